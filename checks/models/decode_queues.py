"""The decode queues (``decode.py``) and the scheduler functions that poll them.

Read-only analysis on ``ast``, over the modules that name a decode queue or a request's
``kv_receiver`` (a ``ClassIndex`` of their own, so mixins resolve across files):

- A *decode queue* is a class one of whose methods MIN-reduces its requests' receiver polls
  (reaches a ``poll_and_all_reduce*`` call, itself or through ``self.*()`` helpers). Those
  methods are its *poll methods* (``pop_preallocated``, ``pop_transferred``, ...).
- A *polling function* is any other function that calls a poll method on an attribute
  (``self.disagg_decode_transfer_queue.pop_transferred()``). An *early return* of one is a
  ``return`` placed before some of its poll calls, unless its condition only asks whether the
  queues it skips are empty.
- A *pending list* is a queue attribute that a method rebuilds from a local list
  (``self.pending_reqs = remaining``) while handing the other entries' receivers their
  ``init()``/``send_metadata()``, or any list the method rebuilds from its own entries while
  admitting the others into a list the queue polls (whatever the entries are: a fork's bare
  requests, whose receivers are created later): the entries it keeps are waiting before any
  receiver clock of theirs runs. ``entries()`` says what they are (their classes, the
  attributes the queue reads on them), for a fix to write only what they have. Each
  ``append``/``extend`` into that list (also inside a helper whose
  returned list it is) is a *re-queue*. A re-queue is *bounded* when the loop around it also
  fails requests under a retry counter or an elapsed-time comparison, or when the class
  enforces a deadline on its entries (a loop over a queue attribute that compares an
  elapsed time since an entry's stamp and fails the entry) in a method its poll methods reach.
  A retry counter must be incremented in the function; an elapsed time does not count when
  its stamp is written again on every pass before it is read (it then never grows). And the
  bound must run on every step: some polling function calls a method that reaches it, not
  behind the retraction gate (``bounded_wait.reach``); a bound only the gated
  ``pop_preallocated()`` reaches is a *gated* re-queue (one per list, unless the gate is an
  early return reported on its own).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property, partial

from pdguard.sglang_names import (
    DECODE_QUEUE_LIST,
    KVPOLL,
    POLL_ALL_REDUCE_PREFIX,
    PREPARE_ABORT,
    RANK_ATTRS,
    RECEIVER_ABORT,
    RECEIVER_SEND_METHODS,
    REQ_RECEIVER,
    RETRACTED_QUEUE,
    SERVER_ARGS,
)

from ..nodes import kept, own_nodes, own_parents, walk
from .bounded_wait import CLOCK_FUNCTIONS, Reach, call_name, is_failed, reach
from .kv_senders import ClassIndex, ClassInfo, is_self_attr

__all__ = ["DecodeQueueModel", "EarlyReturn", "Entries", "Requeue", "paths_read", "type_names"]

CLOCKS = CLOCK_FUNCTIONS


def _fails(node: ast.AST) -> bool:
    """Does ``node`` fail a request: ``abort()``, ``prepare_abort(...)``, or store
    ``KVPoll.Failed``?"""
    for sub in walk(node):
        if isinstance(sub, ast.Call) and call_name(sub) in (RECEIVER_ABORT, PREPARE_ABORT):
            return True
        if is_failed(sub) and getattr(sub.value, "id", getattr(sub.value, "attr", None)) == KVPOLL:
            return True
    return False


def _clock_names(func: ast.AST) -> dict[str, str]:
    """Locals ``func`` assigns a clock reading: name -> the clock function."""
    names: dict[str, str] = {}
    for node in own_nodes(func):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and (clock := call_name(node.value)) in CLOCKS
        ):
            names |= {t.id: clock for t in node.targets if isinstance(t, ast.Name)}
    return names


def _clock_of(node: ast.AST, clocks: Mapping[str, str]) -> str | None:
    """The clock function a reading ``node`` comes from (a call, or a local holding one)."""
    if isinstance(node, ast.Call) and (name := call_name(node)) in CLOCKS:
        return name
    if isinstance(node, ast.Name):
        return clocks.get(node.id)
    return None


def _stamp_key(stamp: ast.AST) -> str | None:
    """What names a stamp wherever it is written: ``x.entered_at`` -> "entered_at",
    ``self.since[rid]`` -> "since"."""
    if isinstance(stamp, ast.Subscript):
        stamp = stamp.value
    return stamp.attr if isinstance(stamp, ast.Attribute) else None


def stamp_clocks(modules: Iterable[ast.Module]) -> dict[str, frozenset[str]]:
    """The clocks each stamp (by ``_stamp_key``) is written with, over ``modules``: an
    elapsed time is one clock's reading minus a stamp of the same clock; ``time.monotonic()``
    minus a ``time.time()`` stamp is far below any limit (the deadline never fires)."""
    found: dict[str, set[str]] = {}
    for tree in modules:
        for func in walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            local = _clock_names(func)
            for node in own_nodes(func):
                if isinstance(node, ast.Assign):
                    clock = _clock_of(node.value, local)
                    for target in node.targets:
                        key = _stamp_key(target)
                        if key is not None:
                            found.setdefault(key, set()).add(clock or "?")
    return {key: frozenset(clocks) for key, clocks in found.items()}


def _same_clock(stamp: ast.AST, clock: str | None, stamps: Mapping[str, frozenset[str]]) -> bool:
    """Can ``stamp`` be a reading of ``clock``? Unless every write of it the tree shows is a
    reading of another clock."""
    key = _stamp_key(stamp)
    written = stamps.get(key) if key is not None else None
    return clock is None or not written or "?" in written or clock in written


def _is_clock(node: ast.AST, clocks: Mapping[str, str]) -> bool:
    return (isinstance(node, ast.Call) and call_name(node) in CLOCKS) or (
        isinstance(node, ast.Name) and node.id in clocks
    )


def _elapsed_locals(func: ast.AST, clocks: Mapping[str, str]) -> dict[str, ast.expr]:
    """Locals assigned ``<clock> - <stamp>`` in ``func``: name -> that difference."""
    found: dict[str, ast.expr] = {}
    for node in own_nodes(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if (
                isinstance(target, ast.Name)
                and isinstance(value, ast.BinOp)
                and isinstance(value.op, ast.Sub)
                and _is_clock(value.left, clocks)
            ):
                found[target.id] = value
    return found


def _elapsed_operands(
    test: ast.AST,
    clocks: Mapping[str, str],
    elapsed: dict[str, ast.expr] | None = None,
    stamps: Mapping[str, frozenset[str]] | None = None,
) -> list[ast.expr]:
    """The stamps of the elapsed times ``test`` reads: ``<clock> - <stamp>`` inline, or a
    local in ``elapsed`` (see ``_elapsed_locals``); not those the tree writes only with
    another clock than the one read (``stamps``: ``stamp_clocks``)."""
    found = []
    for node in walk(test):
        if isinstance(node, ast.Name) and elapsed and node.id in elapsed:
            node = elapsed[node.id]
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Sub)
            and _is_clock(node.left, clocks)
            and _same_clock(node.right, _clock_of(node.left, clocks), stamps or {})
        ):
            found.append(node.right)
    return found


def _counters(func: ast.AST) -> set[str]:
    """Expressions (as source) that ``func`` increments: ``x += 1``, ``x = ... + 1``."""
    found = set()
    for node in own_nodes(func):
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
            found.add(ast.unparse(node.target))
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.BinOp)
            and isinstance(node.value.op, ast.Add)
            and isinstance(node.value.right, ast.Constant)
            and node.value.right.value == 1
        ):
            found |= {ast.unparse(t) for t in node.targets}
    return found


@dataclass(frozen=True)
class EarlyReturn:
    rel: str
    owner: ClassInfo | None
    func: ast.FunctionDef
    node: ast.Return
    condition: str  # source of the test that leads to the return ("" if unconditional)
    skipped: tuple[str, ...]  # "self.disagg_decode_transfer_queue.pop_transferred", ...
    per_rank: bool = False  # the test reads the scheduler's rank (see _reads_rank)


@dataclass(frozen=True)
class GuardedPoll:
    """Poll calls of a polling function that run only under an ``if`` whose condition need
    not come true again (not a throttle the function advances on every call)."""

    rel: str
    owner: ClassInfo | None
    func: ast.FunctionDef
    node: ast.If
    condition: str  # source of the test
    skipped: tuple[str, ...]  # the poll calls it holds, as in EarlyReturn
    per_rank: bool = False  # the test reads the scheduler's rank (see _reads_rank)


@dataclass(frozen=True)
class Requeue:
    owner: ClassInfo
    func: ast.FunctionDef  # where the append sits
    node: ast.Call
    attr: str  # the pending list, ``self.<attr>``
    method: str  # the method that rebuilds it
    # a retry counter or deadline is compared around it, but reaching it fails nothing
    inert: bool = False
    # bounded, but the bound runs only in methods the polling functions call behind the
    # retraction gate (not while retracted requests wait for memory)
    gated: bool = False
    # the polling functions that reach the bound only behind the gate ("Class.method")
    loops: tuple[str, ...] = ()


@dataclass(frozen=True)
class Entries:
    """The entries of a pending list, as the tree shows them."""

    types: tuple[str, ...]  # the classes it is filled with (``DecodeRequest``, ``Req``)
    read: frozenset[str]  # attribute paths the queue reads on an entry: "req.rid", "kv_receiver"


@dataclass
class _Facts:
    """What one function does, from one walk of its own nodes."""

    reduces: bool = False  # calls poll_and_all_reduce*
    hands_on: bool = False  # calls <x>.kv_receiver.init() / send_metadata()
    calls: list[tuple[str, bool]] = field(default_factory=list)  # self.m() / super().m()
    queue_calls: list[ast.Call] = field(default_factory=list)  # self.<queue>.<m>()
    returns: list[ast.Return] = field(default_factory=list)
    rebuilt: list[tuple[str, str]] = field(default_factory=list)  # self.<attr> = <local>
    reads: set[str] = field(default_factory=set)  # self.<attr> read (loaded)


def _from_self(node: ast.AST, derived: set[str]) -> bool:
    """Is ``node`` one of the object's own collections: ``self.<attr>`` (also subscripted or
    sliced), a local computed as one, or a comprehension over one?"""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
        if isinstance(node, ast.Name) and node.id == "self":
            return True
    if isinstance(node, ast.Name):
        return node.id in derived
    if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp):
        return any(_from_self(g.iter, derived) for g in node.generators)
    return False


def _own_receiver_reads(func: ast.FunctionDef) -> bool:
    """Does ``func`` read the ``kv_receiver`` of an item of its object's own collections, in
    the loop or comprehension that iterates over it? A function that polls a list it was
    handed (the PP mixin's ``get_rids``) does not."""
    # the names whose ``kv_receiver`` the function reads anywhere: a loop can only read the
    # receiver of an item through one of them
    readers = set()
    functions: list[ast.AST] = [func]  # and the functions nested in it
    while functions:
        for n in own_nodes(functions.pop()):
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                functions.append(n)
            elif (
                isinstance(n, ast.Attribute)
                and n.attr == REQ_RECEIVER
                and isinstance(n.value, ast.Name)
            ):
                readers.add(n.value.id)
    if not readers:
        return False
    derived: set[str] = set()
    assigns = [n for n in own_nodes(func) if isinstance(n, ast.Assign)]
    for _ in range(2):  # a local computed from another
        for assign in assigns:
            if _from_self(assign.value, derived):
                derived |= {t.id for t in assign.targets if isinstance(t, ast.Name)}
    for node in own_nodes(func):
        if isinstance(node, ast.For):
            loops = [(node.target, node.iter)]
        elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            loops = [(g.target, g.iter) for g in node.generators]
        else:
            continue
        items = {
            n.id
            for target, iterated in loops
            if _from_self(iterated, derived)
            for n in walk(target)
            if isinstance(n, ast.Name)
        }
        if items & readers and any(
            isinstance(n, ast.Attribute)
            and n.attr == REQ_RECEIVER
            and isinstance(n.value, ast.Name)
            and n.value.id in items
            for n in walk(node)
        ):
            return True
    return False


def _facts_of(func: ast.FunctionDef) -> _Facts:
    facts = _Facts()
    for node in own_nodes(func):
        if isinstance(node, ast.Call):
            name = call_name(node) or ""
            facts.reduces |= name.startswith(POLL_ALL_REDUCE_PREFIX)
            callee = node.func
            if not isinstance(callee, ast.Attribute):
                continue
            value = callee.value
            if isinstance(value, ast.Name) and value.id == "self":
                facts.calls.append((callee.attr, False))
            elif (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id == "super"
            ):
                facts.calls.append((callee.attr, True))
            elif isinstance(value, ast.Attribute):
                if value.attr == REQ_RECEIVER and callee.attr in RECEIVER_SEND_METHODS:
                    facts.hands_on = True
                if isinstance(value.value, ast.Name) and value.value.id == "self":
                    facts.queue_calls.append(node)
        elif isinstance(node, ast.Return):
            facts.returns.append(node)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            facts.reads.add(node.attr)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and getattr(target.value, "id", "") == "self":
                    facts.rebuilt.append((target.attr, node.value.id))
    return facts


class DecodeQueueModel:
    def __init__(self, index: ClassIndex) -> None:
        self.index = index
        self._queues: dict[str, set[str]] | None = None
        self._reach: dict[tuple[str, str], list[ast.FunctionDef]] = {}
        self._deadlines: dict[str, list[ast.FunctionDef]] = {}

    def facts(self, func: ast.FunctionDef) -> _Facts:
        """What ``func`` does (kept on the function: the model for a patched tree shares the
        trees of the files the patch left alone)."""
        return kept(func, "_pdguard_decode_facts", _facts_of)

    def reached(self, cls: str, method: str) -> list[ast.FunctionDef]:
        """The functions ``method`` of ``cls`` runs: itself and the ``self.*()`` and
        ``super()`` methods it calls, transitively."""
        key = (cls, method)
        if key not in self._reach:
            found: list[ast.FunctionDef] = []
            seen: set[tuple[str, str]] = set()
            stack: list[tuple[str, str | None]] = [(method, None)]
            while stack:
                meth, after = stack.pop()
                owner = self.index.resolve(cls, meth, after)
                if owner is None or (owner.name, meth) in seen:
                    continue
                seen.add((owner.name, meth))
                func = owner.methods[meth]
                found.append(func)
                for name, via_super in self.facts(func).calls:
                    stack.append((name, owner.name if via_super else None))
            self._reach[key] = found
        return self._reach[key]

    # -- queues and their poll methods --------------------------------------------------

    def queues(self) -> dict[str, set[str]]:
        """Decode queue classes -> their poll methods (own or inherited)."""
        if self._queues is None:
            self._queues = {}
            for name in sorted(self.index.classes):
                methods = {m for c in self.index.mro(name) for m in c.methods}
                polls = {m for m in methods if self._reduces_receiver_polls(name, m)}
                if polls:
                    self._queues[name] = polls
        return self._queues

    def _reduces_receiver_polls(self, cls: str, method: str) -> bool:
        reached = self.reached(cls, method)
        return any(self.facts(f).reduces for f in reached) and any(
            kept(f, "_pdguard_decode_receiver", _own_receiver_reads) for f in reached
        )

    def poll_methods(self) -> set[str]:
        return {m for polls in self.queues().values() for m in polls}

    # -- (b) polling functions that return before polling ------------------------------

    def _functions(self) -> Iterator[tuple[str, ClassInfo | None, ast.FunctionDef]]:
        queues = self.queues()
        for rel, tree in sorted(self.index.modules.items()):
            for node in tree.body:
                if isinstance(node, ast.FunctionDef):
                    yield rel, None, node
                elif isinstance(node, ast.ClassDef) and node.name not in queues:
                    info = self.index.classes.get(node.name)
                    if info is None or info.rel != rel:
                        continue
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef):
                            yield rel, info, item

    def early_returns(self) -> Iterator[EarlyReturn]:
        polls = self.poll_methods()
        for rel, owner, func in self._functions():
            facts = self.facts(func)
            calls = [
                c
                for c in facts.queue_calls
                if isinstance(c.func, ast.Attribute) and c.func.attr in polls
            ]
            if not calls:
                continue
            parents = own_parents(func)
            for ret in facts.returns:
                skipped = sorted(
                    {ast.unparse(c.func) for c in calls if _before(ret, c)}
                    - {ast.unparse(c.func) for c in calls if _before(c, ret)}
                )
                if not skipped:
                    continue
                test = _guard(ret, parents)
                targets = {name.rsplit(".", 1)[0] for name in skipped}
                if test is not None and _only_probes_emptiness(test, targets):
                    continue
                if (
                    test is not None
                    and _reads_attr(test, RETRACTED_QUEUE)
                    and set(skipped) <= self._admissions(func, calls)
                    and not _reads_rank(test)
                ):
                    continue  # back-pressure: see _admissions
                condition = ast.unparse(test) if test is not None else ""
                per_rank = test is not None and _reads_rank(test)
                yield EarlyReturn(rel, owner, func, ret, condition, tuple(skipped), per_rank)

    def guarded_polls(self) -> Iterator[GuardedPoll]:
        """Poll calls nested in an ``if`` that skips them on a condition that need not clear:
        ``if not <retracted requests>: pop_preallocated(); pop_transferred()`` skips the
        transfer queue as the early return does. Not reported: a condition that only probes
        the emptiness of the skipped queues, a throttle (it reads an attribute the function
        reassigns on every call before the test, ``self.polling_count``), and the retraction
        gate over admissions only (see ``early_returns``). Each ``and`` operand of a test
        (``or`` operand, for calls in its ``else``) is judged on its own: the calls are
        skipped while any of them says so."""
        polls = self.poll_methods()
        for rel, owner, func in self._functions():
            calls = [
                c
                for c in self.facts(func).queue_calls
                if isinstance(c.func, ast.Attribute) and c.func.attr in polls
            ]
            if not calls:
                continue
            parents = own_parents(func)
            advanced = _advanced_every_call(func)
            assigned = _local_values(func)
            held: dict[ast.If, set[str]] = {}
            for call in calls:
                child: ast.AST = call
                parent = parents.get(call)
                while parent is not None and parent is not func:
                    if isinstance(parent, ast.If) and child is not parent.test:
                        held.setdefault(parent, set()).add(ast.unparse(call.func))
                    child, parent = parent, parents.get(parent)
            for test_if, names in held.items():
                in_body = any(
                    any(c is n for n in walk(s)) for s in test_if.body for c in calls
                    if ast.unparse(c.func) in names
                )  # fmt: skip
                test = test_if.test
                joined = ast.And if in_body else ast.Or
                parts = test.values if isinstance(test, ast.BoolOp) and isinstance(
                    test.op, joined) else [test]  # fmt: skip
                targets = {name.rsplit(".", 1)[0] for name in names}
                per_rank = _reads_rank(_with_locals(test, assigned))
                if not per_rank and all(
                    _only_probes_emptiness(part, targets)
                    or _static(read := _with_locals(part, assigned))
                    or _reads_any(read, advanced)
                    or (
                        _reads_attr(read, RETRACTED_QUEUE)
                        and names <= self._admissions(func, calls)
                    )
                    for part in parts
                ):
                    continue
                yield GuardedPoll(
                    rel, owner, func, test_if, ast.unparse(test), tuple(sorted(names)), per_rank
                )

    @cached_property
    def _queue_attrs(self) -> set[str]:
        """The attributes the polling functions pop decode queues through
        (``self.disagg_decode_transfer_queue``)."""
        polls = self.poll_methods()
        return {
            ast.unparse(call.func.value)
            for _, _, func in self._functions()
            for call in self.facts(func).queue_calls
            if isinstance(call.func, ast.Attribute) and call.func.attr in polls
        }

    def _admissions(self, func: ast.FunctionDef, calls: list[ast.Call]) -> set[str]:
        """The poll calls of ``func`` that admit requests: what they pop is handed to another
        decode queue (``reqs = prealloc.pop_preallocated(); transfer.extend(reqs)``). Their
        requests hold no KV yet. Skipping only those while retracted requests wait for memory
        is back-pressure, as ``decode-queue-bound`` makes of the gate: the queue that holds
        KV for requests waiting on the prefill is still polled."""
        queues = self._queue_attrs
        handed: dict[str, set[str]] = {}  # a local -> the queues it is handed to
        for node in own_nodes(func):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("extend", "append")
                and ast.unparse(node.func.value) in queues
            ):
                for arg in node.args:
                    for name in walk(arg):
                        if isinstance(name, ast.Name):
                            handed.setdefault(name.id, set()).add(ast.unparse(node.func.value))
        found = set()
        for node in own_nodes(func):
            if not (isinstance(node, ast.Assign) and any(node.value is c for c in calls)):
                continue
            call = node.value
            assert isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            source = ast.unparse(call.func.value)
            bound = {n.id for t in node.targets for n in walk(t) if isinstance(n, ast.Name)}
            if any(handed.get(name, set()) - {source} for name in bound):
                found.add(ast.unparse(call.func))
        return found

    # -- (a) pending lists re-queued without a bound --------------------------------------

    def requeues(self) -> Iterator[Requeue]:
        """The re-queues of pending lists with no bound (worked out once per model)."""
        return iter(self._requeues)

    @cached_property
    def _requeues(self) -> tuple[Requeue, ...]:
        return tuple(self._find_requeues())

    def _find_requeues(self) -> Iterator[Requeue]:
        for cls in self.queues():
            info = self.index.classes[cls]
            for method, func in info.methods.items():
                for attr, local in self.facts(func).rebuilt:
                    if not self._pending(cls, method, func, attr, local):
                        continue
                    deadlines = self._deadline_on_entries(cls)
                    if deadlines and self._every_step(cls, deadlines):
                        continue
                    gated: list[Requeue] = []
                    unbounded = False
                    for site_func, site in self._sites(cls, func, local):
                        helper = partial(self._helper, cls)
                        bounded = _bounded_in_loop(site_func, site, helper, self._stamps)
                        if bounded and self._every_step(cls, [func]):
                            continue
                        if bounded or deadlines:
                            gated.append(Requeue(info, site_func, site, attr, method, gated=True))
                        else:
                            unbounded = True
                            inert = bounded is None
                            yield Requeue(info, site_func, site, attr, method, inert)
                    if gated and not unbounded and not self._gate_reported(cls, [func]):
                        # one finding for the list: its bound is held back where it is called
                        loops = tuple(
                            f"{owner.name}.{loop.name}" if owner else loop.name
                            for _, owner, loop in self.unbounded_loops(cls, [func, *deadlines])
                        )
                        first = min(gated, key=lambda r: r.func is not func)
                        yield replace(first, loops=loops)

    def _gate_reported(self, cls: str, bounds: list[ast.FunctionDef]) -> bool:
        """Is a call that runs one of ``bounds`` skipped by an early return, or held under an
        ``if``, reported on its own (``early_returns``, ``guarded_polls``)? Rewriting that gate
        is the fix; one finding says so."""
        wanted = {id(f) for f in bounds}
        skipped = [name for early in self.early_returns() for name in early.skipped]
        skipped += [name for guarded in self.guarded_polls() for name in guarded.skipped]
        return any(
            self.index.resolve(cls, name.rsplit(".", 1)[-1]) is not None
            and any(id(f) in wanted for f in self.reached(cls, name.rsplit(".", 1)[-1]))
            for name in skipped
        )

    def _every_step(self, cls: str, bounds: list[ast.FunctionDef]) -> bool:
        """Does every polling function that calls a method of ``cls`` running one of
        ``bounds`` (each decode event loop: ``process_decode_queue``, and under pipeline
        parallelism the PP mixin's ``process_prealloc_queue``) call one on every step
        (``bounded_wait.reach``: not behind the retraction gate, an ``if`` or an earlier
        ``return`` on a test that reads the retracted requests)? One loop that does is not
        enough: a request waits as long on the loop that does not. True where no polling
        function calls one (the tree shows no scheduler to tell by). A method that itself
        returns while no retracted request waits (``poll_pending_reqs``) is taken to leave
        those steps to the one the gate holds (``pop_preallocated``)."""
        return not self.unbounded_loops(cls, bounds)

    def unbounded_loops(
        self, cls: str, bounds: list[ast.FunctionDef]
    ) -> list[tuple[str, ClassInfo | None, ast.FunctionDef]]:
        """The polling functions that call a method of ``cls`` running one of ``bounds`` only
        on some steps (see ``_every_step``)."""
        wanted = {id(f) for f in bounds}
        unbounded = []
        for rel, owner, func in self._functions():
            calls = [
                call
                for call in self.facts(func).queue_calls
                if isinstance(call.func, ast.Attribute)
                and self.index.resolve(cls, call.func.attr) is not None
                and any(id(f) in wanted for f in self.reached(cls, call.func.attr))
            ]
            if not calls:
                continue
            assigned = _local_values(func)
            parents = own_parents(func)

            def holds_back(test: ast.expr, assigned: dict[str, list[ast.expr]] = assigned) -> bool:
                return _reads_attr(_with_locals(test, assigned), RETRACTED_QUEUE)

            every = [c for c in calls if reach(c, func, parents, holds_back) is Reach.EVERY_STEP]
            # a method that itself runs the bound only while retracted requests wait
            # (``poll_pending_reqs``) covers those steps only: it counts with a call the gate
            # holds back (``pop_preallocated``), which runs it on the others
            gated_too = len(every) < len(calls)
            if not any(
                self._while_retracted(cls, c.func.attr, wanted) is None
                or (self._while_retracted(cls, c.func.attr, wanted) and gated_too)
                for c in every
                if isinstance(c.func, ast.Attribute)
            ):
                unbounded.append((rel, owner, func))
        return unbounded

    def _while_retracted(self, cls: str, method: str, wanted: set[int]) -> bool | None:
        """Does ``method`` of ``cls`` run one of ``wanted`` on every call (None), only while
        retracted requests wait (True: its calls that do sit after a ``return`` on a test
        that none wait, ``if not self.retracted_queue: return``), or only on some other
        steps (False: a return while they wait, or one this model cannot tell)?"""
        owner = self.index.resolve(cls, method)
        if owner is None:
            return False
        func = owner.methods[method]
        if id(func) in wanted:
            return None
        parents = own_parents(func)
        inner = [
            node
            for node in own_nodes(func)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and is_self_attr(node.func, node.func.attr)
            and self.index.resolve(cls, node.func.attr) is not None
            and any(id(f) in wanted for f in self.reached(cls, node.func.attr))
        ]

        def holds_back(test: ast.expr) -> bool:
            return _reads_attr(test, RETRACTED_QUEUE)

        kinds = {reach(node, func, parents, holds_back) for node in inner}
        if Reach.EVERY_STEP in kinds:
            return None
        returns = [r for r in own_nodes(func) if isinstance(r, ast.Return)]

        def while_waiting(node: ast.Call) -> bool:
            """Every retraction test that holds ``node`` back (an ``if`` around it, a
            ``return`` before it) lets it run only while retracted requests wait."""
            guards: list[ast.expr] = []
            child: ast.AST = node
            parent = parents.get(node)
            while parent is not None and parent is not func:
                if (
                    isinstance(parent, ast.If)
                    and child is not parent.test
                    and holds_back(parent.test)
                ):
                    in_body = child in parent.body
                    guards.append(parent.test if in_body else _negated(parent.test))
                child, parent = parent, parents.get(parent)
            for ret in returns:
                test = _guard(ret, parents)
                if _before(ret, node) and test is not None and holds_back(test):
                    guards.append(_negated(test))
            return bool(guards) and all(_waiting(test) for test in guards)

        return bool(inner) and all(while_waiting(node) for node in inner)

    def _pending(self, cls: str, method: str, func: ast.FunctionDef, attr: str, local: str) -> bool:
        """Is ``self.<attr>``, rebuilt by ``method`` from ``<local>``, a pending list: its
        entries wait before any receiver clock of theirs runs? Either the method hands the
        other entries' receivers on (``init()``/``send_metadata()``), or it is a list the
        method rebuilds from its own entries (it reads ``self.<attr>`` and puts entries back
        into ``<local>``) and admits the others into a list the queue polls (``self.queue.
        append(DecodeRequest(req, receiver))``), while the queue's polls do not reduce its own
        entries' receivers: whatever the entries are (bare requests with no receiver yet
        included), nothing else bounds their wait. A list of entries that are done and only
        wait to be released (``_deferred_releases``) admits nothing: it is not one."""
        reached = self.reached(cls, method)
        if any(self.facts(f).hands_on for f in reached):
            return True
        polled = self._polled_lists(cls)
        if attr not in self.facts(func).reads or attr in polled:
            return False
        admits = any(
            isinstance(c.func, ast.Attribute)
            and c.func.attr in ("append", "extend", "insert")
            and isinstance(c.func.value, ast.Attribute)
            and is_self_attr(c.func.value, c.func.value.attr)
            and c.func.value.attr in polled
            for f in reached
            for c in self.facts(f).queue_calls
        )
        return admits and any(True for _ in self._sites(cls, func, local))

    def _polled_lists(self, cls: str) -> set[str]:
        """The attributes whose entries' receivers the poll methods of ``cls`` read (``[r.
        kv_receiver for r in self.queue]``): their wait is bounded by the receivers' own
        clocks (PDG006), not by the queue."""
        found: set[str] = set()
        for method in self.queues()[cls]:
            for f in self.reached(cls, method):
                found |= kept(f, "_pdguard_decode_polled", _receiver_lists)
        return found

    def entries(self, requeue: Requeue) -> Entries:
        """What the entries of ``requeue``'s pending list are, as the tree shows them: the
        classes it is filled with, and the attributes the queue's code reads on them."""
        types: set[str] = set()
        read: set[str] = set()
        attr = requeue.attr
        for info in self.index.mro(requeue.owner.name):
            for func in info.methods.values():
                params = {
                    a.arg: a.annotation
                    for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)
                }
                values = _local_values(func)
                items = _items_of(func, attr)
                if func is requeue.func:
                    item = requeue.node.args[0] if requeue.node.args else None
                    if isinstance(item, ast.Name):
                        items.add(item.id)
                for node in own_nodes(func):
                    if isinstance(node, ast.AnnAssign) and is_self_attr(node.target, attr):
                        types |= _element_names(node.annotation)
                    if not (
                        isinstance(node, ast.Call)
                        and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ("append", "insert")
                        and is_self_attr(node.func.value, attr)
                        and node.args
                    ):
                        continue
                    added = node.args[-1]
                    if isinstance(added, ast.Name):
                        items.add(added.id)
                    types |= self._made(requeue.owner.name, func, added, params, values)
                read |= paths_read(func, items)
        return Entries(tuple(sorted(types)), frozenset(read))

    def _made(
        self,
        cls: str,
        func: ast.FunctionDef,
        value: ast.expr,
        params: dict[str, ast.expr | None],
        values: dict[str, list[ast.expr]],
        depth: int = 0,
    ) -> set[str]:
        """The classes ``value`` (in ``func``) can be an instance of: a parameter's annotation,
        a constructor call (a capitalised name), or what a ``self.<helper>()`` it is returned
        by returns; "?" for anything else."""
        if isinstance(value, ast.Name):
            if params.get(value.id) is not None:
                return type_names(params[value.id]) or {"?"}
            assigned = values.get(value.id, [])
            if not assigned:
                return {"?"}
            return set().union(*(self._made(cls, func, v, params, {}, depth) for v in assigned))
        if isinstance(value, ast.Call):
            callee = value.func
            if is_self_attr(callee, getattr(callee, "attr", "")) and depth < 3:
                assert isinstance(callee, ast.Attribute)
                owner = self.index.resolve(cls, callee.attr)
                if owner is None:
                    return {"?"}
                helper = owner.methods[callee.attr]
                returned = [
                    n.value for n in own_nodes(helper) if isinstance(n, ast.Return) and n.value
                ]
                helper_params = {a.arg: a.annotation for a in helper.args.args}
                helper_values = _local_values(helper)
                return set().union(
                    *(
                        self._made(cls, helper, v, helper_params, helper_values, depth + 1)
                        for v in returned
                    )
                ) or {"?"}
            names = type_names(callee)
            if names and all(name[:1].isupper() for name in names):
                return names
        return {"?"}

    def _sites(
        self, cls: str, func: ast.FunctionDef, local: str
    ) -> Iterator[tuple[ast.FunctionDef, ast.Call]]:
        yield from ((func, call) for call in _appends(func, local))
        for node in own_nodes(func):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            callee = node.value.func
            if not (
                isinstance(callee, ast.Attribute) and getattr(callee.value, "id", "") == "self"
            ):
                continue
            owner = self.index.resolve(cls, callee.attr)
            if owner is None:
                continue
            helper = owner.methods[callee.attr]
            for target in node.targets:
                position = _position_of(target, local)
                if position is None:
                    continue
                for returned in _returned_names(helper, position):
                    yield from ((helper, call) for call in _appends(helper, returned))

    def _helper(self, cls: str, name: str) -> ast.FunctionDef | None:
        owner = self.index.resolve(cls, name)
        return None if owner is None else owner.methods[name]

    @cached_property
    def _stamps(self) -> dict[str, frozenset[str]]:
        """The clocks each stamp is written with in the queues' modules (``stamp_clocks``)."""
        return stamp_clocks(self.index.modules.values())

    def _deadline_on_entries(self, cls: str) -> list[ast.FunctionDef]:
        """The functions, reached from a poll method, with a loop over a queue attribute
        that fails an entry once the time since its stamp exceeds a limit."""
        if cls not in self._deadlines:
            self._deadlines[cls] = list(self._finds_deadline_on_entries(cls))
        return self._deadlines[cls]

    def _finds_deadline_on_entries(self, cls: str) -> Iterator[ast.FunctionDef]:
        reached = {id(f): f for m in self.queues()[cls] for f in self.reached(cls, m)}
        for func in reached.values():
            if self._fails_overdue_entries(func):
                yield func

    def _fails_overdue_entries(self, func: ast.FunctionDef) -> bool:
        clocks = _clock_names(func)
        elapsed = _elapsed_locals(func, clocks)
        for loop in (n for n in own_nodes(func) if isinstance(n, ast.For)):
            if not (
                isinstance(loop.iter, ast.Attribute)
                and getattr(loop.iter.value, "id", "") == "self"
                and isinstance(loop.target, ast.Name)
            ):
                continue
            entry = loop.target.id
            for test_if in (n for n in walk(loop) if isinstance(n, ast.If)):
                stamps = [
                    stamp
                    for stamp in _elapsed_operands(test_if.test, clocks, elapsed, self._stamps)
                    if not _restamped_before(loop, stamp, test_if, clocks)
                ]
                on_entry = any(entry in {getattr(n, "id", None) for n in walk(s)} for s in stamps)
                if on_entry and any(_fails(s) for s in test_if.body + test_if.orelse):
                    return True
        return False


def _receiver_lists(func: ast.FunctionDef) -> set[str]:
    """``self.<attr>`` lists ``func`` iterates (a loop or a comprehension) reading an item's
    ``kv_receiver``."""
    found = set()
    for node, target, iterated in _loops(func):
        if isinstance(iterated, ast.Attribute) and getattr(iterated.value, "id", "") == "self":
            items = {n.id for n in walk(target) if isinstance(n, ast.Name)}
            if any(
                isinstance(n, ast.Attribute)
                and n.attr == REQ_RECEIVER
                and getattr(n.value, "id", None) in items
                for n in walk(node)
            ):
                found.add(iterated.attr)
    return found


def _loops(func: ast.FunctionDef) -> Iterator[tuple[ast.AST, ast.expr, ast.expr]]:
    """Each loop and comprehension generator of ``func``: (the node, its target, what it
    iterates)."""
    for node in own_nodes(func):
        if isinstance(node, ast.For):
            yield node, node.target, node.iter
        elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            for g in node.generators:
                yield node, g.target, g.iter


def _items_of(func: ast.FunctionDef, attr: str) -> set[str]:
    """The names ``func`` binds to entries of ``self.<attr>`` (a loop or comprehension over it)."""
    return {
        target.id
        for _, target, iterated in _loops(func)
        if is_self_attr(iterated, attr) and isinstance(target, ast.Name)
    }


def paths_read(func: ast.FunctionDef, items: set[str]) -> set[str]:
    """The attribute paths ``func`` reads on the names in ``items``: ``x.req.rid`` gives
    "req" and "req.rid"."""
    found = set()
    for node in own_nodes(func):
        chain: list[str] = []
        sub: ast.AST = node
        while isinstance(sub, ast.Attribute):
            chain.append(sub.attr)
            sub = sub.value
        if chain and isinstance(sub, ast.Name) and sub.id in items:
            path = ".".join(reversed(chain))
            parts = path.split(".")
            found |= {".".join(parts[: i + 1]) for i in range(len(parts))}
    return found


def type_names(expr: ast.expr | None) -> set[str]:
    """The class an annotation or a constructor call names (``Req``, ``"Req"``,
    ``Optional[Req]``, ``module.Req``)."""
    if expr is None:
        return set()
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        try:
            expr = ast.parse(expr.value, mode="eval").body
        except SyntaxError:
            return set()
    if isinstance(expr, ast.Name):
        return {expr.id}
    if isinstance(expr, ast.Attribute):
        return {expr.attr}
    if isinstance(expr, ast.Subscript) and type_names(expr.value) & {"Optional"}:
        return type_names(expr.slice)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):  # X | None
        return (type_names(expr.left) | type_names(expr.right)) - {"None"}
    return set()


def _element_names(annotation: ast.expr) -> set[str]:
    """The element class of a list annotation: ``List[DecodeRequest]``, ``list[Req]``."""
    if isinstance(annotation, ast.Subscript):
        return type_names(annotation.slice)
    return set()


def _advanced_every_call(func: ast.FunctionDef) -> set[str]:
    """``self.<attr>`` names ``func`` assigns in a statement that runs on every call (its own
    body, and the body and ``finally`` of a ``try`` or the body of a ``with`` there; not under
    a condition or a loop): a test on them changes from one call to the next."""
    return {
        target.attr
        for stmt in _every_call(func.body)
        if isinstance(stmt, ast.Assign | ast.AugAssign)
        for target in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
        if isinstance(target, ast.Attribute) and getattr(target.value, "id", "") == "self"
    }


def _every_call(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of ``body`` that run whenever it runs to its end: its own, and those of
    the ``try`` bodies, ``finally`` blocks and ``with`` bodies among them (recursively)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.Try | ast.TryStar):
            yield from _every_call(stmt.body)
            yield from _every_call(stmt.finalbody)
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            yield from _every_call(stmt.body)


def _local_values(func: ast.FunctionDef) -> dict[str, list[ast.expr]]:
    """The values ``func`` assigns to each local name."""
    found: dict[str, list[ast.expr]] = {}
    for node in own_nodes(func):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, []).append(node.value)
        elif isinstance(node, ast.NamedExpr):
            found.setdefault(node.target.id, []).append(node.value)
    return found


def _with_locals(test: ast.expr, assigned: dict[str, list[ast.expr]]) -> ast.Module:
    """``test`` and the values of the locals it reads (transitively), to read as one."""
    nodes: list[ast.expr] = [test]
    seen: set[str] = set()
    for node in nodes:
        for sub in walk(node):
            if isinstance(sub, ast.Name) and sub.id in assigned and sub.id not in seen:
                seen.add(sub.id)
                nodes += assigned[sub.id]
    return ast.Module(body=[ast.Expr(n) for n in nodes], type_ignores=[])


def _static(read: ast.AST) -> bool:
    """Reads no state of the scheduler (``self.<attr>``, except its ``server_args``): a test
    on the configuration is fixed for the life of the process, it does not hold a request
    back until something happens."""
    return not any(
        isinstance(n, ast.Attribute)
        and getattr(n.value, "id", "") == "self"
        and n.attr != SERVER_ARGS
        for n in walk(read)
    )


def _reads_rank(node: ast.AST) -> bool:
    """Does ``node`` read the scheduler's rank (``self.tp_rank``, ``...kv_args.engine_rank``)?
    Polls skipped on such a test are entered by some ranks and not others, and each poll
    all-reduces over the ranks: those that poll wait for those that do not."""
    return any(isinstance(n, ast.Attribute) and n.attr in RANK_ATTRS for n in walk(node))


def _reads_any(node: ast.AST, attrs: set[str]) -> bool:
    return any(
        isinstance(n, ast.Attribute) and n.attr in attrs and getattr(n.value, "id", "") == "self"
        for n in walk(node)
    )


def _negated(test: ast.expr) -> ast.expr:
    return ast.UnaryOp(op=ast.Not(), operand=test)


def _waiting(test: ast.expr) -> bool:
    """A test that holds only while retracted requests wait: ``<retracted requests>``,
    ``len(<retracted requests>) > 0``, or the negation of a test that none do."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _none_wait(test.operand)
    return _reads_attr(test, RETRACTED_QUEUE) and not _none_wait(test)


def _none_wait(test: ast.expr) -> bool:
    """A test that holds while no retracted request waits: ``not <retracted requests>``,
    ``len(<retracted requests>) == 0``."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _reads_attr(test.operand, RETRACTED_QUEUE)
    return (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == 0
        and _reads_attr(test.left, RETRACTED_QUEUE)
    )


def _reads_attr(node: ast.AST, attr: str) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == attr for n in walk(node))


def _before(a: ast.stmt | ast.expr, b: ast.stmt | ast.expr) -> bool:
    return (a.lineno, a.col_offset) < (b.lineno, b.col_offset)


def _guard(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> ast.expr | None:
    """The test of the innermost ``if`` around ``node`` (negated when in its ``else``)."""
    child, parent = node, parents.get(node)
    while parent is not None and not isinstance(parent, ast.FunctionDef):
        if isinstance(parent, ast.If):
            if child in parent.body:
                return parent.test
            return ast.UnaryOp(op=ast.Not(), operand=parent.test)
        child, parent = parent, parents.get(parent)
    return None


def _only_probes_emptiness(test: ast.expr, targets: set[str]) -> bool:
    """``test`` reads the skipped queues only through ``len(q)``, ``q.queue`` or ``len(q.queue)``,
    and reads every one of them."""
    probed: set[str] = set()
    for node in walk(test):
        if isinstance(node, ast.Attribute):
            base = ast.unparse(node.value)
            if base in targets:
                if node.attr != DECODE_QUEUE_LIST:
                    return False
                probed.add(base)
        elif isinstance(node, ast.Call) and call_name(node) == "len" and node.args:
            arg = ast.unparse(node.args[0])
            if arg in targets:
                probed.add(arg)
    return probed == targets


def _appends(func: ast.AST, local: str) -> list[ast.Call]:
    return [
        node
        for node in own_nodes(func)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("append", "extend", "insert")
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == local
    ]


def _position_of(target: ast.expr, local: str) -> int | None:
    if isinstance(target, ast.Name) and target.id == local:
        return -1
    if isinstance(target, ast.Tuple):
        for i, elt in enumerate(target.elts):
            if isinstance(elt, ast.Name) and elt.id == local:
                return i
    return None


def _returned_names(helper: ast.FunctionDef, position: int) -> set[str]:
    names = set()
    for node in own_nodes(helper):
        if isinstance(node, ast.Return) and node.value is not None:
            value = node.value
            if position >= 0 and isinstance(value, ast.Tuple) and position < len(value.elts):
                value = value.elts[position]
            if isinstance(value, ast.Name):
                names.add(value.id)
    return names


def _restamped_before(
    loop: ast.AST, stamp: ast.expr, test_if: ast.AST, clocks: Mapping[str, str]
) -> bool:
    """Is ``stamp`` set to a fresh clock reading on every pass of ``loop`` before ``test_if``
    reads it (an assignment of a clock call, or of a local holding one, in a statement list
    that leads to ``test_if``)? Then the elapsed time is measured from this pass, and never
    grows. Reading a kept stamp into a local (``first = self.since.setdefault(rid,
    time.monotonic())``, ``first = self.since[rid]``) is no restamp."""
    target = ast.unparse(stamp)
    for node in walk(loop):
        for body in (getattr(node, "body", None), getattr(node, "orelse", None)):
            if not isinstance(body, list):
                continue
            for index, stmt in enumerate(body):
                if not (
                    isinstance(stmt, ast.Assign)
                    and any(ast.unparse(t) == target for t in stmt.targets)
                    and _is_clock(stmt.value, clocks)
                ):
                    continue
                if any(test_if is n for later in body[index + 1 :] for n in walk(later)):
                    return True
    return False


def _bounding_test(
    func: ast.AST,
    test: ast.expr,
    loop: ast.AST,
    clocks: Mapping[str, str],
    stamps: Mapping[str, frozenset[str]] | None = None,
) -> bool:
    """Does ``test`` (in ``func``, within ``loop``) compare a retry counter ``func``
    increments, or an elapsed time whose stamp is not taken afresh on each pass?"""
    counters, elapsed = _counters(func), _elapsed_locals(func, clocks)
    compares = [n for n in walk(test) if isinstance(n, ast.Compare)]
    return any(
        ast.unparse(part) in counters
        for compare in compares
        for part in walk(compare)
        if isinstance(part, ast.Name | ast.Attribute | ast.Subscript)
    ) or any(
        not _restamped_before(loop, stamp, test, clocks)
        for compare in compares
        for stamp in _elapsed_operands(compare, clocks, elapsed, stamps)
    )


def _helper_bounds(
    helper: ast.FunctionDef, stamps: Mapping[str, frozenset[str]] | None = None
) -> bool:
    """A helper whose returned value is such a test (``return waited > limit``): calling it
    in a condition tests the bound."""
    clocks = _clock_names(helper)
    return any(
        isinstance(node, ast.Return)
        and node.value is not None
        and _bounding_test(helper, node.value, helper, clocks, stamps)
        for node in own_nodes(helper)
    )


def _bounded_in_loop(
    func: ast.FunctionDef,
    site: ast.Call,
    helper: Callable[[str], ast.FunctionDef | None] = lambda _: None,
    stamps: Mapping[str, frozenset[str]] | None = None,
) -> bool | None:
    """True if the innermost loop around ``site`` also fails requests under a retry counter
    or an elapsed-time comparison (inline, or returned by the ``self.<helper>()`` its
    condition calls, found by ``helper``), on a branch that does not hold ``site``; None if
    it has such a comparison but no branch of it fails a request; else False."""
    parents = own_parents(func)
    loop = parents.get(site)
    while loop is not None and not isinstance(loop, ast.For | ast.While | ast.FunctionDef):
        loop = parents.get(loop)
    if loop is None or isinstance(loop, ast.FunctionDef):
        return False
    clocks = _clock_names(func)
    inert: bool | None = False
    for node in walk(loop):
        if not isinstance(node, ast.If):
            continue
        called = [
            found
            for call in walk(node.test)
            if isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and getattr(call.func.value, "id", "") == "self"
            and (found := helper(call.func.attr)) is not None
        ]
        bound = _bounding_test(func, node.test, loop, clocks, stamps) or any(
            _helper_bounds(h, stamps) for h in called
        )
        if not bound:
            continue
        inert = None
        for branch in _paths_of(node, parents):
            holds_site = any(site is n for stmt in branch for n in walk(stmt))
            if not holds_site and any(_fails(stmt) for stmt in branch):
                return True
    return inert


_JUMPS = (ast.Continue, ast.Break, ast.Return, ast.Raise)


def _paths_of(node: ast.If, parents: dict[ast.AST, ast.AST]) -> tuple[list[ast.stmt], ...]:
    """The statements each way out of ``node`` runs in its loop pass: its body and its
    ``else``, each followed by the statements after the ``if`` unless it ends in a jump
    (``continue``, ``break``, ``return``, ``raise``). ``if waited <= limit: keep; continue``
    then ``abort()`` is the ``else`` form written with an early ``continue``."""
    after: list[ast.stmt] = []
    parent = parents.get(node)
    for name in ("body", "orelse", "finalbody"):
        block = getattr(parent, name, None)
        if isinstance(block, list) and any(s is node for s in block):
            after = block[[id(s) for s in block].index(id(node)) + 1 :]
    return tuple(
        branch if branch and isinstance(branch[-1], _JUMPS) else [*branch, *after]
        for branch in (node.body, node.orelse)
    )
