"""A backend's declared domain (docs/python.md): attn_oracle.Domain checks its
fields and goes into the hello; `check` on a self-attention-only backend that
declares it judges the draws instead of declining them, and skips what the
domain excludes with the reason. About 10 s."""

import json
import os
import subprocess
import sys

import pytest
from support import REPO

from attn_oracle import Domain, worker


class Declares:
    def __init__(self, domain):
        self.domain = domain

    def metadata(self, batch):
        return {}


def test_the_hello_carries_the_fields_that_narrow_the_domain():
    assert "domain" not in worker.hello(object())
    declared = Domain(self_attention_only=True, mask_kinds=["causal", "no_mask"], head_dims=[64])
    assert worker.hello(Declares(declared))["domain"] == {
        "self_attention_only": True, "mask_kinds": ["causal", "no_mask"], "head_dims": [64]}
    assert worker.hello(Declares({"no_padding": True, "max_rows": 1}))["domain"] == {"no_padding": True, "max_rows": 1}
    assert worker.hello(Declares(Domain(positions_extra_dims=False, max_position=2**31 - 1)))["domain"] == {
        "positions_extra_dims": False, "max_position": 2**31 - 1}
    assert worker.hello(Declares(Domain(one_sequence_a_row=True, causal_windows_only=True)))["domain"] == {
        "one_sequence_a_row": True, "causal_windows_only": True}


@pytest.mark.parametrize("fields, key", [({"mask_kinds": ["sideways"]}, "mask_kinds"), ({"dtypes": ["fp64"]}, "dtypes"),
                                         ({"no_padding": "yes"}, "no_padding"), ({"max_rows": -1}, "max_rows"),
                                         ({"positions_extra_dims": 0}, "positions_extra_dims"),
                                         ({"max_position": -1}, "max_position"),
                                         ({"one_sequence_a_row": 1}, "one_sequence_a_row"),
                                         ({"causal_windows_only": "yes"}, "causal_windows_only"),
                                         ({"head_dims": [0]}, "head_dims"), ({"mask_kinds": "causal"}, "mask_kinds")])
def test_a_bad_field_is_refused_naming_it(fields, key):
    with pytest.raises((TypeError, ValueError), match=f"Domain.{key}"):
        Domain(**fields)


def test_an_unknown_key_is_refused_naming_it():
    with pytest.raises(ValueError, match="unknown key 'self_attention'"):
        worker.hello(Declares({"self_attention": True}))
    with pytest.raises(TypeError, match="attn_oracle.Domain or a dict"):
        worker.hello(Declares(("causal",)))


def check(tmp_path, prefix, cases):
    env = {**os.environ, "ATTN_ORACLE_FAILURES_DIR": str(tmp_path / "failures")}
    done = subprocess.run([sys.executable, "-m", "attn_oracle", "check", "examples.self_attention_backend:Backend",
                           "--filter", prefix, "--cases", str(cases), "--report", str(tmp_path / prefix)],
                          cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((tmp_path / prefix / "conformance.json").read_text())["results"], done.stdout


def test_a_self_attention_backend_is_judged_on_its_draws(tmp_path):
    cases = 20
    metadata, printed = check(tmp_path, "metadata/", cases)
    results = metadata + check(tmp_path, "attention/matchesReference", cases)[0]
    judged = {r["property"]: r["draws"]["judged"] for r in results if r["verdict"] == "passed"}
    skipped = {r["property"]: r.get("message", "") for r in results if r["verdict"] == "skipped"}
    # Like numpy_backend, the example declines invalid inputs (and a batch of
    # zero tokens): the valid draws are judged, a pass on arbitrary ones says
    # how little it rests on.
    invalid = "metadata/arbitraryInputsMatchReference"
    assert {"metadata/matchesReference", "attention/matchesReference", invalid} <= set(judged)
    assert all(n >= 0.9 * cases for p, n in judged.items() if p != invalid), judged
    assert f"passed, but judged only {judged[invalid]} of {cases} draws" in printed
    assert "excludes what it needs: it inserts padding tokens" in skipped["metadata/trailingPaddingChangesNothing"]
    assert all(r["draws"]["total"] == 0 for r in results if r["verdict"] == "skipped" and "domain" in r.get("message", ""))


@pytest.mark.parametrize("verb", ["replay", "repro"])
def test_a_case_outside_the_domain_is_declined_naming_the_field(verb):
    # ex2 (padding_causal, padding between documents): every property declines it for this
    # backend, so replay and repro say so (SKIP, exit 4) instead of judging it.
    done = subprocess.run([sys.executable, "-m", "attn_oracle", verb, "examples.self_attention_backend:Backend",
                           str(REPO / "fixtures" / "design" / "ex2.case.json")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stdout + done.stderr
    assert done.stdout.startswith("SKIP"), done.stdout
    assert "declines this case: outside the backend's domain: mask padding_causal" in done.stdout
    assert "(domain field mask_kinds)" in done.stdout


def check_in_tests(tmp_path, target, prefix, cases):
    here = os.path.dirname(__file__)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]),
           "ATTN_ORACLE_FAILURES_DIR": str(tmp_path / "failures")}
    done = subprocess.run([sys.executable, "-m", "attn_oracle", "check", target, "--filter", prefix, "--cases",
                           str(cases), "--no-store", "--report", str(tmp_path / target.replace(":", "-"))],
                          cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    report = json.loads((tmp_path / target.replace(":", "-") / "conformance.json").read_text())["results"]
    return done, report


def test_a_sequence_length_backend_is_drawn_one_sequence_a_row_and_windows_ending_at_the_query(tmp_path):
    # Right only inside its domain: one sequence a row, windows that end at the query.
    cases = 30
    done, results = check_in_tests(tmp_path, "sequence_lengths_backend:Backend", "attention/matchesReference", cases)
    assert done.returncode == 0, done.stdout + done.stderr
    assert results[0]["draws"]["judged"] >= 0.9 * cases, results[0]["draws"]
    # The same code without the two fields is drawn several documents a row and open right sides, and fails.
    done, results = check_in_tests(tmp_path, "sequence_lengths_backend:Undeclared", "attention/matchesReference", cases)
    assert done.returncode == 1, done.stdout + done.stderr
    assert results[0]["verdict"] == "FAILED", results[0]


def test_the_mask_kind_names_are_read_and_composed_in_one_place():
    from types import SimpleNamespace

    from attn_oracle import domain

    composed = {domain.mask_kind(padding=p, causal=c, bottom_right=b): (p, c, b)
                for p in (False, True) for c in (False, True) for b in (False, True) if c or not b}
    assert sorted(composed) == sorted(domain.MASK_KINDS)
    for kind, (padding, causal, bottom_right) in composed.items():
        assert (domain.is_causal(kind), domain.is_bottom_right(kind)) == (causal, bottom_right), kind
    with pytest.raises(ValueError):
        domain.mask_kind(padding=False, causal=False, bottom_right=True)
    assert domain.TOP_LEFT_KINDS == ("no_mask", "padding", "causal", "padding_causal")
    assert domain.CAUSAL_KINDS == ("causal", "padding_causal", "causal_bottom_right", "padding_causal_bottom_right")
    framework = SimpleNamespace(float32="f32", float16="f16", bfloat16="b16")
    assert domain.framework_dtypes(framework) == {"fp32": "f32", "fp16": "f16", "bf16": "b16"}
    assert domain.framework_dtypes(framework, ("bf16",)) == {"bf16": "b16"}
