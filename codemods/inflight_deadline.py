"""Give requests in SGLang's prefill inflight queue a deadline (``prefill.py``).

A request that finished prefill waits in ``disagg_prefill_inflight_queue`` until its KV cache
reaches the decode side. Non-terminal poll results put it back with no deadline, so after a
decode restart it can wait forever. This codemod:

1. reads ``SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT`` (seconds, default 300; 0 turns it off) at
   first use, in the release's convention (``codemods/inflight_timeout.py``): an entry of its
   env registry (0.5.8+: ``envs.X.get()``), else a ``get_int_env_var`` reader next to the
   module's ``logger``; a value that is not a whole number is rejected with a warning;
2. stamps each request with ``time.monotonic()`` wherever it enters the inflight queue: the time
   in the queue is pure transfer time. A request that stays in the queue never passes an entry
   again, so only one that left it (optimistic prefill's ``optimistic_release_and_requeue``)
   and comes back is stamped again, and starts a fresh deadline;
3. adds ``_fail_timed_out_inflight_reqs()`` to the scheduler mixin and calls it in
   ``process_disagg_prefill_inflight_queue`` right before the poll all-reduce. It fails overdue
   requests through their sender (``abort()``, best effort: every sender's ``poll()`` reports
   Failed once aborted, the ``sender-abort`` codemod sees to it), so the MIN-reduced poll is
   Failed on every rank and the release's own Failed branch cleans up. A request whose
   sender this rank already polls Success or Failed is left to the reduced poll, on every
   path: a queue left unpolled for longer than the deadline (a scheduler stall, 0.5.12+'s
   in-place ``pause_generation``) fails nothing that completed. Under pipeline parallelism
   (``rids_to_check``) a request the stages agreed on is left to its poll too. A request is
   failed once (its stamp is cleared); the deadline logs one ``warning_once`` with the
   remediation hint (``export ...=600``). With ``--conclude`` (0.5.20+) the sender is failed
   through its manager's ``conclude_failure()`` instead of ``abort()``: it records the reason
   (a root cause recorded first is kept), marks the room Failed and tells decode; senders of
   other classes (FakeKVSender) are aborted. Else the reason reaches the client through the
   manager's ``record_failure`` (``--record``; with ``--replace``, where some sender never
   pops its record, it only replaces the record ``abort()`` made; with neither it is logged
   per request, as nothing else says it). Parked requests
   (``pending_bootstrap``, 0.5.16+) are not counted while this rank's sender still polls
   Bootstrapping (the bootstrap timeout bounds that): their deadline starts when the bootstrap
   ends, unparked or not (a PP stage never unparks a request the stages have not agreed on,
   which a bootstrapped parked request never is).

Every inserted piece carries the marker comment ``# pdguard: inflight-deadline``.
"""

from __future__ import annotations

import argparse
import ast
from typing import TYPE_CHECKING

import libcst as cst
from libcst.codemod import CodemodContext

from pdguard.checks.models.inflight import Entry, InflightModel, single_request
from pdguard.checks.nodes import walk
from pdguard.checks.project import inflight_model, parse_module
from pdguard.fix_names import INFLIGHT_DEADLINE as FIX
from pdguard.fix_names import INFLIGHT_HELPER as HELPER
from pdguard.fix_names import INFLIGHT_STAMP as STAMP
from pdguard.fix_names import INFLIGHT_TIMEOUT_READER as READER
from pdguard.sglang_names import INFLIGHT_FUNCTION as FUNCTION
from pdguard.sglang_names import INFLIGHT_QUEUE as QUEUE
from pdguard.sglang_names import INFLIGHT_TIMEOUT_ENV as ENV_VAR
from pdguard.sglang_names import PP_CONSENSUS_PARAM as PP_CONSENSUS
from pdguard.sglang_names import PREFILL_PATH

from .anchors import (
    HOLDERS,
    AnchorError,
    calls_named,
    children,
    find_method,
    is_name,
    marker,
    nodes,
)
from .command import Command
from .holes import Scope
from .inflight_timeout import (
    CONVENTIONS,
    DEFAULT_TIMEOUT,
    REGISTRY,
    reader_setting,
    registry_read,
)
from .insertion import (
    Statement,
    StatementEdit,
    apply_edits,
    enclosing_statement,
    parse_method,
    parse_statements,
)
from .isort_imports import (
    AddIsortedImports,
    ImportRequest,
    name_spelling,
    spelling,
)

if TYPE_CHECKING:
    import isort

# How an overdue sender is failed: abort(), which every sender's poll() honours (pdguard's
# sender-abort fix sees to it), best effort (a rank whose abort() raises must still reach the
# poll all-reduce).
_ABORT = (
    "try:\n"
    "    sender.abort()\n"
    "{record}"
    "except Exception:\n"
    "    # best effort: this rank must still reach the poll all-reduce\n"
    '    logger.exception(f"Failed to abort the sender of {{req.rid=}}")\n'
)
# Where every sender's manager has conclude_failure() (0.5.20+): it records the reason (keeping
# a root cause recorded first), marks the room Failed, which the senders' poll() reports, and
# tells decode; abort() would record "Aborted by AbortReq." and tell decode nothing.
# A sender of another class (FakeKVSender, whose poll() reads no room status) is aborted.
_CONCLUDE = (
    "try:\n"
    "    if isinstance(sender, {sender_class}):\n"
    "        # records the reason (a root cause recorded first is kept), marks\n"
    "        # the room Failed and tells decode\n"
    "        sender.kv_mgr.conclude_failure(\n"
    "            bootstrap_room=req.bootstrap_room, failure_reason=reason\n"
    "        )\n"
    "    else:\n"
    "        sender.abort()\n"
    "except Exception:\n"
    "    # best effort: this rank must still reach the poll all-reduce\n"
    '    logger.exception(f"Failed to fail the sender of {{req.rid=}}")\n'
)
# abort() records "Aborted by AbortReq."; where the manager keeps failure records (and every
# sender pops its record when it reports the failure), record why instead.
_RECORD = (
    "    # the failure reason the client gets: why the request was failed\n"
    '    kv_mgr = getattr(sender, "kv_mgr", None)\n'
    '    if hasattr(kv_mgr, "record_failure"):\n'
    "        kv_mgr.record_failure(req.bootstrap_room, reason)\n"
)
# Where some sender never pops its record, a new record would stay for ever: only replace the
# one abort() itself made (record_failure overwrites under the manager's lock; the records
# are popped by failure_exception(), on this same scheduler thread, after the all-reduce).
_REPLACE = (
    "    # the reason the client gets: replace the record abort() made (only\n"
    "    # that one: a sender that never pops its record would leak a new one)\n"
    '    kv_mgr = getattr(sender, "kv_mgr", None)\n'
    '    if req.bootstrap_room in getattr(kv_mgr, "failure_records", ()):\n'
    "        kv_mgr.record_failure(req.bootstrap_room, reason)\n"
)

_LOG = """\
            logger.warning(f"Prefill inflight request {req.rid=}: {reason}")
"""

_STAMP = """\
{marker}: the deadline counts the KV transfer only;
# a request that leaves the queue and comes back starts a fresh one.
{req}.{stamp} = {monotonic}()
"""

_STAMP_ALL = """\
{marker}: the deadline counts the KV transfer only;
# a request that leaves the queue and comes back starts a fresh one.
for {var} in {requests}:
    {var}.{stamp} = {monotonic}()
"""

_HELPER = '''\
    {marker}
{signature}
        """Fail the requests whose KV transfer outlived the inflight deadline.

        Runs before the poll all-reduce: the sender reports Failed from now on, so
        the reduced poll is Failed on every rank and the Failed branch cleans up.
        """
        timeout = {read_timeout}
        if timeout <= 0:
            return
        {now} = {monotonic}()
        for req in self.{queue}:
{consensus}{parked}            entry_time = getattr(req, "{stamp}", None)
            if entry_time is None or {now} - entry_time < timeout:
                continue
            if req.disagg_kv_sender.poll() in (KVPoll.Success, KVPoll.Failed):
                # This rank already polls the transfer as ended (the queue went
                # unpolled for a while: a stall, a pause): the reduced poll ends it.
                continue
            # Failed once: the sender's poll() reports it from now on.
            req.{stamp} = None
            logger.warning_once(
                "Some requests timed out in the prefill inflight queue waiting "
                "for their KV transfer to decode. If slower transfers are "
                "acceptable, relax the timeout: "
                "'export {env}=600' (10 minutes)."
            )
            reason = (
                f"Request {{req.bootstrap_room}} timed out after {{{now} - entry_time:.1f}}s "
                f"in the prefill inflight queue waiting for its KV transfer "
                f"({env}={{timeout}})"
            )
{log}            sender = req.disagg_kv_sender
{abort}'''

LINE_LENGTH = 88  # black's, which SGLang uses


_CONSENSUS = """\
            if {rids} is not None and req.rid in {rids}:
                # PP: every stage already agreed this transfer ended; its poll decides,
                # so that all stages end the request the same way.
                continue
"""
# Where the inflight queue also holds parked requests (prefill done, bootstrap not: 0.5.16+).
# A parked request is not counted while its bootstrap runs (the bootstrap timeout bounds
# that); once this rank's sender has bootstrapped it is, unparked or not: a PP stage looks
# only at the requests the stages agreed have ended, so it never unparks one (0.5.16+).
_PARKED = """\
            if (
                req.pending_bootstrap
                and req.disagg_kv_sender.poll() == KVPoll.Bootstrapping
            ):
                # Parked while its bootstrap runs, which the bootstrap timeout
                # bounds: its KV transfer deadline starts when the bootstrap ends,
                # whether or not the request is unparked then.
                req.{stamp} = {now}
                continue
"""

_CALL = """\
{marker}: fail overdue requests before the poll
# all-reduce, so that every rank sees them Failed in the same step.
self.{helper}({consensus_arg})
"""


def _indented(block: str) -> str:
    """``block`` at the sweep loop's body indent."""
    return "".join(f"            {line}\n" for line in block.splitlines())


def _is_logger_assignment(stmt: cst.CSTNode) -> bool:
    """``logger = ...`` (one statement on the line, one target)."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return False
    assign = stmt.body[0]
    return (
        isinstance(assign, cst.Assign)
        and len(assign.targets) == 1
        and is_name(assign.targets[0].target, "logger")
    )


class InflightDeadline(Command):
    DESCRIPTION: str = "Fail requests that wait in the prefill inflight queue past a deadline."

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.add_argument(
            "--convention",
            choices=CONVENTIONS,
            default=REGISTRY,
            help="how the timeout is read: registry (envs.X.get(), with an environ.py entry "
            "from InflightTimeoutEntry) or get_int_env_var (a reader in prefill.py)",
        )
        arg_parser.add_argument(
            "--no-pp",
            dest="pp",
            action="store_false",
            help="no PP prefill loop passes the inflight function the stages' consensus "
            "(0.4.8 - 0.5.1): the helper takes none",
        )
        arg_parser.add_argument(
            "--parked",
            action="store_true",
            help="the queue holds parked requests (pending_bootstrap): do not count their time",
        )
        arg_parser.add_argument(
            "--record",
            action="store_true",
            help="record the timeout as the room's failure reason (the manager's record_failure)",
        )
        arg_parser.add_argument(
            "--conclude",
            metavar="MODULE:CLASS",
            default=None,
            help="fail overdue senders of CLASS (and its subclasses) through their manager's "
            "conclude_failure() (records the reason, marks the room Failed, tells decode) "
            "instead of abort(); other senders are aborted",
        )
        arg_parser.add_argument(
            "--replace",
            action="store_true",
            help="without --record: replace the failure record abort() made with the timeout "
            "(creates no record, for managers whose records some sender never pops)",
        )

    def __init__(
        self,
        context: CodemodContext,
        isort_config: isort.Config | None = None,
        record: bool = False,
        replace: bool = False,
        parked: bool = False,
        convention: str = REGISTRY,
        pp: bool = True,
        conclude: str | None = None,
    ) -> None:
        super().__init__(context)
        self.isort_config = isort_config
        self.pp = pp  # a PP prefill loop passes the stages' consensus (0.5.2+)
        self.convention = convention
        fail = _ABORT.format(record=_RECORD if record else _REPLACE if replace else "")
        self.conclude = conclude
        recorded = record or conclude is not None
        self.names = {
            "marker": marker(FIX),
            "abort": _indented(fail),
            # recorded, the reason reaches the client and the Failed branch's own log line;
            # else (a sender that reads no record) it is logged here
            "log": "" if recorded else _LOG,
            "env": ENV_VAR,
            "helper": HELPER,
            "queue": QUEUE,
            "stamp": STAMP,
        }
        self.parked = parked

    def scope(self, text: str) -> Scope:
        """The inflight function, whole; elsewhere the statements that name the queue or
        pdguard's own names, and those the checker's model finds putting requests into the
        queue (they are stamped)."""
        model = inflight_model(parse_module(text, PREFILL_PATH, self.run), self.run)
        entries = frozenset(entry.stmt.lineno for entry in model.entries) if model else frozenset()
        return Scope(
            mentions=frozenset({FUNCTION, QUEUE, HELPER, STAMP, READER}),
            lines=entries,
            functions=frozenset({FUNCTION}),
        )

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        # Every anchor is found on the original tree first; then one pass makes all edits.
        checked = self.checked(tree, PREFILL_PATH)
        model = inflight_model(checked, self.run)
        function, poll, entries, logger_stmt = _anchors(tree, checked, model)
        names, imports = self._names_for(tree, function)
        edits = _edits(tree.config_for_parsing, names, function, poll, entries, logger_stmt)
        tree = apply_edits(tree, edits)
        return AddIsortedImports(self.context, imports, self.isort_config).transform_module(tree)

    def _names_for(
        self, tree: cst.Module, function: cst.FunctionDef
    ) -> tuple[dict[str, str], list[ImportRequest]]:
        """The names the snippets are filled with, reusing the module's own imports (``import
        time as _t``, ``from os import environ``), and the imports still missing."""
        checked = self.checked(tree)
        monotonic, time_import = spelling(checked, "time", "monotonic")
        imports = [time_import] if time_import is not None else []
        if self.convention == REGISTRY:
            read_timeout, timeout_imports = registry_read(tree)
            setting = ""
        else:
            # as the release reads its sibling timeouts (Mooncake's managers, 0.4.7 - 0.5.7)
            reader_names, timeout_imports = reader_setting(tree, checked)
            read_timeout = f'{reader_names["get_int_env_var"]}("{ENV_VAR}", {DEFAULT_TIMEOUT})'
            setting = ""
        imports = [*timeout_imports, *imports]
        fail = {}
        if self.conclude is not None:
            module_name, _, class_name = self.conclude.partition(":")
            sender_class, class_import = name_spelling(checked, module_name, class_name)
            imports += [class_import] if class_import is not None else []
            fail = {"abort": _indented(_CONCLUDE.format(sender_class=sender_class))}

        def code(node: cst.CSTNode) -> str:
            return cst.Module(body=[]).code_for_node(node).strip()

        params = function.params.params
        self_param = code(params[0].with_changes(comma=cst.MaybeSentinel.DEFAULT))
        consensus = ""
        if self.pp and len(params) > 1 and params[1].name.value == PP_CONSENSUS:
            # PP (0.5.10+): the rids every stage already agreed have ended their transfer
            self_param += ", " + code(params[1].with_changes(comma=cst.MaybeSentinel.DEFAULT))
            consensus = PP_CONSENSUS
        signature = f"    def {HELPER}({self_param}) -> None:"
        if len(signature) > LINE_LENGTH:  # as black lays it out
            signature = f"    def {HELPER}(\n        {self_param}\n    ) -> None:"
        # the helper's clock reading: ``now``, unless that is the clock's own name (``from time
        # import monotonic as now``), which a local ``now`` would shadow
        now = "current_time" if monotonic.split(".")[0].split("(")[0] == "now" else "now"
        names = {
            **self.names,
            **fail,
            "now": now,
            "parked": _PARKED.format(stamp=STAMP, now=now) if self.parked else "",
            "signature": signature,
            "self_param": self_param,
            "consensus_arg": consensus,
            "consensus": _CONSENSUS.format(rids=consensus) if consensus else "",
            "monotonic": monotonic,
            "read_timeout": read_timeout,
            "setting": setting,
        }
        return names, imports


def _anchors(
    tree: cst.Module, module: ast.Module, model: InflightModel | None
) -> tuple[
    cst.FunctionDef,
    cst.BaseStatement,
    list[tuple[cst.SimpleStatementLine, Entry]],
    cst.BaseStatement,
]:
    """The inflight function, its poll statement, the statements that put requests into the
    queue (each with what it adds) and the module's ``logger = ...``; AnchorError when one is
    missing."""
    _, function = find_method(tree, FUNCTION)
    poll = _poll_statement(function)
    entries = _entry_statements(tree, module, model)
    if not entries:
        raise AnchorError(
            f"no statement puts requests into self.{QUEUE} (append, extend, insert, +=, ...) "
            "to stamp them at"
        )
    logger_stmt = next((stmt for stmt in tree.body if _is_logger_assignment(stmt)), None)
    if logger_stmt is None:
        raise AnchorError("no module-level `logger = ...` to log with")
    return function, poll, entries, logger_stmt


def _edits(
    config: cst.PartialParserConfig,
    names: dict[str, str],
    function: cst.FunctionDef,
    poll: cst.BaseStatement,
    entries: list[tuple[cst.SimpleStatementLine, Entry]],
    logger_stmt: cst.BaseStatement,
) -> list[tuple[cst.CSTNode, StatementEdit]]:
    """Every insertion: a stamp before each way into the queue, the call before the poll
    statement, the helper before the function and (get_int_env_var) the reader after the logger."""
    edits: list[tuple[cst.CSTNode, StatementEdit]] = []
    for stmt, entry in entries:
        edits.append((stmt, StatementEdit(before=_stamp_for(config, names, entry))))
    call = parse_statements(_CALL.format(**names), config)
    edits.append((poll, StatementEdit(before=call)))
    helper = parse_method(_HELPER.format(**names), config)
    edits.append((function, StatementEdit(before=[helper])))
    if names["setting"]:  # the get_int_env_var reader
        setting = parse_statements(names["setting"], config)
        setting[0] = setting[0].with_changes(
            leading_lines=[cst.EmptyLine(indent=False), *setting[0].leading_lines]
        )
        edits.append((logger_stmt, StatementEdit(after=setting)))
    return edits


def _stamp_for(
    config: cst.PartialParserConfig, names: dict[str, str], entry: Entry
) -> list[Statement]:
    """The stamp before an entry: on the one request it adds, or on each of the requests of
    a named list (``extend(reqs)``, ``+= batch.reqs``); anything else cannot be stamped
    without evaluating it twice."""
    single = single_request(entry)
    if single is not None and _is_named(single):
        return parse_statements(_STAMP.format(**names, req=ast.unparse(single)), config)
    if entry.requests is not None and _is_named(entry.requests):
        requests = ast.unparse(entry.requests)
        return parse_statements(
            _STAMP_ALL.format(**names, var="queued_req", requests=requests), config
        )
    raise AnchorError(
        f"line {entry.line}: requests enter self.{QUEUE} through {entry.how} of an expression "
        "pdguard cannot stamp without evaluating it twice; name it first"
    )


def _is_named(node: ast.expr) -> bool:
    """``reqs`` or ``batch.reqs``: safe to iterate once more."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _entry_statements(
    tree: cst.Module, module: ast.Module, model: InflightModel | None
) -> list[tuple[cst.SimpleStatementLine, Entry]]:
    """The simple statements that put requests into the queue, found by the checker's own
    model (so a keep inside the inflight function is not one), each with its entry.
    ``module``: the whole text parsed as the checker parses it (``Command.checked``: the same
    text gives the same tree, whose ``model`` the run keeps)."""
    if model is None:
        raise AnchorError(f"no {FUNCTION}()")
    wanted: dict[tuple[str, str], list[Entry]] = {}
    for entry in model.entries:
        key = (_owner(module, entry.stmt), ast.unparse(entry.stmt))
        wanted.setdefault(key, []).append(entry)
    # the identifiers each function's entries name: a statement that lacks those of every
    # entry of its function is none of them (and is not generated and parsed again to compare)
    names: dict[str, list[set[str]]] = {}
    for (function_name, _), entries in wanted.items():
        names.setdefault(function_name, []).append(_identifiers(entries[0].stmt))
    found: list[tuple[cst.SimpleStatementLine, Entry]] = []
    for function_name, stmt in _function_statements(tree):
        if len(stmt.body) != 1 or function_name not in names:
            continue
        present = {node.value for node in nodes(stmt) if type(node) is cst.Name}
        if not any(needed <= present for needed in names[function_name]):
            continue
        try:
            code = ast.unparse(ast.parse(cst.Module(body=[stmt]).code.strip()).body[0])
        except SyntaxError:
            continue
        matches = wanted.get((function_name, code))
        if matches:
            found.append((stmt, matches.pop(0)))
    missing = [e for entries in wanted.values() for e in entries]
    if missing:
        raise AnchorError(
            f"line {missing[0].line}: requests enter self.{QUEUE} in a statement pdguard cannot "
            "stamp (it shares its line with others)"
        )
    return found


def _identifiers(stmt: ast.stmt) -> set[str]:
    """The names and attribute names ``stmt`` reads or writes (LibCST writes each as a
    ``Name``)."""
    return {
        node.id if isinstance(node, ast.Name) else node.attr
        for node in ast.walk(stmt)
        if isinstance(node, ast.Name | ast.Attribute)
    }


def _owner(module: ast.Module, stmt: ast.stmt) -> str:
    """The name of the innermost function holding ``stmt`` (by position: a statement below a
    ``def`` lies within its lines), or ``<module>``."""
    holding = [
        node
        for node in walk(module)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.lineno < stmt.lineno <= (node.end_lineno or node.lineno)
    ]
    return max(holding, key=lambda node: node.lineno).name if holding else "<module>"


def _function_statements(tree: cst.Module) -> list[tuple[str, cst.SimpleStatementLine]]:
    """Every simple statement line, with the name of the innermost function holding it."""
    found: list[tuple[str, cst.SimpleStatementLine]] = []
    stack: list[tuple[cst.CSTNode, str]] = [(tree, "<module>")]
    while stack:
        node, function_name = stack.pop()
        if type(node) is cst.SimpleStatementLine:
            assert isinstance(node, cst.SimpleStatementLine)
            found.append((function_name, node))
            continue
        if type(node) not in HOLDERS:  # no statement is below an expression
            continue
        if isinstance(node, cst.FunctionDef):
            function_name = node.name.value
        stack.extend((child, function_name) for child in reversed(children(node)))
    return found


def _poll_statement(function: cst.FunctionDef) -> cst.BaseStatement:
    polls = calls_named(function, lambda name: name.startswith("poll_and_all_reduce"))
    if len(polls) != 1:
        raise AnchorError(
            f"{FUNCTION}() has {len(polls)} poll_and_all_reduce*() calls, expected one"
        )
    return enclosing_statement(function, polls[0])
