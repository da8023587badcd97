"""Exceptions shared by every part of the Python package.

An ``AttnOracleError`` carries the stable error code of the C++ side
(``bad_window``, ``positions_not_increasing``, ...; see docs/semantics.md), so a
Python backend or test can compare codes exactly, as the suite does.
"""


class AttnOracleError(Exception):
    """A rejected input or failed call, with its stable code and a message naming the values."""

    def __init__(self, code: str, message: str = ""):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class Unsupported(Exception):
    """Raised by a backend to decline a problem it does not take (a dtype, a head dim, ...).

    The suite counts the draw as declined with this reason and never judges it.
    """

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
