"""The example backends ship in the package as attn_oracle.examples, so a user
with only the installed package can start from them: from a directory outside
the repository (no examples/ on sys.path) every example that needs no framework
imports, and the NumPy one serves `eval`. About 2 s."""

import json
import os
import subprocess
import sys

from support import FIXTURES, cli_eval

# torch and jax are optional: their examples are only checked to ship.
FRAMEWORK_FREE = ("numpy_backend", "planted_numpy_backend", "self_attention_backend", "flash_convention_backend",
                  "planted_flash_convention_backend", "cudnn_convention_backend", "planted_cudnn_convention_backend",
                  "numpy_context_parallel_backend", "planted_numpy_context_parallel_backend")


def outside_the_repository(args, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)


def test_every_example_ships_and_those_without_a_framework_import(tmp_path):
    imports = "; ".join(f"import attn_oracle.examples.{name}" for name in FRAMEWORK_FREE)
    check = ("import importlib.util; missing = [n for n in ('torch_backend', 'jax_backend') "
             "if importlib.util.find_spec('attn_oracle.examples.' + n) is None]; assert not missing, missing")
    done = outside_the_repository(["-c", f"{imports}; {check}"], tmp_path)
    assert done.returncode == 0, done.stderr


def test_the_installed_numpy_example_serves_eval(tmp_path):
    case = FIXTURES / "design" / "ex1.case.json"
    done = outside_the_repository(["-m", "attn_oracle", "eval", "attn_oracle.examples.numpy_backend:Backend", str(case)],
                                  tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == cli_eval(case)[1]
