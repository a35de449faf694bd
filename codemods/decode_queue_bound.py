"""Bound the two places where SGLang's decode queues keep a request that waits on its prefill.

* ``pending``: the prealloc queue puts a request back into ``pending_reqs`` every step while its
  prefill DP rank cannot be resolved (0.5.10+), with no counter and no deadline. The re-queue
  (``remaining.append(decode_req)``) becomes: stamp the request the first time it is put back,
  and once it has waited longer than ``SGLANG_DISAGGREGATION_WAITING_TIMEOUT``, log it and fail
  it through its receiver (``kv_receiver.abort()``, as the queue's own ``_ensure_prefill_info``
  does after its retries), so the queue's normal Failed path cleans it up.
* ``gate``: ``process_decode_queue`` returns while retracted requests wait for memory
  (0.4.7.post1+), before either queue is polled. The early return becomes a flag, and only
  the admission of new requests (``pop_preallocated()`` and the ``extend`` of the transfer
  queue with what it returns) is skipped while the flag is set, as the return skipped it. The
  transfer queue is still polled, so its failures, timeouts and aborts are acted on and free
  their KV.
* ``poll_pending`` (with ``gate``): the pending re-queue's bound runs inside
  ``pop_preallocated()``, which the gate skips. The prealloc queue gets a method
  (``poll_pending_reqs``) that ``process_decode_queue`` calls on every step, before the gate:
  while retracted requests wait, it resolves the pending requests (the bound with it: it
  allocates nothing), polls the queue's handshakes (the MIN all-reduce the release's own
  ``_update_handshake_waiters`` does, so every rank fails a request together) and delivers
  what failed as ``pop_preallocated()`` does (the release's own statements of its
  ``FINISH_ABORT`` branch), dropping it from the queue and from ``pending_reqs``.

Every inserted piece carries the marker comment ``# pdguard: decode-queue-bound``.
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst
from libcst.codemod import CodemodContext

from pdguard.checks.models.bounded_wait import call_name
from pdguard.checks.nodes import first_line, walk
from pdguard.checks.project import parse_module
from pdguard.fix_names import DECODE_GATE_FLAG as GATE_FLAG
from pdguard.fix_names import DECODE_PENDING_STAMP as PENDING_STAMP
from pdguard.fix_names import DECODE_POLL_PENDING as POLL_PENDING
from pdguard.fix_names import DECODE_QUEUE_BOUND as FIX
from pdguard.sglang_names import (
    DECODE_QUEUE_LIST,
    FINISH_ABORT,
    POP_PREALLOCATED,
    RECEIVER_ABORT,
    REQ_RECEIVER,
    RETRACTED_QUEUE,
    UPDATE_HANDSHAKE_WAITERS,
)

from .anchors import (
    AnchorError,
    find_all,
    find_method,
    is_docstring,
    is_method_call,
    is_name,
    marker,
    sole,
)
from .command import Command
from .holes import Scope
from .insertion import (
    StatementEdit,
    apply_edits,
    parse_method,
    parse_statements,
    simple_statements,
)
from .isort_imports import (
    AddIsortedImports,
    ImportRequest,
    import_requests,
    name_spelling,
    spelling,
)
from .sender_bootstrap_timeout import LINE_LENGTH

if TYPE_CHECKING:
    import isort

    from pdguard.run import Run

_PENDING = """\
{marker}: bounded wait for the DP rank.
if {stamped} is None:
    {item}.{stamp} = {clock}()
pending_waited = {clock}() - {item}.{stamp}
pending_limit = {timeout}
if pending_waited > pending_limit:
{log}    if {item}.{receiver} is not None:
        {item}.{receiver}.{abort}()
else:
    {local}.append({item})
"""

# The stamp as a field of the entries' @dataclass (``DecodeRequest``), in its annotation style.
_FIELD = """\
{marker}: when it was first put back
{stamp}: {annotation} = None
"""

_LOG = """\
    logger.error(
        f"Request {{{item}.{rid}}}: prefill DP rank"
        f" not resolved in {{pending_waited:.0f}}s"
    )
"""
# entries with no request id in the tree: the log names none
_LOG_NO_RID = """\
    logger.error(
        f"Request: prefill DP rank not resolved in {{pending_waited:.0f}}s"
    )
"""

# The prealloc queue's method run on every step: ``pop_preallocated()``'s own parameters, the
# statements it runs first (the pending requests' resolution and the handshake poll, with the PP
# consensus where the release takes one) and its failed-request branch are the release's.
_POLL_PENDING = '''\
    def {method}(self):
        """Resolve and bound the pending requests while retracted requests wait for memory.

        pop_preallocated() is not called then (no new request is admitted), nor with it the
        pending requests' bound and the delivery of the failures it makes: this runs them,
        with the same arguments (under PP, the stages' consensus). It allocates no KV.
        Returns the failed requests.
        """
        {marker}: on every step, before the retraction gate
        if not self.{retracted}:
            return []  # pop_preallocated() resolves and polls them
        failed_reqs = []
        for {item} in self.{queue}:
            if {test}:
                failed_reqs.append({item})
        if failed_reqs:
            failed_ids = {{id(r) for r in failed_reqs}}
            self.{queue} = [r for r in self.{queue} if id(r) not in failed_ids]
            self.{pending} = [
                r for r in self.{pending} if id(r) not in failed_ids
            ]
        return failed_reqs
'''

_PP_CALL_COMMENT = (
    "{marker}: while retracted requests wait, pending requests",
    "# are still resolved and bounded, and the failures the stages agreed on delivered",
    "# (none is admitted); the next stage fails the same ones.",
)

_PP_FAILED = "pending_failed_reqs"


class _Rename(cst.CSTTransformer):
    """Every name ``old`` becomes ``new``."""

    def __init__(self, old: str, new: str) -> None:
        super().__init__()
        self.old, self.new = old, new

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return updated.with_changes(value=self.new) if updated.value == self.old else updated


_CALL_COMMENT = (
    "{marker}: while retracted requests wait, pending requests",
    "# are still resolved and bounded, and failures delivered (none is admitted).",
)

_GATE_COMMENT = (
    "{marker}: while retracted requests wait for memory,",
    "# admit no new request (as the early return did), but still poll the",
    "# transfer queue: its failures, timeouts and aborts free their KV.",
)


def _flat(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node).strip()


def _mentions(node: cst.CSTNode, attr: str) -> bool:
    return any(a.attr.value == attr for a in find_all(node, cst.Attribute))


def _appends(stmt: cst.CSTNode, local: str, item: str) -> bool:
    """``<local>.append(<item>)`` as a line of its own."""
    expr = sole(stmt, cst.Expr)
    call = expr.value if expr is not None else None
    return (
        isinstance(call, cst.Call)
        and isinstance(call.func, cst.Attribute)
        and is_name(call.func.value, local)
        and call.func.attr.value == "append"
        and len(call.args) == 1
        and is_name(call.args[0].value, item)
    )


def _returns_nothing(stmt: cst.CSTNode) -> bool:
    """A line ``return`` (no value)."""
    returned = sole(stmt, cst.Return)
    return returned is not None and returned.value is None


def _comment_lines(lines: Sequence[str]) -> list[cst.EmptyLine]:
    return [cst.EmptyLine(comment=cst.Comment(line)) for line in lines]


class DecodeQueueBound(Command):
    DESCRIPTION: str = "Bound the decode queues' pending re-queue and their retraction gate."

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.add_argument(
            "--pending",
            action="append",
            default=[],
            help="Class.method:local:item of a re-queue to bound",
        )
        arg_parser.add_argument(
            "--rid",
            dest="rids",
            action="append",
            default=[],
            help="an entry's request id path for each --pending (req.rid, rid, or '' for none)",
        )
        arg_parser.add_argument(
            "--gate", default=None, help="[Class.]function holding the retraction gate"
        )
        arg_parser.add_argument(
            "--timeout", default="envs.SGLANG_DISAGGREGATION_WAITING_TIMEOUT.get()"
        )
        arg_parser.add_argument(
            "--field",
            dest="fields",
            action="append",
            default=[],
            help="a @dataclass (Class) the entries are: the stamp becomes a field of it",
        )
        arg_parser.add_argument(
            "--poll-pending",
            default=None,
            help="Class:pending_list:resolve_method: with --gate, the pending list's bound and "
            "the queue's failures run on every step, before the gate",
        )
        arg_parser.add_argument(
            "--pp-gate",
            dest="pp_gates",
            action="append",
            default=[],
            help="Class.method of a PP decode loop that returns before pop_preallocated() "
            "while retracted requests wait: it calls poll_pending_reqs() with its consensus",
        )
        arg_parser.add_argument("--no-log", dest="log", action="store_false")
        arg_parser.add_argument("--import", dest="imports", action="append", default=[])

    def __init__(
        self,
        context: CodemodContext,
        pending: Sequence[str] = (),
        rids: Sequence[str | None] = (),
        gate: str | None = None,
        timeout: str = "envs.SGLANG_DISAGGREGATION_WAITING_TIMEOUT.get()",
        log: bool = True,
        imports: Sequence[ImportRequest | str] = (),
        isort_config: isort.Config | None = None,
        fields: Sequence[str] = (),
        poll_pending: str | None = None,
        pp_gates: Sequence[str] = (),
    ) -> None:
        super().__init__(context)
        self.poll_pending = poll_pending
        self.pp_gates = list(pp_gates)
        self.pending = list(pending)
        self.fields = list(fields)
        # each re-queue's entries' request id, as an attribute path on the entry (only paths
        # the entries have in the tree: the fix checks them); "req.rid" unless told
        given = [rid or None for rid in rids]
        self.rids = given + ["req.rid"] * (len(self.pending) - len(given))
        self.gate = gate
        self.timeout = timeout
        self.log = log
        self.imports = import_requests(imports)
        self.isort_config = isort_config

    def scope(self, text: str) -> Scope:
        """The methods holding the re-queues and the function holding the gate, whole (and
        every definition that shares a name with one: ``find_method`` must see them all).
        ``pop_preallocated()``, read only for ``poll_pending`` (its signature, the statements
        up to its handshake poll, and its loop up to the ``FINISH_ABORT`` branch, which
        ``_poll_pending`` copies), keeps only those statements whole: the rest of it (the
        allocation, half of a recent ``decode.py``) is hollowed."""
        names = {spec.split(":")[0].rsplit(".", 1)[-1] for spec in self.pending}
        names |= set(self.fields)
        if self.gate:
            names.add(self.gate.rpartition(".")[2])
        names |= {where.rpartition(".")[2] for where in self.pp_gates}
        whole = set(names)
        lines: frozenset[int] = frozenset()
        if self.poll_pending:
            class_name, _, resolve = self.poll_pending.split(":")
            names |= {POP_PREALLOCATED, POLL_PENDING, UPDATE_HANDSHAKE_WAITERS, resolve}
            copied = (
                None if POP_PREALLOCATED in whole else _copied_lines(self.run, text, class_name)
            )
            whole |= {POLL_PENDING, UPDATE_HANDSHAKE_WAITERS, resolve}
            if copied is None:
                whole.add(POP_PREALLOCATED)
            else:
                names.add(FINISH_ABORT)  # every branch _failed_branch may count stays
                lines = copied
        # the entries' @dataclass whole: its fields are what _field reads
        return Scope(
            mentions=frozenset(names),
            classes=frozenset(self.fields),
            lines=lines,
            functions=frozenset(whole),
        )

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        edits: list[tuple[cst.CSTNode, StatementEdit]] = []
        imports = list(self.imports)
        if self.pending:
            clock, time_import = spelling(self.checked(tree), "time", "monotonic")
            if time_import is not None:
                imports.append(time_import)
            for spec, rid in zip(self.pending, self.rids, strict=True):
                edits.append(self._bound_pending(tree, spec, clock, rid))
        for name in self.fields:
            edit, field_import = self._field(tree, name)
            if edit is not None:
                edits.append(edit)
            if field_import is not None:
                imports.append(field_import)
        if self.gate:
            if self.poll_pending:
                edits.append(self._poll_pending(tree, self.poll_pending))
                edits.extend(self._open_gate(tree, self.gate, poll_pending=True))
            else:
                edits.extend(self._open_gate(tree, self.gate))
        elif self.poll_pending:
            raise AnchorError("--poll-pending is called before the gate: it needs --gate")
        for where in self.pp_gates:
            edits.extend(self._pp_gate(tree, where))
        tree = apply_edits(tree, edits)
        return AddIsortedImports(self.context, imports, self.isort_config).transform_module(tree)

    # -- the pending re-queue -----------------------------------------------------------

    def _bound_pending(
        self, tree: cst.Module, spec: str, clock: str, rid: str | None
    ) -> tuple[cst.CSTNode, StatementEdit]:
        where, local, item = spec.split(":")
        class_name, method = where.rsplit(".", 1)
        _, func = find_method(tree, method, class_name)
        sites = simple_statements(func, lambda s: _appends(s, local, item))
        if len(sites) != 1:
            raise AnchorError(
                f"{class_name}.{method}() has {len(sites)} statements "
                f"{local}.append({item}); expected one"
            )
        stamped = (
            f"{item}.{PENDING_STAMP}"
            if self.fields
            else (f'getattr({item}, "{PENDING_STAMP}", None)')
        )
        code = _PENDING.format(
            marker=marker(FIX),
            stamped=stamped,
            item=item,
            stamp=PENDING_STAMP,
            clock=clock,
            timeout=self.timeout,
            log=(_LOG.format(item=item, rid=rid) if rid else _LOG_NO_RID.format())
            if self.log
            else "",
            receiver=REQ_RECEIVER,
            abort=RECEIVER_ABORT,
            local=local,
        )
        new = parse_statements(code, tree.config_for_parsing)
        return sites[0], StatementEdit(before=new, replacement=None)

    def _field(
        self, tree: cst.Module, name: str
    ) -> tuple[tuple[cst.CSTNode, StatementEdit] | None, ImportRequest | None]:
        """``pending_since: Optional[float] = None`` after the last field of the @dataclass
        ``name`` (``float | None`` where its fields are annotated so), unless it has one."""
        classes = [s for s in tree.body if isinstance(s, cst.ClassDef) and s.name.value == name]
        if len(classes) != 1 or not isinstance(classes[0].body, cst.IndentedBlock):
            raise AnchorError(f"{len(classes)} top-level classes {name}; expected one")
        body = classes[0].body.body
        fields = [
            stmt
            for stmt in body
            if isinstance(stmt, cst.SimpleStatementLine)
            and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.AnnAssign)
        ]
        if not fields:
            raise AnchorError(f"{name} has no annotated field to add {PENDING_STAMP} after")
        annotations = [
            _flat(stmt.body[0].annotation.annotation)  # type: ignore[attr-defined]  # AnnAssign, above
            for stmt in fields
        ]
        if any(
            isinstance(stmt.body[0].target, cst.Name)  # type: ignore[attr-defined]  # AnnAssign
            and stmt.body[0].target.value == PENDING_STAMP  # type: ignore[attr-defined]
            for stmt in fields
        ):
            return None, None
        field_import = None
        if any(a.endswith("| None") for a in annotations) and not any(
            a.startswith("Optional[") for a in annotations
        ):
            annotation = "float | None"
        else:
            optional, field_import = name_spelling(self.checked(tree), "typing", "Optional")
            annotation = f"{optional}[float]"
        code = _FIELD.format(marker=marker(FIX), stamp=PENDING_STAMP, annotation=annotation)
        new = parse_statements(code, tree.config_for_parsing)
        return (fields[-1], StatementEdit(after=new)), field_import

    # -- the pending requests on every step ---------------------------------------------

    def _poll_pending(self, tree: cst.Module, spec: str) -> tuple[cst.CSTNode, StatementEdit]:
        """The prealloc queue's ``poll_pending_reqs()``, before its ``pop_preallocated()``
        (``_open_gate`` writes its call)."""
        class_name, pending, resolve = spec.split(":")
        cls, pop = find_method(tree, POP_PREALLOCATED, class_name)
        if any(
            isinstance(s, cst.FunctionDef) and s.name.value == POLL_PENDING for s in cls.body.body
        ):
            raise AnchorError(f"{class_name} already has a method {POLL_PENDING}()")
        for name in (resolve, UPDATE_HANDSHAKE_WAITERS):
            find_method(tree, name, class_name)  # AnchorError when the release has none
        branch, item, loop = self._failed_branch(pop)
        code = _POLL_PENDING.format(
            method=POLL_PENDING,
            marker=marker(FIX),
            retracted=RETRACTED_QUEUE,
            item=item,
            queue=DECODE_QUEUE_LIST,
            test=_flat(branch.test),
            pending=pending,
        )
        method = parse_method(code, tree.config_for_parsing)
        # the release's own statements of its failed branch, without its index bookkeeping,
        # after the loop's own skips (``rids_to_check``: under PP, the stages' consensus)
        assert isinstance(branch.body, cst.IndentedBlock)  # _failed_branch
        assert isinstance(loop.body, cst.IndentedBlock)
        kept = [s for s in branch.body.body if not _bookkeeping(s, item)]
        skips = list(loop.body.body[: list(loop.body.body).index(branch)])
        if not all(_skips(s) for s in skips):
            raise AnchorError(
                f"{POP_PREALLOCATED}()'s loop runs other statements before its "
                f"{FINISH_ABORT} branch"
            )
        new_loop = next(n for n in find_all(method, cst.For))
        inner = new_loop.body.body[0]
        assert isinstance(inner, cst.If) and isinstance(inner.body, cst.IndentedBlock)
        inner_new = inner.with_changes(body=inner.body.with_changes(body=[*kept, *inner.body.body]))
        loop_new = new_loop.with_changes(body=new_loop.body.with_changes(body=[*skips, inner_new]))
        replaced = method.deep_replace(new_loop, loop_new)
        assert isinstance(replaced, cst.FunctionDef) and isinstance(
            replaced.body, cst.IndentedBlock
        )
        body = list(replaced.body.body)
        body[2:2] = self._prologue(pop, resolve)
        # pop_preallocated()'s parameters as the release lays them out; its list of requests
        returned = self._returned(pop, replaced)
        return pop, StatementEdit(
            before=[
                pop.with_changes(
                    name=replaced.name,
                    returns=returned,
                    body=replaced.body.with_changes(body=body),
                    leading_lines=[],
                    decorators=[],
                )
            ]
        )

    @staticmethod
    def _prologue(pop: cst.FunctionDef, resolve: str) -> list[cst.BaseStatement]:
        """The statements ``pop_preallocated()`` runs before anything else: up to its handshake
        poll (the pending requests' resolution with it), then the ``if`` blocks that only set
        its own parameters (0.5.17+: ``rids_to_check`` from the PP consensus)."""
        assert isinstance(pop.body, cst.IndentedBlock)
        body = list(pop.body.body)
        if body and is_docstring(body[0]):
            body = body[1:]
        params = {p.name.value for p in pop.params.params}
        taken: list[cst.BaseStatement] = []
        for index, stmt in enumerate(body):
            taken.append(stmt)
            if any(is_method_call(c, UPDATE_HANDSHAKE_WAITERS) for c in find_all(stmt, cst.Call)):
                for after in body[index + 1 :]:
                    if not isinstance(after, cst.If) or not _sets_only(after, params):
                        break
                    taken.append(after)
                break
        else:
            raise AnchorError(f"{POP_PREALLOCATED}() calls no {UPDATE_HANDSHAKE_WAITERS}()")
        if not any(is_method_call(c, resolve) for s in taken for c in find_all(s, cst.Call)):
            raise AnchorError(
                f"{POP_PREALLOCATED}() calls no {resolve}() before {UPDATE_HANDSHAKE_WAITERS}()"
            )
        if taken:
            taken[0] = taken[0].with_changes(leading_lines=[])
        return taken

    @staticmethod
    def _returned(pop: cst.FunctionDef, method: cst.FunctionDef) -> cst.Annotation | None:
        """``List[DecodeRequest]`` where ``pop_preallocated()`` returns ``Tuple[List[...], ...]``
        (the first of the lists it returns); no annotation where it has none."""
        if pop.returns is None:
            return None
        annotation = pop.returns.annotation
        if isinstance(annotation, cst.Subscript) and annotation.slice:
            first = annotation.slice[0].slice
            if isinstance(first, cst.Index):
                return pop.returns.with_changes(annotation=first.value)
        raise AnchorError(
            f"{POP_PREALLOCATED}() returns `{_flat(annotation)}`, not a tuple of lists"
        )

    @staticmethod
    def _failed_branch(pop: cst.FunctionDef) -> tuple[cst.If, str, cst.For]:
        """``pop_preallocated``'s ``if isinstance(<item>.req.finished_reason, FINISH_ABORT):``
        inside its loop over the queue, and the loop's entry name."""
        found = []
        for loop in find_all(pop, cst.For):
            target: cst.BaseExpression = loop.target
            if isinstance(target, cst.Tuple) and target.elements:
                target = target.elements[-1].value
            if not isinstance(target, cst.Name) or not isinstance(loop.body, cst.IndentedBlock):
                continue
            for stmt in loop.body.body:
                if (
                    isinstance(stmt, cst.If)
                    and stmt.orelse is None
                    and isinstance(stmt.body, cst.IndentedBlock)
                    and any(is_name(n, FINISH_ABORT) for n in find_all(stmt.test, cst.Name))
                    and any(is_name(n, target.value) for n in find_all(stmt.test, cst.Name))
                ):
                    found.append((stmt, target.value, loop))
        if len(found) != 1:
            raise AnchorError(
                f"{POP_PREALLOCATED}() has {len(found)} `if <entry> ... {FINISH_ABORT}` "
                "branches in a loop; expected one"
            )
        return found[0]

    # -- the retraction gate ------------------------------------------------------------

    def _open_gate(
        self, tree: cst.Module, where: str, poll_pending: bool = False
    ) -> list[tuple[cst.CSTNode, StatementEdit]]:
        class_name, _, name = where.rpartition(".")
        if class_name:
            _, func = find_method(tree, name, class_name)
        else:
            funcs = [
                s for s in tree.body if isinstance(s, cst.FunctionDef) and s.name.value == name
            ]
            if len(funcs) != 1:
                raise AnchorError(f"{len(funcs)} top-level functions {name}(); expected one")
            func = funcs[0]
        gates = [
            stmt
            for stmt, level in _straight_line(func.body, 2)
            if isinstance(stmt, cst.If)
            and stmt.orelse is None
            and _mentions(stmt.test, RETRACTED_QUEUE)
            and isinstance(stmt.body, cst.IndentedBlock)
            and len(stmt.body.body) == 1
            and _returns_nothing(stmt.body.body[0])
        ]
        if len(gates) != 1:
            raise AnchorError(
                f"{name}() has {len(gates)} `if <retracted requests>: return` statements; "
                "expected one"
            )
        gate = gates[0]
        level = dict((id(stmt), level) for stmt, level in _straight_line(func.body, 2))[id(gate)]
        flag = self._flag(tree, gate, level)
        if not poll_pending:
            edits: list[tuple[cst.CSTNode, StatementEdit]] = [
                (gate, StatementEdit(replacement=flag))
            ]
        else:
            edits = [
                (gate, StatementEdit(before=[*self._call(tree, gate), flag], replacement=None))
            ]
        admissions = [
            stmt for stmt in simple_statements(func, lambda s: bool(self._admission_targets(s)))
        ]
        if not admissions:
            raise AnchorError(f"{name}() calls no {POP_PREALLOCATED}() after its gate")
        blocks = self._blocks_holding(func, admissions)
        for stmt in admissions:
            block, level = blocks[id(stmt)]
            body = list(block.body)
            index = next(i for i, s in enumerate(body) if s is stmt)
            names = self._admission_targets(stmt)
            following = body[index + 1] if index + 1 < len(body) else None
            if not isinstance(following, cst.SimpleStatementLine) or not any(
                any(is_method_call(call, "extend") for call in find_all(following, cst.Call))
                and any(is_name(used, n) for used in find_all(following, cst.Name))
                for n in names
            ):
                raise AnchorError(
                    f"{name}(): {POP_PREALLOCATED}()'s result is not handed to an extend() "
                    "right after it"
                )
            wrapped = self._guarded(tree, [stmt, following], level + 1)
            edits.append((stmt, StatementEdit(replacement=wrapped)))
            edits.append((following, StatementEdit(replacement=None)))
        return edits

    def _pp_gate(self, tree: cst.Module, where: str) -> list[tuple[cst.CSTNode, StatementEdit]]:
        """The PP loop's ``if <retracted requests>: return [[], []]`` before its
        ``if <consensus> is not None:`` block that calls ``pop_preallocated(<consensus>)``:
        before the gate, ``poll_pending_reqs(<the same arguments>)`` under the same ``if``
        (the stages' consensus, from the statements that unpack it), and the gate returns
        the rids of what it failed where it returned none, as the block returns them, so
        the next stage fails the same requests. No collective is added: the consensus is
        the one the loop already passes to ``pop_preallocated()``."""
        class_name, _, name = where.rpartition(".")
        _, func = find_method(tree, name, class_name or None)
        assert isinstance(func.body, cst.IndentedBlock)
        body = list(func.body.body)
        gates = [
            (i, s)
            for i, s in enumerate(body)
            if isinstance(s, cst.If)
            and s.orelse is None
            and _mentions(s.test, RETRACTED_QUEUE)
            and isinstance(s.body, cst.IndentedBlock)
            and len(s.body.body) == 1
            and sole(s.body.body[0], cst.Return) is not None
        ]
        blocks = [
            (i, s)
            for i, s in enumerate(body)
            if isinstance(s, cst.If)
            and s.orelse is None
            and isinstance(s.body, cst.IndentedBlock)
            and any(
                self._admission_targets(line)
                for line in s.body.body
                if isinstance(line, cst.SimpleStatementLine)
            )
        ]
        if len(gates) != 1 or len(blocks) != 1 or gates[0][0] > blocks[0][0]:
            raise AnchorError(
                f"{name}() has no one `if <retracted requests>: return` before one `if` block "
                f"calling {POP_PREALLOCATED}()"
            )
        if any(is_name(n, _PP_FAILED) for n in find_all(func, cst.Name)):
            raise AnchorError(f"{name}() already has a name {_PP_FAILED}")
        gate, block = gates[0][1], blocks[0][1]
        assert isinstance(gate, cst.If) and isinstance(block, cst.If)
        assert isinstance(gate.body, cst.IndentedBlock) and isinstance(
            block.body, cst.IndentedBlock
        )
        gate_return = sole(gate.body.body[0], cst.Return)
        assert gate_return is not None
        lines = list(block.body.body)
        at = next(
            i
            for i, line in enumerate(lines)
            if isinstance(line, cst.SimpleStatementLine) and self._admission_targets(line)
        )
        pop_line = lines[at]
        assert isinstance(pop_line, cst.SimpleStatementLine)
        assign = pop_line.body[0]
        assert isinstance(assign, cst.Assign) and isinstance(assign.value, cst.Call)
        failed = self._failed_name(assign)
        returned = [
            ret for line in lines[at + 1 :] for ret in find_all(line, cst.Return) if ret.value
        ]
        value = gate_return.value
        if (
            len(returned) != 1
            or not isinstance(returned[0].value, cst.List)
            or len(returned[0].value.elements) != 2
            or not isinstance(value, cst.List)
            or len(value.elements) != 2
            or _flat(value.elements[1].value) != "[]"
        ):
            raise AnchorError(
                f"{name}(): the gate and the {POP_PREALLOCATED}() block do not return "
                "[<admitted rids>, <failed rids>]"
            )
        failed_rids = returned[0].value.elements[1].value
        renamed = failed_rids.visit(_Rename(failed, _PP_FAILED))
        assert isinstance(renamed, cst.BaseExpression)
        new_return = gate_return.with_changes(
            value=value.with_changes(
                elements=[value.elements[0], value.elements[1].with_changes(value=renamed)]
            )
        )
        func_attr = assign.value.func
        assert isinstance(func_attr, cst.Attribute)
        call = assign.value.with_changes(func=func_attr.with_changes(attr=cst.Name(POLL_PENDING)))
        (init,) = parse_statements(f"{_PP_FAILED} = []\n", tree.config_for_parsing)
        (poll,) = parse_statements(f"{_PP_FAILED} = []\n", tree.config_for_parsing)
        assert isinstance(init, cst.SimpleStatementLine) and isinstance(
            poll, cst.SimpleStatementLine
        )
        poll_assign = poll.body[0]
        assert isinstance(poll_assign, cst.Assign)
        poll = poll.with_changes(body=[poll_assign.with_changes(value=call)])
        comment = _comment_lines(
            [_PP_CALL_COMMENT[0].format(marker=marker(FIX)), *_PP_CALL_COMMENT[1:]]
        )
        first = lines[0].with_changes(leading_lines=[]) if at else None
        unpack = [first, *lines[1:at]] if first is not None else []
        polled = block.with_changes(
            body=block.body.with_changes(body=[*unpack, poll]), leading_lines=[]
        )
        new_gate = gate.with_changes(
            body=gate.body.with_changes(
                body=[gate.body.body[0].deep_replace(gate_return, new_return)]
            )
        )
        init = init.with_changes(leading_lines=[*gate.leading_lines, *comment])
        return [
            (
                gate,
                StatementEdit(
                    before=[init, polled], replacement=new_gate.with_changes(leading_lines=[])
                ),
            ),
        ]

    @staticmethod
    def _failed_name(assign: cst.Assign) -> str:
        """The name ``good_reqs, failed_reqs = ...pop_preallocated(...)`` binds the failed
        requests to (the second of the pair)."""
        target = assign.targets[0].target if len(assign.targets) == 1 else None
        if (
            isinstance(target, cst.Tuple)
            and len(target.elements) == 2
            and isinstance(target.elements[1].value, cst.Name)
        ):
            return target.elements[1].value.value
        raise AnchorError(f"{POP_PREALLOCATED}()'s result is not unpacked into two names")

    def _call(self, tree: cst.Module, gate: cst.If) -> list[cst.SimpleStatementLine]:
        """``<prealloc queue>.poll_pending_reqs()``, through the attribute the gate reads the
        retracted requests of."""
        owners = {
            _flat(a.value)
            for a in find_all(gate.test, cst.Attribute)
            if a.attr.value == RETRACTED_QUEUE
        }
        if len(owners) != 1:
            raise AnchorError(f"the gate reads {RETRACTED_QUEUE} of {len(owners)} queues")
        (call,) = parse_statements(f"{owners.pop()}.{POLL_PENDING}()\n", tree.config_for_parsing)
        assert isinstance(call, cst.SimpleStatementLine)
        lines = [_CALL_COMMENT[0].format(marker=marker(FIX)), *_CALL_COMMENT[1:]]
        comments = [line for line in gate.leading_lines if line.comment is not None]
        return [call.with_changes(leading_lines=[*comments, *_comment_lines(lines)])]

    def _flag(self, tree: cst.Module, gate: cst.If, level: int = 2) -> cst.SimpleStatementLine:
        test = _flat(gate.test)
        code = f"{GATE_FLAG} = {test}\n"
        if level * len(tree.default_indent) + len(code) - 1 > LINE_LENGTH:
            code = f"{GATE_FLAG} = (\n    {test}\n)\n"
        (flag,) = parse_statements(code, tree.config_for_parsing)
        assert isinstance(flag, cst.SimpleStatementLine)  # `flag = <test>`
        comments = _comment_lines([_GATE_COMMENT[0].format(marker=marker(FIX)), *_GATE_COMMENT[1:]])
        return flag.with_changes(leading_lines=[*gate.leading_lines, *comments])

    @staticmethod
    def _admission_targets(stmt: cst.SimpleStatementLine) -> set[str]:
        """The names ``stmt`` binds from a ``...pop_preallocated(...)`` call."""
        if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
            return set()
        assign = stmt.body[0]
        if not is_method_call(assign.value, POP_PREALLOCATED):
            return set()
        return {n.value for target in assign.targets for n in find_all(target.target, cst.Name)}

    @staticmethod
    def _blocks_holding(
        func: cst.FunctionDef, stmts: list[cst.SimpleStatementLine]
    ) -> dict[int, tuple[cst.IndentedBlock, int]]:
        """For each statement, the block that holds it and the block's indentation level."""
        wanted = {id(s) for s in stmts}
        found: dict[int, tuple[cst.IndentedBlock, int]] = {}

        def walk(block: cst.BaseSuite, level: int) -> None:
            if not isinstance(block, cst.IndentedBlock):
                return
            for stmt in block.body:
                if id(stmt) in wanted:
                    found[id(stmt)] = (block, level)
                for child in stmt.children:
                    if isinstance(child, cst.IndentedBlock):
                        walk(child, level + 1)
                    elif isinstance(child, cst.Else | cst.ExceptHandler | cst.Finally):
                        walk(child.body, level + 1)
                    elif isinstance(child, cst.If):  # elif
                        walk(child.body, level + 1)
                        orelse = child.orelse
                        while orelse is not None:
                            walk(orelse.body, level + 1)
                            orelse = orelse.orelse if isinstance(orelse, cst.If) else None

        walk(func.body, 2)
        return found

    def _guarded(
        self, tree: cst.Module, stmts: list[cst.SimpleStatementLine], level: int
    ) -> cst.If:
        """``if not <flag>:`` around ``stmts``, each laid out as black lays it out one level
        deeper."""
        indent = len(tree.default_indent)
        body = []
        for index, stmt in enumerate(stmts):
            stmt = stmt.with_changes(leading_lines=[]) if index == 0 else stmt
            body.append(_black_deeper(stmt, level * indent, tree))
        (guard,) = parse_statements(f"if not {GATE_FLAG}:\n    pass\n", tree.config_for_parsing)
        assert isinstance(guard, cst.If)
        comment = _comment_lines([f"{marker(FIX)}: not while retracted requests wait"])
        return guard.with_changes(
            body=guard.body.with_changes(body=body),
            leading_lines=[*stmts[0].leading_lines, *comment],
        )


def _skips(stmt: cst.BaseStatement) -> bool:
    """``if <test>: continue``: a loop's skip of the entries it does not look at."""
    return (
        isinstance(stmt, cst.If)
        and stmt.orelse is None
        and isinstance(stmt.body, cst.IndentedBlock)
        and len(stmt.body.body) == 1
        and sole(stmt.body.body[0], cst.Continue) is not None
    )


def _sets_only(stmt: cst.If, names: set[str]) -> bool:
    """An ``if`` (no ``else``) whose body only assigns some of ``names``."""
    if stmt.orelse is not None or not isinstance(stmt.body, cst.IndentedBlock):
        return False
    for line in stmt.body.body:
        assign = sole(line, cst.Assign)
        if assign is None or not all(
            isinstance(t.target, cst.Name) and t.target.value in names for t in assign.targets
        ):
            return False
    return True


def _bookkeeping(stmt: cst.BaseStatement, item: str) -> bool:
    """A line that records an entry in a local of the loop's function (``failed_reqs.append(
    decode_req)``, ``indices_to_remove.add(i)``): ``poll_pending_reqs`` keeps its own."""
    expr = sole(stmt, cst.Expr)
    call = expr.value if expr is not None else None
    return (
        isinstance(call, cst.Call)
        and isinstance(call.func, cst.Attribute)
        and call.func.attr.value in ("append", "add")
        and isinstance(call.func.value, cst.Name)
        and call.func.value.value != item
    )


def _straight_line(block: cst.BaseSuite, level: int) -> list[tuple[cst.BaseStatement, int]]:
    """The statements of ``block`` that run whenever it runs, with their indentation level:
    its own, and those of a ``try:`` body or a ``with`` body among them (a fork that wraps
    the whole step in ``try: ... finally:`` to time it keeps its gate one level deeper)."""
    if not isinstance(block, cst.IndentedBlock):
        return []
    out: list[tuple[cst.BaseStatement, int]] = []
    for stmt in block.body:
        out.append((stmt, level))
        if isinstance(stmt, cst.Try | cst.With):
            out += _straight_line(stmt.body, level + 1)
    return out


def _black_deeper(stmt: cst.BaseStatement, indent: int, tree: cst.Module) -> cst.BaseStatement:
    """``stmt`` as black lays it out at ``indent``: a ``target = call()`` too long for one line
    gets its value in parentheses on a line of its own."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return stmt
    line = _flat(stmt.with_changes(leading_lines=[]))
    if "\n" in line or indent + len(line) <= LINE_LENGTH:
        return stmt
    assign = stmt.body[0] if len(stmt.body) == 1 else None
    if not isinstance(assign, cst.Assign) or not isinstance(assign.value, cst.Call):
        raise AnchorError(f"cannot lay out `{line}` one level deeper within {LINE_LENGTH}")
    targets = " = ".join(_flat(t.target) for t in assign.targets)
    value = _flat(assign.value)
    if indent + 4 + len(value) > LINE_LENGTH:
        raise AnchorError(f"cannot lay out `{line}` one level deeper within {LINE_LENGTH}")
    comment = ""
    trailing = stmt.trailing_whitespace
    if trailing.comment is not None:
        comment = f"  {trailing.comment.value}"
    (new,) = parse_statements(f"{targets} = (\n    {value}\n){comment}\n", tree.config_for_parsing)
    return new


def _copied_lines(run: Run, text: str, class_name: str) -> frozenset[int] | None:
    """Every line of what ``_poll_pending`` reads of ``class_name.pop_preallocated()`` in
    ``text`` beyond its signature: its docstring, its statements up to the one that calls
    ``_update_handshake_waiters()`` and the ``if`` blocks right after it (``_prologue``), and
    in each loop, the statements up to and including an ``if`` that names ``FINISH_ABORT``
    (``_failed_branch``: the skips before it and the branch are copied). None (keep the
    method whole) where the text does not parse or the class has no single such method."""
    try:
        tree = parse_module(text, "<hollow>", run)
    except (SyntaxError, ValueError):
        return None
    found = [
        stmt
        for cls in tree.body
        if isinstance(cls, ast.ClassDef) and cls.name == class_name
        for stmt in cls.body
        if isinstance(stmt, ast.FunctionDef) and stmt.name == POP_PREALLOCATED
    ]
    if len(found) != 1:
        return None
    body = found[0].body
    kept: list[ast.stmt] = []
    for index, stmt in enumerate(body):
        kept.append(stmt)
        if any(
            isinstance(node, ast.Call) and call_name(node) == UPDATE_HANDSHAKE_WAITERS
            for node in walk(stmt)
        ):
            for after in body[index + 1 :]:
                if not isinstance(after, ast.If):
                    break
                kept.append(after)
            break
    else:
        return None
    for loop in walk(found[0]):
        if isinstance(loop, ast.For | ast.AsyncFor):
            for index, stmt in enumerate(loop.body):
                if isinstance(stmt, ast.If) and any(
                    (isinstance(n, ast.Name) and n.id == FINISH_ABORT)
                    or (isinstance(n, ast.Attribute) and n.attr == FINISH_ABORT)
                    for n in ast.walk(stmt.test)
                ):
                    kept.extend(loop.body[: index + 1])
    return frozenset(
        line for stmt in kept for line in range(first_line(stmt), (stmt.end_lineno or 0) + 1)
    )
