"""pdguard's commands: one module each (see ``base``). ``COMMANDS`` is the one list the command
line is built from, in the order ``--help`` shows them."""

from __future__ import annotations

from . import apply, carry, check, demo, export, rule, simulate, verify

COMMANDS = (apply, check, rule, verify, carry, export, simulate, demo)

__all__ = ["COMMANDS"]
