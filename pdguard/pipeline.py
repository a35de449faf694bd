"""``apply``: run every fix on a tree, check the result, and (unless asked not to) write it."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from .fixes.base import Fix, Outcome, Status
from .fixes.inflight_deadline import InflightDeadline
from .fixes.sender_bootstrap_timeout import SenderBootstrapTimeoutFix
from .source_file import SourceFile
from .tree import DirectoryTree, SourceTree
from .workspace import Workspace
from .writer import FileChange, write_all

FIXES: tuple[Fix, ...] = (InflightDeadline(), SenderBootstrapTimeoutFix())


@dataclass
class ApplyResult:
    tree: SourceTree
    sglang_version: str | None
    outcomes: dict[str, Outcome]
    originals: dict[str, SourceFile] = field(default_factory=dict)
    changes: dict[str, SourceFile] = field(default_factory=dict)

    @property
    def refused(self) -> dict[str, Outcome]:
        return {n: o for n, o in self.outcomes.items() if o.status is Status.REFUSED}

    def diff(self) -> str:
        chunks = []
        for rel, new in self.changes.items():
            chunks.extend(
                difflib.unified_diff(
                    self.originals[rel].text.splitlines(keepends=True),
                    new.text.splitlines(keepends=True),
                    fromfile=f"a/{rel}",
                    tofile=f"b/{rel}",
                )
            )
        return "".join(chunks)


def plan(tree: SourceTree, fixes: tuple[Fix, ...] = FIXES) -> ApplyResult:
    """Every fix's outcome and every file's new content; nothing is written.

    A refusal of any fix keeps every file as it is (``changes`` is then empty)."""
    workspace = Workspace(tree)
    outcomes = {fix.name: fix.plan(workspace) for fix in fixes}
    result = ApplyResult(tree, tree.sglang_version(), outcomes, dict(workspace.originals))
    if result.refused:
        return result
    changes = workspace.changed()
    for rel, new in changes.items():
        try:
            compile(new.text, rel, "exec", dont_inherit=True)
        except SyntaxError as exc:  # a bug in pdguard: never write it
            name = next(n for n, o in outcomes.items() if o.status is Status.APPLIED)
            outcomes[name] = Outcome(
                Status.REFUSED, f"internal error: the patched file does not compile: {exc}", rel
            )
            return result
    result.changes = changes
    return result


def write(result: ApplyResult) -> None:
    """Write every changed file atomically, all or nothing (directory trees only)."""
    if not isinstance(result.tree, DirectoryTree):
        raise TypeError(f"{result.tree.label}: only a directory tree can be written")
    write_all(
        [
            FileChange(
                path=result.tree.path(rel).resolve(),
                old=result.originals[rel].encode(),
                new=new.encode(),
            )
            for rel, new in result.changes.items()
        ]
    )
