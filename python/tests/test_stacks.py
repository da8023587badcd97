"""attn_oracle.stacks without any stack installed: the registry lists its check
targets without importing a stack, a stack that cannot be imported gives one
line and a non-zero exit (no traceback), the version gate, and the report
scripts/stacks writes. Each stack's own test (test_stack_*.py) runs it against
the real library, and skips when that library is absent."""

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
