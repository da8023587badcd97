"""The worker's stdout belongs to the protocol from before the backend's module
is imported: a module that prints on import (printing_backend.py) still greets
and answers. About 1 s."""

import json
import os
import subprocess
import sys
from pathlib import Path

from support import FIXTURES, REPO, cli_eval


def test_a_backend_module_that_prints_on_import_still_serves():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    case = FIXTURES / "design" / "ex1.case.json"
    done = subprocess.run([sys.executable, "-m", "attn_oracle", "eval", "printing_backend:Backend", str(case)],
                          cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == cli_eval(case)[1]
