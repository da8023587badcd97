"""Ready backends for the stacks people run, each calling that stack's own public code.

``python -m attn_oracle check attn_oracle.stacks.NAME:Backend`` runs the
property suite against one stack; ``scripts/stacks`` creates the venvs the
stacks need and runs every module (docs/stacks.md has what each covers,
declines and maps, and the findings). :data:`registry.STACKS` lists them.

A module imports its stack through :func:`require`: when the stack is absent
or its import fails (no GPU, a missing native library) the worker prints one
line naming the stack and the reason, never a traceback, and the check exits
non-zero. A module names the releases it was checked against; another release
runs with a one-line note on stderr (``ATTN_ORACLE_STACK_VERSIONS=strict``
refuses it instead).
"""

from __future__ import annotations

import importlib
import os
import sys
from importlib import metadata as _metadata
from types import ModuleType
from typing import Sequence

__all__ = ["StackUnavailable", "require", "installed_version"]


class StackUnavailable(ImportError):
    """The stack cannot be imported here; ``str()`` is one line naming it and why."""


def installed_version(distribution: str) -> str:
    try:
        return _metadata.version(distribution)
    except _metadata.PackageNotFoundError:
        return "unknown"


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def require(stack: str, module: str, distribution: str, checked: Sequence[str]) -> ModuleType:
    """Import ``module`` of ``distribution`` for ``stack``, or raise :class:`StackUnavailable`.

    ``checked``: the releases the stack's module was checked against (a prefix
    such as ``"2.20"`` matches 2.20.x). Another release runs with a note on stderr.
    """
    try:
        imported = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any import failure is "unavailable", said in one line
        raise StackUnavailable(f"{stack}: cannot import {module} ({_first_line(e)}); "
                               f"install {distribution} ({', '.join(checked)} checked), or run scripts/stacks") from None
    version = installed_version(distribution)
    if not any(version == c or version.startswith(c + ".") for c in checked):
        message = f"{stack}: {distribution} {version} was not checked by this module (checked: {', '.join(checked)})"
        if os.environ.get("ATTN_ORACLE_STACK_VERSIONS") == "strict":
            raise StackUnavailable(message + "; ATTN_ORACLE_STACK_VERSIONS=strict refuses it")
        print(f"attn-oracle: {message}; running it anyway", file=sys.stderr)
    return imported
