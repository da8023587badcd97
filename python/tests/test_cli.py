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


def test_help_after_a_command_prints_the_usage_with_the_python_forms():
    for args in (["check", "--help"], ["check", "-h"], ["replay", "--help"], ["--help"]):
        done = python_m(*args)
        assert done.returncode == 0 and "unknown option" not in done.stderr, (args, done.stderr)
        assert "check MODULE:CLASS" in done.stdout and "--cases N" in done.stdout, (args, done.stdout)


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


# End to end: the example backends of examples/ through a worker process. Each
# run starts the CLI, a child per property and a Python worker: 2-10 s.


def test_check_passes_the_numpy_example(tmp_path):
    done = python_m("check", "examples.numpy_backend:Backend", "--cases", "3", "--report", str(tmp_path / "report"),
                    env={"ATTN_ORACLE_FAILURES_DIR": str(tmp_path / "failures")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 failed" in done.stdout and "numpy_backend:Backend" in done.stdout
    report = json.loads((tmp_path / "report" / "conformance.json").read_text())
    passed = [r["property"] for r in report["results"] if r["verdict"] == "passed"]
    assert "metadata/matchesReference" in passed and "attention/matchesReference" in passed


def test_the_planted_example_fails_and_its_printed_replay_line_reproduces_it(tmp_path):
    done = python_m("check", "examples.planted_numpy_backend:Backend", "--filter", "metadata/matchesReference",
                    "--report", str(tmp_path / "report"), env={"ATTN_ORACLE_FAILURES_DIR": str(tmp_path / "failures")})
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line.strip() for line in done.stdout.splitlines()]
    # Under the verdict, the first cluster's heading, then its first mismatch.
    heading = lines.index(next(l for l in lines if l.startswith("FAILED"))) + 1
    assert lines[heading].startswith("[1] wrong answer on ordinary inputs"), lines[heading]
    mismatch = lines[heading + 1]
    replay = next(l for l in lines if l.startswith("replay: "))[len("replay: "):]
    assert replay.startswith(cli.program_name() + " replay --backend 'exec:")
    case_path = Path(next(l for l in lines if l.startswith("counterexample")).split(": ", 1)[1])
    shrunk = json.loads(case_path.read_text())
    assert shrunk["mask"].endswith("bottom_right") and len(shrunk["q"]["segment_ids"][0]) <= 4
    replayed = subprocess.run(["/bin/sh", "-c", replay], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert replayed.returncode == 3, replayed.stdout + replayed.stderr
    assert replayed.stdout.startswith("FAIL") and mismatch in replayed.stdout


def test_the_ci_outputs_pass_through_junit_xml_and_github_annotations(tmp_path):
    # The planted example in the store under the working directory: the annotation names it relative to it.
    junit = tmp_path / "junit.xml"
    done = python_m("check", "examples.planted_numpy_backend:Backend", "--filter", "metadata/matchesReference,"
                    "metadata/rowsAreIndependent", "--cases", "30", "--report", str(tmp_path / "report"),
                    "--junit-xml", str(junit), "--github-annotations", cwd=tmp_path,
                    env={"ATTN_ORACLE_FAILURES_DIR": "failures", "PYTHONPATH": os.pathsep.join(
                        [str(REPO), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 1, done.stdout + done.stderr
    import xml.etree.ElementTree as ET

    suites = ET.parse(junit).getroot()
    cases = {c.get("name"): c for c in suites.iter("testcase")}
    assert set(cases) == {"metadata/matchesReference", "metadata/rowsAreIndependent"}
    failure = cases["metadata/matchesReference"].find("failure")
    assert failure is not None and "replay: " + cli.program_name() in failure.text
    case_file = next(l.split(": ", 1)[1] for l in failure.text.splitlines() if "counterexample" in l)
    errors = [l for l in done.stdout.splitlines() if l.startswith("::error ")]
    assert errors and errors[0].startswith("::error file=" + os.path.relpath(case_file, tmp_path) + ","), errors
    assert "%0Areplay: " in errors[0]


def test_a_known_failure_keyed_by_arch_applies_on_that_architecture_only(tmp_path):
    from attn_oracle import worker
    import examples.planted_numpy_backend as planted

    class OnHopper(planted.Backend):
        arch = "sm_90"

    assert worker.hello(OnHopper())["arch"] == "sm_90" and "arch" not in worker.hello(planted.Backend())
    xfails = tmp_path / "xfails.txt"
    xfails.write_text("metadata/matchesReference arch=sm_90  # the planted bug, on Hopper only\n")
    verdicts = {}
    for arch in ("sm_90", "sm_80"):
        done = python_m("check", "examples.planted_numpy_backend:Backend", "--filter", "metadata/matchesReference",
                        "--cases", "30", "--no-store", "--xfails", str(xfails), "--report", str(tmp_path / arch),
                        env={"ATTN_ORACLE_ARCH": arch})
        verdicts[arch] = (done.returncode, json.loads((tmp_path / arch / "conformance.json").read_text())
                          ["results"][0]["verdict"])
    assert verdicts == {"sm_90": (0, "xfail"), "sm_80": (1, "FAILED")}, verdicts


def test_one_worker_per_device_each_seeing_its_device_alone(tmp_path):
    # Fake device lists: an outer CUDA_VISIBLE_DEVICES of three, two of them chosen by index.
    log = tmp_path / "devices.log"
    done = python_m("check", "visible_devices_backend:Backend", "--filter", "metadata/matchesReference",
                    "--cases", "40", "--no-store", "--devices", "2,0", "--report", str(tmp_path / "report"),
                    "--junit-xml", str(tmp_path / "junit.xml"),
                    env={"CUDA_VISIBLE_DEVICES": "7,3,5", "ATTN_ORACLE_TEST_DEVICE_LOG": str(log),
                         "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(REPO),
                                                        os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(log.read_text().split()) == ["5", "7"]
    result = json.loads((tmp_path / "report" / "conformance.json").read_text())["results"][0]
    assert result["draws"]["total"] == 40 and result["verdict"] == "passed"
    assert (tmp_path / "junit.xml").read_text().count("<testcase ") == 1


def test_the_draw_log_is_hypothesis_observations_from_a_python_backend(tmp_path):
    log = tmp_path / "draws.jsonl"
    done = python_m("check", "examples.self_attention_backend:Backend", "--filter", "metadata/matchesReference",
                    "--cases", "25", "--no-store", "--report", str(tmp_path / "report"), "--log-draws", str(log))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(l) for l in log.read_text().splitlines()]
    required = {"type", "status", "status_reason", "representation", "arguments", "how_generated", "features",
                "coverage", "timing", "metadata", "property", "run_start"}
    assert len(lines) == 25 and all(set(l) == required and l["type"] == "test_case" for l in lines)
    draws = json.loads((tmp_path / "report" / "conformance.json").read_text())["results"][0]["draws"]
    statuses = [l["status"] for l in lines]
    assert statuses.count("passed") == draws["passed"] and statuses.count("gave_up") == draws["declined"]
    assert all(l["status_reason"] for l in lines if l["status"] == "gave_up")


def test_a_coverage_target_not_met_fails_the_run_through_python(tmp_path):
    targets = tmp_path / "coverage.txt"
    targets.write_text("metadata/matchesReference  layout B>1  >= 1000  # more than 20 draws hold\n")
    done = python_m("check", "examples.numpy_backend:Backend", "--filter", "metadata/matchesReference", "--cases", "20",
                    "--no-store", "--report", str(tmp_path / "report"), "--require-coverage", str(targets))
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads((tmp_path / "report" / "conformance.json").read_text())["results"][0]
    assert result["verdict"] == "FAILED" and "coverage target not met: layout B>1: " in result["note"]
