"""Reproduction of kv_buffer/metadataIsCanonical on attn_oracle.stacks.fast_llm:Backend
(written by `python -m attn_oracle repro` from fixtures/stacks/fast_llm_cu_seqlens_k_from_first_document_begin.case.json).
Input: kv_buffer doc_lengths [1, 1], micro_seq_tokens 1
Differs: micro_sequences[1].cu_seqlens_k: backend [1,2], reference [0,1]
Run it from a Fast-LLM checkout (`PYTHONPATH=. python THIS_FILE`); exit 1 (AssertionError) while it differs.
"""

import numpy as np

import torch
from fast_llm.data.document.config import LanguageModelBatchPreprocessingConfig
from fast_llm.data.document.language_model import LanguageModelBatch, LanguageModelDocument


def field(result, name):
    return result[name] if isinstance(result, dict) else getattr(result, name)


def compare(got, expected, budgets=None):
    """Prints expected against got for every field; returns the fields that differ."""
    differs = []
    for name, want in expected.items():
        have = np.asarray(field(got, name))
        want = np.asarray(want)
        if budgets and name in budgets:
            same = have.shape == want.shape and np.array_equal(np.isinf(have), np.isinf(want)) and \
                np.array_equal(have[np.isinf(have)], want[np.isinf(want)])
            error = np.max(np.abs(np.where(np.isinf(want), 0, have - want)), initial=0.0) if same else np.inf
            ok = bool(same and error <= budgets[name])
            print(f"{name}: {'ok' if ok else 'DIFFERS'} (max |got - expected| {error:.3g}, budget {budgets[name]:.3g})")
        else:
            ok = have.shape == want.shape and np.array_equal(have, want)
            print(f"{name}: {'ok' if ok else 'DIFFERS'}")
        if not ok:
            print(f"  expected {want.tolist()}\n  got      {have.tolist()}")
            differs.append(name)
    return differs


def model_inputs(doc_lengths: tuple, m: int) -> tuple:
    """Fast-LLM's model inputs (one per micro-sequence) for documents of ``doc_lengths`` tokens and
    micro-sequences of ``m`` tokens: the sequence padded to whole micro-sequences, plus the label token."""
    n = sum(doc_lengths)
    splits = -(-n // m)
    documents = [LanguageModelDocument(tokens=torch.full((length,), 1 + d % 7, dtype=torch.int64))
                 for d, length in enumerate(doc_lengths)]
    batch = LanguageModelBatch.from_documents(documents, pad_to_size=splits * m + 1)
    config = LanguageModelBatchPreprocessingConfig(micro_batch_splits=splits, return_cumulative_sequence_lengths=True,
                                                   return_document_index=True, return_position_index=True)
    return tuple(batch.get_model_inputs(config))


def _ints(t) -> np.ndarray:
    return np.asarray(t.detach().cpu().numpy() if hasattr(t, "detach") else t, dtype=np.int64)


def fast_llm_micro_sequence(doc_lengths: tuple, m: int, i: int) -> dict:
    """The suite's fields of micro-sequence i from Fast-LLM's model inputs (the one place they are read)."""
    n = sum(doc_lengths)
    inputs = model_inputs(doc_lengths, m)
    mi = inputs[i]
    begin = i * m
    end = min(begin + len(mi.tokens), n)  # the padding Fast-LLM added is cut off
    fdb = int(mi.first_document_begin)
    cu_q, cu_k = _ints(mi.cumulative_lengths_q), _ints(mi.cumulative_lengths_k)
    q_doc, kv_doc = _ints(mi.document_index_q), _ints(mi.document_index_k)
    q_pos = _ints(mi.position_index)
    kv_pos = np.concatenate([_ints(x.position_index) for x in inputs[:i + 1]])[fdb:end]
    if end < begin + len(mi.tokens):  # drop the padding document: its cu_seqlens entry and its tokens
        cu_q, cu_k = cu_q[:-1], cu_k[:-1]
        q_doc, q_pos = q_doc[:end - begin], q_pos[:end - begin]
        kv_doc = kv_doc[:len(kv_doc) - (begin + len(mi.tokens) - end)]
    return {"index": i, "begin": begin, "end": end, "first_document_begin": fdb,
            "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k, "q_document": q_doc, "q_position": q_pos,
            "kv_document": kv_doc, "kv_position": kv_pos}


doc_lengths = [1, 1]
micro_seq_tokens = 1
heads_q, heads_kv, head_dim = 1, 1, 8
dtype, backward = 'fp32', True
# The reference's metadata of each micro-sequence (docs/semantics.md#3-metadata), compared exactly.
expected = [
    {'first_document_begin': np.array(0), 'cu_seqlens_q': np.array([0, 1]), 'cu_seqlens_k': np.array([0, 1]), 'q_document': np.array([1]), 'q_position': np.array([0]), 'kv_document': np.array([1]), 'kv_position': np.array([0])},
    {'first_document_begin': np.array(1), 'cu_seqlens_q': np.array([0, 1]), 'cu_seqlens_k': np.array([0, 1]), 'q_document': np.array([1]), 'q_position': np.array([0]), 'kv_document': np.array([1]), 'kv_position': np.array([0])},
]
differs = []
for i, want in enumerate(expected):
    got = fast_llm_micro_sequence(tuple(doc_lengths), micro_seq_tokens, i)
    print(f'micro-sequence {i}:')
    differs += [f'micro-sequence {i} {n}' for n in compare(got, want)]
assert not differs, f"{', '.join(differs)} differ from the reference"
print('PASS')
