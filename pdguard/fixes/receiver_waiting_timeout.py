"""The ``receiver-waiting-timeout`` fix: upstream's own decode-side waiting timeout (Mooncake
0.4.9.post1, NIXL 0.5.6), ported to every KV receiver that lacks it (PDG006).

A receiver needs it when its ``poll()`` can stay non-terminal after its KV indices were sent
with no waiting timeout that can fire: Mooncake 0.4.6 - 0.4.9, NIXL 0.4.6 - 0.5.5.post3. The
fix goes into the class that defines ``__init__``, the sending method and ``poll``; it reads
``SGLANG_DISAGGREGATION_WAITING_TIMEOUT`` (300 s) as the release reads its environment.

Releases whose decode queues raise on a Failed poll (0.4.6 - 0.4.6.post4) are refused: a
receiver that times out there would crash the decode scheduler.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pdguard.checks.bindings import bindings_in_force
from pdguard.checks.models.bounded_wait import is_failed
from pdguard.checks.models.env_reads import env_reader as checks_env_reader
from pdguard.checks.nodes import statements, walk
from pdguard.checks.project import Project

from .. import fix_names
from ..sglang_names import (
    BOOTSTRAP_TIMEOUT_ENV,
    DECODE_PATH,
    DISAGGREGATION_DIR,
    HANDLE_NODE_FAILURE,
    KVPOLL,
    MANAGER_CHECK_STATUS,
    MANAGER_RECORD_FAILURE,
    MANAGERS_DIR,
    NEEDLES,
    RECEIVER_CONCLUDE_STATE,
    RECEIVER_SEND_METHODS,
    SCHEDULER_DECODE_NEEDLES,
    TRANSFER_STATUSES,
    WAITING_TIMEOUT_ENV,
    KVPoll,
)
from .base import Fix, Outcome, Refused, Status, has_marker
from .per_class import run_per_class

if TYPE_CHECKING:
    import libcst as cst

    from pdguard.checks.models.kv_receivers import ReceiverIndex
    from pdguard.checks.models.kv_senders import ClassInfo
    from pdguard.codemods.isort_imports import ImportRequest

    from ..workspace import Workspace

FIX = fix_names.RECEIVER_WAITING_TIMEOUT
# pdguard's own name: the receiver attribute holding the timeout it reads.
WAITING_TIMEOUT_ATTR = fix_names.RECEIVER_WAITING_TIMEOUT_ATTR
DEFAULT_WAITING_TIMEOUT = 300


@dataclass
class _ClassEdit:
    rel: str
    class_name: str
    check: str = "status"
    send_method: str = "init"
    timeout_setting: str = ""
    record_failure: bool = False
    conclude_state: bool = False
    manager_class: str | None = None
    latch: bool = False
    log: bool = False
    imports: tuple[ImportRequest, ...] = ()
    heartbeat_manager: str | None = None  # NIXL 0.5.3 - 0.5.5.post3: its weak heartbeat
    # False when the receiver's own waiting timeout already holds (only its heartbeat is
    # weak): a second timer would be a patch no maintainer merges
    timer: bool = True

    def describe(self) -> str:
        parts = []
        if self.timer:
            parts.append(f"init_time in {self.send_method}() + check ({self.check})")
        if self.heartbeat_manager:
            parts.append(f"{self.heartbeat_manager}'s heartbeat fails every tracked room")
        return f"{self.class_name}: " + ", ".join(parts)


def decode_project(workspace: Workspace) -> Project:
    """The checker's view of the workspace's current receiver, manager and decode files."""
    rels = [  # as check's prefilter
        *workspace.files_containing(DISAGGREGATION_DIR, *NEEDLES),
        *workspace.files_containing(MANAGERS_DIR, *SCHEDULER_DECODE_NEEDLES),
    ]
    for rel in rels:
        workspace.ast(rel)  # a file that does not parse: the workspace's file:line:col error
    return Project(workspace.project_texts(rels), workspace.run)


def failed_poll_raises(workspace: Workspace) -> int | None:
    """The line of a decode queue's ``KVPoll.Failed`` branch that raises (0.4.6 - 0.4.6.post4:
    ``raise Exception("Handshake failed")``), if any."""
    if DECODE_PATH not in workspace.files_containing(DISAGGREGATION_DIR, KVPOLL):
        return None
    raising = [
        (depth, node.body[0].lineno)
        for depth, node in statements(workspace.ast(DECODE_PATH).body)
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and len(node.test.ops) == 1
        and isinstance(node.test.ops[0], ast.Eq | ast.Is)
        and is_failed(node.test.comparators[0])
        and node.body
        and isinstance(node.body[0], ast.Raise)
    ]
    # the one ``ast.walk`` meets first: the shallowest, then the first in the file
    return min(raising)[1] if raising else None


def env_reader(project: Project, env: str) -> tuple[str, str, str | None] | None:
    """An expression the release reads ``env`` with, anywhere in the tree: (its source, the
    module its root name is imported from, the imported name or None)."""
    return checks_env_reader(project.texts, project.tree, env)


def _as_waiting_reader(source: str) -> str | None:
    """A reader of the bootstrap timeout turned into one of the waiting timeout (its name,
    and its default as 300)."""
    import libcst as cst

    expr = cst.parse_expression(source.replace(BOOTSTRAP_TIMEOUT_ENV, WAITING_TIMEOUT_ENV))
    if not isinstance(expr, cst.Call) or len(expr.args) != 2:
        return None
    default = expr.args[1].value
    if isinstance(default, cst.Integer):
        new: cst.BaseExpression = cst.Integer(str(DEFAULT_WAITING_TIMEOUT))
    elif isinstance(default, cst.SimpleString):
        new = cst.SimpleString(f'"{DEFAULT_WAITING_TIMEOUT}"')
    else:
        return None
    expr = expr.with_changes(args=[expr.args[0], expr.args[1].with_changes(value=new)])
    return cst.Module(body=[]).code_for_node(expr)


def _reads_self_attr(func: ast.FunctionDef, attr: str) -> bool:
    return any(
        isinstance(n, ast.Attribute)
        and n.attr == attr
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
        for n in walk(func)
    )


def _self_attr_named(node: ast.AST, attr: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attr
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _tests_transfer_status(test: ast.expr, op: type) -> bool:
    return (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], op)
        and _self_attr_named(test.comparators[0], TRANSFER_STATUSES)
    )


def weak_heartbeat(manager: ClassInfo) -> bool:
    """NIXL 0.5.3 - 0.5.5.post3: a healthy probe forgets the tracked rooms that have no transfer
    status yet, and a node failure fails only the rooms that have one."""
    failure = manager.methods.get(HANDLE_NODE_FAILURE)
    fails_some = failure is not None and any(
        isinstance(n, ast.If)
        and isinstance(n.test, ast.BoolOp)
        and isinstance(n.test.op, ast.And)
        and _tests_transfer_status(n.test.values[0], ast.In)
        for n in ast.walk(failure)
    )
    forgets = any(
        isinstance(loop, ast.For)
        and any(
            isinstance(n, ast.If) and _tests_transfer_status(n.test, ast.NotIn)
            for n in ast.walk(loop)
        )
        and any(isinstance(n, ast.Attribute) and n.attr == "discard" for n in ast.walk(loop))
        for loop in walk(manager.node)
    )
    return fails_some and forgets


def _check_mode(poll: ast.FunctionDef) -> str | None:
    reads = [
        n
        for n in walk(poll)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == MANAGER_CHECK_STATUS
    ]
    if len(reads) == 1:
        return "status"
    last = poll.body[-1]
    if (
        not reads
        and isinstance(last, ast.Return)
        and isinstance(last.value, ast.Attribute)
        and last.value.attr in KVPoll.__members__
        and last.value.attr not in (KVPoll.Success.name, KVPoll.Failed.name)
    ):
        return "final"
    return None


class ReceiverWaitingTimeoutFix(Fix):
    name = FIX
    summary = "a waiting timeout in every *KVReceiver (Mooncake 0.4.6 - 0.4.9, NIXL - 0.5.5)"
    rules = ("PDG006",)
    reads = (DISAGGREGATION_DIR, MANAGERS_DIR)

    def plan(self, workspace: Workspace) -> Outcome:
        project = decode_project(workspace)
        receivers = project.receivers
        concrete = list(receivers.concrete())
        if not concrete:
            return Outcome(Status.NOT_APPLICABLE, "no KV receiver class found")
        outcome = self._plan(workspace, project, concrete)
        dead = sorted(receivers.dead_receivers())
        if not dead:
            return outcome
        aside = (
            f"; dead code, left alone: {', '.join(dead)} (nothing the tree runs names it, "
            "not get_kv_class)"
        )
        return Outcome(outcome.status, (outcome.note or "") + aside, outcome.where)

    def _plan(self, workspace: Workspace, project: Project, concrete: list[str]) -> Outcome:
        receivers = project.receivers
        broken = [name for name in concrete if receivers.verdict(name).violates]
        for name in broken:
            opaque = receivers.verdict(name).opaque
            if opaque:
                return Outcome(
                    Status.REFUSED,
                    f"{name}.poll() returns what {', '.join(opaque)}() gives, which pdguard "
                    "cannot follow: it would not know where to put the waiting timeout",
                )
        if not broken:
            return self._already_live(workspace, receivers, concrete)
        line = failed_poll_raises(workspace)
        if line is not None:
            return Outcome(
                Status.REFUSED,
                "a KVPoll.Failed poll in the decode queues raises inside the scheduler, so a "
                "receiver that times out would crash it; receivers without a waiting timeout: "
                + ", ".join(broken),
                f"{DECODE_PATH}:{line}",
            )
        try:
            edits = self._edits(workspace, project, broken)
            self._run_codemods(workspace, edits)
        except Refused as refused:
            return refused.outcome
        return self._proved(workspace, concrete, edits)

    def _already_live(
        self, workspace: Workspace, receivers: ReceiverIndex, concrete: list[str]
    ) -> Outcome:
        owners = {}
        for name in concrete:
            for method in ("poll", *RECEIVER_SEND_METHODS):
                owner = receivers.index.resolve(name, method)
                if owner is not None:
                    owners[owner.name] = owner
        marked = sorted(
            name for name, o in owners.items() if has_marker(_source(workspace, o.rel, o.node), FIX)
        )
        names = ", ".join(concrete)
        if marked:
            return Outcome(Status.PRESENT, f"marker in {', '.join(marked)}; checked: {names}")
        return Outcome(Status.UPSTREAM, f"waiting timeout already live in: {names}")

    def _edits(
        self, workspace: Workspace, project: Project, broken: list[str]
    ) -> dict[str, _ClassEdit]:
        index = project.receivers.index
        edits: dict[str, _ClassEdit] = {}
        for name in broken:
            sends = [m for m in RECEIVER_SEND_METHODS if index.resolve(name, m) is not None]
            if not sends:
                raise Refused(f"{name} has no method that sends its KV indices")
            owners = {
                method: index.resolve(name, method) for method in ("__init__", "poll", sends[-1])
            }
            missing = [m for m, o in owners.items() if o is None]
            if missing:
                raise Refused(f"{name} has no {', '.join(missing)}")
            classes = {o.name for o in owners.values() if o is not None}
            if len(classes) != 1:
                raise Refused(
                    f"{name}: __init__, poll and {sends[-1]} are defined in different classes "
                    f"({', '.join(sorted(classes))}); pdguard patches one class"
                )
            info = owners["poll"]
            assert info is not None
            if info.name in edits:
                continue
            poll = info.methods["poll"]
            check = _check_mode(poll)
            if check is None:
                raise Refused(
                    f"{info.name}.poll() neither reads check_status() once nor ends with a "
                    "return of a non-terminal KVPoll",
                    f"{info.rel}:{poll.lineno}",
                )
            edit = _ClassEdit(info.rel, info.name, check=check, send_method=sends[-1])
            edit.conclude_state = _reads_self_attr(poll, RECEIVER_CONCLUDE_STATE)
            manager = project.classes.manager_of(name)
            edit.record_failure = bool(
                manager and project.classes.manager_has(manager, MANAGER_RECORD_FAILURE)
            )
            tree = workspace.ast(info.rel)
            edit.log = "logger" in bindings_in_force(tree.body)
            owner = project.classes.classes.get(manager) if manager else None
            if owner is not None and owner.rel == info.rel and weak_heartbeat(owner):
                edit.heartbeat_manager = owner.name
            if owner is not None and owner.rel == info.rel and _decode_branch(owner.node):
                edit.manager_class = owner.name  # read once there, as upstream does
            edit.latch = not edit.conclude_state
            verdict = project.receivers.verdict(name)
            edit.timer = verdict.waits_forever or verdict.early_clock
            if not edit.timer and edit.heartbeat_manager is None:
                raise Refused(
                    f"{name}: its waiting timeout holds, but the heartbeat of its manager is "
                    "not one pdguard knows how to strengthen",
                    f"{info.rel}:{poll.lineno}",
                )
            self._timeout_setting(workspace, project, edit)
            edits[info.name] = edit
        return edits

    def _timeout_setting(self, workspace: Workspace, project: Project, edit: _ClassEdit) -> None:
        """``SGLANG_DISAGGREGATION_WAITING_TIMEOUT`` read the way this release reads it: its own
        reader of that variable, else its reader of the bootstrap timeout, else ``os.environ``."""
        from pdguard.codemods.isort_imports import ImportRequest, spelling, top_level_bindings

        module = workspace.module_statements(edit.rel)
        reader = env_reader(project, WAITING_TIMEOUT_ENV)
        setting = reader[0] if reader else None
        if reader is None:
            reader = env_reader(project, BOOTSTRAP_TIMEOUT_ENV)
            setting = _as_waiting_reader(reader[0]) if reader else None
        if reader is None or setting is None:
            environ, os_import = spelling(workspace.ast(edit.rel), "os", "environ")
            edit.timeout_setting = (
                f'int({environ}.get("{WAITING_TIMEOUT_ENV}", "{DEFAULT_WAITING_TIMEOUT}"))'
            )
            edit.imports = (os_import,) if os_import else ()
            return
        _, origin, name = reader
        edit.timeout_setting = setting
        root = name or origin.split(".")[0]
        if root not in top_level_bindings(module):
            edit.imports = (ImportRequest(origin, name),)

    def _run_codemods(self, workspace: Workspace, edits: dict[str, _ClassEdit]) -> None:
        from pdguard.codemods.command import Command
        from pdguard.codemods.receiver_waiting_timeout import (
            NixlHeartbeatRooms,
            ReceiverWaitingTimeout,
        )

        def transforms_for(edit: _ClassEdit) -> list[Command]:
            transforms: list[Command] = []
            if edit.timer:
                transforms.append(
                    ReceiverWaitingTimeout(
                        workspace.context(),
                        class_name=edit.class_name,
                        check=edit.check,
                        send_method=edit.send_method,
                        timeout_setting=edit.timeout_setting,
                        record_failure=edit.record_failure,
                        conclude_state=edit.conclude_state,
                        log=edit.log,
                        imports=edit.imports,
                        isort_config=workspace.isort_config(edit.rel),
                        manager_class=edit.manager_class,
                        latch=edit.latch,
                    )
                )
            if edit.heartbeat_manager:
                transforms.append(
                    NixlHeartbeatRooms(
                        workspace.context(),
                        manager_class=edit.heartbeat_manager,
                        receiver_class=edit.class_name,
                    )
                )
            return transforms

        run_per_class(workspace, edits.values(), transforms_for)

    def _proved(
        self, workspace: Workspace, concrete: list[str], edits: dict[str, _ClassEdit]
    ) -> Outcome:
        after = decode_project(workspace).receivers
        still = [name for name in concrete if after.verdict(name).violates]
        if still:
            return Outcome(
                Status.REFUSED, f"the fix did not make the waiting timeout live in {still}"
            )
        note = "; ".join(edit.describe() for edit in edits.values())
        fine = [name for name in concrete if not any(name == e for e in edits)]
        if fine:
            note += f"; already live or terminal: {', '.join(fine)}"
        return Outcome(Status.APPLIED, note)


def _decode_branch(node: ast.ClassDef) -> bool:
    """Its ``__init__`` has ``if ... == DisaggregationMode.DECODE:`` (or ``elif``)."""
    init = next(
        (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
    )
    return init is not None and any(
        isinstance(n, ast.If)
        and isinstance(n.test, ast.Compare)
        and isinstance(n.test.comparators[0], ast.Attribute)
        and n.test.comparators[0].attr == "DECODE"
        for n in walk(init)
    )


def _source(workspace: Workspace, rel: str, node: ast.ClassDef) -> str:
    lines = workspace.text(rel).splitlines()
    return "\n".join(lines[node.lineno - 1 : node.end_lineno])


__all__ = ["FIX", "WAITING_TIMEOUT_ATTR", "ReceiverWaitingTimeoutFix"]
