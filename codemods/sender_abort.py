"""Make a KV sender's ``poll()`` report Failed once it is aborted (any ``*KVSender`` class).

pdguard's inflight deadline fails an overdue request through its sender's ``abort()``, before
the poll all-reduce, and counts on the sender's next ``poll()`` saying Failed. Some releases'
senders cannot: NIXL's ``poll()`` (up to SGLang 0.5.11) reads its transfer handles once it has
sent and never looks at what ``abort()`` recorded, the fake sender (up to 0.5.12) and NIXL's
(up to 0.5.9) have no ``abort()``, nor has Mooncake's up to 0.4.9.post4. This codemod changes
one class the way later releases do it, with a concluded state:

* ``init_state``: ``self.conclude_state = None`` at the end of ``__init__``;
* ``check_first``: ``poll()`` starts by returning ``self.conclude_state`` once it is set, so
  everything after it (the transfer handles, the manager's status) is not read any more;
* ``add_abort``: an ``abort()`` (after ``poll()``) that concludes the sender as Failed;
* ``read_record``: ``failure_exception()`` first takes the room's failure record out of the
  manager and, where the sender raised a fixed text, raises the recorded reason instead (with the
  module's ``KVTransferError`` if it imports one, else the type of that fixed raise). NIXL's
  sender up to 0.5.12.post1 reads no record although its manager keeps them (from 0.5.10): the
  client got a fixed text and every record (``abort()``'s, the deadline's) stayed behind.

Every inserted piece carries the marker comment ``# pdguard: sender-abort``.
"""

from __future__ import annotations

import argparse

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext

from pdguard.fix_names import SENDER_ABORT as FIX
from pdguard.sglang_names import KVPOLL

from .anchors import AnchorError, find_method, is_docstring, marker
from .command import ClassCommand
from .insertion import StatementEdit, apply_edits, parse_method, parse_statements
from .isort_imports import top_level_bindings

CONCLUDE_STATE = "conclude_state"
FAILURE_REASON = "failure_reason"

_INIT_STATE = f"""\
{{marker}}: set by abort(), reported by poll().
self.{CONCLUDE_STATE} = None
"""

_CHECK_FIRST = f"""\
{{marker}}: once aborted, the transfer is over.
if self.{CONCLUDE_STATE} is not None:
    return self.{CONCLUDE_STATE}
"""

# NIXL's sender (up to 0.5.11) posts its transfers itself and polls their handles: once
# aborted, Failed (upon which the scheduler frees the KV pages) waits until none of them still
# runs, as upstream's deferred abort ack (0.5.20+) holds pages until the transfer drained.
_CHECK_FIRST_DRAINED = f"""\
{{marker}}: once aborted, the transfer is over; Failed
# (the KV pages are freed then) once no transfer it posted reads them.
if self.{CONCLUDE_STATE} is not None:
    {{states}} = {{handle_states}}
    if not all({{var}} in ({{ended}}) for {{var}} in {{states}}):
        return {KVPOLL}.Transferring  # type: ignore
    return self.{CONCLUDE_STATE}
"""

_ABORT = f"""\
    {{marker}}: poll() reports Failed from now on.
    def abort(self):
        self.{CONCLUDE_STATE} = {KVPOLL}.Failed
"""


KV_TRANSFER_ERROR = "KVTransferError"

_TAKE_RECORD = f"""\
{{marker}}: take the room's failure record (abort() and the
# deadline write one), so that the client reads why and no record stays behind.
with self.kv_mgr.failure_lock:
    {FAILURE_REASON} = self.kv_mgr.failure_records.pop(self.bootstrap_room, None)
"""

_RAISE_RECORD = f"""\
{{marker}}: the recorded reason, where there is one.
if {FAILURE_REASON} is not None:
    raise {{error}}
"""


# ``raise SomeError("a fixed text", ...)``, alone on its line
_FIXED_RAISE = m.SimpleStatementLine(
    body=[m.Raise(exc=m.Call(func=m.Name(), args=[m.ZeroOrMore(m.Arg(value=m.SimpleString()))]))]
)


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


# ``states = [self.kv_mgr.agent.check_xfer_state(x) for x in self.xfer_handles]``
_STATES = m.Assign(
    targets=[m.AssignTarget(target=m.Name())],
    value=m.ListComp(for_in=m.CompFor(iter=m.Attribute(value=m.Name("self")))),
)


def _posted_transfers(body: list[cst.CSTNode]) -> dict[str, str] | None:
    """Where ``poll()`` reads the state of the transfers the sender posted (NIXL up to 0.5.11:
    ``states = [self.kv_mgr.agent.check_xfer_state(x) for x in self.xfer_handles]``, then
    ``all([x == "DONE" ...])`` and ``any([x == "ERR" ...])``): the names the drained check is
    written with, else None."""
    listcomp: cst.ListComp | None = None
    states = ""
    ended: list[str] = []
    for stmt in body:
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            if isinstance(stmt, cst.If) and listcomp is not None:
                ended.extend(_compared_strings(stmt.test, states))
            continue
        small = stmt.body[0]
        if listcomp is None and m.matches(small, _STATES):
            assign = cst.ensure_type(small, cst.Assign)
            listcomp = cst.ensure_type(assign.value, cst.ListComp)
            states = cst.ensure_type(assign.targets[0].target, cst.Name).value
    if listcomp is None or len(ended) < 2:
        return None
    return {
        "states": states,
        "handle_states": _code(listcomp),
        "var": "state",
        "ended": ", ".join(ended),
    }


# ``all([...])`` or ``any(...)`` of one comprehension, and its ``x == "DONE"``
_ALL_OR_ANY = m.Call(
    func=m.Name("all") | m.Name("any"), args=[m.Arg(value=m.ListComp() | m.GeneratorExp())]
)
_EQUALS_STRING = m.Comparison(
    comparisons=[m.ComparisonTarget(operator=m.Equal(), comparator=m.SimpleString())]
)


def _compared_strings(test: cst.BaseExpression, states: str) -> list[str]:
    """The string literals ``all([x == "DONE" for x in states])``-like tests compare the
    states with (``if all(...)``, ``if any(...)``)."""
    if not m.matches(test, _ALL_OR_ANY):
        return []
    comp = cst.ensure_type(test, cst.Call).args[0].value
    assert isinstance(comp, cst.ListComp | cst.GeneratorExp)
    if not m.matches(comp.for_in.iter, m.Name(states)) or not m.matches(comp.elt, _EQUALS_STRING):
        return []
    right = cst.ensure_type(comp.elt, cst.Comparison).comparisons[0].comparator
    return [cst.ensure_type(right, cst.SimpleString).value]


class SenderAbort(ClassCommand):
    DESCRIPTION: str = "Make a KV sender's poll() report Failed once abort() is called."
    METHODS = ("__init__", "poll", "failure_exception")

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        ClassCommand.add_args(arg_parser)
        arg_parser.add_argument(
            "--no-init-state",
            dest="init_state",
            action="store_false",
            help="__init__ already sets conclude_state",
        )
        arg_parser.add_argument(
            "--no-check-first",
            dest="check_first",
            action="store_false",
            help="poll() already returns a set conclude_state first",
        )
        arg_parser.add_argument(
            "--no-abort",
            dest="add_abort",
            action="store_false",
            help="the class already has (or inherits) an abort() that concludes it as Failed",
        )
        arg_parser.add_argument(
            "--read-record",
            dest="read_record",
            action="store_true",
            help="failure_exception() raises the manager's failure record for the room",
        )

    def __init__(
        self,
        context: CodemodContext,
        class_name: str,
        init_state: bool = True,
        check_first: bool = True,
        add_abort: bool = True,
        read_record: bool = False,
    ) -> None:
        super().__init__(context)
        self.class_name = class_name
        self.init_state = init_state
        self.check_first = check_first
        self.add_abort = add_abort
        self.read_record = read_record

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        edits: list[tuple[cst.CSTNode, StatementEdit]] = []
        if self.init_state:
            edits.append(self._init_state(tree))
        if self.check_first or self.add_abort:
            _, poll = find_method(tree, "poll", self.class_name)
            if self.check_first:
                edits.append(self._check_first(tree, poll))
            if self.add_abort:
                edits.append(self._abort(tree, poll))
        if self.read_record:
            edits.extend(self._read_record(tree))
        return apply_edits(tree, edits)

    def _init_state(self, tree: cst.Module) -> tuple[cst.CSTNode, StatementEdit]:
        _, init = find_method(tree, "__init__", self.class_name)
        last = init.body.body[-1]
        if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Return):
            raise AnchorError(f"{self.class_name}.__init__ ends with a return")
        new = parse_statements(_INIT_STATE.format(marker=marker(FIX)), tree.config_for_parsing)
        return last, StatementEdit(after=new)

    def _check_first(
        self, tree: cst.Module, poll: cst.FunctionDef
    ) -> tuple[cst.CSTNode, StatementEdit]:
        body = list(poll.body.body)
        if body and is_docstring(body[0]):
            body = body[1:]
        if not body:
            raise AnchorError(f"{self.class_name}.poll() has no statement to check before")
        drained = _posted_transfers(body)
        code = (
            _CHECK_FIRST_DRAINED.format(marker=marker(FIX), **drained)
            if drained
            else _CHECK_FIRST.format(marker=marker(FIX))
        )
        return body[0], StatementEdit(before=parse_statements(code, tree.config_for_parsing))

    def _abort(self, tree: cst.Module, poll: cst.FunctionDef) -> tuple[cst.CSTNode, StatementEdit]:
        if KVPOLL not in top_level_bindings(tree):
            raise AnchorError(f"{KVPOLL} is not imported at the top of the module")
        indent = tree.default_indent
        code = _ABORT.format(marker=marker(FIX)).replace("    ", indent)
        method = parse_method(code, tree.config_for_parsing)
        method = method.with_changes(
            leading_lines=[cst.EmptyLine(indent=False), *method.leading_lines]
        )
        return poll, StatementEdit(after=[method])

    def _read_record(self, tree: cst.Module) -> list[tuple[cst.CSTNode, StatementEdit]]:
        """The record taken first, raised just before ``failure_exception()``'s fixed raise (so a
        release's own earlier raises, 0.5.12's ``_send_error``/``exceptions``, keep precedence)."""
        _, method = find_method(tree, "failure_exception", self.class_name)
        body = list(method.body.body)
        if body and is_docstring(body[0]):
            body = body[1:]
        last = body[-1] if body else None
        if last is None or not m.matches(last, _FIXED_RAISE):
            raise AnchorError(
                f"{self.class_name}.failure_exception() does not end by raising a fixed text"
            )
        if KV_TRANSFER_ERROR in top_level_bindings(tree):
            error = f"{KV_TRANSFER_ERROR}(self.bootstrap_room, {FAILURE_REASON})"
        else:
            raised = cst.ensure_type(
                cst.ensure_type(last, cst.SimpleStatementLine).body[0], cst.Raise
            )
            call = cst.ensure_type(raised.exc, cst.Call)
            error = f"{cst.ensure_type(call.func, cst.Name).value}({FAILURE_REASON})"
        config = tree.config_for_parsing
        take = parse_statements(_TAKE_RECORD.format(marker=marker(FIX)), config)
        raise_ = parse_statements(_RAISE_RECORD.format(marker=marker(FIX), error=error), config)
        if body[0] is last:
            return [(last, StatementEdit(before=[*take, *raise_]))]
        return [(body[0], StatementEdit(before=take)), (last, StatementEdit(before=raise_))]
