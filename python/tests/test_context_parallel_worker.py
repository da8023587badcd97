"""Context parallelism through the worker (docs/python.md, "Context parallelism"):
what the hello says a backend serves, the Layout and Domain fields, the replies
of the cp_* ops, the context_parallel properties passing
examples/numpy_context_parallel_backend.py through `python -m attn_oracle check`,
and context_parallel cases evaluated and replayed on it (the reference's
permutation and rank metadata exactly, its outputs to 1e-9), on its planted twin
(FAIL) and on workers whose permutation is broken (a clear failure, never a
crash). About 15 s."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from support import REPO, cli_eval

from attn_oracle import Domain, worker
from attn_oracle.domain import CP_BALANCES, CP_STRATEGIES
from attn_oracle.errors import AttnOracleError
from examples.numpy_context_parallel_backend import Backend as Example

EXAMPLE = "examples.numpy_context_parallel_backend:Backend"
PLANTED = "examples.planted_numpy_context_parallel_backend:Backend"


def python_m(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "attn_oracle", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=os.environ)


# Two rows of 16 tokens whose head_tail spans split for cp 2 and 4 (row 0: a document of 8, one of 4 and 4 of
# padding; row 1: 8 of padding, then a document of 8 from position 3).
IDS = [[1] * 8 + [2] * 4 + [0] * 4, [0] * 8 + [1] * 8]
POS = [list(range(8)) + list(range(4)) + [0] * 4, [0] * 8 + list(range(3, 11))]


def write_case(path, cp, mask="padding_causal", window=(-1, -1)):
    """A context_parallel case with layout CP (the case file's "cp" object), heads 2*cp / cp, backward."""
    side = {"segment_ids": IDS, "segment_pos": POS}
    path.write_text(json.dumps({
        "schema": "attn-oracle.case/2", "op": "context_parallel", "mask": mask, "window": list(window),
        "max_segments": 2, "heads_q": 2 * cp["size"], "heads_kv": cp["size"], "head_dim": 4, "dtype": "fp32",
        "backward": True, "q": side, "kv": side, "data": {"seed": 5}, "cp": cp}))
    return path


def request(op, cp, **fields):
    """A request header and arrays as the suite sends them for the batch above."""
    header = {"op": op, "cp": cp, "batch": {"mask": "padding_causal", "window": [-1, -1], "max_segments": 2},
              "shape": {"heads_q": 4, "heads_kv": 2, "head_dim": 4, "scale": None, "dtype": "fp32",
                        "backward": False}, **fields}
    ids, pos = np.array(IDS, np.int64), np.array(POS, np.int64)
    return header, {"q_segment_ids": ids, "q_segment_pos": pos, "kv_segment_ids": ids, "kv_segment_pos": pos}


# ------------------------------------------------------------------ the hello
class Hooks(Example):
    def validate_cp_layout(self, layout, problem):
        pass

    def cp_balance_bound(self, layout, problem):
        return 1.25

    def unsupported_context_parallel(self, layout, problem):
        return None


def test_the_permutation_serves_context_parallel_and_the_optional_ops_are_listed():
    greeting = worker.hello(Example())
    assert greeting["capabilities"] == ["metadata", "attention", "context_parallel"]
    assert greeting["context_parallel_ops"] == ["cp_rank_metadata", "cp_rank_attention", "cp_attention",
                                                "cp_balance_bound"]
    assert greeting["unsupported_hooks"] == []
    greeting = worker.hello(Hooks())
    assert greeting["context_parallel_ops"] == ["cp_rank_metadata", "cp_rank_attention", "cp_attention",
                                                "validate_cp_layout", "cp_balance_bound"]
    assert greeting["unsupported_hooks"] == ["context_parallel"]

    class PermutationOnly:  # a stack whose kernels need a device: judged on its permutation
        cp_permutation = Example.cp_permutation

    greeting = worker.hello(PermutationOnly())
    assert greeting["capabilities"] == ["context_parallel"] and greeting["context_parallel_ops"] == []

    class NoPermutation:
        cp_rank_metadata = cp_rank_attention = cp_attention = Example.cp_permutation

    assert "context_parallel" not in worker.hello(NoPermutation())["capabilities"]
    assert "context_parallel_ops" not in worker.hello(NoPermutation())


def test_the_domain_takes_the_cp_fields_and_refuses_bad_ones_by_name():
    declared = Domain(cp_strategies=("ring",), cp_balances=["head_tail", "striped"], cp_sizes=[2, 4], cp_stripes=[2])
    assert declared.to_hello() == {"cp_strategies": ["ring"], "cp_balances": ["head_tail", "striped"],
                                   "cp_sizes": [2, 4], "cp_stripes": [2]}
    assert set(CP_STRATEGIES) == {"all_gather", "ring", "all_to_all"} and len(CP_BALANCES) == 5
    for fields, key in (({"cp_strategies": ["ulysses"]}, "cp_strategies"), ({"cp_balances": "striped"}, "cp_balances"),
                        ({"cp_sizes": [0]}, "cp_sizes"), ({"cp_stripes": [True]}, "cp_stripes")):
        with pytest.raises((TypeError, ValueError), match=f"Domain.{key}"):
            Domain(**fields)


# ------------------------------------------------------------------ requests and replies
class Recording(Example):
    def cp_permutation(self, layout, problem):
        self.seen = (layout, problem)
        return super().cp_permutation(layout, problem)


def test_the_layout_arrives_as_a_layout_and_the_permutation_goes_back_as_returned():
    backend = Recording()
    indices = [[8, 9, 10, 11, 0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7], list(range(16))]
    reply, arrays = worker.answer(backend, *request(
        "cp_permutation", {"size": 2, "strategy": "ring", "balance": "explicit_indices", "indices": indices}))
    layout, problem = backend.seen
    assert (layout.cp, layout.strategy, layout.balance, layout.stripe) == (2, "ring", "explicit_indices", 1)
    assert layout.indices.dtype == np.int64 and layout.indices.tolist() == indices
    assert (layout.steps, layout.source_rank(0, 1), layout.source_rank(1, 1)) == (2, 1, 0)
    assert problem.batch.q_segment_ids.shape == (2, 16) and problem.heads_q == 4
    assert reply == {"ok": True} and arrays["permutation"].tolist() == indices

    _, arrays = worker.answer(backend, *request("cp_permutation", {"size": 4, "strategy": "all_gather",
                                                                   "balance": "striped", "stripe": 2}))
    assert backend.seen[0].indices is None and backend.seen[0].stripe == 2
    assert arrays["permutation"][0, :8].tolist() == [0, 1, 8, 9, 2, 3, 10, 11]


def test_rank_metadata_and_attention_are_the_rank_problems():
    cp = {"size": 2, "strategy": "ring", "balance": "dual_chunk_swap"}
    reply, md = worker.answer(Example(), *request("cp_rank_metadata", cp, rank=1, step=1))
    # Rank 1 holds chunks 1 and 2 (tokens 4..11); at step 1 it meets rank 0's chunks 0 and 3 (0..3, 12..15):
    # in row 0 document 1's queries at positions 4..7 attend its keys at 0..3; in row 1 the queries at
    # positions 3..6 come before the keys at 7..10, and nothing is attended.
    assert reply == {"ok": True}
    assert md["q_seqlens"].tolist() == [[4, 0], [0, 0]] and md["kv_seqlens"].tolist() == [[4, 0], [0, 0]]
    assert md["q_offsets"].tolist() == [[0, -1, -1], [-1, -1, -1]] and md["kv_offsets"].tolist() == [[0, -1, -1], [-1, -1, -1]]
    assert md["cu_seqlens_q"].tolist() == [0, 4] and md["ragged_offsets_kv"].tolist() == [0, 16]
    header, arrays = request("cp_rank_attention", cp, rank=1, step=1)
    rng = np.random.default_rng(0)
    arrays |= {"q": rng.normal(size=(2, 16, 4, 4)), "k": rng.normal(size=(2, 16, 2, 4)), "v": rng.normal(size=(2, 16, 2, 4))}
    reply, out = worker.answer(Example(), header, arrays)
    assert reply == {"ok": True} and out["o"].shape == (2, 8, 4, 4) and out["lse"].shape == (2, 4, 8)
    assert set(out) == {"o", "lse"}


@pytest.mark.parametrize("bound, want", [(None, None), (1.5, 1.5), (2, 2.0)])
def test_a_balance_bound_is_a_number_or_none(bound, want):
    class Bound:
        def cp_balance_bound(self, layout, problem):
            return bound

    header = request("cp_balance_bound", {"size": 2, "strategy": "ring", "balance": "contiguous"})
    assert worker.answer(Bound(), *header) == ({"ok": True, "bound": want}, {})


def test_what_the_wire_cannot_carry_fails_the_case_and_the_worker_lives_on():
    class Unbounded:
        def cp_balance_bound(self, layout, problem):
            return math.inf

    class Strings(Example):
        def cp_permutation(self, layout, problem):
            return np.array([["a"] * 16] * 2, dtype=object)

    cp = {"size": 2, "strategy": "ring", "balance": "contiguous"}
    reply, _ = worker.answer(Unbounded(), *request("cp_balance_bound", cp))
    assert reply["exception"]["type"] == "ValueError" and "a finite number" in reply["exception"]["message"]
    reply, _ = worker.answer(Strings(), *request("cp_permutation", cp))
    assert reply["exception"]["message"] == "cannot send an array of dtype object"


def test_a_backend_rejects_a_layout_with_its_code():
    class Refuses(Example):
        def validate_cp_layout(self, layout, problem):
            raise AttnOracleError("cp_not_divisible", "T = 16 is not a multiple of cp = 3")

    reply, _ = worker.answer(Refuses(), *request("validate_cp_layout", {"size": 3, "strategy": "ring",
                                                                        "balance": "contiguous"}))
    assert reply == {"error": {"code": "cp_not_divisible", "message": "T = 16 is not a multiple of cp = 3"}}


# ------------------------------------------------------------------ end to end
LAYOUTS = [
    {"size": 4, "strategy": "ring", "balance": "head_tail"},
    {"size": 2, "strategy": "ring", "balance": "striped", "stripe": 2},
    {"size": 2, "strategy": "all_gather", "balance": "dual_chunk_swap"},
    {"size": 4, "strategy": "all_gather", "balance": "contiguous"},
    {"size": 2, "strategy": "all_to_all", "balance": "head_tail"},
    {"size": 2, "strategy": "all_to_all", "balance": "explicit_indices",
     "indices": [[0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15], list(range(16))]},
]


@pytest.mark.parametrize("cp, mask", [(layout, mask) for layout, mask in zip(
    LAYOUTS, ["padding_causal", "padding_causal_bottom_right", "padding", "padding_causal", "padding_causal",
              "padding_causal_bottom_right"])], ids=lambda v: v if isinstance(v, str) else
    f"{v['strategy']}-{v['balance']}-{v['size']}")
def test_the_example_evaluates_as_the_reference(tmp_path, cp, mask):
    case = write_case(tmp_path / "cp.case.json", cp, mask, window=(3, -1) if mask == "padding" else (-1, -1))
    status, want = cli_eval(case)
    assert status == 0, want
    done = python_m("eval", EXAMPLE, str(case))
    assert done.returncode == 0, done.stdout + done.stderr
    got = json.loads(done.stdout)
    assert got["permutation"] == want["permutation"] and got["ranks"] == want["ranks"]
    for name in ("o", "lse", "dq", "dk", "dv"):
        g, w = (np.array(x[name], dtype=object) for x in (got, want))
        g, w = (np.where(a == "-inf", -np.inf, a).astype(float) for a in (g, w))
        assert np.allclose(g, w, atol=1e-9, rtol=0), name


def test_check_passes_the_example_on_every_context_parallel_property(tmp_path):
    done = python_m("check", EXAMPLE, "--filter", "context_parallel/", "--cases", "30", "--no-store", "--report",
                    str(tmp_path / "report"))
    assert done.returncode == 0, done.stdout + done.stderr
    verdicts = {r["property"]: r["verdict"] for r in json.loads((tmp_path / "report" / "conformance.json").read_text())["results"]}
    assert "context_parallel/rankMetadataMatchesTheOracle" in verdicts and set(verdicts.values()) == {"passed"}, verdicts


def test_replay_passes_the_example_and_fails_the_planted_ring_on_its_step_metadata(tmp_path):
    ring = write_case(tmp_path / "ring.case.json", {"size": 4, "strategy": "ring", "balance": "contiguous"})
    done = python_m("replay", EXAMPLE, str(ring))
    assert done.returncode == 0 and done.stdout.startswith("PASS\n"), done.stdout + done.stderr
    done = python_m("replay", PLANTED, str(ring))
    assert done.returncode == 3 and done.stdout.startswith("FAIL\n"), done.stdout + done.stderr
    assert "rank 1, step 1: " in done.stdout  # the first call whose keys differ: rank 2's instead of rank 0's


@pytest.mark.parametrize("target, verb, status, message", [
    ("FlatPermutation", "eval", 1, "the worker's reply to cp_permutation is malformed: permutation must be [B, T] = "
                                   "[2, 16], the shape of the segment ids; the reply's has shape [32]"),
    ("FloatPermutation", "replay", 1, "the worker's reply to cp_permutation is malformed: array permutation holds f64, "
                                      "not integers"),
    ("NotAPermutation", "eval", 2, "the backend's permutation: row 0, slot 1: token 0 is listed already at slot 0"),
    ("NotAPermutation", "replay", 3, "permutation: row 0, rank 0, local slot 1: backend token 0, the layout's 1"),
])
def test_a_broken_permutation_is_a_clear_failure(tmp_path, target, verb, status, message):
    case = write_case(tmp_path / "ring.case.json", {"size": 2, "strategy": "ring", "balance": "dual_chunk_swap"})
    done = python_m(verb, f"tests.workers.cp_worker:{target}", str(case))
    assert done.returncode == status, done.stdout + done.stderr
    assert message in done.stdout + done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
