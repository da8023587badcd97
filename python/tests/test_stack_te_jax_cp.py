"""attn_oracle.stacks.te_jax_cp against the installed transformer-engine wheel's transformer_engine/jax
(skipped without it): each class's permutation, reorder and per-rank metadata equal what the
context-parallel contract defines (computed here from the definitions, the rank problem's
metadata by the float64 oracle), on small batches of several documents with padding, cp 2, 3
and 4; each input class the domains exclude is tried against TE; the conventions the module
maps are shown to be TE's; a planted twin that reads the all-gather's kv offsets in the wrong
buffer is caught.

These tests call the methods directly; ``python -m attn_oracle check`` drives the classes through
the worker (scripts/stacks)."""
import dataclasses
import importlib.util
from types import SimpleNamespace as NS

import numpy as np
import pytest

pytest.importorskip("jax", reason="jax is not installed (scripts/stacks --only te_jax_cp builds the venv)")
if importlib.util.find_spec("transformer_engine") is None:
    pytest.skip("transformer-engine is not installed (scripts/stacks --only te_jax_cp builds the venv)",
                allow_module_level=True)

from attn_oracle.stacks import te_jax_cp  # noqa: E402 - sets jax_num_cpu_devices before JAX starts

import attn_oracle  # noqa: E402
from attn_oracle.errors import AttnOracleError  # noqa: E402
import cp_contract  # noqa: E402
from support import REPO  # noqa: E402


# --------------------------------------------------------------------- the contract, from its definitions
def layout(cp, strategy, balance, stripe=1):
    return NS(cp=cp, strategy=strategy, balance=balance, stripe=stripe, indices=None)


def problem(ids, pos, mask="padding_causal", max_segments=8, window=(-1, -1)):
    ids, pos = np.asarray(ids, np.int64), np.asarray(pos, np.int64)
    batch = NS(q_segment_ids=ids, q_segment_pos=pos, kv_segment_ids=ids, kv_segment_pos=pos, mask=mask,
               window=window, max_segments=max_segments)
    return NS(batch=batch, heads_q=2, heads_kv=1, head_dim=8, scale=None, dtype="bf16", backward=False)


def expected_permutation(lay, t):
    """model/context_parallel.hpp's permutation of a row of t tokens (cp_contract.py's ranks): every
    rank's tokens, rank-major, each rank in row order."""
    return np.argsort(cp_contract.token_rank(lay, np.ones(t, np.int64)), kind="stable")


def expected_rank_metadata(lay, p, rank, step):
    """docs/semantics.md#3-metadata of rank `rank`'s problem at `step` (model/context_parallel.hpp): q its local tokens,
    kv the whole row (all_gather) or rank (rank - step) mod cp's local tokens (ring), mask top-left."""
    b = p.batch
    rows, t = b.q_segment_ids.shape
    local = t // lay.cp
    perms = np.stack([expected_permutation(lay, t) for _ in range(rows)])
    q_tok = perms[:, rank * local:(rank + 1) * local]
    source = (rank - step) % lay.cp
    kv_tok = perms[:, source * local:(source + 1) * local] if lay.strategy == "ring" else \
        np.broadcast_to(np.arange(t), (rows, t))
    mask = {"causal_bottom_right": "causal", "padding_causal_bottom_right": "padding_causal"}.get(b.mask, b.mask)
    take = lambda a, tok: np.take_along_axis(a, tok, axis=1)  # noqa: E731
    md = attn_oracle.metadata(take(b.q_segment_ids, q_tok), take(b.q_segment_pos, q_tok),
                              take(b.kv_segment_ids, kv_tok), take(b.kv_segment_pos, kv_tok),
                              mask=mask, max_segments=b.max_segments).as_dict()
    for side, n in (("q", q_tok.shape[1]), ("kv", kv_tok.shape[1])):
        cu, ragged = md[f"cu_seqlens_{side}"], md[f"ragged_offsets_{side}"]
        md[f"indices_{side}"] = np.concatenate([np.arange(ragged[k], ragged[k] + cu[k + 1] - cu[k])
                                                for k in range(len(cu) - 1)] + [np.zeros(0, np.int64)])
    return md


def random_batch(rng, rows, t, max_id=8, *, padding=True, id_gaps=True, offsets=False):
    """Rows of documents at positions 0, 1, ... (``offsets``: some starting further on, some in
    steps of 2); with padding, some before a document (a row's leading padding too) and after
    the last; ids with gaps."""
    ids, pos = np.zeros((rows, t), np.int64), np.zeros((rows, t), np.int64)
    for b in range(rows):
        at, doc = 0, 0
        while at < t:
            if padding and rng.random() < 0.4:
                at += int(rng.integers(1, 3))
                if at >= t:
                    break
            doc += 1 + int(id_gaps and rng.random() < 0.25)
            last = doc + 2 > max_id  # no room for another id: this document runs to the row's end
            end = t if last else min(t, at + int(rng.integers(2, t // 2)))
            start, step = (int(rng.integers(0, 4)), int(rng.integers(1, 3))) if offsets else (0, 1)
            ids[b, at:end], pos[b, at:end] = doc, start + step * np.arange(end - at)
            at = end
            if last:
                break
    return ids, pos


def te_merges_runs(lay, ids, pos):
    """Whether a rank holds a token of a document right after (in its local order) a token of
    padding or of another document whose position, as the module hands TE positions, is one less:
    where TE's all-gather helpers lose a run (test_finding_... below)."""
    ids, te_pos = np.asarray(ids), te_jax_cp.te_positions(np.asarray(ids))
    perm = expected_permutation(lay, ids.shape[1]).reshape(lay.cp, -1)
    return any(ids[b, cur] != 0 and ids[b, prev] != ids[b, cur] and te_pos[b, cur] == te_pos[b, prev] + 1
               for b in range(ids.shape[0]) for tokens in perm for prev, cur in zip(tokens[:-1], tokens[1:]))


CLASSES = [
    (te_jax_cp.Striped, "all_gather", "striped", [(2, 1), (2, 2), (3, 1), (4, 1), (4, 2)]),
    (te_jax_cp.StripedRing, "ring", "striped", [(2, 1), (3, 1), (4, 1)]),
    (te_jax_cp.DualChunkSwap, "ring", "dual_chunk_swap", [(2, 1), (4, 1)]),
]


@pytest.fixture(scope="module")
def backends():
    return {cls: cls() for cls, *_ in CLASSES}


def assert_metadata_equal(got, want, where):
    for name, value in want.items():
        assert np.array_equal(np.asarray(got[name]), np.asarray(value)), \
            f"{where}: {name}: module {np.asarray(got[name]).tolist()}, contract {np.asarray(value).tolist()}"


@pytest.mark.parametrize("cls, strategy, balance, sizes", CLASSES, ids=[c[0].__name__ for c in CLASSES])
def test_permutation_reorder_and_rank_metadata_are_the_contracts(backends, cls, strategy, balance, sizes):
    backend = backends[cls]
    rng = np.random.default_rng(20261128)
    for cp, stripe in sizes:
        lay = layout(cp, strategy, balance, stripe)
        t = 24 if cp == 3 else 16
        for mask, padding, offsets in (("padding_causal", True, False), ("causal", False, True),
                                       ("padding_causal_bottom_right", True, True)):
            ids, pos = random_batch(rng, 2, t, padding=padding, offsets=offsets)
            while cls is te_jax_cp.Striped and te_merges_runs(lay, ids, pos):  # the finding below, not here
                ids, pos = random_batch(rng, 2, t, padding=padding, offsets=offsets)
            p = problem(ids, pos, mask=mask)
            assert backend.unsupported_context_parallel(lay, p) is None
            want = np.stack([expected_permutation(lay, t)] * 2)
            assert np.array_equal(backend.cp_permutation(lay, p), want), (cp, stripe, ids.tolist())
            values = rng.normal(size=(2, t, 3))
            there = backend.cp_reorder(lay, p, values, 3, False)
            assert np.array_equal(there, np.take_along_axis(values, want[:, :, None], axis=1))
            assert np.array_equal(backend.cp_reorder(lay, p, there, 3, True), values)
            for rank in range(cp):
                for step in range(cp if strategy == "ring" else 1):
                    assert_metadata_equal(backend.cp_rank_metadata(lay, p, rank, step),
                                          expected_rank_metadata(lay, p, rank, step),
                                          f"{cls.__name__} cp {cp} stripe {stripe} {mask} rank {rank} step {step} "
                                          f"ids {ids.tolist()}")


def test_a_row_that_does_not_split_is_cp_not_divisible(backends):
    ids, pos = random_batch(np.random.default_rng(1), 1, 12)
    with pytest.raises(AttnOracleError) as e:  # 12 tokens in 2*4 chunks
        backends[te_jax_cp.DualChunkSwap].cp_permutation(layout(4, "ring", "dual_chunk_swap"), problem(ids, pos))
    assert e.value.code == "cp_not_divisible" and "is not a multiple of" in e.value.message
    with pytest.raises(AttnOracleError) as e:  # 12 tokens in stripes of 4 over 2 ranks
        backends[te_jax_cp.Striped].cp_permutation(layout(2, "all_gather", "striped", 4), problem(ids, pos))
    assert e.value.code == "cp_not_divisible"


def test_attention_is_not_served():
    """TE's fused attention is cuDNN's kernel: the classes define no attention (the suite skips those properties)."""
    for cls, *_ in CLASSES:
        assert callable(getattr(cls, "cp_rank_metadata", None))
        assert not hasattr(cls, "cp_attention") and not hasattr(cls, "cp_rank_attention"), cls.__name__
    assert "cuDNN" in te_jax_cp.__doc__ and "Not served" in te_jax_cp.__doc__


def test_the_domains_say_what_each_class_takes():
    from attn_oracle.domain import CAUSAL_KINDS

    for cls, strategy, balance, _ in CLASSES:
        assert cls.domain.cp_strategies == (strategy,) and cls.domain.cp_balances == (balance,)
        assert cls.domain.mask_kinds == CAUSAL_KINDS and not cls.domain.positions_from_zero  # mapped
        assert cls.domain.self_attention_only and not cls.domain.extra_dims
    assert te_jax_cp.DualChunkSwap.domain.cp_sizes == (2, 4, 8)
    assert te_jax_cp.StripedRing.domain.cp_stripes == (1,)
    assert te_jax_cp.Striped.domain.cp_stripes == ()  # every stripe


# --------------------------------------------------------------------- what TE refuses, tried against TE
def _te_call(cp, strategy, reorder, stripe, mask="PADDING_CAUSAL_MASK", ids=None, pos=None):
    te = te_jax_cp._te()[:2]
    if ids is None:
        ids = np.array([[1] * 8 + [2] * 8], np.int32)
        pos = np.array([list(range(8)) * 2], np.int32)
    return te_jax_cp.te_run(te, ids, pos, cp=cp, strategy=strategy, reorder=reorder, stripe=stripe, mask=mask,
                            max_segments=3)


@pytest.mark.parametrize("strategy", ["ALL_GATHER", "RING"])
@pytest.mark.parametrize("mask", ["NO_MASK", "PADDING_MASK"])
def test_te_refuses_the_kinds_without_a_causal_term(strategy, mask):
    with pytest.raises(ValueError, match="only supports"):
        _te_call(2, strategy, "Striped", 1, mask=mask)


def test_te_refuses_dual_chunk_swap_with_all_gather():
    with pytest.raises(ValueError, match="Striped load balancing with THD layouts"):
        _te_call(2, "ALL_GATHER", "DualChunkSwap", None)


def test_te_refuses_dual_chunk_swap_on_an_odd_cp():
    attention = te_jax_cp._te()[0]
    with pytest.raises(ValueError, match="must be a multiple of 2"):
        attention.reorder_causal_load_balancing(np.arange(12)[None], attention.ReorderStrategy.DualChunkSwap, 3, 1)
    backend = te_jax_cp.DualChunkSwap()
    ids, pos = random_batch(np.random.default_rng(3), 1, 12)
    assert "multiple of 2" in backend.unsupported_context_parallel(layout(3, "ring", "dual_chunk_swap"),
                                                                    problem(ids, pos))


def _realized(call, q_ids, q_pos, kv_ids, kv_pos):
    """The (row, query slot, key slot) pairs cuDNN computes on one recorded call: segment k's
    index rule (top-left: key <= query; bottom-right: key <= query + lkv - lq)."""
    rows, lq, lkv = q_ids.shape[0], call["q_tokens"], call["kv_tokens"]
    pairs = set()
    q_len, kv_len = np.diff(call["q_cu_seqlens"]), np.diff(call["kv_cu_seqlens"])
    for k in range(len(q_len)):
        if q_len[k] == 0 or kv_len[k] == 0:
            continue
        shift = kv_len[k] - q_len[k] if "BOTTOM_RIGHT" in call["mask"] else 0
        for a in range(q_len[k]):
            for c in range(min(kv_len[k], a + shift + 1)):
                qg, kg = call["q_offsets"][k] + a, call["kv_offsets"][k] + c
                pairs.add((qg // lq, qg % lq, kg % lkv))
    return pairs


def _wanted(q_ids, q_pos, kv_ids, kv_pos):
    rows = q_ids.shape[0]
    return {(b, i, j) for b in range(rows) for i in range(q_ids.shape[1]) for j in range(kv_ids.shape[1])
            if q_ids[b, i] != 0 and q_ids[b, i] == kv_ids[b, j] and kv_pos[b, j] <= q_pos[b, i]}


def _mask_mismatches(backend, lay, p):
    """Per (rank, step): whether the pairs TE's kernel calls compute are the rank problem's causal pairs."""
    calls = backend.kernel_calls(lay, p)
    ids, pos = p.batch.q_segment_ids, p.batch.q_segment_pos
    rows, t = ids.shape
    local = t // lay.cp
    perm = backend.cp_permutation(lay, p)
    out = {}
    for (rank, step), call in calls.items():
        q_tok = perm[:, rank * local:(rank + 1) * local]
        source = (rank - step) % lay.cp
        kv_tok = perm[:, source * local:(source + 1) * local] if lay.strategy == "ring" else \
            np.broadcast_to(np.arange(t), (rows, t))
        sides = [np.take_along_axis(a, tok, axis=1) for a, tok in ((ids, q_tok), (pos, q_tok), (ids, kv_tok),
                                                                     (pos, kv_tok))]
        out[(rank, step)] = _realized(call, *sides) != _wanted(*sides)
    return out


def test_the_striped_classes_hand_the_kernel_causal_attention(backends):
    """Evidence beyond metadata: on the classes offered, TE's segments under the mask it names are
    exactly each rank's causal pairs (what the fused kernel would compute on a GPU)."""
    ids, pos = random_batch(np.random.default_rng(4), 2, 16)
    for cls, strategy, stripe in ((te_jax_cp.Striped, "all_gather", 2), (te_jax_cp.StripedRing, "ring", 1)):
        lay = layout(4, strategy, "striped", stripe)
        assert not any(_mask_mismatches(backends[cls], lay, problem(ids, pos)).values())


def test_the_ring_with_longer_stripes_or_dual_chunk_swap_is_not_causal_attention(backends):
    """Why StripedRing takes stripe 1 (fused_attn's docstring) and what DualChunkSwap's kernel would
    compute: TE runs both without a word, its per-step metadata is the contract's, but its top-left
    mask on the step's segments is not causal attention (a query meets fewer keys of an earlier block)."""
    ids = np.array([[1] * 16], np.int64)
    pos = np.arange(16)[None]
    p = problem(ids, pos)
    ring = te_jax_cp.StripedRing()
    # the domain excludes stripe 2; the run below is TE's own, through the class's plumbing
    ring.domain = dataclasses.replace(ring.domain, cp_stripes=())
    wrong = _mask_mismatches(ring, layout(2, "ring", "striped", 2), p)
    assert wrong[(0, 0)] is False and any(wrong.values())
    wrong = _mask_mismatches(backends[te_jax_cp.DualChunkSwap], layout(2, "ring", "dual_chunk_swap"), p)
    assert wrong[(0, 0)] is False and wrong[(0, 1)] is True
    for rank, step in ((0, 0), (0, 1), (1, 1)):  # and still, the metadata is the contract's
        assert_metadata_equal(backends[te_jax_cp.DualChunkSwap].cp_rank_metadata(
            layout(2, "ring", "dual_chunk_swap"), p, rank, step),
            expected_rank_metadata(layout(2, "ring", "dual_chunk_swap"), p, rank, step), "dual_chunk_swap")


# --------------------------------------------------------------------- the conventions mapped are TE's
def _rank_offsets(ids, pos, cp=2):
    calls = _te_call(cp, "ALL_GATHER", "Striped", 1, ids=np.asarray(ids, np.int32), pos=np.asarray(pos, np.int32))
    return {rank: calls[(rank, 0)] for rank in range(cp)}


def test_te_reads_padding_positions_so_the_module_numbers_them_as_te_does():
    ids = np.array([[1, 1, 1, 1, 1, 2, 2, 2, 0, 0, 3, 3, 3, 3, 3, 3]])
    raw = np.array([[0, 1, 2, 3, 4, 0, 1, 2, 0, 0, 0, 1, 2, 3, 4, 5]])  # our padding positions: anything
    te_style = te_jax_cp.te_positions(ids)
    assert te_style[0, 8:10].tolist() == [3, 4]  # document 2's span goes on counting, as TE's example does
    # rank 1 holds tokens 1, 3, ..., 15; with padding at position 0, TE's q offsets lose the run of
    # token 11 (position 1 after a padding token at 0): six offsets for seven runs
    lost = _rank_offsets(ids, raw)[1]
    assert int(np.diff(lost["q_cu_seqlens"]).astype(bool).sum()) == 7
    assert (lost["q_offsets"] < 8).sum() == 6
    kept = _rank_offsets(ids, te_style)[1]
    assert (kept["q_offsets"] < 8).sum() == 7


def test_te_reads_id_k_as_the_kth_document_so_the_module_hands_it_ordinals():
    ids = np.array([[2, 2, 2, 2, 3, 3, 3, 3]])  # ids from 2: valid for the contract
    pos = np.array([[0, 1, 2, 3, 0, 1, 2, 3]])
    gapped = _rank_offsets(ids, pos)[0]
    # rank 0 holds tokens 0, 2, 4, 6: its runs of id 2 should read keys from token 0, of id 3 from token 4;
    # TE looks id k up as the k-th document start of the gathered row (id 2 -> the second document's, 4)
    assert gapped["kv_offsets"][:4].tolist() != [0, 0, 4, 4]
    ordinal = _rank_offsets(te_jax_cp.te_ids(ids), pos)[0]
    assert ordinal["kv_offsets"][:4].tolist() == [0, 0, 4, 4]


def test_te_reads_a_documents_keys_off_its_positions_so_the_module_hands_it_offsets_from_0():
    """TE's positions are the index inside each segment: its key count is the last position + 1 from
    the document's first gathered token. Ours may start anywhere or skip; on the causal kinds a
    document's mask is the order of its positions, so the module hands TE 0, 1, 2, ..."""
    ids = np.array([[1, 1, 1, 1, 2, 2, 2, 2]])
    pos = np.array([[3, 5, 6, 9, 0, 1, 2, 3]])  # document 1 from 3, with gaps: valid for the contract
    call = _rank_offsets(ids, pos)[0]
    assert np.diff(call["kv_cu_seqlens"])[0] == 4  # token 0 (position 3) is handed 4 keys: 3 before its document
    assert te_jax_cp.te_positions(ids).tolist() == [[0, 1, 2, 3, 0, 1, 2, 3]]
    lay, p = layout(2, "all_gather", "striped"), problem(ids, pos, mask="causal")
    backend = te_jax_cp.Striped()
    assert backend.unsupported_context_parallel(lay, p) is None
    for rank in range(2):
        assert_metadata_equal(backend.cp_rank_metadata(lay, p, rank, 0), expected_rank_metadata(lay, p, rank, 0),
                              f"rank {rank}")


def test_te_documents_a_dual_chunk_swap_order_its_code_does_not_produce():
    """Finding (documentation): ReorderStrategy's docstring says GPU1 holds [4, 5, 10, 11] of 16 tokens on
    4 ranks; the code gives [2, 3, 12, 13] (chunks 1 and 6 of 8), which is the contract's order."""
    attention = te_jax_cp._te()[0]
    assert "GPU1: [4, 5, 10, 11]" in attention.ReorderStrategy.__doc__
    order = np.asarray(attention.reorder_causal_load_balancing(np.arange(16)[None],
                                                               attention.ReorderStrategy.DualChunkSwap, 4, 1))
    assert order[0, 4:8].tolist() == [2, 3, 12, 13]
    assert order[0].tolist() == expected_permutation(layout(4, "ring", "dual_chunk_swap"), 16).tolist()


# --------------------------------------------------------------------- the finding
def test_finding_the_all_gather_loses_a_run_that_continues_the_positions_before_it():
    """Bug (docs/findings/te-jax-2.20-cp-all-gather-run-offsets.md): on each rank the all-gather helpers
    count runs (q_seqlens_for_striped_for_rank, kv_seqlens_for_striped_for_rank) where the document id
    changes or the position breaks, on the rank's tokens without padding, but place them
    (q_seqoffsets_for_striped_for_rank, kv_seqoffsets_for_striped_for_rank) where the position breaks
    alone, on every token. A document whose first token on a rank sits right after (on that rank) a
    token whose position is one less gets a length and no offset: every later run of the rank takes
    the next run's offset, the last one B*L, past the buffer. No padding needed: document 1 of one
    token, document 2 of seven, cp 2, stripe 1: rank 0 holds positions 0 | 1, 3, 5."""
    ids, pos = np.array([[1, 2, 2, 2, 2, 2, 2, 2]]), np.array([[0, 0, 1, 2, 3, 4, 5, 6]])
    lay, p = layout(2, "all_gather", "striped"), problem(ids, pos, mask="causal")
    assert te_merges_runs(lay, ids, pos)
    call = te_jax_cp.Striped().kernel_calls(lay, p)[(0, 0)]
    assert np.diff(call["q_cu_seqlens"]).tolist()[:4] == [1, 1, 1, 1]  # four runs: 0 | 1 | 3 | 5
    assert call["q_offsets"][:4].tolist() == [0, 2, 3, 4]  # three offsets, then B*L = 4: run 1 lost
    assert call["kv_offsets"][:4].tolist() == [0, 1, 1, 8]  # and the keys likewise
    got = te_jax_cp.Striped().cp_rank_metadata(lay, p, 0, 0)
    want = expected_rank_metadata(lay, p, 0, 0)
    assert got["q_seqlens"].tolist() == [[1, 2, 0, 0, 0, 0, 0, 0]] and want["q_seqlens"].tolist()[0][:2] == [1, 3]
    # at TE's own test settings (cp 2, stripe 64): a document of 64 tokens, then one of 192
    ids, pos = np.array([[1] * 64 + [2] * 192]), np.array([list(range(64)) + list(range(192))])
    call = te_jax_cp.Striped().kernel_calls(layout(2, "all_gather", "striped", 64), problem(ids, pos, mask="causal"))
    q_len = np.diff(call[(0, 0)]["q_cu_seqlens"])
    assert q_len[:3].tolist() == [64, 64, 0] and call[(0, 0)]["q_offsets"][:2].tolist() == [0, 128]  # 128 = B*L
    # the ring classes read the same batch right (their metadata is the descriptor's)
    ring = layout(2, "ring", "striped")
    for rank in range(2):
        for step in range(2):
            assert_metadata_equal(te_jax_cp.StripedRing().cp_rank_metadata(ring, p, rank, step),
                                  expected_rank_metadata(ring, p, rank, step), f"ring rank {rank} step {step}")


FINDING_SCRIPT = REPO / "docs" / "findings" / "te_jax_2_20_cp_all_gather_run_offsets.py"


def _fixed_copy(directory):
    """TE's files with the fix of docs/findings/te-jax-2.20-cp-all-gather-run-offsets.md applied."""
    import shutil

    source = te_jax_cp._installed_attention().parent
    (directory / "cpp_extensions").mkdir(parents=True)
    for name in ("attention.py", "sharding.py", "cpp_extensions/misc.py"):
        shutil.copy(source / name, directory / name)
    text = (source / "cpp_extensions" / "attention.py").read_text()
    for side in ("q", "kv"):
        old = f"({side}_segment_pos[..., 1:] != {side}_segment_pos[..., :-1] + 1),  # Segment pos changed"
        assert text.count(old) == 1
        text = text.replace(old, f"({side}_segment_pos[..., 1:] != {side}_segment_pos[..., :-1] + 1)\n"
                                 f"                | ({side}_segment_ids[..., 1:] != {side}_segment_ids[..., :-1]),")
    (directory / "cpp_extensions" / "attention.py").write_text(text)
    return te_jax_cp.load_te(str(directory / "attention.py"))


def _run_script(te):
    import runpy
    import sys

    name = "transformer_engine.jax.cpp_extensions.attention"
    saved = sys.modules.get(name)
    sys.modules[name] = te[1]
    try:
        runpy.run_path(str(FINDING_SCRIPT), run_name="__main__")
    finally:
        if saved is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = saved


def test_the_finding_script_fails_on_2_20_and_passes_with_the_fix(tmp_path, capsys):
    with pytest.raises(AssertionError, match="q_seqoffsets, kv_seqoffsets differ"):
        _run_script(te_jax_cp._te())
    assert capsys.readouterr().out.count("DIFFERS") == 2
    fixed = _fixed_copy(tmp_path / "fixed")
    _run_script(fixed)
    assert "DIFFERS" not in capsys.readouterr().out
    # and with the fix, a batch of the finding's kind reads as the contract on every rank
    ids, pos = np.array([[1, 2, 2, 2, 2, 2, 2, 2]]), np.array([[0, 0, 1, 2, 3, 4, 5, 6]])
    lay, p = layout(2, "all_gather", "striped"), problem(ids, pos, mask="causal")
    calls = te_jax_cp.te_run(fixed[:2], te_jax_cp.te_ids(ids), te_jax_cp.te_positions(ids), cp=2,
                             strategy="ALL_GATHER", reorder="Striped", stripe=1, max_segments=8)
    perm = expected_permutation(lay, 8)
    for rank in range(2):
        q_ids = ids[:, perm[rank * 4:(rank + 1) * 4]]
        assert_metadata_equal(te_jax_cp.metadata_from_call(calls[(rank, 0)], q_ids, 8),
                              expected_rank_metadata(lay, p, rank, 0), f"fixed, rank {rank}")


# --------------------------------------------------------------------- the planted twin
def test_the_planted_twin_reading_gathered_offsets_as_local_is_caught():
    from planted_te_jax_cp import StripedKvOffsetsLocal

    twin = StripedKvOffsetsLocal()
    ids, pos = random_batch(np.random.default_rng(5), 2, 16)
    lay, p = layout(2, "all_gather", "striped"), problem(ids, pos)
    differs = []
    for rank in range(2):
        got, want = twin.cp_rank_metadata(lay, p, rank, 0), expected_rank_metadata(lay, p, rank, 0)
        differs += [name for name in want if not np.array_equal(np.asarray(got[name]), np.asarray(want[name]))]
    assert "ragged_offsets_kv" in differs and "kv_offsets" in differs, differs
