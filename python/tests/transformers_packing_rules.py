"""transformers' two packing rules on the same drawn position_ids: where they disagree.

    python python/tests/transformers_packing_rules.py [--draws N] [--seed S]

Each draw is a batch of packed rows (B of 1 to 3, T of 1 to 24, documents of
random lengths) whose positions are of one class: from 0 in every document
(what DataCollatorWithFlattening gives), offset (a document continued from
an earlier window starts past 0), or gapped (positions step by more than 1,
as context-parallel stripes do). The rules are those of
attn_oracle.adapters.transformers_position_ids_to_batch: "flash" (a document
starts where the position equals the minimum, packed only for B = 1) and
"sdpa" (where it does not step by 1). With transformers importable, each draw
also runs transformers' own code for both paths (``_is_packed_sequence`` +
``prepare_fa_kwargs_from_position_ids``, ``find_packed_sequence_indices``) and
checks that the adapter reads the same documents. Printed per class: draws,
draws where the two rules read different documents, and where each differs
from the documents drawn.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from attn_oracle.adapters import transformers_position_ids_to_batch

CLASSES = ("from zero, B = 1", "from zero, B > 1", "offset or gapped, B = 1", "offset or gapped, B > 1")


def draw(rng):
    """(class, position_ids [B, T], the drawn documents' ids [B, T])."""
    b, t = int(rng.integers(1, 4)), int(rng.integers(1, 25))
    kind = rng.choice(["zero", "offset", "gapped"])
    pos, ids = np.zeros((b, t), np.int64), np.zeros((b, t), np.int64)
    for r in range(b):
        at, doc = 0, 0
        while at < t:
            n = int(min(t - at, rng.integers(1, 9)))
            doc += 1
            start = 0 if kind == "zero" else int(rng.integers(0, 8))
            steps = np.ones(n, np.int64) if kind != "gapped" else rng.integers(1, 4, n)
            pos[r, at:at + n] = start + np.cumsum(steps) - steps[0]
            ids[r, at:at + n] = doc
            at += n
    cls = CLASSES[(0 if kind == "zero" else 2) + (b > 1)]
    return cls, pos, ids


def starts(ids):
    return np.concatenate([np.ones((ids.shape[0], 1), bool), ids[:, 1:] != ids[:, :-1]], axis=1) & (ids != 0)


def transformers_starts(pos, path):
    """Where transformers' own code starts a sequence, [B, T] (a flat cu_seqlens laid back on the rows)."""
    import torch
    from transformers import masking_utils
    from transformers import modeling_flash_attention_utils as fa

    p = torch.from_numpy(pos)
    b, t = pos.shape
    out = np.zeros((b, t), bool)
    if path == "flash":
        if fa._is_packed_sequence(p, b):
            (cu, _), _ = fa.prepare_fa_kwargs_from_position_ids(p)
            flat = out.reshape(-1)
            flat[cu.numpy()[:-1]] = True
        else:
            out[:, 0] = True
    else:
        seq = masking_utils.find_packed_sequence_indices(p)
        out[:, 0] = True
        if seq is not None:
            out[:, 1:] = (seq[:, 1:] != seq[:, :-1]).numpy()
    return out


def count(draws: int, seed: int, with_transformers: bool):
    rng = np.random.default_rng(seed)
    table = {c: {"draws": 0, "rules disagree": 0, "flash differs from drawn": 0, "sdpa differs from drawn": 0}
             for c in CLASSES}
    mismatches = []
    for n in range(draws):
        cls, pos, ids = draw(rng)
        read = {rule: starts(transformers_position_ids_to_batch(pos, rule=rule)["q_segment_ids"])
                for rule in ("flash", "sdpa")}
        row = table[cls]
        row["draws"] += 1
        row["rules disagree"] += not np.array_equal(read["flash"], read["sdpa"])
        for rule in ("flash", "sdpa"):
            row[f"{rule} differs from drawn"] += not np.array_equal(read[rule], starts(ids))
            if with_transformers and not np.array_equal(read[rule], transformers_starts(pos, rule)):
                mismatches.append((n, rule, pos.tolist()))
    return table, mismatches


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        import transformers  # noqa: F401
        with_transformers = True
    except ImportError:
        with_transformers = False
    table, mismatches = count(args.draws, args.seed, with_transformers)
    print(f"| positions | draws | rules disagree | flash differs from drawn | sdpa differs from drawn |")
    print("|---|---|---|---|---|")
    for cls, row in table.items():
        print(f"| {cls} | " + " | ".join(str(v) for v in row.values()) + " |")
    if with_transformers:
        print(f"transformers {transformers.__version__}: the adapter's rules read transformers' own documents on "
              f"{2 * args.draws - len(mismatches)} of {2 * args.draws} (draw, path) pairs")
        for m in mismatches[:5]:
            print("  differs:", m)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
