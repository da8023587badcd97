"""Shape-stable draws through the Python paths: `python -m attn_oracle check
--shape-stable`, ATTN_ORACLE_SHAPE_STABLE, the pytest plugin's
--attn-oracle-shape-stable, and a backend's declared Domain(sizes=...). A
backend records the shapes of its attention calls (what a jitted backend
compiles for). Each run starts the CLI and one worker: about 20 s in all."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO

from attn_oracle import Domain

TESTS = Path(__file__).parent
PROPERTY = "attention/matchesReference"


def recorded_check(tmp_path, target, *args, env=None):
    shapes = tmp_path / "shapes.txt"
    shapes.unlink(missing_ok=True)
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
               "ATTN_ORACLE_FAILURES_DIR": str(tmp_path / "failures"), "ATTN_ORACLE_TEST_SHAPES": str(shapes)}
    environ.pop("ATTN_ORACLE_SHAPE_STABLE", None)
    environ.update(env or {})
    done = subprocess.run([sys.executable, "-m", "attn_oracle", "check", target, "--filter", PROPERTY, "--cases", "60",
                           "--no-store", *args], cwd=REPO, capture_output=True, text=True, timeout=300, env=environ)
    calls = [tuple(map(int, line.split())) for line in shapes.read_text().splitlines()] if shapes.exists() else []
    return done, calls


def test_shape_stable_draws_call_the_backend_with_few_shapes(tmp_path):
    free, free_calls = recorded_check(tmp_path, "shape_recording_backend:Backend")
    menu, menu_calls = recorded_check(tmp_path, "shape_recording_backend:Backend", "--shape-stable")
    assert free.returncode == 0 and menu.returncode == 0, free.stdout + menu.stdout + menu.stderr
    assert len(free_calls) >= 40 and len(menu_calls) >= 40
    print(f"distinct shapes in {len(free_calls)} calls: {len(set(free_calls))}; "
          f"with --shape-stable, in {len(menu_calls)} calls: {len(set(menu_calls))}")
    # At most 3 x 3 sides, 2 row counts, 2 head pairs and 2 head dims, however long the run.
    assert len(set(menu_calls)) <= 72 and 2 * len(set(menu_calls)) <= len(set(free_calls))
    for rows, tq, tkv, hq, hkv, d in menu_calls:
        assert tq in (16, 64, 144) and tkv in (16, 64, 144) and rows in (1, 2), (rows, tq, tkv)
        assert (hq, hkv) in ((2, 1), (2, 2)) and d in (8, 64)


def test_the_environment_variable_turns_them_on(tmp_path):
    done, calls = recorded_check(tmp_path, "shape_recording_backend:Backend", env={"ATTN_ORACLE_SHAPE_STABLE": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls and all(tq in (16, 64, 144) for _, tq, *_ in calls)


def test_a_declared_menu_is_where_every_call_lands(tmp_path):
    done, calls = recorded_check(tmp_path, "shape_recording_backend:MenuBackend")
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(calls) >= 40, done.stdout
    assert set((r, tq, tkv, hq, hkv, d) for r, tq, tkv, hq, hkv, d in calls) <= {
        (2, tq, tkv, 4, 2, 16) for tq in (32, 96) for tkv in (32, 96)}, sorted(set(calls))
    assert "tokens 32 and 96" in done.stdout


def test_a_malformed_menu_is_the_backends_error():
    with pytest.raises(ValueError, match="heads"):
        Domain(sizes={"heads": [[3, 2]]})
    with pytest.raises(ValueError, match="tokenz"):
        Domain(sizes={"tokenz": [16]})
    assert Domain(sizes={"tokens": (16, 64)}).to_hello() == {"sizes": {"tokens": [16, 64]}}


def test_the_pytest_option_passes_it_on(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nattn_oracle_backend = shape_recording_backend:Backend\n"
                                         "attn_oracle_args = --cases 20 --no-store\n")
    shapes = tmp_path / "shapes.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "ATTN_ORACLE_FAILURES_DIR": str(tmp_path / "failures"), "ATTN_ORACLE_TEST_SHAPES": str(shapes)}
    env.pop("ATTN_ORACLE_SHAPE_STABLE", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           str(tmp_path), "-k", PROPERTY, "--attn-oracle-shape-stable"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = [tuple(map(int, line.split())) for line in shapes.read_text().splitlines()]
    assert calls and all(tq in (16, 64, 144) for _, tq, *_ in calls)
