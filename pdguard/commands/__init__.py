"""pdguard's commands: one module each (see ``base``). ``COMMANDS`` is the one list the command
line is built from, in the order ``--help`` shows them."""

from __future__ import annotations

from . import apply, carry, check, demo, simulate, verify

COMMANDS = (apply, check, verify, carry, simulate, demo)

__all__ = ["COMMANDS"]
