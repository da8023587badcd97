"""attn_oracle.stacks without any stack installed: the registry lists its check
targets without importing a stack, a stack that cannot be imported gives one
line and a non-zero exit (no traceback), the version gate, and the report
scripts/stacks writes. Each stack's own test (test_stack_*.py) runs it against
the real library, and skips when that library is absent."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

from attn_oracle import stacks
from attn_oracle.stacks import registry, report

HERE = Path(__file__).parent


def test_the_registry_lists_every_target_without_importing_a_stack():
    done = subprocess.run([sys.executable, "-c", "import sys, runpy; sys.argv = ['x', 'list'];"
                           "runpy.run_module('attn_oracle.stacks', run_name='__main__');"
                           "heavy = {'torch', 'jax', 'transformers', 'megatron', 'flax'} & set(sys.modules);"
                           "sys.exit(f'imported {heavy}' if heavy else 0)"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == sum(len(s.backends) for s in registry.STACKS)
    for line, (stack, target) in zip(lines, [(s, t) for s in registry.STACKS for t in s.backends]):
        env, name, full, needs, _ = line.split("\t")
        assert (env, name, full) == (stack.env, stack.name, f"attn_oracle.stacks.{stack.name}:{target}")


def test_a_stack_that_cannot_import_is_one_line_and_a_failed_check(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "attn_oracle", "check", "unavailable_stack_backend:Backend",
                           "--cases", "1", "--no-store", "--report", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "Some Stack: cannot import attn_oracle_no_such_library (ModuleNotFoundError" in out, out
    assert "Traceback" not in out, out


def test_the_version_gate_notes_an_unchecked_release_and_strict_refuses_it(monkeypatch, capsys):
    stacks.require("NumPy", "numpy", "numpy", ("0.0",))
    assert "numpy" in capsys.readouterr().err
    monkeypatch.setenv("ATTN_ORACLE_STACK_VERSIONS", "strict")
    with pytest.raises(stacks.StackUnavailable, match="strict refuses it"):
        stacks.require("NumPy", "numpy", "numpy", ("0.0",))


def test_the_report_has_a_row_per_target_and_says_what_was_skipped(tmp_path):
    (tmp_path / "runs.tsv").write_text("torch\tdemo\tattn_oracle.stacks.demo:Backend\t3\t1200\n"
                                       "torch\tother\tattn_oracle.stacks.other:Backend\tskipped\t0\n")
    text = report.render(tmp_path)
    assert "did not run (exit 3" in text and "skipped" in text and "## Failures and expected failures" in text


def test_the_registry_marks_the_gpu_targets_and_list_splits_them():
    def listed(*flags):
        done = subprocess.run([sys.executable, "-m", "attn_oracle.stacks", "list", *flags], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return [line.split("\t")[2] for line in done.stdout.splitlines()]
    gpu = [f"attn_oracle.stacks.{s.name}:{t}" for s in registry.STACKS if s.gpu for t in s.backends]
    assert gpu and listed("--gpu") == gpu
    assert sorted(listed("--gpu") + listed("--cpu")) == sorted(listed())
    assert "attn_oracle.stacks.torch_varlen:Backend" in gpu


def test_the_device_runner_without_a_gpu_skips_each_target_and_says_nothing_ran(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}  # no nvidia-smi, no device
    done = subprocess.run([sys.executable, "-m", "attn_oracle.stacks", "device", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    targets = [f"attn_oracle.stacks.{s.name}:{t}" for s in registry.STACKS if s.gpu for t in s.backends]
    for target in targets:
        assert f"{target} skipped: no CUDA device here" in done.stdout, done.stdout
    assert "nothing ran" in done.stdout.splitlines()[-1]


def test_the_device_script_refuses_to_run_without_a_staged_wheel(tmp_path):
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "stacks-device").write_bytes((REPO / "scripts" / "stacks-device").read_bytes())
    done = subprocess.run(["bash", str(root / "scripts" / "stacks-device"), "run"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "ATTN_ORACLE_DEVICE_PYTHON": sys.executable})
    assert done.returncode == 2 and "nothing ran" in done.stderr, done.stdout + done.stderr


STAGED = REPO / "build" / "device" / "wheels"


@pytest.mark.skipif(not STAGED.is_dir(), reason="nothing staged: scripts/stacks --device stage fills build/device")
def test_the_staged_folder_holds_what_the_runner_installs_within_the_device_limit():
    names = sorted(p.name for p in STAGED.iterdir())
    assert any(n.startswith("attn_oracle-") and "-cp312-" in n for n in names), names
    pins = [line.split()[0].split("==") for line in (REPO / "python/attn_oracle/stacks/requirements-device.txt")
            .read_text().splitlines() if line.strip() and not line.startswith("#")]
    for name, version in pins:
        wheel = name.replace("-", "_")  # a wheel's file name writes the project's '-' as '_' (PEP 427)
        assert any(n.startswith(f"{wheel}-{version}-") for n in names), (name, names)
    tracked = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                             capture_output=True, check=True).stdout.split(b"\0")
    tree = sum((REPO / p.decode()).stat().st_size for p in tracked if p and (REPO / p.decode()).is_file())
    staged = sum(p.stat().st_size for p in (REPO / "build" / "device").rglob("*") if p.is_file())
    assert tree + staged < 64 * 2**20, (tree, staged)


def test_the_device_runner_shards_merges_and_writes_what_comes_back(tmp_path):
    """The run's machinery on a CPU target (the GPU is only what the registry's targets need)."""
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "attn_oracle.stacks", "device", "--out", str(out), "--targets",
                           "examples.numpy_backend:Backend", "--without-device", "--cases", "6", "--jobs", "2",
                           "--shards", "2", "--budget", "240"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["logs.tar.gz", "runs.json", "stacks-gpu.md"]
    rows = json.loads((out / "runs.json").read_text())["rows"]
    assert len(rows) == 1 and rows[0]["shards"] == ["0"] and rows[0]["judged"] > 0 and rows[0]["ok"], rows
    assert "| examples.numpy_backend | `examples.numpy_backend:Backend` |" in (out / "stacks-gpu.md").read_text()


def test_a_targets_registry_env_reaches_its_checks_in_the_device_run(tmp_path):
    from attn_oracle.stacks import device

    target = "attn_oracle.stacks.torch_sdpa:CudnnJagged"
    assert device._environment(tmp_path, target)["ATTN_ORACLE_WORKER_TIMEOUT"] == "60"
    assert device._environment(tmp_path, "attn_oracle.stacks.torch_sdpa:EfficientJagged")[
        "ATTN_ORACLE_WORKER_TIMEOUT"] == os.environ.get("ATTN_ORACLE_WORKER_TIMEOUT", "300")


def test_a_property_whose_every_draw_was_declined_counts_its_draws_unjudged():
    """The H100 run showed xformers' Flash at '100 of 100 (100%)' while it had declined every draw of
    six of its seven properties: their draws count, unjudged; a capability the backend lacks draws nothing."""
    from attn_oracle.stacks.report import judged_of_drawn

    def result(verdict, judged, declined):
        return {"verdict": verdict, "draws": {"total": judged + declined, "judged": judged, "declined": declined}}

    report = {"results": [result("passed", 100, 0), result("skipped", 0, 100), result("skipped", 0, 100),
                          result("skipped", 0, 0)]}
    assert judged_of_drawn(report) == (100, 300)
