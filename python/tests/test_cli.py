"""`python -m attn_oracle`: the command lines it builds, and the commands that
pass through to the bundled attn-oracle. About 1 s."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import FIXTURES, REPO, cli_eval

from attn_oracle import cli


def python_m(*args, cwd=REPO, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "attn_oracle", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_a_target_becomes_an_exec_backend_with_the_rest_passed_through():
    command = cli.command_line(["check", "mypkg.kernels:Backend", "--cases", "5", "--filter", "attention/"],
                               python="/opt/my python/bin/python3")
    assert command == [cli.bundled_cli(), "check", "--backend",
                       "exec:'/opt/my python/bin/python3' -m attn_oracle.worker mypkg.kernels:Backend",
                       "--cases", "5", "--filter", "attention/"]
    assert cli.command_line(["replay", "m:C", "x.case.json"])[1:3] == ["replay", "--backend"]


def test_anything_else_passes_through_unchanged():
    assert cli.command_line(["replay", "--backend", "exec:w", "x.case.json"])[1:] == [
        "replay", "--backend", "exec:w", "x.case.json"]
    assert cli.command_line(["eval", "fixtures/design/ex1.case.json"])[1:] == ["eval", "fixtures/design/ex1.case.json"]
    assert cli.command_line([])[1:] == ["--help"]
    with pytest.raises(cli.UsageError):
        cli.command_line(["check", "m:C", "--backend", "reference"])


def test_targets_are_module_colon_class():
    assert cli.is_target("examples.numpy_backend:Backend") and cli.is_target("m:Outer.Inner")
    assert not cli.is_target("fixtures/design/ex1.case.json") and not cli.is_target("reference")


def test_printed_lines_name_this_python():
    assert cli.environment(python="/usr/bin/python3")["ATTN_ORACLE_PROGRAM"] in (
        os.environ.get("ATTN_ORACLE_PROGRAM"), "/usr/bin/python3 -m attn_oracle")


def test_eval_passes_through_with_the_clis_output_and_status():
    done = python_m("eval", "fixtures/design/ex1.case.json")
    assert done.returncode == 0
    assert json.loads(done.stdout) == cli_eval(FIXTURES / "design" / "ex1.case.json")[1]
    rejected = python_m("eval", "fixtures/design/ex4.case.json")
    assert rejected.returncode == 2 and json.loads(rejected.stdout)["error"]["code"] == "too_many_segments"


def test_check_lists_the_properties():
    done = python_m("check", "--list")
    ids = done.stdout.split()
    assert done.returncode == 0 and "metadata/matchesReference" in ids and len(ids) == len(set(ids)) > 20
    only = python_m("check", "--list", "--filter", "metadata/").stdout.split()
    assert only == [i for i in ids if i.startswith("metadata/")]
    assert python_m("check", "--list", "--filter", "nothing/").returncode == 1


def test_the_console_script_runs_the_bundled_cli():
    script = Path(sys.executable).with_name("attn-oracle")
    if not script.exists():
        pytest.skip(f"no console script next to {sys.executable}")
    done = subprocess.run([str(script), "backends"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "reference" in done.stdout
