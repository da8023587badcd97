"""attn_oracle.stacks.te_jax against the installed transformer-engine wheel's
transformer_engine/jax (skipped without it): TE's metadata passes the metadata
properties on the kinds without a bottom-right term, its bottom-right finding
replays from its fixture, and the planted twin that reads TE's compacted
offsets as slot-indexed fails and shrinks to one document."""
import importlib.util
import subprocess
import sys

import pytest

pytest.importorskip("jax", reason="jax is not installed (scripts/stacks --only te_jax builds the venv)")
if importlib.util.find_spec("transformer_engine") is None:
    pytest.skip("transformer-engine is not installed (scripts/stacks --only te_jax builds the venv)",
                allow_module_level=True)

from stack_checks import documents, run_check, shrunk_case  # noqa: E402
from support import REPO  # noqa: E402


def test_te_metadata_passes_without_bottom_right(tmp_path):
    done, _ = run_check(tmp_path, "planted_jax_stacks:TeJaxWithoutBottomRight", "--cases", "40", "--filter", "metadata/")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.parametrize("name", ["te_jax_bottom_right_query_without_keys_counted",
                                  "te_jax_bottom_right_document_without_keys_counted",
                                  "te_jax_bottom_right_extreme_positions_counted"])
def test_the_bottom_right_finding_replays(tmp_path, name):
    fixture = REPO / "fixtures" / "stacks" / f"{name}.case.json"
    done = subprocess.run([sys.executable, "-m", "attn_oracle", "replay", "attn_oracle.stacks.te_jax:Backend",
                           str(fixture)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "q_seqlens" in done.stdout, done.stdout + done.stderr


def test_the_planted_twin_is_caught_and_shrunk(tmp_path):
    done, _ = run_check(tmp_path, "planted_jax_stacks:TeJaxSlotOffsets", "--cases", "40",
                        "--filter", "metadata/matchesReference")
    assert done.returncode == 1, done.stdout[-4000:]
    case = shrunk_case(done)
    assert documents(case) == 1, case  # one document whose id is not 1


def _te():
    from attn_oracle.stacks import te_jax

    return te_jax.load_attention()[0]


def _descriptor(te, ids, pos, kv_ids=None, kv_pos=None):
    import jax.numpy as jnp

    kv_ids, kv_pos = ids if kv_ids is None else kv_ids, pos if kv_pos is None else kv_pos
    d = te.SequenceDescriptor.from_segment_ids_and_pos((jnp.asarray(ids), jnp.asarray(kv_ids)),
                                                       (jnp.asarray(pos), jnp.asarray(kv_pos)))
    return d.get_seqlens_and_offsets(te.AttnMaskType.PADDING_CAUSAL_MASK, te.QKVLayout.THD_THD_THD, None, 2)


def test_te_refuses_what_the_module_declines():
    """Each class the module's Domain or hook excludes, tried against TE itself."""
    import numpy as np

    from attn_oracle.stacks import te_jax

    te = _te()
    ids = np.array([[[1, 1, 2, 2]], [[1, 2, 2, 2]]], np.int32)  # extra dims [2], B 1, T 4
    shared = np.array([[0, 1, 2, 3]], np.int32)
    _descriptor(te, ids, shared)  # positions [B, T] under extra dims: taken
    with pytest.raises(ValueError):  # positions that carry the extra dims: TE vmaps the ids only
        _descriptor(te, ids, np.stack([shared, shared]))
    with pytest.raises(ValueError):  # a side of 0 tokens: no seqlens or offsets for it
        _descriptor(te, np.zeros((1, 0), np.int32), np.zeros((1, 0), np.int32), np.ones((1, 2), np.int32),
                    np.arange(2, dtype=np.int32)[None])
    assert te_jax.Backend.domain.positions_extra_dims is False
    assert te_jax.Backend.domain.max_position == 2**31 - 1  # TE casts positions to int32 (the JAX test shows the wrap)
