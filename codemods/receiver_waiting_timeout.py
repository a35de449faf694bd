"""Give a KV receiver the waiting timeout upstream gave Mooncake (0.4.9.post1) and NIXL (0.5.6).

Once a decode request's receiver has sent its KV indices to the prefill, the request holds its
KV pages, a request slot and a metadata buffer until ``poll()`` reports Success or Failed. A
receiver without a waiting timeout waits for ever when the prefill drops the request. This
codemod, on one receiver class (the one that defines ``__init__``, the sending method and
``poll``):

* ``__init__``: ``self.init_time = None`` and ``self.waiting_timeout`` read from
  ``SGLANG_DISAGGREGATION_WAITING_TIMEOUT`` (default 300 s) the way the release reads its
  environment, as its first statements (before any early ``return``);
* the sending method (``init``): ``self.init_time`` set to the current time at its end, where
  the KV indices have been sent;
* ``poll()``: once the indices were sent and the status is not terminal, a check that reports
  ``KVPoll.Failed`` after the timeout, records the failure (where the manager can), logs, and
  keeps it in ``conclude_state`` (where the receiver has one). ``check="status"`` places it
  after the one ``check_status()`` read (a ``return`` of it is split), ``check="final"`` before
  the last statement, a ``return`` of a non-terminal ``KVPoll``.

Every inserted piece carries the marker comment ``# pdguard: receiver-waiting-timeout``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst
from libcst.codemod import CodemodContext

from pdguard.fix_names import RECEIVER_WAITING_TIMEOUT as FIX
from pdguard.fix_names import RECEIVER_WAITING_TIMEOUT_ATTR as WAITING_TIMEOUT_ATTR
from pdguard.sglang_names import (
    CHECK_TRANSFER_DONE,
    HANDLE_NODE_FAILURE,
    MANAGER_CHECK_STATUS,
    RECEIVER_INIT_TIME,
    ROOMS_TRACKER,
    TRANSFER_STATUSES,
    WAITING_TIMEOUT_ENV,
    KVPoll,
)

from .anchors import (
    AnchorError,
    find_all,
    find_method,
    is_method_call,
    is_name,
    is_self_attr,
    marker,
    sole,
)
from .command import ClassCommand, Command
from .holes import Scope
from .insertion import Statement, StatementEdit, apply_edits, parse_statements, simple_statements
from .isort_imports import (
    AddIsortedImports,
    ImportRequest,
    add_import_args,
    import_requests,
    spelling,
)
from .sender_bootstrap_timeout import LINE_LENGTH, black_assignment

if TYPE_CHECKING:
    import isort

_INIT = """\
{marker}: set when the KV indices are sent.
self.{init_time} = None
"""

_STAMP = """\
{marker}: the waiting timeout counts from here.
self.{init_time} = {clock}()
"""

_CHECK = """\
{marker}
if {condition}:
    elapsed = {clock}() - self.{init_time}
    if elapsed >= self.{timeout}:
{body}        return KVPoll.Failed
"""

_REASON = """\
        reason = (
            f"Request {self.bootstrap_room} timed out after {elapsed:.1f}s"
            " waiting for its KV cache"
        )
"""
# Once, with the remediation hint, as upstream's receivers log it (0.4.9.post1+, 0.5.13+).
_LOG = """\
        logger.warning_once(
            "Requests timed out waiting for their KV cache after "
            "sending their KV indices to prefill. If a longer time "
            "to first token is acceptable, raise the timeout: "
            "'export {env}=600'."
        )
"""
# Read once, in the manager's decode branch, as upstream reads it (Mooncake 0.4.9.post1,
# NIXL 0.5.6).
_MANAGER_SETTING = """\
{marker}: seconds a receiver may wait
# for its KV cache once it sent its KV indices.
"""
_LATCH_INIT = "{marker}: Failed once timed out.\nself.conclude_state = None\n"
_LATCH_FIRST = """\
{marker}: a timed-out receiver stays Failed.
if self.conclude_state is not None:
    return self.conclude_state
"""
_RECORD = "        self.kv_mgr.record_failure(self.bootstrap_room, reason)\n"

_CONCLUDE = "        self.conclude_state = KVPoll.Failed\n"

_NON_TERMINAL = tuple(p.name for p in KVPoll if p not in (KVPoll.Success, KVPoll.Failed))


def _is_check_status(expr: cst.CSTNode | None) -> bool:
    return expr is not None and is_method_call(expr, MANAGER_CHECK_STATUS)


def _returns_non_terminal(stmt: cst.CSTNode) -> bool:
    returned = sole(stmt, cst.Return)
    value = returned.value if returned is not None else None
    return (
        isinstance(value, cst.Attribute)
        and is_name(value.value, "KVPoll")
        and value.attr.value in _NON_TERMINAL
    )


def _blocks(stmt: cst.CSTNode) -> list[tuple[cst.CSTNode, int]]:
    """The statement lists directly inside ``stmt``, each with its extra indentation."""
    found: list[tuple[cst.CSTNode, int]] = []
    body = getattr(stmt, "body", None)
    if isinstance(body, cst.IndentedBlock):
        found.append((body, 1))
    orelse = getattr(stmt, "orelse", None)
    if isinstance(orelse, cst.If):  # elif: at the level of its if
        found.append((cst.IndentedBlock(body=[orelse]), 0))
    elif orelse is not None:
        found.append((orelse.body, 1))
    for handler in getattr(stmt, "handlers", ()):
        found.append((handler.body, 1))
    final = getattr(stmt, "finalbody", None)
    if final is not None:
        found.append((final.body, 1))
    return found


def _level(block: cst.CSTNode, target: cst.CSTNode, level: int) -> int | None:
    """How many indentation levels deep ``target`` sits, ``block``'s statements being at
    ``level``."""
    for stmt in getattr(block, "body", ()):
        if stmt is target:
            return level
        for inner, extra in _blocks(stmt):
            found = _level(inner, target, level + extra)
            if found is not None:
                return found
    return None


def _is_docstring(stmt: cst.CSTNode) -> bool:
    expr = sole(stmt, cst.Expr)
    return expr is not None and isinstance(expr.value, cst.SimpleString)


class ReceiverWaitingTimeout(ClassCommand):
    DESCRIPTION: str = "Give a KV receiver a waiting timeout once its KV indices are sent."
    METHODS = ("__init__", "poll")

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        ClassCommand.add_args(arg_parser)
        arg_parser.add_argument("--check", dest="check", choices=["status", "final"])
        arg_parser.add_argument("--send-method", dest="send_method", default="init")
        arg_parser.add_argument(
            "--timeout-setting",
            dest="timeout_setting",
            default=f'int(os.environ.get("{WAITING_TIMEOUT_ENV}", "300"))',
        )
        arg_parser.add_argument("--no-record-failure", dest="record_failure", action="store_false")
        arg_parser.add_argument("--no-conclude-state", dest="conclude_state", action="store_false")
        arg_parser.add_argument("--no-log", dest="log", action="store_false")
        arg_parser.add_argument("--manager-class", dest="manager_class", default=None)
        arg_parser.add_argument("--latch", dest="latch", action="store_true")
        add_import_args(arg_parser)

    def __init__(
        self,
        context: CodemodContext,
        class_name: str,
        check: str = "status",
        send_method: str = "init",
        timeout_setting: str = f'int(os.environ.get("{WAITING_TIMEOUT_ENV}", "300"))',
        record_failure: bool = True,
        conclude_state: bool = True,
        log: bool = True,
        imports: Sequence[ImportRequest | str] = (),
        isort_config: isort.Config | None = None,
        manager_class: str | None = None,
        latch: bool = False,
    ) -> None:
        super().__init__(context)
        self.class_name = class_name
        # the timeout read once in this manager's decode branch (else in each receiver)
        self.manager_class = manager_class
        # the receiver has no concluded state: give it one, returned first by poll()
        self.latch = latch
        self.check = check or "status"
        self.send_method = send_method
        self.timeout_setting = timeout_setting
        self.record_failure = record_failure
        self.conclude_state = conclude_state
        self.log = log
        self.imports = import_requests(imports)
        self.isort_config = isort_config
        self.clock = "time.time"

    def methods(self) -> tuple[str, ...]:
        return (*self.METHODS, self.send_method)

    def scope(self, text: str) -> Scope:
        scope = super().scope(text)
        if self.manager_class is None:
            return scope
        return scope | Scope(members=frozenset({(self.manager_class, "__init__")}))

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        # time.time(), as upstream's receivers measure it; the module's own spelling of it.
        self.clock, time_import = spelling(self.checked(tree), "time", "time")
        imports = [*self.imports, *([time_import] if time_import else [])]
        edits = [self._init(tree), self._stamp(tree), self._poll(tree)]
        if self.manager_class is not None:
            edits.append(self._manager(tree))
        if self.latch:
            edits.append(self._latch_first(tree))
        tree = apply_edits(tree, edits)
        return AddIsortedImports(self.context, imports, self.isort_config).transform_module(tree)

    def _init(self, tree: cst.Module) -> tuple[cst.CSTNode, StatementEdit]:
        config = tree.config_for_parsing
        _, init = find_method(tree, "__init__", self.class_name)
        new = parse_statements(
            _INIT.format(marker=marker(FIX), init_time=RECEIVER_INIT_TIME), config
        )
        if self.manager_class is None:
            new += parse_statements(
                black_assignment(
                    f"self.{WAITING_TIMEOUT_ATTR}",
                    self.timeout_setting,
                    2 * len(tree.default_indent),
                ),
                config,
            )
        if self.latch:
            new += parse_statements(_LATCH_INIT.format(marker=marker(FIX)), config)
        body = list(init.body.body)
        if body and _is_docstring(body[0]):
            return body[0], StatementEdit(after=new)
        return body[0], StatementEdit(before=new)

    def _manager(self, tree: cst.Module) -> tuple[cst.CSTNode, StatementEdit]:
        """The timeout read at the end of the manager's decode branch
        (``elif self.disaggregation_mode == DisaggregationMode.DECODE:``)."""
        assert self.manager_class is not None
        _, init = find_method(tree, "__init__", self.manager_class)
        branch = next(
            (
                node
                for node in find_all(init, cst.If)
                if isinstance(node.test, cst.Comparison)
                and isinstance(node.test.comparisons[0].comparator, cst.Attribute)
                and node.test.comparisons[0].comparator.attr.value == "DECODE"
            ),
            None,
        )
        if branch is None:
            raise AnchorError(f"{self.manager_class}.__init__ has no decode branch")
        last = branch.body.body[-1]
        level = (_level(init.body, last, 2) or 3) * len(tree.default_indent)
        code = _MANAGER_SETTING.format(marker=marker(FIX)) + black_assignment(
            f"self.{WAITING_TIMEOUT_ATTR}", self.timeout_setting, level
        )
        return last, StatementEdit(after=parse_statements(code, tree.config_for_parsing))

    def _latch_first(self, tree: cst.Module) -> tuple[cst.CSTNode, StatementEdit]:
        _, poll = find_method(tree, "poll", self.class_name)
        body = list(poll.body.body)
        first = body[1] if len(body) > 1 and _is_docstring(body[0]) else body[0]
        new = parse_statements(_LATCH_FIRST.format(marker=marker(FIX)), tree.config_for_parsing)
        return first, StatementEdit(before=new)

    def _stamp(self, tree: cst.Module) -> tuple[cst.CSTNode, StatementEdit]:
        config = tree.config_for_parsing
        _, send = find_method(tree, self.send_method, self.class_name)
        new = parse_statements(
            _STAMP.format(marker=marker(FIX), init_time=RECEIVER_INIT_TIME, clock=self.clock),
            config,
        )
        last = send.body.body[-1]
        if sole(last, cst.Return) is not None:
            return last, StatementEdit(before=new)
        return last, StatementEdit(after=new)

    def _poll(self, tree: cst.Module) -> tuple[cst.CSTNode, StatementEdit]:
        config = tree.config_for_parsing
        _, poll = find_method(tree, "poll", self.class_name)
        if self.check == "final":
            last = poll.body.body[-1]
            if not _returns_non_terminal(last):
                raise AnchorError(
                    f"{self.class_name}.poll() does not end with a return of a non-terminal KVPoll"
                )
            started = f"self.{RECEIVER_INIT_TIME} is not None"
            return last, StatementEdit(before=self._check(started, 2, tree, config))
        # (the line, the name it binds the status to); (the line, its return, the read)
        assigned: list[tuple[cst.SimpleStatementLine, str]] = []
        returned: list[tuple[cst.SimpleStatementLine, cst.Return, cst.BaseExpression]] = []
        for line in simple_statements(poll, lambda _: True):
            assign, ret = sole(line, cst.Assign), sole(line, cst.Return)
            if (
                assign is not None
                and _is_check_status(assign.value)
                and len(assign.targets) == 1
                and isinstance(assign.targets[0].target, cst.Name)
            ):
                assigned.append((line, assign.targets[0].target.value))
            elif ret is not None and ret.value is not None and _is_check_status(ret.value):
                returned.append((line, ret, ret.value))
        if len(assigned) + len(returned) != 1:
            raise AnchorError(
                f"{self.class_name}.poll() reads check_status() {len(assigned) + len(returned)} "
                "times; expected once"
            )

        def condition(status: str) -> str:
            return (
                f"{status} not in (KVPoll.Success, KVPoll.Failed)\n"
                f"and self.{RECEIVER_INIT_TIME} is not None"
            )

        stmt = assigned[0][0] if assigned else returned[0][0]
        level = _level(poll.body, stmt, 2) or 2
        if assigned:
            status = assigned[0][1]
            check = self._check(condition(status), level, tree, config)
            return stmt, StatementEdit(after=check)
        _, ret, read = returned[0]
        call = cst.Module(body=[]).code_for_node(read)
        before = [
            *parse_statements(f"status = {call}\n", config),
            *self._check(condition("status"), level, tree, config),
        ]
        new_return = stmt.with_changes(
            body=[ret.with_changes(value=cst.Name("status"))],
            leading_lines=[],
        )
        return stmt, StatementEdit(before=before, replacement=new_return)

    def _check(
        self, condition: str, level: int, tree: cst.Module, config: cst.PartialParserConfig
    ) -> list[Statement]:
        lines = condition.split("\n")
        flat = " ".join(lines)
        if level * len(tree.default_indent) + len(f"if {flat}:") > LINE_LENGTH:
            # black's layout of a condition too long for one line: one operand a line
            condition = "(\n    " + "\n    ".join(lines) + "\n)"
        else:
            condition = flat
        body = (
            (_REASON if self.record_failure else "")
            + (_LOG.format(env=WAITING_TIMEOUT_ENV) if self.log else "")
            + (_RECORD if self.record_failure else "")
            + (_CONCLUDE if self.conclude_state or self.latch else "")
        )
        code = _CHECK.format(
            marker=marker(FIX),
            condition=condition,
            clock=self.clock,
            init_time=RECEIVER_INIT_TIME,
            timeout=f"kv_mgr.{WAITING_TIMEOUT_ATTR}"
            if self.manager_class
            else WAITING_TIMEOUT_ATTR,
            body=body,
        )
        return parse_statements(code, config)


# -- NIXL 0.5.3 - 0.5.5.post3: the heartbeat fails every tracked room (as 0.5.6 does) -----------

_KEEP_ROOMS = (
    "{marker}: a healthy",
    "# probe keeps every tracked room; poll() drops",
    "# it once its transfer is done (as in 0.5.6).",
)
_EVERY_ROOM = "{marker}: also a room no chunk reached yet"
_DONE = """\
{marker}: untracked once done.
self.kv_mgr.{tracker}[self.bootstrap_addr].discard(
    self.bootstrap_room
)
"""


def _in_transfer_statuses(node: cst.BaseExpression, negated: bool) -> bool:
    if not isinstance(node, cst.Comparison) or len(node.comparisons) != 1:
        return False
    (target,) = node.comparisons
    op = cst.NotIn if negated else cst.In
    return isinstance(target.operator, op) and is_self_attr(target.comparator, TRANSFER_STATUSES)


def _fails_rooms_with_status(node: cst.If) -> cst.BooleanOperation | None:
    """The test of ``if <room> in self.<transfer statuses> and ...:``, else None."""
    test = node.test
    if (
        isinstance(test, cst.BooleanOperation)
        and isinstance(test.operator, cst.And)
        and _in_transfer_statuses(test.left, negated=False)
    ):
        return test
    return None


def _assigns(stmt: cst.BaseStatement, name: str) -> bool:
    """``<name> = ...``: a line with one assignment, to ``name`` alone."""
    assign = sole(stmt, cst.Assign)
    return (
        assign is not None and len(assign.targets) == 1 and is_name(assign.targets[0].target, name)
    )


class NixlHeartbeatRooms(Command):
    """The NIXL decode heartbeat of 0.5.3 - 0.5.5.post3 forgets, on every healthy probe, each
    tracked room that has not received a chunk yet, and on a node failure fails only the rooms
    that have: a room still waiting for its first chunk is never failed. This ports 0.5.6's
    change: the probe keeps every room, a node failure fails every tracked room whose transfer
    is not done, and the receiver drops its room from the tracker once its transfer is done."""

    DESCRIPTION: str = "Let NIXL's decode heartbeat fail every room of a prefill that died."

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.add_argument("--manager", dest="manager_class", required=True)
        arg_parser.add_argument("--receiver", dest="receiver_class", required=True)

    def __init__(self, context: CodemodContext, manager_class: str, receiver_class: str) -> None:
        super().__init__(context)
        self.manager_class = manager_class
        self.receiver_class = receiver_class

    def scope(self, text: str) -> Scope:
        """The manager class whole (its heartbeat's loops can be anywhere in it), and the
        receiver's poll()."""
        return Scope(
            classes=frozenset({self.manager_class}),
            members=frozenset({(self.receiver_class, "poll")}),
        )

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        manager = next(
            (
                s
                for s in tree.body
                if isinstance(s, cst.ClassDef) and s.name.value == self.manager_class
            ),
            None,
        )
        if manager is None:
            raise AnchorError(f"no class {self.manager_class}")
        edits = [*self._keep_rooms(manager), self._every_room(tree), self._drop_when_done(tree)]
        return apply_edits(tree, edits)

    def _keep_rooms(self, manager: cst.ClassDef) -> list[tuple[cst.CSTNode, StatementEdit]]:
        loops = [
            loop
            for loop in find_all(manager, cst.For)
            if any(_in_transfer_statuses(i.test, negated=True) for i in find_all(loop, cst.If))
            and any(is_method_call(call, "discard") for call in find_all(loop, cst.Call))
        ]
        # the innermost: not a loop around another one
        loops = [
            loop
            for loop in loops
            if not any(
                other is not loop and any(inner is other for inner in find_all(loop, cst.For))
                for other in loops
            )
        ]
        if len(loops) != 1:
            raise AnchorError(
                f"{self.manager_class}: {len(loops)} loops forget rooms with no transfer "
                "status; expected one"
            )
        loop = loops[0]
        holder = next(
            block
            for block in find_all(manager, cst.IndentedBlock)
            if any(s is loop for s in block.body)
        )
        body = list(holder.body)
        index = next(i for i, s in enumerate(body) if s is loop)
        iterated = loop.iter.value if isinstance(loop.iter, cst.Name) else None
        drop: list[cst.BaseStatement] = [loop]
        if index > 0 and iterated and _assigns(body[index - 1], iterated):
            drop.insert(0, body[index - 1])
        kept = [s for s in body if not any(s is d for d in drop)]
        if not kept:
            raise AnchorError(f"{self.manager_class}: the heartbeat's loop is alone in its block")
        comment = [
            cst.EmptyLine(comment=cst.Comment(line))
            for line in (_KEEP_ROOMS[0].format(marker=marker(FIX)), *_KEEP_ROOMS[1:])
        ]
        first = kept[0]
        assert isinstance(first, Statement)  # a block's statement: a line or a compound one
        edits: list[tuple[cst.CSTNode, StatementEdit]] = [
            (first, StatementEdit(replacement=first.with_changes(
                leading_lines=[*first.leading_lines, *comment]
            )))
        ]  # fmt: skip
        edits += [(d, StatementEdit(replacement=None)) for d in drop]
        return edits

    def _every_room(self, tree: cst.Module) -> tuple[cst.CSTNode, StatementEdit]:
        _, failure = find_method(tree, HANDLE_NODE_FAILURE, self.manager_class)
        found = [
            (node, test)
            for node in find_all(failure, cst.If)
            if (test := _fails_rooms_with_status(node)) is not None
        ]
        if len(found) != 1:
            raise AnchorError(
                f"{self.manager_class}.{HANDLE_NODE_FAILURE}() fails {len(found)} sets of rooms "
                "only when they have a transfer status; expected one"
            )
        node, test = found[0]
        rest = test.right.with_changes(lpar=[], rpar=[])
        comment = cst.EmptyLine(comment=cst.Comment(_EVERY_ROOM.format(marker=marker(FIX))))
        new = node.with_changes(
            test=rest,
            whitespace_before_test=cst.SimpleWhitespace(" "),
            leading_lines=[*node.leading_lines, comment],
        )
        return node, StatementEdit(replacement=new)

    def _drop_when_done(self, tree: cst.Module) -> tuple[cst.CSTNode, StatementEdit]:
        _, poll = find_method(tree, "poll", self.receiver_class)
        done = [
            node
            for node in find_all(poll, cst.If)
            if any(
                is_method_call(call, CHECK_TRANSFER_DONE) for call in find_all(node.test, cst.Call)
            )
        ]
        if len(done) != 1:
            raise AnchorError(
                f"{self.receiver_class}.poll() checks {CHECK_TRANSFER_DONE}() {len(done)} "
                "times; expected once"
            )
        first = done[0].body.body[0]
        new = parse_statements(
            _DONE.format(marker=marker(FIX), tracker=ROOMS_TRACKER), tree.config_for_parsing
        )
        return first, StatementEdit(before=new)
