"""Give requests in SGLang's prefill inflight queue a deadline (``prefill.py``).

A request that finished prefill waits in ``disagg_prefill_inflight_queue`` until its KV cache
reaches the decode side. Non-terminal poll results put it back with no deadline, so after a
decode restart it can wait forever. This codemod:

1. reads ``SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT`` (seconds, default 300; 0 turns it off) once
   per process, next to the module's ``logger``;
2. stamps each request with ``time.monotonic()`` where it is appended to the inflight queue,
   once (a re-queue keeps the first stamp): the time in the queue is pure transfer time;
3. adds ``_fail_timed_out_inflight_reqs()`` to the scheduler mixin and calls it in
   ``process_disagg_prefill_inflight_queue`` right before the poll all-reduce. It fails overdue
   requests through their sender, so the MIN-reduced poll is Failed on every rank and the
   release's own Failed branch cleans up.

Every inserted piece carries the marker comment ``# pdguard: inflight-deadline``.
"""

from __future__ import annotations

import argparse

import isort
import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext

from pdguard.fixes.inflight_deadline import FIX, HELPER, STAMP, TIMEOUT
from pdguard.sglang_names import INFLIGHT_FUNCTION as FUNCTION
from pdguard.sglang_names import INFLIGHT_QUEUE as QUEUE
from pdguard.sglang_names import INFLIGHT_TIMEOUT_ENV as ENV_VAR

from .anchors import AnchorError, calls_named, find_method, is_self_attr_call, marker
from .command import SourceCodemod
from .insertion import (
    StatementEdit,
    apply_edits,
    enclosing_statement,
    parse_method,
    parse_statements,
    simple_statements,
)
from .isort_imports import DEFAULT_ISORT_CONFIG, AddIsortedImports, ImportRequest, reference_to

# How an overdue sender is failed, by what the release's senders offer.
ABORT_CALLS = {
    # BaseKVSender defines abort(): every sender has one.
    "direct": "sender.abort()\n",
    # Only some backends' senders define abort().
    "guarded": 'if hasattr(sender, "abort"):\n    sender.abort()\n',
    # No sender can abort.
    "none": "",
}

_SETTING = """\
{marker}
# Seconds a request may wait in the prefill inflight queue for its KV transfer
# before it is failed; read once per process. 0 (or less) turns the deadline off.
_INFLIGHT_TIMEOUT_ENV = "{env}"
try:
    {timeout} = float({environ}.get(_INFLIGHT_TIMEOUT_ENV, "300"))
except ValueError:
    logger.warning(
        f"{{_INFLIGHT_TIMEOUT_ENV}}={{{environ}[_INFLIGHT_TIMEOUT_ENV]!r}} is not a number "
        "of seconds; using the default, 300"
    )
    {timeout} = 300.0
"""

_STAMP = """\
{marker}: stamp on first entry only, so that the deadline
# counts KV transfer time (not prefill) and a re-queue does not restart it.
if getattr({req}, "{stamp}", None) is None:
    {req}.{stamp} = {monotonic}()
"""

_HELPER = '''\
    {marker}
    def {helper}({self_param}) -> None:
        """Fail the requests whose KV transfer outlived the inflight deadline.

        Runs before the poll all-reduce: the sender reports Failed from now on, so the
        reduced poll is Failed on every rank and the Failed branch cleans the request up.
        """
        if {timeout} <= 0:
            return
        now = {monotonic}()
        for req in self.{queue}:
            entry_time = getattr(req, "{stamp}", None)
            if entry_time is None or now - entry_time < {timeout}:
                continue
            logger.warning(
                f"Prefill inflight request timed out: {{req.rid=}} {{req.bootstrap_room=}} "
                f"waited {{now - entry_time:.1f}}s for its KV transfer "
                f"(deadline {{{timeout}:g}}s)"
            )
            sender = req.disagg_kv_sender
{abort}            # Not every backend's poll() honours abort() (NIXL reads its transfer
            # handles once it has sent), so pin the sender's result to Failed.
            sender.poll = lambda: KVPoll.Failed
'''

_CALL = """\
{marker}: fail overdue requests before the poll
# all-reduce, so that every rank sees them Failed in the same step.
self.{helper}()
"""


def _is_logger_assignment(stmt: cst.CSTNode) -> bool:
    return m.matches(
        stmt,
        m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(target=m.Name("logger"))])]),
    )


class InflightDeadline(SourceCodemod):
    DESCRIPTION: str = "Fail requests that wait in the prefill inflight queue past a deadline."

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.add_argument(
            "--abort",
            choices=sorted(ABORT_CALLS),
            default="guarded",
            help="direct: BaseKVSender has abort(); guarded: only some senders do; none",
        )

    def __init__(
        self,
        context: CodemodContext,
        abort: str = "guarded",
        isort_config: isort.Config = DEFAULT_ISORT_CONFIG,
    ) -> None:
        super().__init__(context)
        self.isort_config = isort_config
        self.names = {
            "marker": marker(FIX),
            "abort": "".join(f"            {line}\n" for line in ABORT_CALLS[abort].splitlines()),
            "timeout": TIMEOUT,
            "env": ENV_VAR,
            "helper": HELPER,
            "queue": QUEUE,
            "stamp": STAMP,
        }

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        # Every anchor is found on the original tree first; then one pass makes all edits.
        function, appends, logger_stmt = _anchors(tree)
        names, imports = self._names_for(tree, function)
        edits = _edits(tree.config_for_parsing, names, function, appends, logger_stmt)
        tree = apply_edits(tree, edits)
        return AddIsortedImports(self.context, imports, self.isort_config).transform_module(tree)

    def _names_for(
        self, tree: cst.Module, function: cst.FunctionDef
    ) -> tuple[dict[str, str], list[ImportRequest]]:
        """The names the snippets are filled with, reusing the module's own imports (``import
        time as _t``, ``from os import environ``), and the imports still missing."""
        monotonic = reference_to(tree, "time", "monotonic")
        environ = reference_to(tree, "os", "environ")
        imports = [ImportRequest("os")] if environ is None else []
        imports += [ImportRequest("time")] if monotonic is None else []
        self_param = cst.Module(body=[]).code_for_node(
            function.params.params[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        )
        names = {
            **self.names,
            "self_param": self_param,
            "monotonic": monotonic or "time.monotonic",
            "environ": environ or "os.environ",
        }
        return names, imports


def _anchors(
    tree: cst.Module,
) -> tuple[cst.FunctionDef, list[cst.SimpleStatementLine], cst.BaseStatement]:
    """The inflight function, the queue's append statements and the module's ``logger = ...``;
    AnchorError when one is missing."""
    _, function = find_method(tree, FUNCTION)
    _poll_statement(function)
    appends = _append_statements(tree)
    if not appends:
        raise AnchorError(f"no self.{QUEUE}.append(...) to stamp requests at")
    logger_stmt = next((stmt for stmt in tree.body if _is_logger_assignment(stmt)), None)
    if logger_stmt is None:
        raise AnchorError("no module-level `logger = ...` to log with")
    return function, appends, logger_stmt


def _edits(
    config: cst.PartialParserConfig,
    names: dict[str, str],
    function: cst.FunctionDef,
    appends: list[cst.SimpleStatementLine],
    logger_stmt: cst.BaseStatement,
) -> list[tuple[cst.CSTNode, StatementEdit]]:
    """Every insertion: a stamp before each append, the call before the poll statement, the
    helper before the function and the setting after the logger."""
    edits: list[tuple[cst.CSTNode, StatementEdit]] = []
    for stmt in appends:
        append = stmt.body[0]  # ``self.<queue>.append(...)``: see _append_statements
        assert isinstance(append, cst.Expr) and isinstance(append.value, cst.Call)
        arg = append.value.args[0].value
        if not isinstance(arg, cst.Name):
            raise AnchorError(f"self.{QUEUE}.append() of a non-name expression")
        stamp = parse_statements(_STAMP.format(**names, req=arg.value), config)
        edits.append((stmt, StatementEdit(before=stamp)))
    call = parse_statements(_CALL.format(**names), config)
    edits.append((_poll_statement(function), StatementEdit(before=call)))
    helper = parse_method(_HELPER.format(**names), config)
    edits.append((function, StatementEdit(before=[helper])))
    setting = parse_statements(_SETTING.format(**names), config)
    setting[0] = setting[0].with_changes(
        leading_lines=[cst.EmptyLine(indent=False), *setting[0].leading_lines]
    )
    edits.append((logger_stmt, StatementEdit(after=setting)))
    return edits


def _poll_statement(function: cst.FunctionDef) -> cst.BaseStatement:
    polls = calls_named(function, lambda name: name.startswith("poll_and_all_reduce"))
    if len(polls) != 1:
        raise AnchorError(
            f"{FUNCTION}() has {len(polls)} poll_and_all_reduce*() calls, expected one"
        )
    return enclosing_statement(function, polls[0])


def _append_statements(tree: cst.Module) -> list[cst.SimpleStatementLine]:
    return simple_statements(
        tree,
        lambda stmt: (
            len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Expr)
            and is_self_attr_call(stmt.body[0].value, QUEUE, "append")
        ),
    )
