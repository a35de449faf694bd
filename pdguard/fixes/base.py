"""What a fix is: a unit that owns its identity (name, marker, one-line summary), the rule codes
that prove it, and its ``plan``: it detects itself, applies itself, and says how it went.

A fix module imports nothing heavy at import time (no LibCST, no isort): the command line
builds its help from ``FIXES``, and ``check`` never loads LibCST.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar

from ..errors import refusal
from ..fix_names import MARKER_PREFIX, has_marker, marker
from ..sglang_names import DISAGGREGATION_DIR

if TYPE_CHECKING:
    from ..checks import Project
    from ..tree import SourceTree
    from ..workspace import Workspace


__all__ = ["MARKER_PREFIX", "Fix", "Outcome", "Refused", "Status", "has_marker", "marker"]


class Status(StrEnum):
    APPLIED = "applied"  # pdguard's fix was (or, in a dry run, would be) applied
    PRESENT = "present"  # pdguard's fix is already there (its marker and its code)
    UPSTREAM = "upstream"  # the code already does what the fix does, without pdguard
    NOT_APPLICABLE = "not-applicable"  # nothing for this fix to do in this release
    REFUSED = "refused"  # pdguard will not apply it here; the note says why
    SKIPPED = "skipped"  # left out by --select/--ignore


@dataclass(frozen=True)
class Outcome:
    status: Status
    note: str | None = None
    where: str | None = None  # "rel:line" of the code a refusal is about

    def refusal(self, name: str, tree: SourceTree) -> str:
        """The refusal line for fix ``name``, naming the file as ``tree`` shows it."""
        return refusal(name, self.note, tree.display(self.where) if self.where else None)


class Refused(Exception):
    """A step's refusal inside a fix's ``plan`` (an ``AnchorError`` of a codemod, or a class
    it cannot anchor on): ``plan`` returns its ``outcome``."""

    def __init__(self, note: str, where: str | None = None) -> None:
        super().__init__(note)
        self.outcome = Outcome(Status.REFUSED, note, where)


class Fix:
    """One fix. Subclasses set the class attributes and implement ``plan``."""

    name: ClassVar[str]  # e.g. "inflight-deadline": statuses, reports, the marker
    summary: ClassVar[str]  # one line for the command line's help
    rules: ClassVar[tuple[str, ...]]  # the rule codes (checks.RULES) that prove it
    # The codes of ``rules`` whose findings the fix removes by writing its code (check's
    # "fixable"); the others (code pdguard cannot model, a hand-written deadline gone wrong)
    # make it refuse. Default: all of ``rules``.
    fixes: ClassVar[tuple[str, ...]]
    # what of a tree it reads or writes: directories (their .py files) and single files; the
    # pre-commit hooks' ``files`` cover them all (tests/checks/test_decode_corpus.py)
    reads: ClassVar[tuple[str, ...]] = (DISAGGREGATION_DIR,)
    # whether single classes can be left out of it (``--ignore FIX:Class``)
    per_class: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "fixes" not in cls.__dict__ and "rules" in cls.__dict__:
            cls.fixes = cls.rules

    @property
    def marker(self) -> str:
        return marker(self.name)

    def fixable_in(self, project: Project) -> bool:
        """Whether ``plan`` would write this fix into the tree ``project`` reads, told from the
        parsed files alone (no LibCST): what ``check`` calls "fixable". A fix whose plan can
        refuse on its own grounds says so here, with the same test its ``plan`` runs."""
        return True

    def plan(self, workspace: Workspace) -> Outcome:
        """Decide the fix's status; when it applies, put the new texts into ``workspace``."""
        raise NotImplementedError
