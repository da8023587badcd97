"""The torch gloo runner when a rank goes wrong: a rank that hangs is reported as hung (which
rank, which step) within the timeout, one that raises or dies fails the call with its rank, step
and message, and in every case every rank process is killed and reaped; the next call starts a
new group and answers right. Also: the ranks leave when the driver is killed. Faults are planted
through the runner's step hook (cp_faults.py). Skipped without torch (scripts/stacks' venv has it)."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="torch is not installed here: these tests run in build/stacks/torch "
                                    "(scripts/stacks builds it)")

import cp_faults  # noqa: E402
import cp_reference as ref  # noqa: E402
from attn_oracle import worker  # noqa: E402
from attn_oracle.multidevice import torch_gloo  # noqa: E402

TIMEOUT_S = 10


def _layout(cp, strategy):
    return worker.Layout(cp=cp, strategy=strategy, balance="contiguous", stripe=1, indices=None)


def _alive(pid):
    return Path(f"/proc/{pid}").exists()


def _rank_children():
    """This process's children running a rank (reaped ones are gone from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and b"_torch_rank" in cmdline:
            out.append(int(stat.parent.name))
    return out


@pytest.fixture(scope="module")
def backend():
    b = torch_gloo.Backend(timeout_s=TIMEOUT_S)
    yield b
    b.close()


def _problem(cp):
    return ref.problem(np.random.default_rng(cp), cp, "padding_causal")


def _fails(backend, cp, strategy, hook, error):
    p, x = _problem(cp)
    layout = _layout(cp, strategy)
    backend.step_hook = None
    backend.cp_attention(layout, p, x)  # the group is up (its start is not what is timed)
    pids = backend.pids()
    assert len(pids) == cp and all(map(_alive, pids))
    backend.step_hook = hook
    start = time.monotonic()
    try:
        with pytest.raises(error) as raised:
            backend.cp_attention(layout, p, x)
    finally:
        backend.step_hook = None
    took = time.monotonic() - start
    assert not any(map(_alive, pids)), f"rank processes left behind: {[p for p in pids if _alive(p)]}"
    assert _rank_children() == [] and backend.pids() == []
    return raised.value, took


def test_a_rank_that_hangs_is_named_with_its_step(backend):
    err, took = _fails(backend, 3, "ring", functools.partial(cp_faults.hang, at_rank=1, at_step=2),
                       torch_gloo.RankHung)
    assert (err.rank, err.step) == (1, 2), str(err)
    assert "rank 1 hung in step 2 (computing)" in str(err), str(err)
    assert "waiting on the others" in str(err), str(err)  # where the other ranks were
    assert TIMEOUT_S <= took < TIMEOUT_S + 15, took


def test_a_rank_that_raises_fails_the_call_with_its_traceback(backend):
    err, took = _fails(backend, 4, "all_gather", functools.partial(cp_faults.fail, at_rank=2, at_step=0),
                       torch_gloo.RankFailed)
    assert not isinstance(err, torch_gloo.RankHung)
    assert (err.rank, err.step) == (2, 0), str(err)
    assert "rank 2 raised in step 0 (computing): RuntimeError: planted failure on rank 2, step 0" in str(err), str(err)
    assert "cp_faults.py" in str(err)  # the rank's traceback
    assert took < TIMEOUT_S, took  # not left to the timeout


def test_a_rank_that_dies_fails_the_call(backend):
    err, _ = _fails(backend, 2, "all_to_all", functools.partial(cp_faults.die, at_rank=0, at_step=0),
                    torch_gloo.RankFailed)
    assert err.rank == 0 and "rank 0 died (exit code 7) in step 0 (computing)" in str(err), str(err)


def test_after_a_failure_a_new_group_answers_right(backend):
    _fails(backend, 3, "ring", functools.partial(cp_faults.fail, at_rank=0, at_step=1), torch_gloo.RankFailed)
    p, x = _problem(3)
    got, want = backend.cp_attention(_layout(3, "ring"), p, x), ref.full_attention(p, x)
    np.testing.assert_allclose(got["o"], want["o"], atol=3e-5)  # contiguous: rank-major is row order


DRIVER = """
import sys, time
import numpy as np
sys.path[:0] = {path!r}
import cp_reference as ref
from attn_oracle import worker
from attn_oracle.multidevice import torch_gloo
p, x = ref.problem(np.random.default_rng(0), 2, "padding")
b = torch_gloo.Backend()
b.cp_attention(worker.Layout(cp=2, strategy="all_gather", balance="contiguous", stripe=1, indices=None), p, x)
print(*b.pids(), flush=True)
time.sleep(600)
"""


def test_the_ranks_leave_when_the_driver_is_killed(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(path=sys.path))
    driver = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in driver.stdout.readline().split()]
        assert len(pids) == 2 and all(map(_alive, pids))
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    deadline = time.monotonic() + 10
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(map(_alive, pids)), "ranks outlived their killed driver"
