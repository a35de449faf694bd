"""The driver of a fix whose codemod runs once per class: its edits grouped by file, each file
parsed once, every edit of that file applied in turn, and the new text put into the workspace.

Like every fix module it imports nothing heavy at import time: LibCST and the codemods are
loaded when a fix runs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol, TypeVar

from .base import Refused

if TYPE_CHECKING:
    import libcst as cst
    from libcst.codemod import CodemodContext

    from ..workspace import Workspace


class ClassEdit(Protocol):
    """What the driver needs of one class's edit: the file the class is in."""

    @property
    def rel(self) -> str: ...


E = TypeVar("E", bound=ClassEdit)

Transform = Callable[["cst.Module", "CodemodContext", E], "cst.Module"]


def run_per_class(workspace: Workspace, edits: Iterable[E], transform: Transform[E]) -> None:
    """Apply ``transform`` (a class's codemod run on a module) for every edit, file by file in
    order of path, edits of one file in the order given, into ``workspace``. A codemod's
    ``AnchorError`` is the fix's ``Refused``, naming the file."""
    from libcst.codemod import CodemodContext

    from pdguard.codemods.anchors import AnchorError

    by_file: dict[str, list[E]] = defaultdict(list)
    for edit in edits:
        by_file[edit.rel].append(edit)
    for rel, file_edits in sorted(by_file.items()):
        module = workspace.cst(rel)
        context = CodemodContext(filename=rel)
        try:
            for edit in file_edits:
                module = transform(module, context, edit)
        except AnchorError as exc:
            raise Refused(f"{rel}: {exc}", rel) from exc
        workspace.set_text(rel, module.code)
