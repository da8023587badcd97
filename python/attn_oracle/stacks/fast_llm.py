"""Fast-LLM: its micro-sequence preprocessing, judged as the K/V buffer's metadata.

Fast-LLM is not on the package index. Point ``ATTN_ORACLE_FAST_LLM`` at a
checkout (the directory holding ``fast_llm/``): the module puts it first on
``sys.path`` and imports ``fast_llm`` from there, so a developer checks the
tree they are editing. Its preprocessing needs torch, numpy, PyYAML and
packaging (the torch venv of scripts/stacks has them).

``Backend`` serves the ``kv_buffer`` capability with ``kv_micro_sequence``
alone (docs/python.md, "The K/V buffer"): the suite judges the metadata
(metadataIsCanonical, metadataDrivesAttentionLikeTheReference,
earlierDocumentsDoNotInfluence through its own float64 kernel). For a problem
(document lengths, micro-sequence size m) it calls Fast-LLM's own entry point
of the training data path, as its tests do:
``LanguageModelBatch.from_documents(documents, pad_to_size).get_model_inputs(
LanguageModelBatchPreprocessingConfig(micro_batch_splits=..., return_cumulative_sequence_lengths=True,
return_document_index=True, return_position_index=True))``. Micro-sequence i's
fields are read off the i-th model input: ``begin`` = i * m, ``end`` = begin +
its token count, ``first_document_begin``, ``cu_seqlens_q`` / ``cu_seqlens_k``
(``cumulative_lengths_q/k``), ``q_document`` / ``kv_document``
(``document_index_q/k``, both numbering the overlapping documents from 1), and
``q_position`` (``position_index``). Fast-LLM gives no positions for the keys:
``kv_position`` is read off the earlier model inputs' ``position_index`` over
tokens [first_document_begin, end), the positions Fast-LLM gave those tokens
when they were queries.

Conventions mapped:
- Fast-LLM reads one label token past the inputs (``predicted_tokens=1``): the
  sequence is padded by one token.
- Fast-LLM splits a sequence into equal micro-sequences. When m does not divide
  N, the module pads the sequence with Fast-LLM's own ``pad_to_size`` to
  ceil(N / m) * m tokens; the padding is one more document at the end, which the
  module cuts off the last micro-sequence (its cu_seqlens entry and its tokens).
- The errors the suite expects for a malformed problem (no document, a length
  below 1, m < 1, i out of range) are raised by the module before Fast-LLM runs.

The query that attends nothing: none here; every query of a micro-sequence
attends its own document's earlier tokens and itself.

Fast-LLM releases up to the commit "Fix non-canonical cu_seqlens_k from
preprocessor" emit ``cu_seqlens_k[0] = first_document_begin`` instead of 0
(docs/stacks.md, Fast-LLM: a bug, found by kv_buffer/metadataIsCanonical).
"""

from __future__ import annotations

import os
import sys
from functools import lru_cache

import numpy as np

from attn_oracle.errors import AttnOracleError
from attn_oracle.stacks import StackUnavailable, check_version

__all__ = ["Backend", "model_inputs", "micro_sequence"]

CHECKOUT_VARIABLE = "ATTN_ORACLE_FAST_LLM"


def _checkout() -> str:
    path = os.environ.get(CHECKOUT_VARIABLE, "")
    if not path:
        raise StackUnavailable(f"Fast-LLM: set {CHECKOUT_VARIABLE} to a Fast-LLM checkout (it is not on the "
                               "package index; docs/stacks.md)")
    if not os.path.isdir(os.path.join(path, "fast_llm")):
        raise StackUnavailable(f"Fast-LLM: {CHECKOUT_VARIABLE}={path} holds no fast_llm/ directory")
    return os.path.abspath(path)


CHECKOUT = _checkout()
if CHECKOUT not in sys.path:
    sys.path.insert(0, CHECKOUT)
CHECKED = ("0.4",)  # fast_llm.__version__ of the checkouts this module was checked on
try:
    import fast_llm  # noqa: E402
    import fast_llm.data.document.language_model  # noqa: E402,F401
except Exception as e:  # noqa: BLE001 - any import failure is "unavailable", said in one line
    first = (str(e).strip().splitlines() or [""])[0]
    raise StackUnavailable(f"Fast-LLM: cannot import fast_llm from {CHECKOUT} ({type(e).__name__}: {first}); "
                           "its preprocessing needs torch, numpy, PyYAML and packaging (scripts/stacks' torch venv)") from None
FAST_LLM_VERSION = getattr(fast_llm, "__version__", "unknown")
check_version("Fast-LLM", "fast_llm", FAST_LLM_VERSION, CHECKED)
import torch  # noqa: E402
from fast_llm.data.document.config import LanguageModelBatchPreprocessingConfig  # noqa: E402
from fast_llm.data.document.language_model import LanguageModelBatch, LanguageModelDocument  # noqa: E402

torch.set_num_threads(1)


def _revision() -> str:
    head = os.path.join(CHECKOUT, ".git")
    try:  # a worktree's .git is a file naming its git dir
        if os.path.isfile(head):
            head = open(head).read().split(":", 1)[1].strip()
        ref = open(os.path.join(head, "HEAD")).read().strip()
        return ref[:12] if not ref.startswith("ref:") else ref.split("/")[-1]
    except OSError:
        return "unknown"


def _checked(doc_lengths, m: int) -> tuple[np.ndarray, int]:
    lengths = np.asarray(doc_lengths, dtype=np.int64)
    if lengths.size == 0 or (lengths < 1).any():
        raise AttnOracleError("kv_buffer_document_length", f"doc_lengths {lengths.tolist()}: each document needs a token")
    if m < 1:
        raise AttnOracleError("kv_buffer_micro_seq_tokens", f"micro_seq_tokens {m}: must be at least 1")
    return lengths, int(lengths.sum())


@lru_cache(maxsize=64)
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


def micro_sequence(doc_lengths, m: int, i: int) -> dict:
    """Micro-sequence i's fields, read off Fast-LLM's i-th model input."""
    lengths, n = _checked(doc_lengths, m)
    count = -(-n // m)
    if not 0 <= i < count:
        raise AttnOracleError("kv_buffer_slice_out_of_bounds", f"micro-sequence {i} of {count} (N = {n}, m = {m})")
    return fast_llm_micro_sequence(tuple(int(x) for x in lengths), int(m), i)


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


class Backend:
    """Fast-LLM's micro-sequence preprocessing (``LanguageModelBatch.get_model_inputs``)."""

    name, version = "fast-llm-micro-sequences", f"{FAST_LLM_VERSION}+{_revision()}"

    def reproduction(self, case):
        """The call a reproduction makes (attn_oracle.repro): Fast-LLM's preprocessing, as its tests call it."""
        from ..repro import StackCall

        return StackCall(
            imports=["import torch", "from fast_llm.data.document.config import LanguageModelBatchPreprocessingConfig",
                     "from fast_llm.data.document.language_model import LanguageModelBatch, LanguageModelDocument"],
            functions=[model_inputs, _ints, fast_llm_micro_sequence],
            call="fast_llm_micro_sequence(tuple(doc_lengths), micro_seq_tokens, i)",
            notes=["Run it from a Fast-LLM checkout (`PYTHONPATH=. python THIS_FILE`); exit 1 (AssertionError) "
                   "while it differs."])

    def kv_micro_sequence(self, problem, i):
        return micro_sequence(problem.doc_lengths, problem.micro_seq_tokens, i)
