"""The base of pdguard's codemods: plain LibCST codemod commands.

Each codemod is a ``libcst.codemod.CodemodCommand`` subclass defined at import time, with its
``DESCRIPTION`` and ``add_args`` (its options are the keyword arguments of ``__init__``), so
``python -m libcst.tool codemod inflight_deadline.InflightDeadline ...`` runs it as it runs any
codemod, and ``Command(context, **options).transform_module(tree)`` runs it in a program or a
test. What belongs to one run is in ``self.context``: the filename, and in
``context.scratch`` the pdguard ``Run`` (``pdguard.run``: its caches) and the whole text of
the module (``source``), put there by ``codemods.runner``, which runs codemods for the fixes.

No metadata is computed: ``Codemod.transform_module`` would wrap the module in a
``MetadataWrapper`` that deep-copies it; the codemods find their anchors by shape (``isinstance``
and ``libcst.matchers``) and declare no ``METADATA_DEPENDENCIES``, so ``transform_module`` wraps
the module without a copy.

Hollowing (``codemods.holes``) is the runner's: a codemod that says where it can reach
(``scope``: one method, from its options and the module's text; a per-class codemod declares
its methods in ``METHODS`` instead) is run on a module whose unreachable statements are hole
lines. A codemod that says nothing runs on the whole module.
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import replace
from typing import ClassVar

import libcst as cst
from libcst import MetadataWrapper
from libcst.codemod import CodemodCommand, CodemodContext

from pdguard.checks.project import parse_module
from pdguard.run import HOLLOWED, RUN, SOURCE, WHOLE_READ, Run

from .holes import PREFIX, Hollowed, Scope


class Command(CodemodCommand):
    """One edit of a module; ``DESCRIPTION`` and ``add_args`` serve ``libcst.tool``."""

    DESCRIPTION: str = ""

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        """The command-line options, named as the keyword arguments of ``__init__``."""

    def key(self) -> str:
        """The codemod and its options (taken before it runs): two codemods with the same key
        make the same edit of the same text."""
        options = sorted(
            (name, repr(value))
            for name, value in vars(self).items()
            if name not in ("context", "metadata")
        )
        return f"{type(self).__module__}.{type(self).__qualname__}{options}"

    def scope(self, text: str) -> Scope | None:
        """Where in ``text`` (the module's source) the codemod can look or edit, so that the
        rest need not be parsed with LibCST (``holes``); None (the default): anywhere."""
        return None

    def transform_module(self, tree: cst.Module) -> cst.Module:
        """``tree`` with the edit made (``self.module`` is ``tree`` meanwhile)."""
        if self.METADATA_DEPENDENCIES or self.should_allow_multiple_passes():
            return super().transform_module(tree)
        before = self.context
        self.context = replace(before, wrapper=MetadataWrapper(tree, unsafe_skip_copy=True))
        try:
            return self.transform_module_impl(tree)
        finally:
            self.context = replace(self.context, wrapper=before.wrapper)

    @property
    def run(self) -> Run:
        """The pdguard run this codemod is part of (a new one, kept in the context, when it
        runs under ``libcst.tool`` or a test)."""
        run = self.context.scratch.get(RUN)
        if not isinstance(run, Run):
            run = self.context.scratch[RUN] = Run()
        return run

    def source(self, tree: cst.Module) -> str:
        """The whole text of ``tree``: the text it was parsed from when the runner knows it,
        else generated; with the holes of a hollowed module filled, so that what is asked of
        the text (``ast`` queries: the names a module uses, its bindings, the inflight model)
        is answered for the whole module. A read of a hollowed module's whole text is noted
        (``WHOLE_READ``): what the codemod made then depends on more than its module."""
        scratch = self.context.scratch
        known = scratch.get(SOURCE)
        hollowed = scratch.get(HOLLOWED)
        if known is not None and known[0] is tree:
            code: str = known[1]
        else:
            code = tree.code
            if not isinstance(hollowed, Hollowed) or PREFIX not in code:
                return code
            code = hollowed.fill_present(code)
        if hollowed is not None:
            scratch[WHOLE_READ] = True
        return code

    def checked(self, tree: cst.Module, rel: str = "<module>") -> ast.Module:
        """``tree``'s whole text parsed as the checker parses it (the same text gives the
        same tree in a run, whose models are kept)."""
        return parse_module(self.source(tree), rel, self.run)


class ClassCommand(Command):
    """A codemod of one class of a module (``--class``), which reads only the methods
    ``METHODS`` names (and those ``methods()`` adds from its options), whole."""

    class_name: str
    METHODS: ClassVar[tuple[str, ...]] = ()

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.add_argument("--class", dest="class_name", required=True)

    def methods(self) -> tuple[str, ...]:
        """The methods of the class the codemod reads or edits (whole)."""
        return self.METHODS

    def scope(self, text: str) -> Scope:
        """Its methods, whole."""
        return Scope(members=frozenset((self.class_name, name) for name in self.methods()))


def context_for(run: Run) -> CodemodContext:
    """A context for codemods of ``run`` (the runner gives each file its own)."""
    return CodemodContext(scratch={RUN: run})
