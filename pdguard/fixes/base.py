"""What a fix is: a unit that detects itself, applies itself, and says how it went."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from ..workspace import Workspace


class Status(StrEnum):
    APPLIED = "applied"  # pdguard's fix was (or, in a dry run, would be) applied
    PRESENT = "present"  # pdguard's fix is already there (its marker and its code)
    UPSTREAM = "upstream"  # the code already does what the fix does, without pdguard
    NOT_APPLICABLE = "not-applicable"  # nothing for this fix to do in this release
    REFUSED = "refused"  # pdguard will not apply it here; the note says why


@dataclass(frozen=True)
class Outcome:
    status: Status
    note: str | None = None
    where: str | None = None  # "rel:line" of the code a refusal is about


class Fix(Protocol):
    name: str

    def plan(self, workspace: Workspace) -> Outcome:
        """Decide the fix's status; when it applies, put the new texts into ``workspace``."""
        ...
