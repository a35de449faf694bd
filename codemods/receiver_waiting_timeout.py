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

import isort
import libcst as cst
import libcst.matchers as m

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

from .anchors import AnchorError, find_method, marker
from .command import Transform, commands
from .insertion import Statement, StatementEdit, apply_edits, parse_statements
from .isort_imports import DEFAULT_ISORT_CONFIG, AddIsortedImportsTransform, ImportRequest, spelling
from .sender_bootstrap_timeout import LINE_LENGTH, black_assignment

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
_LOG = '        logger.error(f"{{reason}} ({env})")\n'
_RECORD = "        self.kv_mgr.record_failure(self.bootstrap_room, reason)\n"

_CONCLUDE = "        self.conclude_state = KVPoll.Failed\n"

_NON_TERMINAL = tuple(p.name for p in KVPoll if p not in (KVPoll.Success, KVPoll.Failed))


def _is_check_status(expr: cst.CSTNode | None) -> bool:
    return expr is not None and m.matches(
        expr, m.Call(func=m.Attribute(attr=m.Name(MANAGER_CHECK_STATUS)))
    )


def _returns_non_terminal(stmt: cst.CSTNode) -> bool:
    return m.matches(
        stmt,
        m.SimpleStatementLine(
            body=[
                m.Return(
                    value=m.Attribute(
                        value=m.Name("KVPoll"),
                        attr=m.OneOf(*(m.Name(name) for name in _NON_TERMINAL)),
                    )
                )
            ]
        ),
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
    return m.matches(stmt, m.SimpleStatementLine(body=[m.Expr(value=m.SimpleString())]))


class ReceiverWaitingTimeoutTransform(Transform):
    DESCRIPTION: str = "Give a KV receiver a waiting timeout once its KV indices are sent."

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.add_argument("--class", dest="class_name", required=True)
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
        arg_parser.add_argument(
            "--import",
            dest="imports",
            action="append",
            default=[],
            help="'module' or 'module:name' the timeout setting needs",
        )

    def __init__(
        self,
        class_name: str,
        check: str = "status",
        send_method: str = "init",
        timeout_setting: str = f'int(os.environ.get("{WAITING_TIMEOUT_ENV}", "300"))',
        record_failure: bool = True,
        conclude_state: bool = True,
        log: bool = True,
        imports: Sequence[ImportRequest | str] = (),
        isort_config: isort.Config = DEFAULT_ISORT_CONFIG,
    ) -> None:
        self.class_name = class_name
        self.check = check or "status"
        self.send_method = send_method
        self.timeout_setting = timeout_setting
        self.record_failure = record_failure
        self.conclude_state = conclude_state
        self.log = log
        self.imports = [
            i if isinstance(i, ImportRequest) else ImportRequest(*i.split(":", 1)) for i in imports
        ]
        self.isort_config = isort_config
        self.clock = "time.time"

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        # time.time(), as upstream's receivers measure it; the module's own spelling of it.
        self.clock, time_import = spelling(tree, "time", "time")
        imports = [*self.imports, *([time_import] if time_import else [])]
        edits = [self._init(tree), self._stamp(tree), self._poll(tree)]
        tree = apply_edits(tree, edits)
        return AddIsortedImportsTransform(imports, self.isort_config).transform_module(tree)

    def _init(self, tree: cst.Module) -> tuple[cst.CSTNode, StatementEdit]:
        config = tree.config_for_parsing
        _, init = find_method(tree, "__init__", self.class_name)
        new = parse_statements(
            _INIT.format(marker=marker(FIX), init_time=RECEIVER_INIT_TIME), config
        )
        new += parse_statements(
            black_assignment(
                f"self.{WAITING_TIMEOUT_ATTR}", self.timeout_setting, 2 * len(tree.default_indent)
            ),
            config,
        )
        body = list(init.body.body)
        if body and _is_docstring(body[0]):
            return body[0], StatementEdit(after=new)
        return body[0], StatementEdit(before=new)

    def _stamp(self, tree: cst.Module) -> tuple[cst.CSTNode, StatementEdit]:
        config = tree.config_for_parsing
        _, send = find_method(tree, self.send_method, self.class_name)
        new = parse_statements(
            _STAMP.format(marker=marker(FIX), init_time=RECEIVER_INIT_TIME, clock=self.clock),
            config,
        )
        last = send.body.body[-1]
        if m.matches(last, m.SimpleStatementLine(body=[m.Return()])):
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
        assigned = [
            stmt
            for stmt in m.findall(poll, m.SimpleStatementLine(body=[m.Assign()]))
            if _is_check_status(stmt.body[0].value)  # type: ignore[attr-defined]
            and len(stmt.body[0].targets) == 1  # type: ignore[attr-defined]
            and isinstance(stmt.body[0].targets[0].target, cst.Name)  # type: ignore[attr-defined]
        ]
        returned = [
            stmt
            for stmt in m.findall(poll, m.SimpleStatementLine(body=[m.Return()]))
            if _is_check_status(stmt.body[0].value)  # type: ignore[attr-defined]
        ]
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

        stmt = (assigned or returned)[0]
        level = _level(poll.body, stmt, 2) or 2
        if assigned:
            status = stmt.body[0].targets[0].target.value  # type: ignore[attr-defined]
            check = self._check(condition(status), level, tree, config)
            return stmt, StatementEdit(after=check)
        call = cst.Module(body=[]).code_for_node(stmt.body[0].value)  # type: ignore[attr-defined]
        before = [
            *parse_statements(f"status = {call}\n", config),
            *self._check(condition("status"), level, tree, config),
        ]
        new_return = stmt.with_changes(
            body=[stmt.body[0].with_changes(value=cst.Name("status"))],  # type: ignore[attr-defined]
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
            (_REASON if self.log or self.record_failure else "")
            + (_LOG.format(env=WAITING_TIMEOUT_ENV) if self.log else "")
            + (_RECORD if self.record_failure else "")
            + (_CONCLUDE if self.conclude_state else "")
        )
        code = _CHECK.format(
            marker=marker(FIX),
            condition=condition,
            clock=self.clock,
            init_time=RECEIVER_INIT_TIME,
            timeout=WAITING_TIMEOUT_ATTR,
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
    op = m.NotIn() if negated else m.In()
    return m.matches(
        node,
        m.Comparison(
            comparisons=[
                m.ComparisonTarget(
                    operator=op,
                    comparator=m.Attribute(value=m.Name("self"), attr=m.Name(TRANSFER_STATUSES)),
                )
            ]
        ),
    )


class NixlHeartbeatRoomsTransform(Transform):
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

    def __init__(self, manager_class: str, receiver_class: str) -> None:
        self.manager_class = manager_class
        self.receiver_class = receiver_class

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
            for loop in m.findall(manager, m.For())
            if any(
                _in_transfer_statuses(i.test, negated=True)  # type: ignore[attr-defined]
                for i in m.findall(loop, m.If())
            )
            and m.findall(loop, m.Call(func=m.Attribute(attr=m.Name("discard"))))
        ]
        # the innermost: not a loop around another one
        loops = [
            loop
            for loop in loops
            if not any(
                other is not loop and m.findall(loop, m.For()).count(other) for other in loops
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
            for block in m.findall(manager, m.IndentedBlock())
            if any(s is loop for s in block.body)  # type: ignore[attr-defined]
        )
        body = list(holder.body)  # type: ignore[attr-defined]
        index = next(i for i, s in enumerate(body) if s is loop)
        iterated = loop.iter.value if isinstance(loop.iter, cst.Name) else None  # type: ignore[attr-defined]
        drop = [loop]
        if (
            index > 0
            and iterated
            and m.matches(
                body[index - 1],
                m.SimpleStatementLine(
                    body=[m.Assign(targets=[m.AssignTarget(target=m.Name(iterated))])]
                ),
            )
        ):
            drop.insert(0, body[index - 1])
        kept = [s for s in body if not any(s is d for d in drop)]
        if not kept:
            raise AnchorError(f"{self.manager_class}: the heartbeat's loop is alone in its block")
        comment = [
            cst.EmptyLine(comment=cst.Comment(line))
            for line in (_KEEP_ROOMS[0].format(marker=marker(FIX)), *_KEEP_ROOMS[1:])
        ]
        first = kept[0]
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
            node
            for node in m.findall(failure, m.If())
            if isinstance(node.test, cst.BooleanOperation)  # type: ignore[attr-defined]
            and isinstance(node.test.operator, cst.And)  # type: ignore[attr-defined]
            and _in_transfer_statuses(node.test.left, negated=False)  # type: ignore[attr-defined]
        ]
        if len(found) != 1:
            raise AnchorError(
                f"{self.manager_class}.{HANDLE_NODE_FAILURE}() fails {len(found)} sets of rooms "
                "only when they have a transfer status; expected one"
            )
        node: cst.If = found[0]  # type: ignore[assignment]
        rest = node.test.right.with_changes(lpar=[], rpar=[])  # type: ignore[attr-defined]
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
            for node in m.findall(poll, m.If())
            if m.findall(
                node.test,  # type: ignore[attr-defined]
                m.Call(func=m.Attribute(attr=m.Name(CHECK_TRANSFER_DONE))),
            )
        ]
        if len(done) != 1:
            raise AnchorError(
                f"{self.receiver_class}.poll() checks {CHECK_TRANSFER_DONE}() {len(done)} "
                "times; expected once"
            )
        first = done[0].body.body[0]  # type: ignore[attr-defined]
        new = parse_statements(
            _DONE.format(marker=marker(FIX), tracker=ROOMS_TRACKER), tree.config_for_parsing
        )
        return first, StatementEdit(before=new)


# The LibCST codemod commands (python -m libcst.tool codemod), built on first use: command.py
__getattr__, __dir__ = commands(
    __name__,
    ReceiverWaitingTimeout=ReceiverWaitingTimeoutTransform,
    NixlHeartbeatRooms=NixlHeartbeatRoomsTransform,
)
