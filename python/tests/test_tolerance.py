"""The tolerance judge accepts the oracle's own output rounded to the device
dtype and rejects perturbed ones, naming the first failing element, the worst
one and the budget; structural failures (NaN, a missing or misshapen tensor)
and a truncating rounding fail however small the error. About 1 s."""

import numpy as np
import pytest
from support import FIXTURES

import attn_oracle
from attn_oracle.cases import read_case
from attn_oracle.tolerance import judge, tolerance_floor

BATCH = dict(q_segment_ids=[[1] * 40 + [2] * 24], q_segment_pos=[list(range(40)) + list(range(24))],
             mask="causal", max_segments=2)


@pytest.fixture(scope="module")
def fp16_case():
    rng = np.random.default_rng(7)
    q, k, v, do = (rng.uniform(-1, 1, (1, 64, 4, 32)).astype(np.float16) for _ in range(4))
    return attn_oracle.attention_case(q, k, v, do=do, **BATCH)


def device_output(case):
    """What a correct fp16 device returns: the float64 truth rounded to fp16 (lse in fp32)."""
    truth = case.eval()
    out = {name: truth[name].astype(np.float16).astype(np.float64) for name in ("o", "dq", "dk", "dv")}
    out["lse"] = truth["lse"].astype(np.float32).astype(np.float64)
    return out


def test_the_oracle_rounded_to_the_dtype_passes(fp16_case):
    verdict = judge(fp16_case, device_output(fp16_case))
    assert verdict.passed and bool(verdict) and verdict.first_failure is None
    assert [c.tensor for c in verdict.checks] == ["o", "lse", "dq", "dk", "dv"]
    o = verdict["o"]
    assert o.k == 2 and o.eps == tolerance_floor("fp16") and verdict["dq"].k == 3
    assert 0 < o.error <= o.budget == pytest.approx(o.k * o.naive_error + o.eps)
    assert o.first_failure is None and len(o.worst_index) == 4


def test_a_perturbed_element_fails_with_its_index_and_the_budget(fp16_case):
    out = device_output(fp16_case)
    out["dk"][0, 5, 1, 3] += 0.05
    out["dk"][0, 30, 2, 0] -= 0.5
    verdict = judge(fp16_case, out)
    assert not verdict.passed and [c.tensor for c in verdict.failures] == ["dk"]
    dk = verdict.first_failure
    assert dk.first_failure == (0, 5, 1, 3) and dk.worst_index == (0, 30, 2, 0)
    assert dk.error > dk.budget and dk.ratio > 1
    assert dk.first_failure_backend - dk.first_failure_reference == pytest.approx(0.05, abs=2e-3)
    assert "dk: FAIL" in str(verdict) and "first failing element [0, 5, 1, 3]" in str(verdict)


def test_structural_failures_fail_whatever_the_error(fp16_case):
    out = device_output(fp16_case)
    out["o"][0, 3, 0, 0] = np.nan
    del out["dv"]
    out["lse"] = out["lse"].reshape(1, 64, 4)  # [B, Tq, Hq] instead of [B, Hq, Tq]
    verdict = judge(fp16_case, out)
    assert {c.tensor for c in verdict.failures} == {"o", "lse", "dv"}
    assert verdict["o"].detail == "NaN in backend" and verdict["o"].first_failure == (0, 3, 0, 0)
    assert "expected [1, 4, 64]" in verdict["lse"].detail and verdict["lse"].error == np.inf
    assert "missing" in verdict["dv"].detail


def test_a_truncating_rounding_fails_inside_the_budget(fp16_case):
    truth = fp16_case.eval()
    out = device_output(fp16_case)
    rounded = truth["o"].astype(np.float16)
    away = np.abs(rounded.astype(np.float64)) > np.abs(truth["o"])
    out["o"] = np.where(away, np.nextafter(rounded, np.float16(0)), rounded).astype(np.float64)
    verdict = judge(fp16_case, out)
    assert verdict["o"].error <= verdict["o"].budget and not verdict["o"].passed
    assert "rounding biased towards zero" in verdict["o"].detail


def test_judges_fixtures_and_results_directly():
    case = read_case(FIXTURES / "regressions" / "window_right_int64_max.case.json")
    inputs = case.inputs()
    f = case.fields
    result = attn_oracle.attention(
        inputs["q"], inputs["k"], inputs["v"], do=inputs.get("do"), dtype=f["dtype"], scale=f.get("scale"),
        q_segment_ids=f["q"]["segment_ids"], q_segment_pos=f["q"]["segment_pos"],
        kv_segment_ids=f["kv"]["segment_ids"], kv_segment_pos=f["kv"]["segment_pos"], mask=f["mask"],
        max_segments=f["max_segments"], window=tuple(int(x) for x in f["window"]))
    assert judge(case.path, result).passed
    wrong = dict(result.as_dict(), o=result.o + 1e-2)
    assert not judge(case, wrong).passed


def test_other_ops_are_refused():
    with pytest.raises(attn_oracle.AttnOracleError) as raised:
        judge(FIXTURES / "design" / "ex1.case.json", {"o": np.zeros(1)})
    assert raised.value.code == "bad_case"
