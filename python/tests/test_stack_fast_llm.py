"""attn_oracle.stacks.fast_llm against a Fast-LLM checkout named by ATTN_ORACLE_FAST_LLM
(skipped when unset): the micro-sequence metadata passes the kv_buffer metadata properties
on a checkout with the canonical cu_seqlens_k (and fails metadataIsCanonical on one
without: the test says which it found), and the planted twin
(tests/planted_fast_llm_backend.py) fails, shrunk to one document over two
micro-sequences. About 20 s on two cores."""

import os
from pathlib import Path

import pytest

CHECKOUT = os.environ.get("ATTN_ORACLE_FAST_LLM")
if not CHECKOUT:
    pytest.skip("ATTN_ORACLE_FAST_LLM is not set: point it at a Fast-LLM checkout (docs/stacks.md, Fast-LLM)",
                allow_module_level=True)
pytest.importorskip("torch", reason="Fast-LLM's preprocessing needs torch: run this in scripts/stacks' torch venv")

import stack_checks  # noqa: E402

METADATA_PROPERTIES = ("kv_buffer/metadataIsCanonical", "kv_buffer/metadataDrivesAttentionLikeTheReference",
                       "kv_buffer/earlierDocumentsDoNotInfluence")


def check(tmp_path, target, cases=30):
    done, results = stack_checks.check(tmp_path, target, "--filter", "kv_buffer/", "--cases", str(cases), "--seed", "1")
    return done, {p: r["verdict"] for p, r in results.items()}


def canonical_checkout() -> bool:
    """Whether the checkout has the fix that makes cu_seqlens_k start at 0 (its own source says so)."""
    block = Path(CHECKOUT, "fast_llm", "data", "document", "block.py")
    return block.exists() and "cumulative_lengths_k[0] = 0" in block.read_text()


def test_the_micro_sequence_metadata_against_the_suite(tmp_path):
    done, verdicts = check(tmp_path, "attn_oracle.stacks.fast_llm:Backend")
    judged = {p: verdicts[p] for p in METADATA_PROPERTIES}
    if canonical_checkout():
        assert done.returncode == 0, done.stdout + done.stderr
        assert judged == dict.fromkeys(METADATA_PROPERTIES, "passed"), verdicts
    else:  # before the fix: cu_seqlens_k[0] is first_document_begin
        assert done.returncode == 1, done.stdout + done.stderr
        assert judged["kv_buffer/metadataIsCanonical"] == "FAILED", verdicts
        assert "cu_seqlens_k" in done.stdout, done.stdout


def test_the_planted_twin_fails_shrunk_to_one_document_over_two_micro_sequences(tmp_path):
    done, verdicts = check(tmp_path, "planted_fast_llm_backend:Backend")
    assert done.returncode == 1, done.stdout + done.stderr
    assert verdicts["kv_buffer/metadataIsCanonical"] == "FAILED", verdicts
    cases = stack_checks.shrunk_cases(done)
    assert cases and sum(cases[0]["doc_lengths"]) <= 2 and cases[0]["micro_seq_tokens"] == 1, cases
