"""The ``decode-queue-bound`` fix: no decode queue keeps a request that waits on its prefill
without a bound (PDG007).

Two places, found by the checker's own decode-queue model:

* the prealloc queue's ``pending_reqs`` re-queue while the prefill DP rank cannot be resolved
  (0.5.10 - 0.5.23): bounded by ``SGLANG_DISAGGREGATION_WAITING_TIMEOUT``, counted from the
  first time the request is put back; an overdue request is failed through its receiver;
* the retraction gate of ``process_decode_queue`` (0.4.7.post1 - 0.5.23): the transfer queue
  is polled while retracted requests wait for memory; new requests are still not admitted.

Releases whose decode queues raise on a Failed poll (0.4.6 - 0.4.6.post4) are refused when
there is something to fix (there is not: they have neither place).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from pdguard.checks.bindings import bindings_in_force
from pdguard.checks.nodes import walk

from .. import fix_names
from ..sglang_names import (
    DECODE_PATH,
    DISAGGREGATION_DIR,
    ENVIRON_MODULE,
    ENVIRON_OBJECT,
    MANAGERS_DIR,
    POP_PREALLOCATED,
    POP_TRANSFERRED,
    REQ_RECEIVER,
    RETRACTED_QUEUE,
    WAITING_TIMEOUT_ENV,
)
from .base import Fix, Outcome, Refused, Status, has_marker
from .receiver_waiting_timeout import decode_project, env_reader, failed_poll_raises

if TYPE_CHECKING:
    from pdguard.checks.models.decode_queues import DecodeQueueModel, EarlyReturn, Entries, Requeue
    from pdguard.codemods.isort_imports import ImportRequest

    from ..checks import Project
    from ..workspace import Workspace

FIX = fix_names.DECODE_QUEUE_BOUND
# pdguard's own names in the code it writes.
PENDING_STAMP = fix_names.DECODE_PENDING_STAMP
GATE_FLAG = fix_names.DECODE_GATE_FLAG
POLL_PENDING = fix_names.DECODE_POLL_PENDING


@dataclass
class _FilePlan:
    """What the codemod does in one file."""

    pending: list[str] = field(default_factory=list)  # "Class.method:local:item"
    rids: list[str | None] = field(default_factory=list)  # each entry's rid path, if it has one
    gate: str | None = None  # "[Class.]function" holding the retraction gate
    timeout: str = ""
    log: bool = True
    imports: list[ImportRequest] = field(default_factory=list)
    fields: list[str] = field(default_factory=list)  # @dataclasses the stamp is a field of
    poll_pending: str | None = None  # "Class:pending_list:resolve_method", run before the gate
    pp_gates: list[str] = field(default_factory=list)  # "Class.method": PP loops gating it


class DecodeQueueBoundFix(Fix):
    name = FIX
    summary = "a bound on the decode queues' pending re-queue and retraction gate (0.4.7.post1+)"
    rules = ("PDG007",)
    reads = (DISAGGREGATION_DIR, MANAGERS_DIR)

    def fixable_in(self, project: Project) -> bool:
        """Not where ``plan`` refuses on sight: a hand-written gate it does not rewrite, a
        pending bound behind a gate that is not the early return it rewrites (a tree patched
        before ``poll_pending_reqs``: ``apply --repair``), or a release with a re-queue to
        bound that reads its timeout nowhere (no file check reads names it)."""
        model = project.decode_queues
        if next(iter(model.guarded_polls()), None) is not None:
            return False
        requeues = list(model.requeues())
        if any(r.gated for r in requeues) and next(iter(model.early_returns()), None) is None:
            return False  # a bound behind a gate plan does not rewrite: refused on sight
        return not requeues or any(WAITING_TIMEOUT_ENV in text for text in project.texts.values())

    def plan(self, workspace: Workspace) -> Outcome:
        model = decode_project(workspace).decode_queues
        requeues = list(model.requeues())
        gates = list(model.early_returns())
        for guarded in model.guarded_polls():  # a hand-written gate pdguard does not rewrite
            where = f"{guarded.owner.name}." if guarded.owner else ""
            polls = ", ".join(f"{name}()" for name in guarded.skipped)
            return Outcome(
                Status.REFUSED,
                f"{where}{guarded.func.name} polls {polls} only under "
                f"`if {guarded.condition}`: pdguard does not rewrite that gate; poll the "
                "transfer queue on every call",
                f"{guarded.rel}:{guarded.node.lineno}",
            )
        if not requeues and not gates:
            return self._already_bounded(workspace, model)
        line = failed_poll_raises(workspace)
        if line is not None:
            return Outcome(
                Status.REFUSED,
                "a KVPoll.Failed poll in the decode queues raises inside the scheduler, so a "
                "request failed by a bound would crash it",
                f"{DECODE_PATH}:{line}",
            )
        try:
            plans = self._plans(workspace, model, requeues, gates)
            pp_loops = [where for plan in plans.values() for where in plan.pp_gates]
            self._run_codemods(workspace, plans)
        except Refused as refused:
            return refused.outcome
        return self._proved(workspace, requeues, gates, pp_loops)

    def _already_bounded(self, workspace: Workspace, model: DecodeQueueModel) -> Outcome:
        rels = sorted({info.rel for info in model.index.classes.values()})
        marked = [rel for rel in rels if has_marker(workspace.text(rel), FIX)]
        if marked:
            return Outcome(Status.PRESENT, f"marker in {', '.join(marked)}")
        if not model.queues():
            return Outcome(Status.NOT_APPLICABLE, "no decode queue found")
        return Outcome(
            Status.UPSTREAM,
            "no request is re-queued without a bound and no early return skips polling the "
            "decode queues",
        )

    def _plans(
        self,
        workspace: Workspace,
        model: DecodeQueueModel,
        requeues: list[Requeue],
        gates: list[EarlyReturn],
    ) -> dict[str, _FilePlan]:
        plans: dict[str, _FilePlan] = defaultdict(_FilePlan)
        for requeue in requeues:
            if requeue.gated:  # bounded already: poll_pending_reqs runs it before the gate
                continue
            # the class that defines the method holding the re-queue (a helper may be inherited)
            owner = next(
                (
                    info
                    for info in model.index.classes.values()
                    if any(f is requeue.func for f in info.methods.values())
                ),
                requeue.owner,
            )
            rel = owner.rel
            call = requeue.node
            func = call.func  # `<local>.append(...)`, as the model finds re-queues
            local = getattr(func.value, "id", None) if isinstance(func, ast.Attribute) else None
            item = call.args[0] if len(call.args) == 1 else None
            if (
                not isinstance(func, ast.Attribute)
                or func.attr != "append"
                or local is None
                or not isinstance(item, ast.Name)
            ):
                raise Refused(
                    f"{requeue.owner.name}.{requeue.func.name}: the re-queue is not "
                    "`<list>.append(<request>)`",
                    f"{rel}:{call.lineno}",
                )
            rid = self._entry_attrs(workspace, model, requeue, rel)
            dataclass_name = _entry_dataclass(workspace, model.entries(requeue).types, rel)
            if dataclass_name is not None and dataclass_name not in plans[rel].fields:
                plans[rel].fields.append(dataclass_name)
            plans[rel].pending.append(f"{owner.name}.{requeue.func.name}:{local}:{item.id}")
            plans[rel].rids.append(rid)
            self._timeout(workspace, rel, plans[rel])
        for gate in gates:
            rel = gate.rel
            where = f"{gate.owner.name}.{gate.func.name}" if gate.owner else gate.func.name
            odd = [
                name
                for name in gate.skipped
                if name.rsplit(".", 1)[-1] not in (POP_PREALLOCATED, POP_TRANSFERRED)
            ]
            if odd or RETRACTED_QUEUE not in gate.condition or gate.per_rank:
                raise Refused(
                    f"{where}: the early return (while `{gate.condition}`) is not the "
                    f"retraction gate pdguard knows, or skips {', '.join(odd)}",
                    f"{rel}:{gate.node.lineno}",
                )
            if plans[rel].gate not in (None, where):
                raise Refused(f"{rel}: two functions return early before polling", rel)
            plans[rel].gate = where
        for rel in sorted({r.owner.rel for r in requeues}):
            # the re-queue's bound runs in pop_preallocated(), which the gate skips: the
            # pending list is resolved, bounded and its failures delivered before the gate
            plan = plans[rel]
            pending = {(r.owner.name, r.attr, r.method) for r in requeues if r.owner.rel == rel}
            if plan.gate is None:
                self._gated_elsewhere(workspace, [r for r in requeues if r.owner.rel == rel])
            else:
                if len(pending) != 1 or next(iter(pending))[2] == POP_PREALLOCATED:
                    raise Refused(
                        f"{rel}: the pending lists are rebuilt by "
                        f"{', '.join(sorted(f'{o}.{m}' for o, _, m in pending))}: pdguard bounds "
                        f"one, rebuilt by a method other than {POP_PREALLOCATED}(), before the "
                        "retraction gate",
                        rel,
                    )
                queue, attr, method = pending.pop()
                plan.poll_pending = f"{queue}:{attr}:{method}"
                self._pp_loops(model, requeues, gates, plans)
        return plans

    @staticmethod
    def _pp_loops(
        model: DecodeQueueModel,
        requeues: list[Requeue],
        gates: list[EarlyReturn],
        plans: dict[str, _FilePlan],
    ) -> None:
        """The other decode loops that reach the pending bound only behind the retraction
        gate (the PP mixin's ``process_prealloc_queue``): each calls ``poll_pending_reqs()``
        with the consensus it passes ``pop_preallocated()``."""
        rewritten = {id(g.func) for g in gates}
        seen: set[int] = set()
        for requeue in requeues:
            cls = requeue.owner.name
            for rel, owner, func in model.unbounded_loops(cls, [requeue.func]):
                if id(func) in rewritten or id(func) in seen:
                    continue
                seen.add(id(func))
                if owner is None:
                    raise Refused(
                        f"{func.name}() calls {POP_PREALLOCATED}() behind the retraction gate "
                        "outside a class: pdguard does not rewrite it",
                        f"{rel}:{func.lineno}",
                    )
                plans[rel].pp_gates.append(f"{owner.name}.{func.name}")

    @staticmethod
    def _gated_elsewhere(workspace: Workspace, requeues: list[Requeue]) -> None:
        """Re-queues bounded only behind a retraction gate that is not the early return
        pdguard rewrites: a tree patched by pdguard before ``poll_pending_reqs`` (its marker
        is there; ``apply --repair`` re-applies the fix), or a hand-written gate."""
        gated = [r for r in requeues if r.gated]
        if not gated:
            return
        first = gated[0]
        rel = first.owner.rel
        where = f"{first.owner.name}.{first.method}"
        older = has_marker(workspace.text(rel), FIX)
        raise Refused(
            f"{where}: the bound on self.{first.attr} runs only behind the retraction gate, "
            "so not while retracted requests wait for memory; "
            + (
                "patched by an earlier pdguard (its bound not run on every step of every decode "
                "loop): "
                "`pdguard apply --repair` re-applies the fix"
                if older
                else "pdguard does not rewrite that gate: resolve the pending requests on "
                "every step, before it"
            ),
            f"{rel}:{first.node.lineno}",
        )

    def _entry_attrs(
        self, workspace: Workspace, model: DecodeQueueModel, requeue: Requeue, rel: str
    ) -> str | None:
        """The path of an entry's request id (``req.rid``, ``rid``, or None when the entries
        have neither in this tree); refused when the entries have no ``kv_receiver`` to fail
        them through (a list of bare requests whose receivers are created later)."""
        entries = model.entries(requeue)
        has = partial(_has_path, workspace, model, entries)
        where = f"{requeue.owner.name}.{requeue.func.name}"
        if not has(REQ_RECEIVER):
            known = [kind for kind in entries.types if kind != "?"]
            kinds = (
                ", ".join(known)
                if known and len(known) == len(entries.types)
                else ("of a type pdguard cannot tell")
            )
            raise Refused(
                f"{where}: the entries of self.{requeue.attr} are {kinds}, with no "
                f"{REQ_RECEIVER} in this tree: the bound would have no receiver to fail them "
                "through (and would raise when it fires); bound this list by hand",
                f"{rel}:{requeue.node.lineno}",
            )
        return next((path for path in ("req.rid", "rid") if has(path)), None)

    def _timeout(self, workspace: Workspace, rel: str, plan: _FilePlan) -> None:
        """``SGLANG_DISAGGREGATION_WAITING_TIMEOUT`` as the release reads it."""
        from pdguard.codemods.isort_imports import ImportRequest

        tree = workspace.ast(rel)
        if (ENVIRON_OBJECT in bindings_in_force(tree.body)) and f"from {ENVIRON_MODULE} import" in (
            workspace.text(rel)
        ):
            plan.timeout = f"{ENVIRON_OBJECT}.{WAITING_TIMEOUT_ENV}.get()"
            return
        reader = env_reader(decode_project(workspace), WAITING_TIMEOUT_ENV)
        if reader is None:
            raise Refused(f"{rel}: the release reads {WAITING_TIMEOUT_ENV} nowhere", rel)
        source, origin, name = reader
        plan.timeout = " ".join(source.split())
        root = name or origin.split(".")[0]
        if (
            root not in bindings_in_force(tree.body)
            and ImportRequest(origin, name) not in plan.imports
        ):
            plan.imports.append(ImportRequest(origin, name))

    def _run_codemods(self, workspace: Workspace, plans: dict[str, _FilePlan]) -> None:
        from pdguard.codemods.anchors import AnchorError
        from pdguard.codemods.decode_queue_bound import DecodeQueueBound

        for rel, plan in sorted(plans.items()):
            plan.log = "logger" in bindings_in_force(workspace.ast(rel).body)
            transform = DecodeQueueBound(
                workspace.context(),
                pending=plan.pending,
                rids=plan.rids,
                gate=plan.gate,
                timeout=plan.timeout,
                log=plan.log,
                imports=plan.imports,
                isort_config=workspace.isort_config(rel),
                fields=plan.fields,
                poll_pending=plan.poll_pending,
                pp_gates=plan.pp_gates,
            )
            try:
                workspace.transform(rel, [transform])
            except AnchorError as exc:
                raise Refused(f"{rel}: {exc}", rel) from exc

    def _proved(
        self,
        workspace: Workspace,
        requeues: list[Requeue],
        gates: list[EarlyReturn],
        pp_loops: list[str],
    ) -> Outcome:
        after = decode_project(workspace).decode_queues
        still = (
            [f"{r.owner.name}.{r.func.name}:{r.node.lineno}" for r in after.requeues()]
            + [f"{g.func.name}:{g.node.lineno}" for g in after.early_returns()]
            + [f"{g.func.name}:{g.node.lineno}" for g in after.guarded_polls()]
        )
        if still:
            return Outcome(Status.REFUSED, f"the fix did not bound: {', '.join(still)}")
        done = [
            f"{r.owner.name}.{r.func.name}: re-queue bounded by {WAITING_TIMEOUT_ENV}"
            for r in requeues
            if not r.gated
        ]
        done += sorted(
            {
                f"{r.owner.name}.{r.method}: run on every step, before the retraction gate "
                f"({r.owner.name}.{POLL_PENDING}())"
                for r in requeues
                if gates  # then _plans wrote poll_pending_reqs
            }
        )
        done += [
            f"{g.func.name}: transfer queue polled while retracted requests wait, no new "
            "request admitted"
            for g in gates
        ]
        done += [
            f"{where}: pending requests resolved and bounded while retracted requests wait, "
            f"with the stages' consensus ({POLL_PENDING}())"
            for where in pp_loops
        ]
        return Outcome(Status.APPLIED, "; ".join(done))


def _entry_dataclass(workspace: Workspace, types: tuple[str, ...], rel: str) -> str | None:
    """The one class the entries are, where it is a ``@dataclass`` defined at the top of
    ``rel`` (``DecodeRequest`` in ``decode.py``): the stamp becomes a declared field of it,
    not an attribute set on an instance."""
    if len(types) != 1:
        return None
    for node in workspace.ast(rel).body:
        if (
            isinstance(node, ast.ClassDef)
            and node.name == types[0]
            and any(
                (d.id if isinstance(d, ast.Name) else getattr(d, "attr", None)) == "dataclass"
                for d in (n.func if isinstance(n, ast.Call) else n for n in node.decorator_list)
            )
        ):
            return node.name
    return None


def _class_fields(workspace: Workspace, name: str) -> dict[str, set[str]] | None:
    """The attributes instances of class ``name`` have in the tree (class-body names, methods,
    ``self.<x> = ...`` in its methods, its bases' too) -> the classes their annotations name;
    None if the tree defines no such class, or more than one."""
    from pdguard.checks.models.decode_queues import type_names
    from pdguard.checks.models.kv_senders import is_self_attr

    needle = f"class {name}"
    found = [
        node
        for folder in DecodeQueueBoundFix.reads  # DecodeRequest, and the scheduler's Req
        for rel in workspace.files_containing(folder, needle)
        for node in workspace.ast(rel).body
        if isinstance(node, ast.ClassDef) and node.name == name
    ]
    if len(found) != 1:
        return None
    fields: dict[str, set[str]] = {}
    cls = found[0]
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            fields.setdefault(stmt.target.id, set()).update(type_names(stmt.annotation))
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    fields.setdefault(target.id, set())
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            fields.setdefault(stmt.name, set())
            params = {a.arg: a.annotation for a in stmt.args.args}
            for node in walk(stmt):
                targets = (
                    node.targets
                    if isinstance(node, ast.Assign)
                    else [node.target]
                    if isinstance(node, ast.AnnAssign)
                    else []
                )
                for target in targets:
                    if is_self_attr(target, getattr(target, "attr", "")):
                        assert isinstance(target, ast.Attribute)
                        kinds = fields.setdefault(target.attr, set())
                        if isinstance(node, ast.AnnAssign):
                            kinds |= type_names(node.annotation)
                        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
                            kinds |= type_names(params.get(node.value.id))
    for base in cls.bases:
        for base_name in type_names(base):
            inherited = _class_fields(workspace, base_name) if base_name != name else None
            for attr, kinds in (inherited or {}).items():
                fields.setdefault(attr, set()).update(kinds)
    return fields


def _annotated_reads(model: DecodeQueueModel, name: str) -> set[str]:
    """The attributes the decode modules read on a parameter annotated ``name`` (``req: Req``
    then ``req.rid``): what the tree's own code relies on instances of a class it does not
    define (a partial tree) having."""
    from pdguard.checks.models.decode_queues import paths_read, type_names

    found = set()
    for tree in model.index.modules.values():
        for func in walk(tree):
            if not isinstance(func, ast.FunctionDef):
                continue
            params = {
                a.arg
                for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)
                if name in type_names(a.annotation)
            }
            found |= {path for path in paths_read(func, params) if "." not in path}
    return found


def _has_path(workspace: Workspace, model: DecodeQueueModel, entries: Entries, path: str) -> bool:
    """Does every entry have the attribute path ``path``: the queue's own code reads it on
    them, or the entries' one class defines it (through annotated fields for a nested path;
    a class the tree does not define, by what its code reads on parameters of that class)?"""
    if path in entries.read:
        return True
    if len(entries.types) != 1:
        return False
    kinds: set[str] = set(entries.types)
    for part in path.split("."):
        if len(kinds) != 1:
            return False
        kind = next(iter(kinds))
        fields = _class_fields(workspace, kind)
        if fields is None:
            return part in _annotated_reads(model, kind) and part == path.rsplit(".", 1)[-1]
        if part not in fields:
            return False
        kinds = fields[part]
    return True
