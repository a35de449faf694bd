"""The ``sender-abort`` fix: every KV sender's ``poll()`` reports Failed once it is aborted.

The inflight deadline fails an overdue request with its sender's ``abort()`` only: the MIN-reduced
poll is then Failed on every rank and the release's own Failed branch cleans the request up, with
``poll()``'s own bookkeeping. A sender whose ``poll()`` ignores ``abort()`` (NIXL up to 0.5.11
reads its transfer handles once it has sent), or that has no ``abort()`` (NIXL up to 0.5.9, the
fake sender up to 0.5.12, Mooncake up to 0.4.9.post4), is fixed in its class, the way later
releases do it: ``abort()`` concludes it as Failed and ``poll()`` returns a concluded state
first. The change goes into the class that defines ``poll()`` (and ``__init__``), so a subclass
that inherits them (Ascend from Mooncake) is fixed with it. Proved by PDG008.

An aborted sender must also say why: where the manager keeps failure records (``abort()`` and
the deadline write one) but ``failure_exception()`` reads none (NIXL 0.5.10 - 0.5.12.post1),
that method pops the room's record and raises it, as 0.5.13 does. Every sender then pops its
record, which lets the inflight deadline add its own record there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pdguard.checks.models.kv_senders import ClassIndex

from .. import fix_names
from ..errors import UsageError
from .base import Fix, Outcome, Refused, Status, has_marker
from .per_class import run_per_class
from .sender_index import sender_index

if TYPE_CHECKING:
    from ..workspace import Workspace

FIX = fix_names.SENDER_ABORT


@dataclass
class _ClassEdit:
    rel: str
    class_name: str
    init_state: bool = False
    check_first: bool = False
    add_abort: bool = False
    read_record: bool = False

    def describe(self) -> str:
        what = [
            what
            for what, on in (
                ("abort()", self.add_abort),
                ("poll() returns the concluded state first", self.check_first),
                ("conclude_state in __init__", self.init_state),
                ("failure_exception() raises the room's failure record", self.read_record),
            )
            if on
        ]
        return f"{self.class_name}: {', '.join(what)}"


def ignoring_senders(index: ClassIndex) -> list[str]:
    """The concrete senders whose ``poll()`` does not report Failed once aborted."""
    return [s for s in index.senders() if index.is_concrete(s) and not index.abort_honoured(s)]


def unread_senders(index: ClassIndex) -> list[str]:
    """The concrete senders whose manager keeps failure records (``abort()`` writes one) but
    whose ``failure_exception()`` never takes the room's out (NIXL 0.5.10 - 0.5.12.post1)."""
    return [
        s
        for s in index.senders()
        if index.is_concrete(s)
        and index.keeps_failure_records(s)
        and not index.pops_failure_records(s)
    ]


def leave_out(name: str) -> str:
    """What a refusal about sender class ``name`` says the user can do."""
    return f" (leave the class out with --ignore {FIX}:{name} to apply every other fix)"


def _aside(index: ClassIndex, left: frozenset[str]) -> str:
    """The classes the outcome left alone: dead ones, and those the user left out."""
    note = ""
    dead = sorted(index.dead_senders())
    if dead:
        note += (
            f"; dead code, left alone: {', '.join(dead)} (nothing the tree runs names it, "
            "not get_kv_class)"
        )
    if left:
        note += f"; left out by --ignore, still reported by check: {', '.join(sorted(left))}"
    return note


class SenderAbortFix(Fix):
    name = FIX
    summary = "every KV sender's poll() reports Failed once aborted (NIXL <= 0.5.11, ...)"
    rules = ("PDG008",)
    per_class = True

    def plan(self, workspace: Workspace) -> Outcome:
        index = sender_index(workspace)
        concrete = [s for s in index.senders() if index.is_concrete(s)]
        if not concrete:
            return Outcome(Status.NOT_APPLICABLE, "no KV sender with a poll() found")
        left = workspace.left_out.get(FIX, frozenset())
        unknown = sorted(left - set(index.senders()))
        if unknown:
            raise UsageError(
                f"--ignore {FIX}:{unknown[0]}: no KV sender class {unknown[0]!r} in this tree "
                f"(its senders: {', '.join(sorted(index.senders()))})"
            )
        ignoring = [s for s in ignoring_senders(index) if s not in left]
        unread = [s for s in unread_senders(index) if s not in left]
        if not ignoring and not unread:
            kept = [s for s in concrete if s not in left]
            outcome = self._already_honoured(workspace, index, kept)
            note = (outcome.note or "") + _aside(index, left)
            return Outcome(outcome.status, note, outcome.where)
        try:
            edits = self._edits(index, ignoring, unread)
            self._run_codemods(workspace, edits)
        except Refused as refused:
            return refused.outcome
        after = sender_index(workspace)
        still = [s for s in ignoring_senders(after) if s not in left]
        if still:
            return Outcome(
                Status.REFUSED,
                f"the change did not make {', '.join(still)}.poll() report Failed once aborted",
            )
        still = [s for s in unread_senders(after) if s not in left]
        if still:
            return Outcome(
                Status.REFUSED,
                f"the change did not make {', '.join(still)}.failure_exception() take the "
                "room's failure record",
            )
        note = "; ".join(edits[name].describe() for name in sorted(edits))
        fine = [s for s in concrete if s not in ignoring and s not in unread and s not in left]
        if fine:
            note += f"; already honoured: {', '.join(fine)}"
        return Outcome(Status.APPLIED, note + _aside(index, left))

    def _already_honoured(
        self, workspace: Workspace, index: ClassIndex, concrete: list[str]
    ) -> Outcome:
        owners = {
            owner.name: owner
            for name in concrete
            for method in ("poll", "abort", "__init__", "failure_exception")
            if (owner := index.resolve(name, method)) is not None
        }
        marked = sorted(
            info.name
            for info in owners.values()
            if has_marker(_class_source(workspace, info.rel, info.node), FIX)
        )
        names = ", ".join(concrete)
        if marked:
            return Outcome(Status.PRESENT, f"marker in {', '.join(marked)}; checked: {names}")
        return Outcome(Status.UPSTREAM, f"abort() already fails every sender: {names}")

    def _edits(
        self, index: ClassIndex, ignoring: list[str], unread: list[str]
    ) -> dict[str, _ClassEdit]:
        """What to change in which class: ``poll()``'s class gets the check first and a missing
        ``abort()``, ``__init__``'s class the initial state, ``failure_exception()``'s class the
        record read."""
        edits: dict[str, _ClassEdit] = {}

        def edit_for(owner_name: str) -> _ClassEdit:
            info = index.classes[owner_name]
            return edits.setdefault(owner_name, _ClassEdit(info.rel, owner_name))

        for name in ignoring:
            no_abort, no_check, no_state = index.abort_gap(name)
            poll_owner = index.resolve(name, "poll")
            if poll_owner is None:  # not concrete: never listed
                continue
            if not no_abort and not index.abort_concludes(name):
                abort_owner = index.resolve(name, "abort")
                where = abort_owner.name if abort_owner else name
                raise Refused(
                    f"{where}.abort() does not conclude {name} as Failed, and pdguard does not "
                    f"rewrite an abort() that does something else{leave_out(name)}",
                    poll_owner.rel,
                )
            if no_abort or no_check:
                edit = edit_for(poll_owner.name)
                edit.add_abort |= no_abort
                edit.check_first |= no_check
            if no_state:
                init_owner = index.resolve(name, "__init__")
                if init_owner is None or init_owner.rel not in index.texts:
                    raise Refused(
                        f"{name} has no __init__ in the tree to set conclude_state in"
                        + leave_out(name)
                    )
                edit_for(init_owner.name).init_state = True
        for name in unread:
            owner = index.resolve(name, "failure_exception")
            if owner is None or owner.rel not in index.texts:
                raise Refused(
                    f"{name} has no failure_exception() in the tree to read records in"
                    + leave_out(name)
                )
            edit_for(owner.name).read_record = True
        return edits

    def _run_codemods(self, workspace: Workspace, edits: dict[str, _ClassEdit]) -> None:
        """The codemod once per class to change, file by file, into ``workspace``."""
        from pdguard.codemods.sender_abort import SenderAbort

        def transforms_for(edit: _ClassEdit) -> list[SenderAbort]:
            return [
                SenderAbort(
                    workspace.context(),
                    class_name=edit.class_name,
                    init_state=edit.init_state,
                    check_first=edit.check_first,
                    add_abort=edit.add_abort,
                    read_record=edit.read_record,
                )
            ]

        run_per_class(workspace, edits.values(), transforms_for)


def _class_source(workspace: Workspace, rel: str, node: object) -> str:
    lines = workspace.text(rel).splitlines()
    start = getattr(node, "lineno", 1)
    end = getattr(node, "end_lineno", None) or len(lines)
    return "\n".join(lines[start - 1 : end])
