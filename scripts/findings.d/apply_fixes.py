"""apply_fixes.py TE_COPY MEGATRON_SITE MEGATRON_COPY: the fixes docs/findings/ proposes, on copies.

- TransformerEngine 2.20.2 (docs/findings/te-jax-2.20-bottom-right-query-without-keys.md): the
  bottom-right branch of _get_seqlens_offsets_thd fills the kv keys of other segments with
  int32's minimum instead of -1, so no fill passes for a key.
- Megatron-core 0.19.2 (docs/findings/megatron-core-0.19-ltor-mask-pad-token.md): the document
  ends are the tokens that are EOD or pad (one boolean mask), not the bitwise AND of two index lists.
"""

import shutil
import sys
from pathlib import Path


def replace_once(path: Path, old: str, new: str, after: str = "") -> None:
    text = path.read_text()
    start = text.index(after) if after else 0
    at = text.index(old, start)
    path.write_text(text[:at] + new + text[at + len(old):])


def main(te_copy: str, megatron_site: str, megatron_copy: str) -> None:
    replace_once(Path(te_copy) / "transformer_engine/jax/attention.py",
                 "neg_fill_val = jnp.asarray(-1, dtype=jnp.int32)",
                 "neg_fill_val = jnp.asarray(jnp.iinfo(jnp.int32).min, dtype=jnp.int32)",
                 after="# BRCM: mask[q][kv] = (same seg) AND (q_key <= kv_key).")
    target = Path(megatron_copy) / "megatron"
    shutil.copytree(Path(megatron_site) / "megatron", target, dirs_exist_ok=True)
    replace_once(target / "training/utils/common_utils.py",
                 "eod_index = position_ids[b, data[b] == eod_token] & position_ids[b, data[b] == pad_token]",
                 "eod_index = position_ids[b, (data[b] == eod_token) | (data[b] == pad_token)]")


if __name__ == "__main__":
    main(*sys.argv[1:])
