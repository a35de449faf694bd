"""Make a KV sender's bootstrap timeout able to fire (any ``*KVSender`` class).

A sender whose ``poll()`` can report ``KVPoll.Bootstrapping`` keeps its request in the prefill
bootstrap queue until decode sends its KV indices. Mooncake's sender bounds that wait with
``SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT`` measured from ``init_time``; NIXL's (before SGLang
0.5.18) never sets ``init_time`` nor checks, and Mooncake's own 0.4.7 - 0.4.8 sets it only in
``init()``, after Bootstrapping. This codemod, on one class:

* ``set_init_time``: sets ``self.init_time`` to the current time in ``__init__`` (replacing an
  ``init_time = None``, else after ``super().__init__()`` or the ``update_status(...,
  KVPoll.Bootstrapping)`` call), optionally with ``self.bootstrap_timeout`` read as the release
  reads it elsewhere;
* ``add_check``: while ``poll()`` sees Bootstrapping, returns the result of the timeout check:
  ``self._check_bootstrap_timeout()`` where the release has it (0.5.13+), else an inline check
  that records the failure (where the manager can) and reports Failed.

Every inserted piece carries the marker comment ``# pdguard: sender-bootstrap-timeout``.
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import libcst as cst
from libcst.codemod import CodemodContext

from pdguard.checks.nodes import HOLDS_STATEMENTS, children, first_line, statement_walk, walk
from pdguard.fix_names import SENDER_BOOTSTRAP_TIMEOUT as FIX
from pdguard.sglang_names import (
    BOOTSTRAP_TIMEOUT_ENV,
    MANAGER_CHECK_STATUS,
    MANAGER_UPDATE_STATUS,
    SENDER_INIT_TIME,
)

from .anchors import (
    AnchorError,
    calls_named,
    find_all,
    find_method,
    is_attribute,
    is_docstring,
    is_name,
    marker,
)
from .command import ClassCommand, Command
from .holes import Scope
from .insertion import Statement, StatementEdit, apply_edits, parse_statements
from .isort_imports import (
    AddIsortedImports,
    ImportRequest,
    add_import_args,
    import_requests,
    spelling,
)

if TYPE_CHECKING:
    import isort

_INIT_TIME = """\
{marker}: the bootstrap timeout counts from here.
self.init_time = {clock}()
"""

LINE_LENGTH = 88  # black's, which SGLang uses


def _flat(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node).strip()


def black_assignment(target: str, value: str, indent: int) -> str:
    """``target = value`` laid out as black lays out an assignment of a call at ``indent``:
    on one line if it fits, else the arguments on a line of their own, else one per line."""
    expr = cst.parse_expression(value.strip())
    if not isinstance(expr, cst.Call):
        return f"{target} = {_flat(expr)}\n"
    func = _flat(expr.func)
    args = [_flat(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)) for arg in expr.args]
    joined = ", ".join(args)
    if indent + len(f"{target} = {func}({joined})") <= LINE_LENGTH:
        return f"{target} = {func}({joined})\n"
    if indent + 4 + len(joined) <= LINE_LENGTH:
        return f"{target} = {func}(\n    {joined}\n)\n"
    return f"{target} = {func}(\n" + "".join(f"    {arg},\n" for arg in args) + ")\n"


_HELPER_CHECK = (
    "{marker}\n"
    "if {status} == KVPoll.Bootstrapping:\n"
    # own-words: the generated patch calls the release's own helper word for word as the
    # release's Mooncake sender does, so that a maintainer reads the same lines in both senders.
    "    timeout_result = self._check_bootstrap_timeout()\n"
    "    if timeout_result is not None:\n"
    "        return timeout_result\n"
)

# Latched (a late decode info must not turn Failed back into WaitingForInput), logged once with
# the remediation hint, the reason recorded for the client where the manager keeps records:
# the shape of upstream's _check_bootstrap_timeout (0.5.13+), in pdguard's words.
_INLINE_CHECK = """\
{marker}
if {status} == KVPoll.Bootstrapping and self.init_time is not None:
    elapsed = {clock}() - self.init_time
    if elapsed >= {timeout}:
        logger.warning_once(
            "Requests timed out bootstrapping: decode never sent "
            "this prefill instance their KV indices. If a longer "
            "time to first token is acceptable, raise the timeout: "
            "'export {env}=600'."
        )
{record}        {latch}
        return KVPoll.Failed
"""
LATCH = "self.conclude_state = KVPoll.Failed"  # what poll() returns first (sender-abort)

_RECORD_FAILURE = """\
        self.kv_mgr.record_failure(
            self.bootstrap_room,
            f"Request {self.bootstrap_room} timed out after "
            f"{elapsed:.1f}s in KVPoll.Bootstrapping",
        )
"""


def _is_check_status(expr: cst.CSTNode | None) -> bool:
    """Does ``expr`` read the manager's status (``check_status(...)`` anywhere in it, e.g.
    ``self.conclude_state or self.kv_mgr.check_status(room)``)? Its value is then the status."""
    if expr is None:
        return False
    return any(is_attribute(call.func, MANAGER_CHECK_STATUS) for call in find_all(expr, cst.Call))


def _sets_init_time_to_none(stmt: cst.CSTNode) -> bool:
    """``self.init_time = None`` or ``self.init_time: ... = None`` (alone on its line)."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return False
    assign = stmt.body[0]
    if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
        target: cst.BaseExpression = assign.targets[0].target
    elif isinstance(assign, cst.AnnAssign):
        target = assign.target
    else:
        return False
    return (
        is_name(assign.value, "None")
        and is_attribute(target, SENDER_INIT_TIME)
        and is_name(target.value, "self")
    )


def _is_return_line(stmt: cst.CSTNode) -> bool:
    """A line holding one ``return`` statement."""
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Return)
    )


def _check_status_returns(poll: cst.FunctionDef) -> list[cst.SimpleStatementLine]:
    return [
        stmt
        for stmt in find_all(poll, cst.SimpleStatementLine)
        if len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Return)
        and _is_check_status(stmt.body[0].value)
    ]


class SenderBootstrapTimeout(ClassCommand):
    DESCRIPTION: str = "Let a KV sender's bootstrap timeout fire while it reports Bootstrapping."
    METHODS = ("__init__", "init", "poll")

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        ClassCommand.add_args(arg_parser)
        arg_parser.add_argument("--no-init-time", dest="set_init_time", action="store_false")
        arg_parser.add_argument("--no-check", dest="add_check", action="store_false")
        arg_parser.add_argument("--check", dest="check_style", choices=["helper", "inline"])
        arg_parser.add_argument("--timeout", default="self.kv_mgr.bootstrap_timeout")
        arg_parser.add_argument("--timeout-setting", default=None)
        arg_parser.add_argument("--no-record-failure", dest="record_failure", action="store_false")
        add_import_args(arg_parser)

    def __init__(
        self,
        context: CodemodContext,
        class_name: str,
        set_init_time: bool = True,
        add_check: bool = True,
        check_style: str = "helper",
        timeout: str = "self.kv_mgr.bootstrap_timeout",
        timeout_setting: str | None = None,
        record_failure: bool = True,
        imports: Sequence[ImportRequest | str] = (),
        isort_config: isort.Config | None = None,
    ) -> None:
        super().__init__(context)
        self.class_name = class_name
        self.set_init_time = set_init_time
        self.add_check = add_check
        self.check_style = check_style or "helper"
        self.timeout = timeout
        self.timeout_setting = timeout_setting
        self.record_failure = record_failure
        self.imports = import_requests(imports)
        self.isort_config = isort_config
        self.clock = "time.time"
        self.latch = LATCH

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        # time.time(), as _check_bootstrap_timeout() and Mooncake measure it; reuse the
        # module's own spelling of it.
        self.clock, time_import = spelling(self.checked(tree), "time", "time")
        imports = [*self.imports, *([time_import] if time_import else [])]
        edits: list[tuple[cst.CSTNode, StatementEdit]] = []
        if self.add_check:
            edits.append(self._add_check(tree))
        if self.set_init_time:
            edits.append(self._set_init_time(tree))
            edits.extend(self._restarts_in_init(tree))
        tree = apply_edits(tree, edits)
        return AddIsortedImports(self.context, imports, self.isort_config).transform_module(tree)

    # -- __init__ ---------------------------------------------------------------------------

    def _set_init_time(self, tree: cst.Module) -> tuple[cst.CSTNode, StatementEdit]:
        config = tree.config_for_parsing
        _, init = find_method(tree, "__init__", self.class_name)
        new = parse_statements(_INIT_TIME.format(marker=marker(FIX), clock=self.clock), config)
        if self.timeout_setting:
            code = black_assignment(
                "self.bootstrap_timeout", self.timeout_setting, 2 * len(tree.default_indent)
            )
            new += parse_statements(code, config)
        body = list(init.body.body)
        unset = _first(body, _sets_init_time_to_none)
        if unset is not None:
            # ``self.init_time = None``: start the clock there instead.
            return unset, StatementEdit(before=new, replacement=None)
        anchor = _first(body, lambda s: bool(calls_named(s, lambda n: n == "__init__")))
        if anchor is None:
            anchor = _first(
                body,
                lambda s: any(
                    is_attribute(call.args[-1].value, "Bootstrapping")
                    for call in calls_named(s, lambda n: n == MANAGER_UPDATE_STATUS)
                    if call.args
                ),
            )
        if anchor is None:
            anchor = body[-1]
            if _is_return_line(anchor):
                raise AnchorError(f"{self.class_name}.__init__ ends with a return")
        return anchor, StatementEdit(after=new)

    def _restarts_in_init(self, tree: cst.Module) -> list[tuple[cst.CSTNode, StatementEdit]]:
        """``self.init_time = ...`` in ``init()`` (Mooncake 0.4.7 - 0.4.8) goes: the clock
        starts at construction and ``init()`` no longer restarts it, as in 0.4.8.post1."""
        try:
            _, init = find_method(tree, "init", self.class_name)
        except AnchorError:
            return []
        if len(init.body.body) < 2:
            return []
        return [
            (stmt, StatementEdit(replacement=None))
            for stmt in init.body.body
            if isinstance(stmt, cst.SimpleStatementLine)
            and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Assign)
            and len(stmt.body[0].targets) == 1
            and is_attribute(stmt.body[0].targets[0].target, SENDER_INIT_TIME)
            and is_name(stmt.body[0].targets[0].target.value, "self")
        ]

    # -- poll -------------------------------------------------------------------------------

    def _add_check(self, tree: cst.Module) -> tuple[cst.CSTNode, StatementEdit]:
        config = tree.config_for_parsing
        _, poll = find_method(tree, "poll", self.class_name)
        self.latch = self._latch(poll)
        assigned = [
            stmt
            for stmt in find_all(poll, cst.SimpleStatementLine)
            if len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Assign)
            and _is_check_status(stmt.body[0].value)
            and len(stmt.body[0].targets) == 1
            and isinstance(stmt.body[0].targets[0].target, cst.Name)
        ]
        returned = _check_status_returns(poll)
        if len(assigned) + len(returned) != 1:
            raise AnchorError(
                f"{self.class_name}.poll() reads check_status() {len(assigned) + len(returned)} "
                "times; expected once"
            )
        if assigned:
            stmt = assigned[0]
            assign = stmt.body[0]
            assert isinstance(assign, cst.Assign) and isinstance(assign.targets[0].target, cst.Name)
            status = assign.targets[0].target.value
            return stmt, StatementEdit(after=self._check(status, config))
        stmt = returned[0]
        ret = stmt.body[0]
        assert isinstance(ret, cst.Return) and ret.value is not None
        call = cst.Module(body=[]).code_for_node(ret.value)
        before = [
            *parse_statements(f"status = {call}\n", config),
            *self._check("status", config),
        ]
        new_return = stmt.with_changes(
            body=[ret.with_changes(value=cst.Name("status"))],
            leading_lines=[],
        )
        return stmt, StatementEdit(before=before, replacement=new_return)

    def _check(self, status: str, config: cst.PartialParserConfig) -> list[Statement]:
        if self.check_style == "helper":
            code = _HELPER_CHECK.format(marker=marker(FIX), status=status)
        else:
            code = _INLINE_CHECK.format(
                marker=marker(FIX),
                status=status,
                clock=self.clock,
                timeout=self.timeout,
                env=BOOTSTRAP_TIMEOUT_ENV,
                record=_RECORD_FAILURE if self.record_failure else "",
                latch=self.latch,
            )
        return parse_statements(code, config)

    def _latch(self, poll: cst.FunctionDef) -> str:
        """How the timeout stays Failed: the flag ``poll()`` first returns Failed on (``if
        self._send_failed: return KVPoll.Failed``, NIXL 0.5.12), else the concluded state
        ``poll()`` returns first (the release's, or the one sender-abort gives it)."""
        body = list(poll.body.body)
        first = body[1] if len(body) > 1 and is_docstring(body[0]) else body[0]
        if (
            isinstance(first, cst.If)
            and first.orelse is None
            and isinstance(first.test, cst.Attribute)
            and is_name(first.test.value, "self")
            and len(first.body.body) == 1
        ):
            line = first.body.body[0]
            ret = line.body[0] if isinstance(line, cst.SimpleStatementLine) else None
            if (
                isinstance(ret, cst.Return)
                and isinstance(ret.value, cst.Attribute)
                and ret.value.attr.value == "Failed"
            ):
                return f"self.{first.test.attr.value} = True"
        return LATCH


_T = TypeVar("_T")


def _first(body: Sequence[_T], predicate: Callable[[_T], bool]) -> _T | None:
    return next((stmt for stmt in body if predicate(stmt)), None)


# Upstream started the clock at construction in 0.4.8.post1, raising the default from 30 s to
# 120 s in the same change (a sender stays Bootstrapping while decode has no free KV memory for
# its request), and to 300 s in 0.4.9.post1: the siblings' value, which pdguard writes.
RAISED_DEFAULT = 300

_RAISED_COMMENT = (
    "{marker}: the clock now starts when the sender is",
    "# created (0.4.8.post1); 300 s, upstream's default from 0.4.9.post1 on.",
)


def may_raise_default(module: ast.Module, env: str, text: str) -> bool:
    """Whether ``RaiseBootstrapTimeoutDefault`` can change the module parsed from ``text``: a
    cheap test with ``ast`` (true of every module it changes, and of a few more), so that the
    modules it cannot change are neither parsed with LibCST nor walked. Only the expressions
    of the statements on a line that names ``env`` are read (its call is one of them)."""
    lines = set()
    at = text.find(env)
    while at != -1:
        lines.add(text.count("\n", 0, at) + 1)
        at = text.find(env, at + len(env))
    for holder in statement_walk(module):
        if isinstance(holder, ast.stmt | ast.excepthandler):  # a ``case`` has no position
            last = holder.end_lineno or holder.lineno
            first = first_line(holder) if isinstance(holder, ast.stmt) else holder.lineno
            if not any(first <= line <= last for line in lines):
                continue
        for child in children(holder):
            if isinstance(child, HOLDS_STATEMENTS):
                continue
            for node in walk(child):
                if isinstance(node, ast.Call) and len(node.args) + len(node.keywords) == 2:
                    values = [*node.args, *(keyword.value for keyword in node.keywords)]
                    constants = [v.value for v in values if isinstance(v, ast.Constant)]
                    if env in constants and any(
                        type(c) is int and c < RAISED_DEFAULT for c in constants
                    ):
                        return True
    return False


class RaiseBootstrapTimeoutDefault(Command):
    DESCRIPTION: str = (
        "Raise SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT's default below 300 s to 300 s "
        "(upstream's from 0.4.9.post1; the clock starts at the sender's creation)."
    )

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.add_argument("--env", required=True, help="the variable's name")

    def __init__(self, context: CodemodContext, env: str) -> None:
        super().__init__(context)
        self.env = env
        self.raised = 0

    def scope(self, text: str) -> Scope:
        """The statements that name the variable."""
        return Scope(mentions=frozenset({self.env}))

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        return tree.visit(_DefaultRaiser(self))


class _DefaultRaiser(cst.CSTTransformer):
    """``get_int_env_var("<env>", N)`` with N below the raised default: N raised, and the
    statement that holds it marked."""

    def __init__(self, command: RaiseBootstrapTimeoutDefault) -> None:
        self.command = command
        self.pending = 0

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        args = updated_node.args
        if (
            len(args) == 2
            and isinstance(args[0].value, cst.SimpleString)
            and args[0].value.evaluated_value == self.command.env
            and isinstance(args[1].value, cst.Integer)
            and args[1].value.evaluated_value < RAISED_DEFAULT
        ):
            self.pending += 1
            self.command.raised += 1
            new = args[1].with_changes(value=cst.Integer(str(RAISED_DEFAULT)))
            return updated_node.with_changes(args=[args[0], new])
        return updated_node

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        if not self.pending:
            return updated_node
        self.pending = 0
        first, second = _RAISED_COMMENT
        comments = [
            cst.EmptyLine(comment=cst.Comment(text), indent=True)
            for text in (first.format(marker=marker(FIX)), second)
        ]
        return updated_node.with_changes(leading_lines=[*updated_node.leading_lines, *comments])


# PP (0.5.2 - 0.5.6): a later stage pops only what the stage before it popped, and asserts that
# its own poll of each is WaitingForInput or Failed. Each stage times a bootstrap out on its
# own clock, so the stage before may have failed one this stage still polls Bootstrapping.
_PP_BOOTSTRAPPING = """\
{marker}: each PP stage times a bootstrap
# out on its own clock; one the stage before ended fails here too.
if {poll} == KVPoll.Bootstrapping:
    {poll} = KVPoll.Failed
"""


def consensus_assert(function: cst.FunctionDef) -> tuple[cst.SimpleStatementLine, str] | None:
    """The ``assert <poll> == KVPoll.WaitingForInput or <poll> == KVPoll.Failed`` of
    ``pop_bootstrapped`` (under ``if rids_to_check is not None``), and the name it tests."""
    for stmt in find_all(function, cst.SimpleStatementLine):
        if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assert):
            continue
        test = stmt.body[0].test
        if not isinstance(test, cst.BooleanOperation):
            continue
        sides = [test.left, test.right]
        names = {
            side.left.value
            for side in sides
            if isinstance(side, cst.Comparison)
            and isinstance(side.left, cst.Name)
            and len(side.comparisons) == 1
            and isinstance(side.comparisons[0].operator, cst.Equal)
        }
        states = {
            side.comparisons[0].comparator.attr.value
            for side in sides
            if isinstance(side, cst.Comparison)
            and len(side.comparisons) == 1
            and isinstance(side.comparisons[0].comparator, cst.Attribute)
        }
        if len(names) == 1 and states == {"WaitingForInput", "Failed"}:
            return stmt, names.pop()
    return None


class PPBootstrapConsensus(Command):
    DESCRIPTION: str = (
        "PP: a later stage fails a request the stage before ended that it still polls "
        "Bootstrapping, instead of asserting (pop_bootstrapped, 0.5.2 - 0.5.6)."
    )

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        pass

    def scope(self, text: str) -> Scope:
        return Scope(
            mentions=frozenset({"pop_bootstrapped"}), functions=frozenset({"pop_bootstrapped"})
        )

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        _, function = find_method(tree, "pop_bootstrapped")
        found = consensus_assert(function)
        if found is None:
            raise AnchorError("pop_bootstrapped() has no assert on the PP consensus' polls")
        stmt, poll = found
        code = _PP_BOOTSTRAPPING.format(marker=marker(FIX), poll=poll)
        new = parse_statements(code, tree.config_for_parsing)
        return apply_edits(tree, [(stmt, StatementEdit(before=new))])
