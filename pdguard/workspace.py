"""The files of one run: read once, decoded once, parsed once per content.

LibCST and isort are imported only when a fix writes (``cst``, ``isort_config``): deciding that
a fix is ``present`` or ``upstream`` needs ``ast`` only.
"""

from __future__ import annotations

import ast
from functools import cache
from typing import TYPE_CHECKING

from pdguard.checks.project import parse_module

from .errors import TargetError, does_not_parse
from .source_file import SourceFile
from .tree import SourceTree

if TYPE_CHECKING:
    import isort
    import libcst as cst


@cache
def _parse_cst(text: str) -> cst.Module:
    import libcst as cst

    return cst.parse_module(text)


class Workspace:
    """The original and the current (fixed so far) text of the tree's files."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self.originals: dict[str, SourceFile] = {}
        self.current: dict[str, str] = {}

    def _load(self, rel: str) -> SourceFile | None:
        if rel not in self.originals:
            data = self.tree.read_bytes(rel)
            if data is None:
                return None
            self.originals[rel] = SourceFile.decode(rel, data)  # or a ParseError
        return self.originals[rel]

    def text(self, rel: str) -> str:
        source = self._load(rel)
        if source is None:
            raise TargetError(f"{self.tree.display(rel)}: missing")
        return self.current.get(rel, source.text)

    def set_text(self, rel: str, text: str) -> None:
        self.current[rel] = text

    def ast(self, rel: str) -> ast.Module:
        text = self.text(rel)
        try:
            return parse_module(text, rel)
        except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte, before 3.11.4
            raise does_not_parse(self.tree.display(rel), exc, text) from exc

    def cst(self, rel: str) -> cst.Module:
        self.ast(rel)  # a clear error (file:line:col) for code that does not parse
        return _parse_cst(self.text(rel))

    def isort_config(self, rel: str) -> isort.Config:
        from .isort_config import isort_config_for

        return isort_config_for(self.tree, rel)[0]

    def files_containing(self, rel_dir: str, *needles: str) -> list[str]:
        """``.py`` files below ``rel_dir`` whose text contains any of ``needles``: a cheap text
        prefilter, so only files that can matter are parsed."""
        return [
            rel
            for rel in self.tree.python_files(rel_dir)
            if any(needle in self.text(rel) for needle in needles)
        ]

    def changed(self) -> dict[str, SourceFile]:
        """New content of each file whose text changed, keeping its encoding."""
        return {
            rel: self.originals[rel].with_text(text)
            for rel, text in sorted(self.current.items())
            if text != self.originals[rel].text
        }
