"""What the package tests share: the repository's fixtures/ and the bundled
attn-oracle CLI, whose output the Python API must reproduce."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
from attn_oracle import cli

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"


def run_cli(*args: str, cwd=REPO, env=None, timeout=120) -> subprocess.CompletedProcess:
    """The bundled attn-oracle with ARGS (no Python backend involved)."""
    return subprocess.run([cli.bundled_cli(), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def cli_eval(path: Path, *args: str):
    """(exit status, parsed JSON) of `attn-oracle eval ARGS PATH`."""
    done = run_cli("eval", *args, str(path))
    return done.returncode, json.loads(done.stdout)


def assert_same(got, want, path="result"):
    """Exact equality of nested dicts / lists / arrays (-inf == -inf, shapes and dtypes kinds too)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), f"{path}: keys {sorted(got)} vs {sorted(want)}"
        for k in want:
            assert_same(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, np.ndarray) or isinstance(got, np.ndarray):
        got, want = np.asarray(got), np.asarray(want)
        assert got.shape == want.shape, f"{path}: shape {got.shape} vs {want.shape}"
        assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), f"{path}: {got} vs {want}"
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{path}: {got!r} vs {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{path}[{i}]")
    else:
        assert got == want, f"{path}: {got!r} vs {want!r}"
