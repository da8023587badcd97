"""The attn-oracle executable bundled in the package, and the command lines that start it
with a backend written in Python: what ``python -m attn_oracle`` (attn_oracle.cli), its
``repro`` (attn_oracle.repro) and the pytest plugin share. It imports nothing of theirs,
so that none of them imports another to reach the CLI. Tested by python/tests/test_cli.py.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

VERBS_WITH_BACKEND = ("check", "replay", "eval", "repro")
_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


class UsageError(Exception):
    """A command line this wrapper cannot turn into an attn-oracle one."""


def bundled_cli() -> str:
    """The attn-oracle executable inside the package (``$ATTN_ORACLE_CLI`` overrides it)."""
    path = os.environ.get("ATTN_ORACLE_CLI") or str(Path(__file__).with_name("bin") / "attn-oracle")
    if not os.access(path, os.X_OK):
        raise UsageError(f"no attn-oracle executable at {path} (install the package with pip, or set ATTN_ORACLE_CLI)")
    return path


def is_target(word: str) -> bool:
    """True for a ``MODULE:CLASS`` (``examples.numpy_backend:Backend``)."""
    return _TARGET.fullmatch(word) is not None


def worker_command(target: str, python: Optional[str] = None) -> str:
    """The shell command that starts a worker serving ``target`` (``/bin/sh -c`` runs it)."""
    return f"{shlex.quote(python or sys.executable)} -m attn_oracle.worker {shlex.quote(target)}"


def backend_name(target: str, python: Optional[str] = None) -> str:
    """The ``--backend`` value of a Python backend: ``exec:`` and its worker command."""
    return "exec:" + worker_command(target, python)


def program_name(python: Optional[str] = None) -> str:
    """How the CLI names itself in the replay and rerun lines it prints."""
    return f"{shlex.quote(python or sys.executable)} -m attn_oracle"


def command_line(argv: Sequence[str], python: Optional[str] = None) -> list[str]:
    """The attn-oracle command line for the arguments of ``python -m attn_oracle``."""
    argv = list(argv)
    if not argv:
        return [bundled_cli(), "--help"]
    verb, rest = argv[0], argv[1:]
    if verb in VERBS_WITH_BACKEND and rest and is_target(rest[0]):
        if any(a == "--backend" or a.startswith("--backend=") for a in rest[1:]):
            raise UsageError(f"{verb}: give either MODULE:CLASS or --backend, not both")
        return [bundled_cli(), verb, "--backend", backend_name(rest[0], python), *rest[1:]]
    return [bundled_cli(), *argv]


def environment(python: Optional[str] = None) -> dict[str, str]:
    """The CLI's environment: this one, with the printed program name set."""
    env = dict(os.environ)
    env.setdefault("ATTN_ORACLE_PROGRAM", program_name(python))
    return env


def run(argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
    """Runs ``python -m attn_oracle ARGV`` in a child process (``subprocess.run`` keywords pass on)."""
    return subprocess.run(command_line(argv), env=environment(), **kwargs)
