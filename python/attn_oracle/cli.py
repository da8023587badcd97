"""``python -m attn_oracle``: the attn-oracle CLI with a backend written in Python.

    python -m attn_oracle check MODULE:CLASS [--cases N] [--seed S] [--filter PREFIX] ...
    python -m attn_oracle replay [MODULE:CLASS] CASE
    python -m attn_oracle eval [MODULE:CLASS] CASE
    python -m attn_oracle repro MODULE:CLASS CASE [-o FILE]
    python -m attn_oracle COMMAND ...        any other attn-oracle command, as is
    python -m attn_oracle [COMMAND] --help   these forms, then attn-oracle's usage (exit 0)

With a ``MODULE:CLASS``, the command runs the ``attn-oracle`` executable bundled
in this package with ``--backend 'exec:PYTHON -m attn_oracle.worker MODULE:CLASS'``:
one persistent worker process serves an instance of CLASS (see
attn_oracle.worker) and the C++ property suite drives it. Every other
argument goes to attn-oracle unchanged, its output is the CLI's own (summary,
counterexamples, replay and rerun lines) and so is the exit status (0 pass,
1 failure, 130 interrupted; replay 0 / 3 / 4). The printed replay and rerun
lines start with ``PYTHON -m attn_oracle``, so they run as printed.

The ``attn-oracle`` console script runs the bundled executable directly.
Tested by python/tests/test_cli.py.
"""

from __future__ import annotations

import os
import shlex
import sys
from typing import Optional, Sequence

# The bundled CLI and its command lines live in attn_oracle.bundled (repro and the pytest plugin use
# them too); their names stay importable from here.
from .bundled import (VERBS_WITH_BACKEND, UsageError, backend_name, bundled_cli, command_line, environment,  # noqa: F401
                      is_target, program_name, run, worker_command)

_HELP = ("--help", "-h")

# Printed before the bundled CLI's own usage, which knows only --backend.
PYTHON_USAGE = """\
usage: python -m attn_oracle COMMAND ...   (attn-oracle with a backend written in Python)

  check MODULE:CLASS [OPTIONS]    the check below on an instance of CLASS from MODULE, served
                                  by `python -m attn_oracle.worker MODULE:CLASS` (OPTIONS as
                                  for check, without --backend), e.g.
                                  python -m attn_oracle check examples.numpy_backend:Backend --cases N
  replay [MODULE:CLASS] CASE      replay below, on CLASS when given
  eval [MODULE:CLASS] CASE        eval below, on CLASS when given
  repro MODULE:CLASS CASE [-o FILE]
                                  a counterexample as one standalone Python script (stdout, or
                                  FILE) that imports NumPy and the code under test only: the
                                  stack's public API for attn_oracle.stacks, else MODULE
  COMMAND ...                     any other attn-oracle command, as is:
"""


def wants_help(argv: Sequence[str]) -> bool:
    """``--help`` or ``-h``, alone or after a command (``check --help``)."""
    return bool(argv) and (argv[0] == "help" or any(a in _HELP for a in argv))


def python_repro_target(argv: Sequence[str]) -> Optional[list[str]]:
    """``repro MODULE:CLASS ...`` or the form a failure prints, ``repro --backend 'exec:PYTHON -m
    attn_oracle.worker MODULE:CLASS' ...``: the arguments of attn_oracle.repro.main, else None."""
    if not argv or argv[0] != "repro" or wants_help(argv):
        return None
    rest = list(argv[1:])
    if rest and is_target(rest[0]):
        return rest
    for i, a in enumerate(rest):
        value = a[len("--backend="):] if a.startswith("--backend=") else rest[i + 1] if a == "--backend" and i + 1 < len(rest) else None
        if value is None:
            continue
        words = shlex.split(value[len("exec:"):]) if value.startswith("exec:") else []
        if len(words) >= 4 and words[-3:-1] == ["-m", "attn_oracle.worker"] and is_target(words[-1]):
            return [words[-1]] + rest[:i] + rest[i + (1 if a.startswith("--backend=") else 2):]
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Replaces this process with attn-oracle (its output and exit status are the command's);
    ``repro`` of a Python backend is written here (attn_oracle.repro)."""
    argv = sys.argv[1:] if argv is None else argv
    if (repro_args := python_repro_target(argv)) is not None:
        from . import repro

        return repro.main(repro_args)
    try:
        command = [bundled_cli(), "--help"] if wants_help(argv) else command_line(argv)
    except UsageError as e:
        print(f"python -m attn_oracle: {e}", file=sys.stderr)
        return 1
    if wants_help(argv):
        print(PYTHON_USAGE)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command[0], command, environment())
    return 1  # not reached


def run_bundled() -> int:
    """The ``attn-oracle`` console script: the bundled executable with these arguments."""
    try:
        cli = bundled_cli()
    except UsageError as e:
        print(f"attn-oracle: {e}", file=sys.stderr)
        return 1
    os.execv(cli, [cli, *sys.argv[1:]])
    return 1  # not reached
