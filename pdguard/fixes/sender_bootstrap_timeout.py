"""The ``sender-bootstrap-timeout`` fix, for every KV sender class of the tree.

A sender needs it when its ``poll()`` can report Bootstrapping while no bootstrap timeout can
fire: ``init_time`` is not a time once the sender is constructed, or ``poll()`` (with the helpers
it calls) never checks it. The fix goes into the class that defines the method at fault, so a
subclass that inherits it (Ascend from Mooncake) is fixed with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pdguard.checks.models.kv_senders import BOOTSTRAP_TIMEOUT_ENV, ClassIndex, SenderFacts
from pdguard.checks.nodes import walk

from .. import fix_names
from ..sglang_names import DISAGGREGATION_DIR, MANAGER_RECORD_FAILURE, PREFILL_PATH
from .base import Fix, Outcome, Refused, Status, has_marker
from .per_class import run_per_class
from .sender_index import sender_index

if TYPE_CHECKING:
    from pdguard.checks.project import Project
    from pdguard.codemods.isort_imports import ImportRequest

    from ..workspace import Workspace

FIX = fix_names.SENDER_BOOTSTRAP_TIMEOUT


@dataclass
class _ClassEdit:
    rel: str
    class_name: str
    set_init_time: bool = False
    add_check: bool = False
    check_style: str = "helper"
    timeout: str = "self.kv_mgr.bootstrap_timeout"
    timeout_setting: str | None = None
    record_failure: bool = True
    imports: tuple[ImportRequest, ...] = ()

    def describe(self) -> str:
        what = [w for w, on in (("init_time", self.set_init_time), ("check", self.add_check)) if on]
        style = f" ({self.check_style})" if self.add_check else ""
        return f"{self.class_name}: {' + '.join(what)}{style}"


def _class_source(workspace: Workspace, index: ClassIndex, name: str) -> str:
    info = index.classes[name]
    lines = workspace.text(info.rel).splitlines()
    return "\n".join(lines[info.node.lineno - 1 : info.node.end_lineno])


POP_BOOTSTRAPPED = "pop_bootstrapped"


def _is_consensus_assert(node: object) -> bool:
    """``assert poll == KVPoll.WaitingForInput or poll == KVPoll.Failed``."""
    import ast

    if not (isinstance(node, ast.Assert) and isinstance(node.test, ast.BoolOp)):
        return False
    states = {
        side.comparators[0].attr
        for side in node.test.values
        if isinstance(side, ast.Compare) and isinstance(side.comparators[0], ast.Attribute)
    }
    return states == {"WaitingForInput", "Failed"}


def _raised(expression: str, minimum: int) -> str:
    """``get_int_env_var("<env>", 30)`` with its default raised to ``minimum``."""
    import ast

    tree = ast.parse(expression, mode="eval")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and len(node.args) == 2
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == BOOTSTRAP_TIMEOUT_ENV
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, int)
            and node.args[1].value < minimum
        ):
            # splice the new value in, so the rest keeps the release's spelling
            default = node.args[1]
            lines = expression.splitlines(keepends=True)
            line = lines[default.lineno - 1].encode()
            start, end = default.col_offset, default.end_col_offset
            lines[default.lineno - 1] = (line[:start] + str(minimum).encode() + line[end:]).decode()
            return "".join(lines)
    return expression


class SenderBootstrapTimeoutFix(Fix):
    name = FIX
    summary = "a bootstrap timeout that can fire in every *KVSender (NIXL 0.4.7 - 0.5.17, ...)"
    rules = ("PDG004",)

    def fixable_in(self, project: Project) -> bool:
        """Not where ``plan`` refuses on sight (``_edits``): a sender it would have to fix
        whose ``init_time`` is a state flag ``poll()`` decides on, or a clock ``poll()``
        restarts on every call."""
        index = project.classes
        for name in index.senders():
            facts = index.facts(name)
            refused = facts.init_time_flag or facts.restamp
            if facts.can_bootstrap and not facts.healthy and refused:
                return False
        return True

    def plan(self, workspace: Workspace) -> Outcome:
        index = sender_index(workspace)
        senders = [index.facts(name) for name in index.senders()]
        bootstrapping = [f for f in senders if f.can_bootstrap]
        for facts in senders:
            opaque = index.opaque_poll(facts.name)
            if opaque is not None:
                owner, line, how = opaque
                what = "bound to an expression" if how == "poll = ..." else f"wrapped by {how}"
                return Outcome(
                    Status.REFUSED,
                    f"pdguard cannot read {facts.name}'s poll(): {owner.name}.poll is {what} "
                    f"(PDG000); review it by hand (leave this fix out with --ignore {FIX} to "
                    "apply the others)",
                    f"{owner.rel}:{line}",
                )
            unread = None if facts.can_bootstrap else index.unread_return(facts.name)
            if unread is not None and index.is_concrete(facts.name):
                owner, node = unread
                return Outcome(
                    Status.REFUSED,
                    f"pdguard cannot tell whether {facts.name} can report Bootstrapping: its "
                    f"poll() returns what pdguard cannot trace to poll states (PDG000); review "
                    f"it by hand (leave this fix out with --ignore {FIX} to apply the others)",
                    f"{owner.rel}:{node.lineno}",
                )
        if not bootstrapping:
            names = ", ".join(f.name for f in senders) or "none found"
            return Outcome(
                Status.NOT_APPLICABLE, f"no KV sender can report Bootstrapping ({names})"
            )
        broken = [f for f in bootstrapping if not f.healthy]
        if not broken:
            return self._already_live(workspace, index, bootstrapping)
        try:
            edits = self._edits(workspace, index, broken)
            raised = self._raise_default(workspace, edits)
            self._run_codemods(workspace, edits)
            pp_safe = self._pp_consensus(workspace, edits)
        except Refused as refused:
            return refused.outcome
        outcome = self._proved(workspace, index, bootstrapping, edits, raised)
        if pp_safe and outcome.status is Status.APPLIED:
            outcome = Outcome(
                outcome.status,
                f"{outcome.note}; PP: {pp_safe}'s pop_bootstrapped fails a request the stage "
                "before ended that this stage still polls Bootstrapping (was an assert)",
            )
        return outcome

    # -- the steps ------------------------------------------------------------------------

    def _already_live(
        self, workspace: Workspace, index: ClassIndex, bootstrapping: list[SenderFacts]
    ) -> Outcome:
        """Every sender that can report Bootstrapping times out: pdguard's (present) or not."""
        owners = {
            owner.name
            for f in bootstrapping
            for owner in (f.poll_owner, f.init_owner)
            if owner is not None
        }
        marked = sorted(o for o in owners if has_marker(_class_source(workspace, index, o), FIX))
        names = ", ".join(f.name for f in bootstrapping)
        if marked:
            return Outcome(Status.PRESENT, f"marker in {', '.join(marked)}; checked: {names}")
        return Outcome(Status.UPSTREAM, f"bootstrap timeout already live in: {names}")

    def _run_codemods(self, workspace: Workspace, edits: dict[str, _ClassEdit]) -> None:
        """The codemod once per class to fix, file by file, into ``workspace``."""
        from pdguard.codemods.sender_bootstrap_timeout import SenderBootstrapTimeout

        def transforms_for(edit: _ClassEdit) -> list[SenderBootstrapTimeout]:
            return [
                SenderBootstrapTimeout(
                    workspace.context(),
                    class_name=edit.class_name,
                    set_init_time=edit.set_init_time,
                    add_check=edit.add_check,
                    check_style=edit.check_style,
                    timeout=edit.timeout,
                    timeout_setting=edit.timeout_setting,
                    record_failure=edit.record_failure,
                    imports=edit.imports,
                    isort_config=workspace.isort_config(edit.rel),
                )
            ]

        run_per_class(workspace, edits.values(), transforms_for)

    def _pp_consensus(self, workspace: Workspace, edits: dict[str, _ClassEdit]) -> str | None:
        """Where pdguard writes a timeout of its own (inline) and a later PP stage asserts its
        poll of what the stage before popped is WaitingForInput or Failed (0.5.2 - 0.5.6), the
        stages' own clocks could reach that assert: the path changed, else None."""
        import ast

        if not any(e.add_check and e.check_style == "inline" for e in edits.values()):
            return None
        from .inflight_deadline import has_pp_prefill_loop

        if workspace.tree.read_bytes(PREFILL_PATH) is None or not has_pp_prefill_loop(workspace):
            return None
        tree = workspace.ast(PREFILL_PATH)
        if not any(
            isinstance(node, ast.FunctionDef)
            and node.name == POP_BOOTSTRAPPED
            and any(_is_consensus_assert(n) for n in walk(node))
            for node in walk(tree)
        ):
            return None
        from pdguard.codemods.sender_bootstrap_timeout import PPBootstrapConsensus

        workspace.transform(PREFILL_PATH, [PPBootstrapConsensus(workspace.context())])
        return PREFILL_PATH

    def _raise_default(self, workspace: Workspace, edits: dict[str, _ClassEdit]) -> list[str]:
        """Where pdguard starts a sender's clock at its creation, a bootstrap-timeout default
        below upstream's for that change (30 s in 0.4.7 - 0.4.8) is raised to it, as upstream
        did in the same change: a sender stays Bootstrapping while decode has no free KV
        memory. The files changed (the inline checks pdguard writes read the raised value)."""
        from pdguard.codemods.sender_bootstrap_timeout import (
            RAISED_DEFAULT,
            RaiseBootstrapTimeoutDefault,
            may_raise_default,
        )

        if not any(edit.set_init_time for edit in edits.values()):
            return []
        changed = []
        for rel in workspace.files_containing(DISAGGREGATION_DIR, BOOTSTRAP_TIMEOUT_ENV):
            if not may_raise_default(
                workspace.ast(rel), BOOTSTRAP_TIMEOUT_ENV, workspace.text(rel)
            ):
                continue
            codemod = RaiseBootstrapTimeoutDefault(workspace.context(), BOOTSTRAP_TIMEOUT_ENV)
            if workspace.transform(rel, [codemod]):
                changed.append(rel)
        for edit in edits.values():
            if edit.timeout_setting is not None:
                edit.timeout_setting = _raised(edit.timeout_setting, RAISED_DEFAULT)
        return changed

    def _proved(
        self,
        workspace: Workspace,
        index: ClassIndex,
        bootstrapping: list[SenderFacts],
        edits: dict[str, _ClassEdit],
        raised: list[str] | None = None,
    ) -> Outcome:
        """Re-check every sender on the new texts; the note says what was done."""
        from pdguard.codemods.sender_bootstrap_timeout import RAISED_DEFAULT

        after = sender_index(workspace)
        still = [name for name in index.senders() if not after.facts(name).healthy]
        if still:
            return Outcome(Status.REFUSED, f"the fix did not make the timeout live in {still}")
        note = "; ".join(edit.describe() for edit in edits.values())
        if raised:
            note += (
                f"; {BOOTSTRAP_TIMEOUT_ENV}'s default raised to {RAISED_DEFAULT} s, upstream's "
                f"once the clock starts at creation ({', '.join(raised)})"
            )
        fine = [f.name for f in bootstrapping if f.healthy]
        if fine:
            note += f"; already live: {', '.join(fine)}"
        return Outcome(Status.APPLIED, note)

    def _edits(
        self, workspace: Workspace, index: ClassIndex, broken: list[SenderFacts]
    ) -> dict[str, _ClassEdit]:
        """What to change in which class: the fix goes into the class that defines the method
        at fault (``__init__`` for ``init_time``, ``poll`` for the check)."""
        edits: dict[str, _ClassEdit] = {}

        def edit_for(owner_name: str) -> _ClassEdit:
            info = index.classes[owner_name]
            return edits.setdefault(owner_name, _ClassEdit(info.rel, owner_name))

        for facts in broken:
            if facts.init_time_flag:
                owner = facts.poll_owner.name if facts.poll_owner else facts.name
                rel = facts.poll_owner.rel if facts.poll_owner else facts.rel
                raise Refused(
                    f"{owner}.poll() decides its result on init_time: it is a state flag there, "
                    "not a clock, and setting it at construction would report a state the "
                    "sender never reached (leave this fix out with --ignore "
                    f"{FIX} to apply the others)",
                    f"{rel}:{facts.init_time_flag}",
                )
            if facts.restamp:
                rel = facts.poll_owner.rel if facts.poll_owner else facts.rel
                raise Refused(
                    f"{facts.name}.poll() restarts init_time on every call, so the time since "
                    "it never grows; pdguard does not rewrite a clock poll() keeps resetting "
                    f"(leave this fix out with --ignore {FIX} to apply the others)",
                    f"{rel}:{facts.restamp}",
                )
            if facts.init_time != "time":
                if facts.init_owner is None:
                    raise Refused(f"{facts.name} has no __init__ to start init_time in")
                edit_for(facts.init_owner.name).set_init_time = True
            # no check, or one that a return reporting Bootstrapping comes before
            if not facts.check_reached or facts.unchecked_return[0]:
                if facts.poll_owner is None:
                    raise Refused(f"{facts.name} has no poll() to check the timeout in")
                edit = edit_for(facts.poll_owner.name)
                edit.add_check = True
                if not facts.has_helper:
                    self._inline_check(workspace, index, facts, edit)
        return edits

    def _inline_check(
        self, workspace: Workspace, index: ClassIndex, facts: SenderFacts, edit: _ClassEdit
    ) -> None:
        """Before 0.5.13 there is no ``_check_bootstrap_timeout``: check inline, with the
        timeout the way this release reads it."""
        from pdguard.codemods.isort_imports import ImportRequest, spelling, top_level_bindings

        edit.check_style = "inline"
        manager = index.manager_of(facts.name)
        edit.record_failure = bool(manager and index.manager_has(manager, MANAGER_RECORD_FAILURE))
        attr = index.manager_timeout_attr(manager) if manager else None
        if attr is not None:
            edit.timeout = f"self.kv_mgr.{attr}"
            return
        if not edit.set_init_time:
            if manager is None:
                raise Refused(
                    f"pdguard cannot tell {facts.name}'s manager (its __init__'s first "
                    "parameter has no annotation, nor is it handed on to a base's), so not "
                    "where its bootstrap timeout is; and its __init__ is not being patched to "
                    "read one"
                )
            raise Refused(
                f"{edit.class_name}: its manager has no bootstrap timeout and its __init__ "
                "is not being patched to read one"
            )
        edit.timeout = "self.bootstrap_timeout"
        module = workspace.module_statements(edit.rel)
        reader = index.timeout_reader()
        if reader is None:
            environ, os_import = spelling(workspace.ast(edit.rel), "os", "environ")
            edit.timeout_setting = f'int({environ}.get("{BOOTSTRAP_TIMEOUT_ENV}", "300"))'
            edit.imports = (os_import,) if os_import else ()
            return
        expression, origin, name = reader
        edit.timeout_setting = expression
        root = name or origin.split(".")[0]
        if root not in top_level_bindings(module):
            edit.imports = (ImportRequest(origin, name),)
