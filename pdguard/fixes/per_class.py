"""The driver of a fix whose codemod runs once per class: its edits grouped by file, and every
edit of a file made in turn by ``Workspace.transform`` (each file parsed once, the outcome kept
by text for the same file in another ref).

Like every fix module it imports nothing heavy at import time: LibCST and the codemods are
loaded when a fix runs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from .base import Refused

if TYPE_CHECKING:
    from pdguard.codemods.command import Command

    from ..workspace import Workspace


class ClassEdit(Protocol):
    """What the driver needs of one class's edit: the file the class is in."""

    @property
    def rel(self) -> str: ...


E = TypeVar("E", bound=ClassEdit)


def run_per_class(
    workspace: Workspace,
    edits: Iterable[E],
    transforms_for: Callable[[E], Sequence[Command]],
) -> None:
    """Make every edit into ``workspace``: file by file in order of path, the transforms of the
    edits of one file in the order given (``transforms_for`` builds a class's). A codemod's
    ``AnchorError`` is the fix's ``Refused``, naming the file."""
    from pdguard.codemods.anchors import AnchorError

    by_file: dict[str, list[E]] = defaultdict(list)
    for edit in edits:
        by_file[edit.rel].append(edit)
    for rel, file_edits in sorted(by_file.items()):
        transforms = [t for edit in file_edits for t in transforms_for(edit)]
        try:
            workspace.transform(rel, transforms)
        except AnchorError as exc:
            raise Refused(f"{rel}: {exc}", rel) from exc
