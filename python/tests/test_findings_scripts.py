"""The standalone scripts that isolate the GPU findings on a device (docs/findings/, run there by
`scripts/stacks-device findings`): on a CPU, each script's own check (--cpu: the same calls on
torch's math backend or on the bias xformers materializes) passes and says what it expects, and
without --cpu each says NOT RUN and exits 2; the runner says so for every script and exits 2 when
none ran. Skipped without torch (scripts/stacks makes build/stacks/torch) or, for the xformers
script, without xformers (`pip install xformers==0.0.35` into that venv)."""

import os
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: scripts/stacks makes the torch venv")

ROOT = pathlib.Path(__file__).resolve().parents[2]
FINDINGS = ROOT / "docs" / "findings"
CUDA = torch.cuda.is_available()


def run_script(name, *args, timeout=300):
    return subprocess.run([sys.executable, str(FINDINGS / name), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=FINDINGS)


def test_nested_cudnn_script_checks_itself_on_the_cpu():
    done = run_script("torch_2_11_sdpa_nested_cudnn_dq.py", "--cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "CPU stand-in" in lines[0]
    for queries in (8, 9):
        for keys in ("once", "twice"):
            assert any(line.startswith(f"{queries} queries, the key {keys}: ok") for line in lines), done.stdout
    assert lines[-1] == "PASS"


def test_xformers_script_checks_itself_on_the_cpu():
    pytest.importorskip("xformers.ops.fmha", reason="xformers is not installed: pip install xformers==0.0.35")
    done = run_script("xformers_0_0_35_cutlass_fp32_gqa_causal.py", "--cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    # The values the report names: top-left gives key 0's v, both keys give what the H100 returned.
    assert "top-left -0.793277, bottom-right 0.429743, no causal term 0.429743" in done.stdout
    assert done.stdout.count("wrong in 0 of 20 calls, 1 distinct outputs") == 3, done.stdout
    assert done.stdout.splitlines()[-1] == "PASS"


@pytest.mark.skipif(CUDA, reason="a CUDA device is present: the scripts run for real")
@pytest.mark.parametrize("name", ["torch_2_11_sdpa_nested_cudnn_dq.py", "torch_sdpa_nested_flash_vs_efficient.py",
                                  "xformers_0_0_35_cutlass_fp32_gqa_causal.py"])
def test_without_a_device_a_script_says_not_run(name):
    done = run_script(name)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.startswith("NOT RUN:")


@pytest.mark.skipif(CUDA, reason="a CUDA device is present: the runner runs the scripts for real")
def test_the_device_runner_says_nothing_ran_on_a_cpu(tmp_path):
    env = dict(os.environ, ATTN_ORACLE_DEVICE_PYTHON=sys.executable, OUT=str(tmp_path))
    done = subprocess.run([str(ROOT / "scripts" / "stacks-device"), "findings"], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 2, done.stdout + done.stderr
    verdicts = [line for line in done.stdout.splitlines() if line.startswith("== ") and ": " in line]
    assert len(verdicts) == 5, done.stdout
    assert all("NOT RUN" in line or "an exception of its own" in line for line in verdicts), verdicts
    assert "0 of 5 findings scripts ran" in done.stdout
    assert (tmp_path / "findings-device.txt").read_text().count("\n== ") >= 9
