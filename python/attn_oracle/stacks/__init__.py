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
from typing import Callable, Optional, Sequence

__all__ = ["StackUnavailable", "require", "installed_version", "check_version", "decline", "unvalidated_reason",
           "convention_call"]


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
    check_version(stack, distribution, installed_version(distribution), checked)
    return imported


def check_version(stack: str, distribution: str, version: str, checked: Sequence[str]) -> None:
    """The version gate: a release outside ``checked`` (a prefix such as ``"2.20"`` matches
    2.20.x) runs with a note on stderr, or raises :class:`StackUnavailable` under
    ``ATTN_ORACLE_STACK_VERSIONS=strict``."""
    if any(version == c or version.startswith(c + ".") for c in checked):
        return
    message = f"{stack}: {distribution} {version} was not checked by this module (checked: {', '.join(checked)})"
    if os.environ.get("ATTN_ORACLE_STACK_VERSIONS") == "strict":
        raise StackUnavailable(message + "; ATTN_ORACLE_STACK_VERSIONS=strict refuses it")
    print(f"attn-oracle: {message}; running it anyway", file=sys.stderr)


# How a module declines what its stack does not validate, or what its convention cannot say: the
# decline names the reference's error code or the adapter's reason (docs/stacks.md).
def _not_judged(code: str, unvalidated: str) -> str:
    return f"not a valid batch ({code}): {unvalidated}, so it is not judged"


def decline(reason: Optional[str]) -> None:
    """Raise Unsupported(reason) where the module's ``unsupported_<capability>`` gave one: a direct
    call declines as the suite, which asks that first, would."""
    from ..errors import Unsupported

    if reason:
        raise Unsupported(reason)


def unvalidated_reason(batch, unvalidated: str) -> Optional[str]:
    """For a stack that validates no batch (``unvalidated`` says what it does not validate): why
    the reference rejects ``batch``, as a decline, or None for a valid batch."""
    from ..errors import AttnOracleError
    from .. import packing

    try:
        packing.check(batch)
    except AttnOracleError as e:
        return _not_judged(e.code, unvalidated)
    return None


def convention_call(adapter: Callable, batch, *, convention: str, unvalidated: str, **kwargs) -> dict:
    """``adapter(batch, **kwargs)`` (an ``attn_oracle.adapters`` *_from_batch), or Unsupported:
    where ``convention`` cannot say the batch (the adapter's reason), or the batch is invalid."""
    from ..errors import AttnOracleError, Unsupported

    try:
        return adapter(batch, **kwargs)
    except AttnOracleError as e:
        if e.code == "unsupported":
            raise Unsupported(f"{convention} cannot say this batch: {e.message}") from None
        raise Unsupported(_not_judged(e.code, unvalidated)) from None
