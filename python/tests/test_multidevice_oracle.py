"""The multi-device runners against the C++ oracle, apart from the worker protocol: each
context_parallel case here is evaluated by `attn-oracle eval` on the reference (its permutation,
every rank's metadata at every step, and the run in row order), and the runner's own answers
must equal it: the integers exactly, the floats to float32's rounding. Skipped without the
runner's framework."""

import json
import struct

import numpy as np
import pytest
from support import run_cli

from attn_oracle import worker
from attn_oracle.multidevice import _host

# While collected: a module collected later may start JAX (test_stack_jax_cudnn asks for its backend), after
# which XLA makes no more host devices.
_host.ask_for_host_devices()

# (cp, strategy, balance, stripe, mask, window): every strategy and balance at least once.
LAYOUTS = [
    (2, "all_gather", "contiguous", 1, "padding_causal", (-1, -1)),
    (4, "all_gather", "head_tail", 1, "padding_causal_bottom_right", (3, -1)),
    (2, "ring", "dual_chunk_swap", 1, "padding", (2, 1)),
    (4, "ring", "striped", 2, "padding_causal", (-1, -1)),
    (2, "ring", "explicit_indices", 1, "padding_causal", (1, -1)),
    (2, "all_to_all", "striped", 4, "padding_causal", (-1, -1)),
    (4, "all_to_all", "head_tail", 1, "padding", (-1, 0)),
]
# Two rows of 16 tokens whose spans split for cp 2 and 4 (row 0: a document of 8, one of 4 and 4 of
# padding; row 1: 8 of padding, then a document of 8 from position 3).
IDS = [[1] * 8 + [2] * 4 + [0] * 4, [0] * 8 + [1] * 8]
POS = [list(range(8)) + list(range(4)) + [0] * 4, [0] * 8 + list(range(3, 11))]
INDICES = [[0, 2, 3, 5, 8, 9, 12, 15, 1, 4, 6, 7, 10, 11, 13, 14], list(range(16))]


def _generated(seed, n):
    """docs/case-files.md section 4's splitmix64 stream, rounded to fp32."""
    mask, s, out = (1 << 64) - 1, seed, []
    for _ in range(n):
        s = (s + 0x9E3779B97F4A7C15) & mask
        z = ((s ^ (s >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        out.append(struct.unpack("<f", struct.pack("<f", (z >> 11) * 2.0**-53 * 2 - 1))[0])
    return np.array(out)


def _case(cp, strategy, balance, stripe, mask, window):
    layout = {"size": cp, "strategy": strategy, "balance": balance}
    if balance == "striped":
        layout["stripe"] = stripe
    if balance == "explicit_indices":
        layout["indices"] = INDICES
    side = {"segment_ids": IDS, "segment_pos": POS}
    return {"schema": "attn-oracle.case/2", "op": "context_parallel", "mask": mask, "window": list(window),
            "max_segments": 2, "heads_q": 2 * cp, "heads_kv": cp, "head_dim": 4, "dtype": "fp32", "backward": True,
            "q": side, "kv": side, "data": {"seed": 7}, "cp": layout}


def _problem(case):
    from types import SimpleNamespace as N

    ids, pos = np.array(IDS), np.array(POS)
    batch = N(q_segment_ids=ids, q_segment_pos=pos, kv_segment_ids=ids, kv_segment_pos=pos, mask=case["mask"],
              window=tuple(case["window"]), max_segments=case["max_segments"])
    problem = N(batch=batch, heads_q=case["heads_q"], heads_kv=case["heads_kv"], head_dim=case["head_dim"],
                scale=None, dtype="fp32", backward=True)
    b, t, d = ids.shape[0], ids.shape[1], case["head_dim"]
    shapes = [(b, t, case["heads_q"], d), (b, t, case["heads_kv"], d), (b, t, case["heads_kv"], d),
              (b, t, case["heads_q"], d)]
    values = _generated(case["data"]["seed"], sum(int(np.prod(s)) for s in shapes))
    tensors, at = [], 0
    for s in shapes:
        tensors.append(values[at:at + int(np.prod(s))].reshape(s))
        at += int(np.prod(s))
    c = case["cp"]
    layout = worker.Layout(cp=c["size"], strategy=c["strategy"], balance=c["balance"],
                                  stripe=c.get("stripe", 1), indices=np.array(c["indices"]) if "indices" in c else None)
    return layout, problem, N(q=tensors[0], k=tensors[1], v=tensors[2], do=tensors[3])


def _floats(value):
    return np.array(value, dtype=object).astype(str).astype(np.float64) if value is not None else None


@pytest.fixture(scope="module", params=["jax", "torch"])
def runner(request):
    pytest.importorskip(request.param, reason=f"{request.param} is not installed")
    if request.param == "jax":
        from attn_oracle.multidevice import jax_shard_map

        backend = jax_shard_map.Backend()
        if backend.max_ranks < 4:
            pytest.skip(f"JAX has {backend.max_ranks} devices: it started before jax_shard_map set XLA_FLAGS")
        yield backend
    else:
        from attn_oracle.multidevice import torch_gloo

        backend = torch_gloo.Backend(max_ranks=4)
        yield backend
        backend.close()


@pytest.mark.parametrize("spec", LAYOUTS, ids=lambda s: f"cp{s[0]}-{s[1]}-{s[2]}")
def test_the_runner_answers_as_the_oracle(runner, tmp_path, spec):
    case = _case(*spec)
    path = tmp_path / "case.json"
    path.write_text(json.dumps(case))
    done = run_cli("eval", "--backend", "reference", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    want = json.loads(done.stdout)
    layout, problem, inputs = _problem(case)
    perm = runner.cp_permutation(layout, problem)
    np.testing.assert_array_equal(perm, want["permutation"])
    for rank, steps in enumerate(want["ranks"]):
        for step, md in enumerate(steps):
            got = runner.cp_rank_metadata(layout, problem, rank, step)
            for name, value in md.items():
                np.testing.assert_array_equal(got[name], np.array(value).reshape(np.shape(got[name])),
                                              err_msg=f"rank {rank}, step {step}: {name}")
    run = runner.cp_attention(layout, problem, inputs)
    for name in ("o", "lse", "dq", "dk", "dv"):
        got = _row_order(np.asarray(run[name], np.float64), perm, 2 if name == "lse" else 1)
        expected = _floats(want[name])
        assert np.array_equal(np.isneginf(got), np.isneginf(expected)), name
        finite = ~np.isneginf(expected)
        np.testing.assert_allclose(got[finite], expected[finite], atol=2e-6, rtol=1e-5, err_msg=name)


def _row_order(x, perm, axis):
    """A rank-major result in row order: slot s of row b holds token perm[b, s]."""
    out = np.empty_like(x)
    for b in range(perm.shape[0]):
        if axis == 1:
            out[b, perm[b]] = x[b]
        else:
            out[b][:, perm[b]] = x[b]
    return out
