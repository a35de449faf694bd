"""How a run applies codemods to a module's text: hollowed where they say where they reach,
each with a ``CodemodContext`` of the file (``context.filename``, and in ``context.scratch`` the
``Run`` and the module's whole text), and what they made kept in the run by text.

``transform(run, rel, text, commands)`` is what ``Workspace.transform`` calls. Where every
codemod declares its scope (``Command.scope``) and ``run.hollow`` is on, they run on the
hollowed module (``codemods.holes``) first; a result whose holes cannot all be filled, or an
``AnchorError`` there, sends them to the whole module. What they made of a hollowed text is
kept for any version of the file that hollows to the same text, unless a codemod read the
module's whole text (``Command.source``).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import replace
from functools import reduce

import libcst as cst

from pdguard.run import HOLLOWED, RUN, SOURCE, WHOLE_READ, Run

from .anchors import AnchorError
from .command import Command
from .holes import Hollowed, Scope, hollow
from .insertion import editing


def cst_module(run: Run, text: str) -> cst.Module:
    """``text`` parsed with LibCST, once per text in ``run``."""
    module: cst.Module = run.cst_modules.get_or_build(text, lambda: cst.parse_module(text))
    return module


def module_statements(run: Run, text: str) -> cst.Module:
    """The module-level statements of ``text`` with LibCST (each run of definitions is a
    hole), for the import helpers (``top_level_bindings``), which read nothing else."""
    hollowed = hollow(text, Scope(), by_content=True, run=run) if run.hollow else None
    return cst_module(run, text if hollowed is None else hollowed.text)


def transform(run: Run, rel: str, text: str, commands: Sequence[Command]) -> tuple[bool, str]:
    """(True, the new text) or (False, the ``AnchorError`` message), kept in ``run`` by the
    text, the hollowing switch and the codemods' keys: ``verify`` meets the same file in
    consecutive refs."""
    keys = tuple(command.key() for command in commands)
    key = (text, run.hollow, keys)
    known = run.transformed.get(key)
    if known is None:
        known = run.transformed.put(key, _transformed(run, rel, text, commands, keys))
    return known


def _transformed(
    run: Run, rel: str, text: str, commands: Sequence[Command], keys: tuple[str, ...]
) -> tuple[bool, str]:
    scopes = [s for s in (c.scope(text) for c in commands) if s is not None] if run.hollow else []
    if scopes and len(scopes) == len(commands):  # every codemod says where it reaches
        hollowed = hollow(text, reduce(operator.or_, scopes), by_content=True, run=run)
        if hollowed is not None:
            key = (hollowed.text, keys)
            made = run.hollow_made.get(key)
            if made is None:
                made, whole_read = _run(run, rel, text, hollowed, commands)
                if not whole_read:  # a function of the hollowed text and the keys
                    run.hollow_made.put(key, made)
            done, result = made
            filled = hollowed.fill(result) if done else None
            if filled is not None:
                return True, filled
    return _run(run, rel, text, None, commands)[0]


def _run(
    run: Run, rel: str, text: str, hollowed: Hollowed | None, commands: Sequence[Command]
) -> tuple[tuple[bool, str], bool]:
    """What ``commands`` make of ``text`` (hollowed, when given), and whether one of them read
    the whole text of a hollowed module."""
    module = cst_module(run, text if hollowed is None else hollowed.text)
    scratch = {RUN: run, SOURCE: (module, text), HOLLOWED: hollowed}
    try:
        with editing(run):
            for command in commands:
                # the file's context, as libcst.tool gives each file its own
                command.context = replace(command.context, filename=rel, scratch=scratch)
                module = command.transform_module(module)
    except AnchorError as exc:
        return (False, str(exc)), bool(scratch.get(WHOLE_READ))
    return (True, module.code), bool(scratch.get(WHOLE_READ))
