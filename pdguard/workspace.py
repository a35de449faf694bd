"""The files of one run: read once, decoded once, parsed once per content.

LibCST and isort are imported only when a fix writes (``cst``, ``isort_config``): deciding that
a fix is ``present`` or ``upstream`` needs ``ast`` only.
"""

from __future__ import annotations

import ast
from collections import OrderedDict
from functools import cache
from typing import TYPE_CHECKING

from pdguard.checks.project import parse_module

from .errors import TargetError, does_not_parse
from .source_file import SourceFile
from .tree import SourceTree

if TYPE_CHECKING:
    from collections.abc import Sequence

    import isort
    import libcst as cst

    from pdguard.codemods.command import Transform

# What transforms made of a text (or the AnchorError message they raised), by the text and their
# keys, for the process: ``verify`` meets the same file in consecutive refs.
_TRANSFORMED: OrderedDict[tuple[str, tuple[str, ...]], tuple[bool, str]] = OrderedDict()
_KEPT = 256


@cache
def _parse_cst(text: str) -> cst.Module:
    from pdguard.codemods.command import parse

    return parse(text)


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

    def transform(self, rel: str, transforms: Sequence[Transform]) -> bool:
        """Run ``transforms`` one after another on the current text of ``rel`` and keep the
        result; whether the text changed. An ``AnchorError`` propagates and nothing changes.
        The outcome is kept by text and the transforms' keys, so the same file in another ref
        is neither parsed with LibCST nor transformed again."""
        from pdguard.codemods.anchors import AnchorError

        text = self.text(rel)
        key = (text, tuple(transform.key() for transform in transforms))
        known = _TRANSFORMED.get(key)
        if known is None:
            module = self.cst(rel)
            try:
                for transform in transforms:
                    module = transform.transform_module(module)
            except AnchorError as exc:
                known = (False, str(exc))
            else:
                known = (True, module.code)
            _TRANSFORMED[key] = known
            while len(_TRANSFORMED) > _KEPT:
                _TRANSFORMED.popitem(last=False)
        else:
            _TRANSFORMED.move_to_end(key)
        done, result = known
        if not done:
            raise AnchorError(result)
        self.set_text(rel, result)
        return result != text

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
