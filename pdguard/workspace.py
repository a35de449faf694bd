"""The files of one run: read once, decoded once, parsed once per content.

LibCST is imported only when a fix writes, isort only when it adds an import: deciding that
a fix is ``present`` or ``upstream`` needs ``ast`` only.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from pdguard.checks.project import base_files, parse_module

from .deep import deep_call
from .errors import TargetError, does_not_parse
from .fix_names import unmark
from .run import Run, run_or_new
from .sglang_names import DISAGGREGATION_DIR
from .source_file import SourceFile
from .tree import SourceTree

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    import isort
    import libcst as cst
    from libcst.codemod import CodemodContext

    from pdguard.codemods.command import Command


class Workspace:
    """The original and the current (fixed so far) text of the tree's files.

    ``markers``: whether the code the fixes write carries their marker comments (``# pdguard:
    <fix>``, how a later run says ``present``); without them (``apply --no-markers``, ``export``)
    a later run recognises the code by what it does (``upstream``). The one place this is
    decided: every fix writes through ``transform``."""

    def __init__(self, tree: SourceTree, *, markers: bool = True, run: Run | None = None) -> None:
        self.tree = tree
        self.run = run_or_new(run)
        self.markers = markers
        self.originals: dict[str, SourceFile] = {}
        self.current: dict[str, str] = {}
        # classes the user left out of a fix (``--ignore FIX:Class``), by fix name: that fix
        # leaves them as they are, and the fixes that rely on it do not require them fixed
        self.left_out: dict[str, frozenset[str]] = {}

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
            return parse_module(text, rel, self.run)
        except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte, before 3.11.4
            raise does_not_parse(self.tree.display(rel), exc, text, rel) from exc

    def module_statements(self, rel: str) -> cst.Module:
        """The module-level statements of ``rel`` with LibCST (each run of definitions is a
        hole: ``codemods/holes``), for ``top_level_bindings``, which reads nothing else."""
        from pdguard.codemods.runner import module_statements

        self.ast(rel)  # a clear error (file:line:col) for code that does not parse
        return module_statements(self.run, self.text(rel))

    def context(self) -> CodemodContext:
        """A ``CodemodContext`` of this run, to build a codemod with (``transform`` gives it
        the file's own when it runs)."""
        from pdguard.codemods.command import context_for

        return context_for(self.run)

    def transform(self, rel: str, commands: Sequence[Command]) -> bool:
        """Run the codemods ``commands`` one after another on the current text of ``rel`` and
        keep the result; whether the text changed. An ``AnchorError`` propagates and nothing
        changes. The outcome is kept in the run by text and the codemods' keys
        (``codemods.runner``), so the same file in another ref is neither parsed with LibCST
        nor transformed again."""
        from pdguard.codemods.anchors import AnchorError
        from pdguard.codemods.runner import transform

        text = self.text(rel)
        self.ast(rel)  # a clear error (file:line:col) for code that does not parse
        done, result = deep_call(
            self.tree.display(rel), lambda: transform(self.run, rel, text, commands)
        )
        if not done:
            raise AnchorError(result)
        if not self.markers:
            result = unmark(result, text)
        self.set_text(rel, result)
        return result != text

    def isort_config(self, rel: str) -> isort.Config | None:
        """The target's isort settings for ``rel``; None where it has none (the codemods then
        use SGLang's, and import isort only if they add an import)."""
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

    def project_texts(self, rels: Iterable[str]) -> dict[str, str]:
        """The current texts of ``rels`` and of the files that define their classes' bases
        (``checks.project.base_files``, from the disaggregation package): the files a
        ``Project`` of the checker needs, as ``check``'s loader reads them."""
        chosen = {rel: self.text(rel) for rel in rels}
        pool = {rel: self.text(rel) for rel in self.tree.python_files(DISAGGREGATION_DIR)}
        return {**chosen, **base_files(chosen, pool, self.run)}

    def changed(self) -> dict[str, SourceFile]:
        """New content of each file whose text changed, keeping its encoding."""
        return {
            rel: self.originals[rel].with_text(text)
            for rel, text in sorted(self.current.items())
            if text != self.originals[rel].text
        }
