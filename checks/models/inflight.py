"""What ``prefill.py`` does with requests in the inflight queue, read off its ``ast``.

The model answers, for ``process_disagg_prefill_inflight_queue``:

* where a request is kept for another step (appended to the list that becomes the queue);
* where requests enter the queue (``self.disagg_prefill_inflight_queue.append(req)``) and which
  attribute, if any, is stamped there with a clock value, and whether only once;
* which deadline checks exist: comparisons of a clock value with a stamp read off the request,
  found in the function and in the ``self.*()`` methods it calls, and whether each runs before
  the poll all-reduce on every call, and whether it fails the request's sender.

It judges the code, not pdguard's text: any names, ``time.time()`` or ``time.monotonic()``, a
helper method or an inline loop.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from pdguard.sglang_names import (
    BOOTSTRAP_QUEUE,
    POLL_ALL_REDUCE_PREFIX,
    PP_CONSENSUS_PARAM,
    SENDER_ABORT,
    KVPoll,
)
from pdguard.sglang_names import INFLIGHT_FUNCTION as FUNCTION
from pdguard.sglang_names import INFLIGHT_QUEUE as QUEUE
from pdguard.sglang_names import REQ_SENDER as SENDER

from ..classes import methods_of
from ..nodes import first_line, kept, own_parents, statement_walk, walk
from .bounded_wait import (
    CLOCK_FUNCTIONS,
    Clock,
    Comparison,
    Direction,
    FailAction,
    LimitKind,
    StartKind,
    call_name,
    clock_aliases,
    clock_of,
    fail_action,
    limit_of,
    never_runs,
    overdue_branch,
    read_test,
    start_of,
)
from .kv_senders import ClassIndex, is_self_attr


def imported_names(module: ast.Module) -> set[str]:
    """Names the module binds by a module-level import (``envs``, ``os``, ``get_int_env_var``):
    what they hold is configuration or code, never a request."""
    names = set()
    for node in module.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def is_clock(
    node: ast.AST, clocks: Mapping[str, Clock], clock_vars: Mapping[str, Clock] = {}
) -> bool:
    """A clock reading (``bounded_wait.clock_of``)."""
    return clock_of(node, clocks, clock_vars) is not None


@dataclass
class Stamp:
    attr: str
    line: int
    col: int
    guarded: bool  # only set when not set yet (keeps the first stamp)
    start: StartKind = StartKind.STAMP  # a stamp, or a stored deadline (a reading + the limit)
    clock: Clock | None = None  # the clock it reads


@dataclass
class SendBack:
    """A method that sends a request back to an earlier queue (optimistic prefill's
    ``optimistic_release_and_requeue``), from where it can enter the inflight queue again."""

    method: str
    line: int
    col: int
    queue: str  # the queue it goes back to (``waiting_queue``, the bootstrap queue)
    resets: set[str] = field(default_factory=set)  # request attributes it clears


@dataclass
class Entry:
    """A statement that puts requests into the inflight queue."""

    stmt: ast.stmt
    how: str  # "append()", "extend()", "insert()", "+=", "slice assignment", "reassignment"
    element: ast.expr | None = None  # the one request (append, insert)
    requests: ast.expr | None = None  # the requests (extend, +=, slices, reassignment)

    @property
    def line(self) -> int:
        return self.stmt.lineno


@dataclass
class Unmodelled:
    """Something pdguard cannot follow, so it cannot prove the property."""

    line: int
    col: int
    message: str


@dataclass
class DeadlineCheck:
    attr: str  # the attribute the deadline measures from
    via_sender: bool  # read off the request's sender (e.g. sender.init_time)
    line: int
    col: int
    method: str  # where the comparison is
    fails_sender: bool  # the expired branch acts on the request's sender
    position: str = ""  # "before" / "after" the poll all-reduce, "conditional" before it
    # What the expired branch does to the sender: the methods it calls on it, and where it sets
    # ``poll`` on the instance (``sender.poll = lambda: KVPoll.Failed``), if it does.
    sender_calls: set[str] = field(default_factory=set)
    poll_set_at: tuple[int, int] | None = None
    # The expired branch's loop looks at whether the request is parked (``pending_bootstrap``).
    minds_parked: bool = False
    # Where the loop skips every parked request whatever its sender polls (``if
    # req.pending_bootstrap: continue``, no test of Bootstrapping), as (line, col); None if
    # it does not. Under PP a stage never unparks a request that bootstrapped (it is not in
    # the consensus), so such a skip leaves it waiting for ever.
    parked_skip: tuple[int, int] | None = None
    # The expired branch's loop leaves alone a request whose own sender already polls as
    # transferred (what a PP stage reports into the stages' consensus).
    minds_ended_poll: bool = False
    # The check never runs when the PP consensus (``rids_to_check``) is given, as every PP
    # stage gives it: ``if rids_to_check is not None: continue`` before it, or under ``if
    # rids_to_check is None:``.
    skipped_under_pp: bool = False
    # Which requests of the queue the check reaches: "" for every one (a loop over the whole
    # queue, or a helper called in one), else what it loops over: a part of the queue
    # (``queue[1:]``, ``range(len(queue) - 1)``; ``partial``) or something pdguard cannot
    # tell covers the queue (a ``while`` loop, another list, no loop).
    reaches: str = ""
    partial: bool = False
    # The rank test the failure is behind (``self.tp_rank == 0``), if it runs on some ranks only.
    rank_gate: str = ""
    # The methods that call, one through the other, the one holding the check (``method``),
    # from the inflight function (excluded): they run the deadline too.
    callers: tuple[str, ...] = ()
    # What the comparison tests (``bounded_wait.read_test``; None: a shape it does not read,
    # taken as true once overdue) and the clock it reads now on.
    comparison: Comparison | None = None
    clock: Clock | None = None
    # Why the check never fails an overdue request, if it does not: it never runs (after a
    # ``return``, under ``if False``, in a lambda) or its comparison never holds then.
    never: str = ""
    # The loop around it takes the request out of the queue (on this rank only).
    drops: bool = False

    @property
    def each_step(self) -> bool:
        """Decided on every step and unanimous: before the poll all-reduce, or after it on the
        requests kept for the next step's reduce (``bounded_wait.Unanimity``)."""
        return self.position in (BEFORE, NEXT_STEP) and not (
            self.position == NEXT_STEP and self.drops
        )


# Where a check runs, relative to the poll all-reduce: before it on every call, after it on
# the requests kept for the next step (after the queue is rebuilt), after it on requests this
# step may end, before it behind a condition.
BEFORE, NEXT_STEP, AFTER, CONDITIONAL = "before", "next step", "after", "conditional"


@dataclass
class InflightModel:
    class_name: str
    function: ast.FunctionDef
    keep_sites: list[ast.Call] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    stamps: dict[int, Stamp | None] = field(default_factory=dict)  # id(entry.stmt) -> stamp
    unmodelled: list[Unmodelled] = field(default_factory=list)
    checks: list[DeadlineCheck] = field(default_factory=list)
    restamps: list[Stamp] = field(default_factory=list)  # stamps inside FUNCTION (on keep)
    clears: list[Stamp] = field(default_factory=list)  # attributes cleared where kept
    assigned_attrs: set[str] = field(default_factory=set)  # attrs given a clock value anywhere
    send_backs: list[SendBack] = field(default_factory=list)
    # Where the inflight function keeps a parked request (``if req.pending_bootstrap:``, 0.5.16+:
    # prefill done, bootstrap not, bounded by the bootstrap timeout), if it does.
    parked_line: int = 0

    def unstamped(self) -> list[Entry]:
        return [e for e in self.entries if self.stamps.get(id(e.stmt)) is None]

    def stamped_attrs(self) -> set[str]:
        """Attributes stamped at every append site."""
        stamps = list(self.stamps.values())
        if not stamps or any(s is None for s in stamps):
            return set()
        return set.intersection(*({s.attr} for s in stamps if s is not None))

    def stamp_clocks(self, attr: str) -> set[Clock]:
        """The clocks the stamps of ``attr`` read at the entries."""
        return {
            s.clock
            for s in self.stamps.values()
            if s is not None and s.attr == attr and s.clock is not None
        }

    def mixed_clock(self, check: DeadlineCheck) -> Clock | None:
        """The stamp's clock, where the check reads now on another (``Clock.agrees``)."""
        if check.clock is None:
            return None
        return next((c for c in self.stamp_clocks(check.attr) if not c.agrees(check.clock)), None)

    def valid_checks(self, classes: ClassIndex | None = None) -> list[DeadlineCheck]:
        """The checks that bound every request's wait; with the tree's sender ``classes``,
        also judged by what the overdue branch's calls do there (``unfailed_senders``)."""
        stamped = self.stamped_attrs()
        return [
            c
            for c in self.checks
            if c.each_step
            and c.fails_sender
            and not c.via_sender
            and c.attr in stamped
            and not c.reaches
            and not c.rank_gate
            and not c.never
            and self.mixed_clock(c) is None
            and not (classes is not None and unfailed_senders(c, classes))
        ]


# Calls on a sender that fail nothing themselves: a reading, a reason recorded beside abort().
_NOT_FAIL_ACTIONS = frozenset({"poll", "record_failure", "failure_exception"})


def unfailed_senders(check: DeadlineCheck, classes: ClassIndex) -> list[str]:
    """The tree's concrete senders whose ``poll()`` does not report Failed after what the
    check's overdue branch calls on the request's sender (``bounded_wait.fail_action``: a
    ``release()`` that frees buffers fails nothing), where it calls no ``abort()`` (PDG008
    judges that one) and sets no ``poll``."""
    methods = sorted(check.sender_calls - _NOT_FAIL_ACTIONS)
    if not methods or SENDER_ABORT in methods or check.poll_set_at is not None:
        return []
    senders = [s for s in classes.senders() if classes.is_concrete(s)]
    if fail_action(senders, classes.abort_honoured, methods) is not FailAction.DOES_NOT_FAIL:
        return []
    return [s for s in senders if not any(classes.abort_honoured(s, m) for m in methods)]


class _Scope:
    """Names a function assigns from clock calls and from attribute reads."""

    def __init__(
        self,
        function: ast.FunctionDef,
        clocks: Mapping[str, Clock],
        imported: frozenset[str] = frozenset(),
        clock_params: frozenset[tuple[str, Clock]] = frozenset(),
    ) -> None:
        self.clocks = clocks
        self.imported = imported
        self.clock_vars: dict[str, Clock] = dict(clock_params)  # names holding a clock reading
        self.reads: dict[str, tuple[str, bool]] = {}  # name -> (attr, via_sender)
        self.senders: set[str] = set()
        self.values: dict[str, ast.expr] = {}  # name -> the expression last assigned to it
        for node in walk(function):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if not isinstance(target, ast.Name):
                    continue
                self.values[target.id] = node.value
                reading = self.clock(node.value)
                if reading is not None:
                    self.clock_vars[target.id] = reading
                read = self.stamp_read(node.value)
                if read is not None:
                    self.reads[target.id] = read
                if isinstance(node.value, ast.Attribute) and node.value.attr == SENDER:
                    self.senders.add(target.id)

    def is_clock(self, node: ast.AST) -> bool:
        return is_clock(node, self.clocks, self.clock_vars)

    def clock(self, node: ast.AST) -> Clock | None:
        return clock_of(node, self.clocks, self.clock_vars)

    def stamp_read(self, node: ast.AST) -> tuple[str, bool] | None:
        """``req.attr`` / ``getattr(req, "attr", ...)`` / a name holding one: (attr, via_sender);
        or a stamp the scheduler keeps by request (``keyed_stamp``)."""
        if isinstance(node, ast.Name):
            return self.reads.get(node.id)
        keyed = keyed_stamp(node)
        if keyed is not None and (
            not isinstance(node, ast.Subscript) or isinstance(node.ctx, ast.Load)
        ):
            return keyed, False
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                return None  # scheduler state, not something stamped on a request
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in self.imported:
                return None  # ``envs.SGLANG_X``: configuration, not a request's stamp
            return node.attr, _mentions_sender(node.value) or _name_in(node.value, self.senders)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            obj = node.args[0]
            return node.args[1].value, _mentions_sender(obj) or _name_in(obj, self.senders)
        return None

    def touches_sender(self, node: ast.AST) -> bool:
        return _mentions_sender(node) or _name_in(node, self.senders)


def _mentions_sender(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == SENDER for n in walk(node))


def _name_in(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in walk(node))


def _expanded(parts: list[ast.expr], scope: _Scope, depth: int = 3) -> list[ast.AST]:
    """The nodes of ``parts``, and of what the names in them were assigned (``waited = now -
    req.entered_at; if waited > TIMEOUT``)."""
    nodes: list[ast.AST] = [n for part in parts for n in walk(part)]
    if depth:
        for node in list(nodes):
            if isinstance(node, ast.Name) and node.id in scope.values:
                value = scope.values[node.id]
                if scope.is_clock(value) or scope.stamp_read(value) is not None:
                    continue  # already understood as a clock value or a stamp read
                nodes += _expanded([value], scope, depth - 1)
    return nodes


def _deadline_compare(compare: ast.Compare, scope: _Scope) -> tuple[str, bool] | None:
    """(attr, via_sender) if ``compare`` compares a clock value with a stamp read off a request."""
    nodes = _expanded([compare.left, *compare.comparators], scope)
    if not any(scope.is_clock(n) for n in nodes):
        return None
    # what a call is made on is a method, not a value read (``envs.X.get()``, ``t.value()``)
    callees = {id(inner) for n in nodes if isinstance(n, ast.Call) for inner in walk(n.func)}
    for node in nodes:
        if id(node) in callees:
            continue
        if scope.is_clock(node) or (isinstance(node, ast.Name) and node.id in scope.clock_vars):
            continue
        read = scope.stamp_read(node)
        if read is not None and read[0] not in CLOCK_FUNCTIONS:
            return read
    return None


def _comparison(
    compare: ast.Compare, scope: _Scope, starts: Mapping[str, StartKind]
) -> tuple[Comparison | None, Clock | None]:
    """What ``compare`` tests (``bounded_wait.read_test``), and the clock it reads now on."""

    def start(node: ast.AST) -> StartKind | None:
        read = scope.stamp_read(node)
        if read is None or read[0] in CLOCK_FUNCTIONS:
            return None
        return starts.get(read[0], StartKind.STAMP)

    def expand(name: ast.expr) -> ast.expr | None:
        return scope.values.get(name.id) if isinstance(name, ast.Name) else None

    nodes = _expanded([compare.left, *compare.comparators], scope)
    clock = next((c for n in nodes if (c := scope.clock(n)) is not None), None)
    return read_test(compare, scope.is_clock, start, expand), clock


class _ModuleIndex:
    def __init__(self, module: ast.Module) -> None:
        self.module = module
        self.clocks = clock_aliases(module)
        self.imported = frozenset(imported_names(module))
        self.methods: dict[str, ast.FunctionDef] = {}
        self.owner: dict[int, str] = {}
        self._scopes: dict[tuple[int, frozenset[tuple[str, Clock]]], _Scope] = {}
        for cls in module.body:
            if isinstance(cls, ast.ClassDef):
                for item in methods_of(cls).values():
                    self.methods.setdefault(item.name, item)
                    self.owner[id(item)] = cls.name

    def scope(
        self, function: ast.FunctionDef, clock_params: frozenset[tuple[str, Clock]] = frozenset()
    ) -> _Scope:
        """The function's names, analysed once however many statements ask; ``clock_params``:
        its parameters that the call reaching it gives a clock reading."""
        key = (id(function), clock_params)
        if key not in self._scopes:
            self._scopes[key] = _Scope(function, self.clocks, self.imported, clock_params)
        return self._scopes[key]

    @cached_property
    def starts(self) -> dict[str, StartKind]:
        """Attributes the module stores a deadline in (``req.deadline = now + limit``): their
        reads are deadlines, not stamps."""
        found: dict[str, StartKind] = {}
        for node in statement_walk(self.module):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.BinOp):
                start = start_of(node.value, lambda n: clock_of(n, self.clocks))
                if start is not None and start.kind is StartKind.DEADLINE:
                    found |= {
                        t.attr: start.kind for t in node.targets if isinstance(t, ast.Attribute)
                    }
        return found

    @cached_property
    def _blocks(self) -> tuple[dict[int, ast.AST], dict[int, tuple[list[ast.stmt], int]]]:
        """(id(block) -> the node holding it, id(stmt) -> (its block, its position))."""
        holders: dict[int, ast.AST] = {}
        places: dict[int, tuple[list[ast.stmt], int]] = {}
        for node, block in _held_blocks(self.module):
            holders[id(block)] = node
            for position, stmt in enumerate(block):
                places[id(stmt)] = (block, position)
        return holders, places

    def loop_of(self, block: list[ast.stmt]) -> ast.For | None:
        """The ``for`` loop whose body ``block`` is."""
        holder = self._blocks[0].get(id(block))
        return holder if isinstance(holder, ast.For) and holder.body is block else None

    def block_of(self, stmt: ast.stmt) -> tuple[list[ast.stmt] | None, int]:
        return self._blocks[1].get(id(stmt), (None, 0))

    def self_calls(self, node: ast.AST) -> Iterator[ast.FunctionDef]:
        for _, method in self.self_call_sites(node):
            yield method

    def self_call_sites(self, node: ast.AST) -> Iterator[tuple[ast.Call, ast.FunctionDef]]:
        """``self.<method>(...)`` calls below ``node`` of this class's methods, with the method."""
        for call in walk(node):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Name)
                and call.func.value.id == "self"
                and call.func.attr in self.methods
            ):
                yield call, self.methods[call.func.attr]


def _checks_in(
    index: _ModuleIndex,
    function: ast.FunctionDef,
    region: ast.AST,
    seen: set[str],
    pp_names: frozenset[str] = frozenset({PP_CONSENSUS_PARAM}),
    pp_skipped: bool = False,
    outer: tuple[str, bool] | None = None,
    gated: str = "",
    clock_params: frozenset[tuple[str, Clock]] = frozenset(),
    site: tuple[ast.AST, _Scope, ast.FunctionDef, frozenset[str]] | None = None,
    callers: tuple[str, ...] = (),
    dead: str = "",
) -> list[DeadlineCheck]:
    """Deadline checks in ``region`` of ``function``, and in the methods it calls.
    ``pp_names``: the names that hold the PP consensus in ``function``; ``pp_skipped``: the
    call that reached ``function`` does not run when it is given; ``outer``: what the loop
    around that call reaches (``_reach``), ``gated``: the rank test that call is behind;
    ``clock_params``: the parameters that call gives a clock reading; ``site``: the loop
    around that call (with its function's scope, the function and its PP names). A check
    outside any loop of ``function`` (a predicate, ``def _late(self, req, now): return now -
    req.t > LIMIT``) is acted on where it is called: its failure is the site loop's."""
    scope = index.scope(function, clock_params)
    pp_names = pp_names | _aliases(function, pp_names)
    loops = [n for n in walk(region) if isinstance(n, ast.For | ast.While)]
    found = []
    for node in walk(region):
        if not isinstance(node, ast.Compare):
            continue
        read = _deadline_compare(node, scope)
        if read is None:
            continue
        loop = next((lp for lp in loops if any(n is node for n in walk(lp))), region)
        at, at_scope, at_names = function, scope, pp_names
        if loop is region and site is not None and _reach(node, function, scope) is None:
            loop, at_scope, at, at_names = site
        later = _loops_over_collected(at, loop)
        comparison, clock = _comparison(node, scope, index.starts)
        parents = own_parents(function)
        branch = (
            overdue_branch(node, comparison.direction, parents) if comparison is not None else None
        )
        inside = None if branch is None else {id(n) for stmt in branch for n in walk(stmt)}
        actions = [
            a
            for part in (loop, *later)
            for a in _failing_actions(index, part, at_scope, node)
            if inside is None or id(a) in inside or part is not loop
        ]
        if inside is not None and not any(
            isinstance(n, ast.Call) and call_name(n) == "append"
            for n in walk(loop)
            if id(n) in inside
        ):
            actions = [a for a in actions if any(a is n for n in walk(loop))]
        fails = bool(actions)
        check = DeadlineCheck(read[0], read[1], node.lineno, node.col_offset, function.name, fails)
        check.callers = callers
        check.comparison, check.clock = comparison, clock
        check.never = dead or never_runs(node, parents, function)
        if not check.never and comparison is not None and comparison.direction is Direction.NEVER:
            check.never = "its comparison never holds for an overdue request"
        for limit in comparison.limit if comparison is not None and not check.never else ():
            local = scope.values.get(limit.id) if isinstance(limit, ast.Name) else None
            kind, line = limit_of(local or limit, index.module)
            line = line or (local.lineno if local is not None and kind is LimitKind.INFINITE else 0)
            if kind is LimitKind.INFINITE:
                check.never = f"its limit `{ast.unparse(limit)}` is infinite" + (
                    f" (line {line})" if line else ""
                )
        check.drops = _drops(loop)
        check.reaches, check.partial = (
            _reach(node, function, scope) or outer or ("no loop over the queue", False)
        )
        skip = _position_skip(node, function)
        if skip and not check.partial:
            check.reaches, check.partial = skip, True
        check.rank_gate = gated or _rank_gate(node, function)
        if not check.rank_gate and actions:
            gates = [_rank_gate(a, at) or _gate_inside(index, a) for a in actions]
            check.rank_gate = gates[0] if all(gates) else ""
        check.sender_calls, check.poll_set_at = _sender_actions(loop, at_scope)
        check.minds_parked = any(
            isinstance(n, ast.Attribute) and n.attr == PARKED for n in walk(loop)
        )
        check.parked_skip = _skips_every_parked(loop)
        check.minds_ended_poll = any(
            _spares_ended_transfers(part, at_scope, _unpassed(at, at_names))
            for part in (loop, *later)
        )
        check.skipped_under_pp = pp_skipped or _skipped_under_pp(node, function, pp_names)
        found.append(check)
    for call, callee in index.self_call_sites(region):
        if callee.name not in seen:
            seen.add(callee.name)
            around = next((lp for lp in loops if any(n is call for n in walk(lp))), None)
            clocks = frozenset(
                (p, reading)
                for p, a in _arguments(call, callee).items()
                if (reading := scope.clock(a)) is not None
            )
            found += _checks_in(
                index,
                callee,
                callee,
                seen,
                _passed_as(call, callee, pp_names),
                pp_skipped or _skipped_under_pp(call, function, pp_names),
                _reach(call, function, scope) or outer,
                gated or _rank_gate(call, function),
                clocks,
                (around, scope, function, pp_names) if around is not None else site,
                callers if function.name == FUNCTION else (*callers, function.name),
                dead or never_runs(call, own_parents(function), function),
            )
    return found


def _drops(loop: ast.AST) -> bool:
    """Does ``loop`` (around a deadline check) take requests out of the queue itself
    (``queue.remove(req)``, ``.pop()``, ``del queue[i]``)?"""
    for node in walk(loop):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("remove", "pop", "popleft", "clear")
            and _is_queue(node.func.value)
        ):
            return True
        if isinstance(node, ast.Delete) and any(
            isinstance(t, ast.Subscript) and _is_queue(t.value) for t in node.targets
        ):
            return True
    return False


def _loops_over_collected(function: ast.FunctionDef, loop: ast.AST) -> list[ast.For]:
    """The loops of ``function`` over a list that ``loop`` (around a deadline check) collects
    its requests in (``for req in queue: ... late.append(req)``, then ``for req in late:``):
    what they do to a request's sender, the deadline does."""
    if not (isinstance(loop, ast.For) and isinstance(loop.target, ast.Name)):
        return []
    collected = {
        node.func.value.id
        for node in walk(loop)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "append"
        and isinstance(node.func.value, ast.Name)
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id == loop.target.id
    }
    return [
        node
        for node in walk(function)
        if isinstance(node, ast.For)
        and node is not loop
        and isinstance(node.iter, ast.Name)
        and node.iter.id in collected
    ]


def _aliases(function: ast.FunctionDef, names: frozenset[str]) -> frozenset[str]:
    """Local names ``function`` binds to one of ``names`` (``agreed = rids_to_check``): they
    hold the PP consensus too."""
    return frozenset(
        target.id
        for node in walk(function)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Name)
        and node.value.id in names
        for target in node.targets
        if isinstance(target, ast.Name)
    )


def _unpassed(function: ast.FunctionDef, names: frozenset[str]) -> frozenset[str]:
    """The parameters of ``function`` with a None default that the call reaching it does not
    pass the PP consensus to (``self._expire()`` for ``def _expire(self, rids_to_check=None)``):
    they are always None there, so a guard on them being given never runs. The inflight
    function itself is called with the consensus."""
    if function.name == FUNCTION:
        return frozenset()
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    defaults = dict(zip([a.arg for a in positional][::-1], args.defaults[::-1], strict=False))
    defaults |= {
        a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None
    }
    return frozenset(
        name
        for name, default in defaults.items()
        if isinstance(default, ast.Constant) and default.value is None and name not in names
    )


# Iterations over the whole of a list: ``list(q)``, ``enumerate(q)``, ``zip(q, polls)``.
_WHOLE_READERS = frozenset({"list", "tuple", "reversed", "sorted", "enumerate", "iter", "zip"})


def _reach(node: ast.AST, function: ast.FunctionDef, scope: _Scope) -> tuple[str, bool] | None:
    """Which requests of the queue ``node`` (a deadline comparison, or a call of a helper that
    may hold one) runs for, from the innermost loop around it in ``function``: ("", False) for
    every one, (what it loops over, True) for a part of the queue, (what, False) when pdguard
    cannot tell; None without a loop around it (then the loop around the call that reached
    ``function`` decides, or, for a call, the callee's own loops)."""
    parents = own_parents(function)
    child: ast.AST = node
    while child is not function and child in parents:
        parent = parents[child]
        if isinstance(parent, ast.For | ast.comprehension) and child is not parent.iter:
            return _covers(parent.iter, scope)
        if isinstance(parent, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            return _covers(parent.generators[0].iter, scope)
        if isinstance(parent, ast.While):
            return "a while loop", False
        child = parent
    return None


def _covers(iterated: ast.expr, scope: _Scope, depth: int = 2) -> tuple[str, bool]:
    """What a loop over ``iterated`` reaches of the queue (as ``_reach``): the queue itself, a
    whole copy or enumeration of it (``list(q)``, ``q[:]``, ``enumerate(q)``, ``zip(q,
    polls)``, ``range(len(q))``), a part of it (a slice with bounds, a ``range`` other than
    ``range(len(q))``), or something else (a name is followed to what it was assigned)."""
    text = f"`{ast.unparse(iterated)}`"
    if _is_queue(iterated):
        return "", False
    if isinstance(iterated, ast.Name) and iterated.id in scope.values and depth:
        found = _covers(scope.values[iterated.id], scope, depth - 1)
        return (found[0] and text, found[1]) if found[0] else found
    if isinstance(iterated, ast.Subscript) and _is_queue(iterated.value):
        whole = (
            isinstance(iterated.slice, ast.Slice)
            and iterated.slice.upper is None
            and iterated.slice.step is None
            and (
                iterated.slice.lower is None
                or (
                    isinstance(iterated.slice.lower, ast.Constant)
                    and iterated.slice.lower.value == 0
                )
            )
        )
        return ("", False) if whole else (text, True)
    if isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name):
        name, args = iterated.func.id, iterated.args
        if name in _WHOLE_READERS and args and not iterated.keywords:
            parts = [_covers(a, scope, depth) for a in (args if name == "zip" else args[:1])]
            if name == "enumerate" and len(args) > 1:
                return text, False
            if any(p[1] for p in parts):
                return text, True
            if any(not p[0] for p in parts):
                return "", False
            return text, False
        if name == "range" and any(_is_queue(n) for a in args for n in walk(a)):
            counts = args[-1] if len(args) <= 2 else None
            starts = len(args) == 1 or (
                len(args) == 2 and isinstance(args[0], ast.Constant) and args[0].value == 0
            )
            whole = (
                starts
                and isinstance(counts, ast.Call)
                and isinstance(counts.func, ast.Name)
                and counts.func.id == "len"
                and len(counts.args) == 1
                and _is_queue(counts.args[0])
            )
            return ("", False) if whole else (text, True)
    return text, False


def _position_skip(node: ast.AST, function: ast.FunctionDef) -> str:
    """The loop over positions (``for i, req in enumerate(queue)``, ``for i in range(...)``)
    around ``node`` and the test on the position it runs behind, in words, if it does: ``if
    i == 0: continue`` leaves the request at that position unchecked."""
    parents = own_parents(function)
    child: ast.AST = node
    while child is not function and child in parents:
        loop = parents[child]
        if isinstance(loop, ast.For) and child is not loop.iter:
            break
        child = loop
    else:
        return ""
    target, iterated = loop.target, loop.iter
    if not (isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name)):
        return ""
    if iterated.func.id == "enumerate" and isinstance(target, ast.Tuple) and target.elts:
        index = target.elts[0]
    elif iterated.func.id == "range":
        index = target
    else:
        return ""
    if not isinstance(index, ast.Name):
        return ""
    name = index.id
    test = _gate(node, function, lambda n: isinstance(n, ast.Name) and n.id == name)
    return f"`{ast.unparse(iterated)}` behind `{test}`" if test else ""


def _gate_inside(index: _ModuleIndex, action: ast.AST) -> str:
    """For ``self.<helper>(req)`` that fails the sender: the rank test every sender action of
    the helper is behind (``def _fail(self, r): if self.tp_rank == 0: r.<sender>.abort()``),
    if there is one."""
    for callee in index.self_calls(action) if isinstance(action, ast.Call) else ():
        acts = [
            n
            for n in walk(callee)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr != "poll"
            and _mentions_sender(n.func.value)
        ]
        gates = [_rank_gate(n, callee) for n in acts]
        if gates and all(gates):
            return gates[0]
    return ""


def _is_rank(node: ast.AST) -> bool:
    """A rank's number or a test of it: ``self.tp_rank``, ``attn_tp_rank``,
    ``get_tensor_model_parallel_rank()``, ``is_first_rank``."""
    name = (
        node.id
        if isinstance(node, ast.Name)
        else node.attr
        if isinstance(node, ast.Attribute)
        else ""
    )
    return name.endswith("rank") or "_rank_" in name


def _rank_gate(node: ast.AST, function: ast.FunctionDef) -> str:
    """The test on the rank that ``node`` runs behind (``_gate``)."""
    return _gate(node, function, _is_rank)


def _gate(node: ast.AST, function: ast.FunctionDef, reads: Callable[[ast.AST], bool]) -> str:
    """The test that ``node`` (in ``function``) runs behind, among those with a node that
    ``reads``, if it does: under an ``if`` (or its ``else``) whose test has one, or after ``if
    <test>: continue`` (``break``, ``return``, ``raise``) in a block around it. On a rank
    (``_is_rank``): ranks then act differently on the same request."""
    parents = own_parents(function)
    child: ast.AST = node
    while child is not function and child in parents:
        parent = parents[child]
        if (
            isinstance(parent, ast.If | ast.While | ast.IfExp)
            and child is not parent.test
            and any(reads(n) for n in walk(parent.test))
        ):
            return ast.unparse(parent.test)
        for block in _blocks_of(parent):
            if child in block:
                for before in block[: block.index(child)]:
                    if (
                        isinstance(before, ast.If)
                        and isinstance(
                            before.body[-1], ast.Continue | ast.Return | ast.Break | ast.Raise
                        )
                        and any(reads(n) for n in walk(before.test))
                    ):
                        return ast.unparse(before.test)
        child = parent
    return ""


def _passed_as(call: ast.Call, callee: ast.FunctionDef, names: frozenset[str]) -> frozenset[str]:
    """The parameters of ``callee`` (a method, called as ``self.callee(...)``) that ``call``
    passes one of ``names`` to."""
    params = [a.arg for a in callee.args.args][1:]  # after self
    passed = {
        params[i]
        for i, arg in enumerate(call.args)
        if i < len(params) and isinstance(arg, ast.Name) and arg.id in names
    }
    passed |= {
        kw.arg
        for kw in call.keywords
        if kw.arg is not None and isinstance(kw.value, ast.Name) and kw.value.id in names
    }
    return frozenset(passed)


def _skipped_under_pp(node: ast.AST, function: ast.FunctionDef, names: frozenset[str]) -> bool:
    """Is ``node`` (in ``function``) unreachable once one of ``names`` (the PP consensus) is
    not None: under ``if <name> is None:`` (or the ``else`` of ``is not None``), or after
    ``if <name> is not None: continue`` (``return``, ``break``, ``raise``) in a block around
    it?"""
    if not names:
        return False
    parents = own_parents(function)
    child: ast.AST = node
    while child is not function and child in parents:
        parent = parents[child]
        if isinstance(parent, ast.If) and (
            (child in parent.body and _is_none_test(parent.test, names, ast.Is))
            or (child in parent.orelse and _is_none_test(parent.test, names, ast.IsNot))
        ):
            return True
        for block in _blocks_of(parent):
            if child in block:
                for before in block[: block.index(child)]:
                    if (
                        isinstance(before, ast.If)
                        and not before.orelse
                        and _is_none_test(before.test, names, ast.IsNot)
                        and isinstance(
                            before.body[-1], ast.Continue | ast.Return | ast.Break | ast.Raise
                        )
                    ):
                        return True
        child = parent
    return False


def _pp_test(stmt: ast.stmt) -> bool:
    """``if rids_to_check is (not) None:``: a statement that runs on every call without PP."""
    names = frozenset({PP_CONSENSUS_PARAM})
    return isinstance(stmt, ast.If) and (
        _is_none_test(stmt.test, names, ast.Is) or _is_none_test(stmt.test, names, ast.IsNot)
    )


def _blocks_of(node: ast.AST) -> list[list[ast.stmt]]:
    return [
        value
        for name in ("body", "orelse", "finalbody")
        if isinstance(value := getattr(node, name, None), list)
    ]


def _is_none_test(test: ast.expr, names: frozenset[str], op: type[ast.cmpop]) -> bool:
    """``<name> is None`` (``op``: ``ast.Is``) or ``<name> is not None`` (``ast.IsNot``)."""
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id in names
        and len(test.ops) == 1
        and isinstance(test.ops[0], op)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    )


def _failing_actions(
    index: _ModuleIndex, region: ast.AST, scope: _Scope, compare: ast.Compare
) -> list[ast.AST]:
    """Where ``region`` (the loop around a deadline check) acts on the request's sender, other
    than polling it: calls on it, helpers that do, attributes set on it."""
    found: list[ast.AST] = []
    for node in walk(region):
        if node is compare:
            continue
        if isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr != "poll"
                and scope.touches_sender(func.value)
            ):
                found.append(node)
                continue
            if isinstance(func, ast.Name) and func.id.startswith(POLL_ALL_REDUCE_PREFIX):
                continue
            for callee in index.self_calls(node):
                if callee is not None and _mentions_sender(callee) and callee.name != FUNCTION:
                    found.append(node)
                    break
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and scope.touches_sender(target.value):
                    found.append(node)
    return found


def _spares_ended_transfers(
    region: ast.AST, scope: _Scope, unpassed: frozenset[str] = frozenset()
) -> bool:
    """Does ``region`` (the loop around a deadline check) leave alone a request whose sender's
    own ``poll()`` says the transfer succeeded: ``if <poll> in (KVPoll.Success, ...):
    continue`` (or ``== KVPoll.Success``), or the failure only under ``if <poll> not in
    (KVPoll.Success, ...)`` (or ``!= KVPoll.Success``)? ``<poll>`` is a ``poll()`` call on the
    request's sender, or a name assigned one. A comprehension that keeps only requests whose
    poll is not Success (``[r for r in q if ... and <poll> not in (KVPoll.Success, ...)]``)
    spares them too. A test that also needs one of ``unpassed`` (parameters the consensus
    never reaches, always None) to be given never holds, so spares nothing."""
    polled = {
        node.targets[0].id
        for node in walk(region)
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and _is_sender_poll(node.value, scope)
    }
    for node in walk(region):
        if isinstance(node, ast.comprehension):
            for condition in node.ifs:
                for test in _required(condition):
                    if (
                        len(test.ops) == 1
                        and isinstance(test.ops[0], ast.NotIn | ast.NotEq)
                        and (
                            _is_sender_poll(test.left, scope)
                            or (isinstance(test.left, ast.Name) and test.left.id in polled)
                        )
                        and _names_success(test.comparators[0], scope)
                    ):
                        return True
            continue
        if not isinstance(node, ast.If) or _needs_given(node.test, unpassed):
            continue
        for test in _comparisons(node.test):
            if len(test.ops) != 1:
                continue
            left, right = test.left, test.comparators[0]
            polls = _is_sender_poll(left, scope) or (
                isinstance(left, ast.Name) and left.id in polled
            )
            if not polls or not _names_success(right, scope):
                continue
            op = test.ops[0]
            if isinstance(op, ast.In | ast.Eq) and isinstance(node.body[-1], ast.Continue):
                return True
            if isinstance(op, ast.NotIn | ast.NotEq) and any(
                _acts_on_sender(n, scope) for stmt in node.body for n in walk(stmt)
            ):
                return True
    return False


def _required(test: ast.expr) -> list[ast.Compare]:
    """The comparisons ``test`` holds only if they hold: itself, each side of an ``and``, the
    one side of an ``or`` whose other sides only test a name for None (``agreed is None or
    (...)``, the test's non-PP path)."""
    if isinstance(test, ast.Compare):
        return [test]
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [c for value in test.values for c in _required(value)]
    if isinstance(test, ast.BoolOp):
        others = [
            v
            for v in test.values
            if not (isinstance(v, ast.Compare) and isinstance(v.left, ast.Name))
            or not _is_none_test(v, frozenset({v.left.id}), ast.Is)
        ]
        return _required(others[0]) if len(others) == 1 else []
    return []


def _needs_given(test: ast.expr, names: frozenset[str]) -> bool:
    """Does ``test`` hold only when one of ``names`` is not None (``<name> is not None and
    ...``)?"""
    values = (
        test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    )
    return any(_is_none_test(v, names, ast.IsNot) for v in values)


def _comparisons(test: ast.expr) -> list[ast.Compare]:
    """The comparisons a condition is made of, through ``and``/``or`` (``if rids is not None
    and <poll> in (...)``, ``if <poll> == KVPoll.Success or <poll> == KVPoll.Failed``)."""
    if isinstance(test, ast.Compare):
        return [test]
    if isinstance(test, ast.BoolOp):
        return [c for value in test.values for c in _comparisons(value)]
    return []


def _acts_on_sender(node: ast.AST, scope: _Scope) -> bool:
    """A call on the request's sender other than ``poll()``, or an attribute set on it."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr != "poll" and scope.touches_sender(node.func.value)
    return isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Attribute) and scope.touches_sender(t.value) for t in node.targets
    )


def _is_sender_poll(node: ast.AST, scope: _Scope) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "poll"
        and scope.touches_sender(node.func.value)
    )


def _names_success(node: ast.AST, scope: _Scope | None = None) -> bool:
    """``KVPoll.Success``, or a tuple, list or set holding it, or a name assigned one (``ended
    = (KVPoll.Success, KVPoll.Failed)``)."""
    if isinstance(node, ast.Name) and scope is not None and node.id in scope.values:
        node = scope.values[node.id]
    elements = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return any(isinstance(e, ast.Attribute) and e.attr == POLL_SUCCESS for e in elements)


def _sender_actions(region: ast.AST, scope: _Scope) -> tuple[set[str], tuple[int, int] | None]:
    """The methods ``region`` calls on the request's sender, and where it sets ``poll`` on the
    sender instance."""
    calls: set[str] = set()
    poll_set_at = None
    for node in walk(region):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and scope.touches_sender(node.func.value)
        ):
            calls.add(node.func.attr)
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr == "poll"
                    and scope.touches_sender(target.value)
                ):
                    poll_set_at = (node.lineno, node.col_offset)
    return calls, poll_set_at


def _while_queued(stmt: ast.stmt) -> bool:
    """Is ``stmt`` ``if <the queue is not empty>: ...`` with no ``else`` (``if self.<queue>:``,
    ``if len(self.<queue>):``, ``len(...) > 0``, ``!= 0``, ``>= 1``)? It skips what its body
    holds only when no request waits: a deadline there runs whenever it has a request to look
    at."""
    if not isinstance(stmt, ast.If) or stmt.orelse:
        return False
    test = stmt.test
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, bound = test.ops[0], test.comparators[0]
        if not (isinstance(bound, ast.Constant) and isinstance(bound.value, int)):
            return False
        nonempty = (isinstance(op, ast.Gt | ast.NotEq) and bound.value == 0) or (
            isinstance(op, ast.GtE) and bound.value == 1
        )
        if not nonempty:
            return False
        test = test.left
    elif _is_queue(test):
        return True
    return (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Name)
        and test.func.id == "len"
        and len(test.args) == 1
        and _is_queue(test.args[0])
    )


def _conditional(stmt: ast.stmt) -> bool:
    """Does what ``stmt`` holds run behind a condition, rather than on every call?"""
    return isinstance(stmt, ast.If | ast.While | ast.Try | ast.With | ast.Match)


def _stamps_in(
    index: _ModuleIndex,
    stmt: ast.stmt,
    req: str | ast.expr,
    depth: int = 0,
    clock_vars: Mapping[str, Clock] = {},  # read only
) -> Stamp | None:
    """The stamp ``stmt`` sets on ``req`` (a name, or an expression such as ``batch.urgent``),
    or on an object the request holds (``req.stats.entered``, named by its last attribute as
    its reads are), directly or through a helper method it passes the request to, by position
    or keyword; ``clock_vars``: the helper's parameters given a clock reading by that call
    (``self._note(req, at=time.monotonic())``). A stored deadline (``req.deadline = now +
    limit``) is a start too (``bounded_wait.start_of``)."""

    def clock(node: ast.AST | None) -> Clock | None:
        return clock_of(node, index.clocks, clock_vars)

    for node in walk(stmt):
        if isinstance(node, ast.Assign):
            start = start_of(node.value, clock)
            if start is None:
                continue
            for target in node.targets:
                if isinstance(target, ast.Attribute) and _holds(target.value, req):
                    guarded = _guarded(stmt, node, target.attr) or any(
                        (isinstance(n, ast.Attribute) and n.attr == target.attr)
                        or (isinstance(n, ast.Constant) and n.value == target.attr)
                        for n in walk(node.value)
                    )
                    return Stamp(
                        target.attr,
                        node.lineno,
                        node.col_offset,
                        guarded,
                        start.kind,
                        start.clock,
                    )
                keyed = keyed_stamp(target, req)
                if keyed is not None:
                    assert isinstance(target, ast.Subscript)  # keyed_stamp's shape
                    holder = target.value
                    assert isinstance(holder, ast.Attribute)
                    guarded = _guarded(stmt, node, holder.attr)
                    return Stamp(
                        keyed, node.lineno, node.col_offset, guarded, start.kind, start.clock
                    )
        if isinstance(node, ast.Call) and depth < 2 and isinstance(req, str):
            # A helper that stamps its argument: self._stamp(req), self._note(at=now, r=req)
            for callee in index.self_calls(node):
                given = _arguments(node, callee)
                inner = next(
                    (p for p, a in given.items() if isinstance(a, ast.Name) and a.id == req), None
                )
                if inner is None:
                    continue
                clocks = {p: c for p, a in given.items() if (c := clock(a)) is not None}
                for inner_stmt in callee.body:
                    found = _stamps_in(index, inner_stmt, inner, depth + 1, clocks)
                    if found is not None:
                        return found
    return None


def _arguments(call: ast.Call, callee: ast.FunctionDef) -> dict[str, ast.expr]:
    """The parameters of ``callee`` (a method, called as ``self.callee(...)``) that ``call``
    passes an argument to, by position or keyword, with the argument."""
    params = [a.arg for a in [*callee.args.posonlyargs, *callee.args.args][1:]]
    params += [a.arg for a in callee.args.kwonlyargs]
    given = {params[i]: arg for i, arg in enumerate(call.args) if i < len(params)}
    given |= {kw.arg: kw.value for kw in call.keywords if kw.arg in params}
    return given


def _holds(node: ast.expr, req: str | ast.expr) -> bool:
    """Is ``node`` the request, or an object read off it (``req.stats``)?"""
    while not _is_request(node, req):
        if not isinstance(node, ast.Attribute):
            return False
        node = node.value
    return True


def _attribute_root(node: ast.expr) -> ast.expr:
    """``req`` for ``req.stats.timing``: what a chain of attribute reads starts from."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def keyed_stamp(node: ast.AST, req: str | ast.expr | None = None) -> str | None:
    """A stamp kept by the scheduler rather than on the request: ``self.<map>[<key>]``, or
    ``self.<map>.get(<key>, ...)``, where the key is an attribute of the request
    (``req.rid``), the request itself, or ``id(req)`` (of ``req``, when given). Its name in
    the model is ``self.<map>[<attr>]`` (``[]`` for the request, ``[id]`` for its id), so the
    stamp and the deadline's read of it meet as an attribute stamp does."""
    if isinstance(node, ast.Subscript):
        holder, key = node.value, node.slice
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
    ):
        holder, key = node.func.value, node.args[0]
    else:
        return None
    if not (
        isinstance(holder, ast.Attribute)
        and isinstance(holder.value, ast.Name)
        and holder.value.id == "self"
    ):
        return None

    def of_request(expr: ast.expr) -> bool:
        return isinstance(expr, ast.Name) if req is None else _is_request(expr, req)

    if isinstance(key, ast.Attribute) and of_request(key.value):
        part = key.attr
    elif of_request(key):
        part = ""
    elif (
        isinstance(key, ast.Call)
        and isinstance(key.func, ast.Name)
        and key.func.id == "id"
        and len(key.args) == 1
        and of_request(key.args[0])
    ):
        part = "id"
    else:
        return None
    return f"self.{holder.attr}[{part}]"


def _is_request(node: ast.AST, req: str | ast.expr) -> bool:
    if isinstance(req, str):
        return isinstance(node, ast.Name) and node.id == req
    return _same(node, req)


def _guarded(stmt: ast.stmt, assign: ast.Assign, attr: str) -> bool:
    """Is ``assign`` behind an ``if`` that tests the stamp attribute (set only once)?"""
    for node in walk(stmt):
        if isinstance(node, ast.If) and any(n is assign for n in walk(node)):
            mentions = any(
                (isinstance(n, ast.Attribute) and n.attr == attr)
                or (isinstance(n, ast.Constant) and n.value == attr)
                for n in walk(node.test)
            )
            if mentions:
                return True
    return False


def _held_blocks(module: ast.Module) -> list[tuple[ast.AST, list[ast.stmt]]]:
    """Every statement list of ``module`` with the node holding it, in ``walk`` order (kept on
    the module: the index and the entry points read it)."""
    return kept(module, "_pdguard_inflight_blocks", _find_held_blocks)


def _find_held_blocks(module: ast.Module) -> list[tuple[ast.AST, list[ast.stmt]]]:
    return [(node, block) for node in statement_walk(module) for block in _own_blocks(node)]


def _own_blocks(node: ast.AST) -> list[list[ast.stmt]]:
    """The statement lists directly held by ``node`` (bodies, else and finally branches)."""
    blocks = []
    for name in ("body", "orelse", "finalbody"):
        block = getattr(node, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            blocks.append(block)
    if isinstance(node, ast.Try):
        blocks += [handler.body for handler in node.handlers]
    return blocks


# Methods of the queue that put requests into it, and what they take.
_ENTRY_METHODS = {"append": 0, "appendleft": 0, "insert": 1, "extend": None, "extendleft": None}
# Reads of the queue that neither add to it nor let it escape.
_READERS = frozenset(
    {"len", "list", "tuple", "zip", "enumerate", "iter", "reversed", "sorted", "any", "all", "bool"}
)
_QUEUE_METHODS = frozenset({"remove", "pop", "popleft", "clear", "index", "count", "copy", "sort"})


def _is_queue(node: ast.AST | None) -> bool:
    return node is not None and is_self_attr(node, QUEUE)


def _empty(value: ast.expr) -> bool:
    """``[]``, ``list()``, ``deque()``: a queue that starts (or restarts) empty."""
    if isinstance(value, ast.List | ast.Tuple):
        return not value.elts
    return isinstance(value, ast.Call) and not value.args and not value.keywords


def _entry(stmt: ast.stmt) -> Entry | None:
    """The requests ``stmt`` puts into the queue, if it is an entry statement."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        func = call.func
        if (
            isinstance(func, ast.Attribute)
            and _is_queue(func.value)
            and func.attr in _ENTRY_METHODS
        ):
            position = _ENTRY_METHODS[func.attr]
            how = f"{func.attr}()"
            if position is None:
                return Entry(stmt, how, requests=call.args[0] if call.args else None)
            element = call.args[position] if len(call.args) > position else None
            return Entry(stmt, how, element=element)
    if isinstance(stmt, ast.AugAssign) and _is_queue(stmt.target) and isinstance(stmt.op, ast.Add):
        return Entry(stmt, "+=", requests=stmt.value)
    if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for target in targets:
            if isinstance(target, ast.Subscript) and _is_queue(target.value):
                return Entry(stmt, "slice assignment", requests=stmt.value)
            if _is_queue(target) and not _empty(stmt.value):
                value = stmt.value
                if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
                    # self.queue = self.queue + new: the new ones enter
                    if _is_queue(value.left):
                        value = value.right
                    elif _is_queue(value.right):
                        value = value.left
                elif any(_is_queue(n) for n in walk(value)):
                    return None  # rebuilt from its own requests (a filter): nothing enters
                return Entry(stmt, "reassignment", requests=value)
    return None


def single_request(entry: Entry) -> ast.expr | None:
    """The one request an entry adds (``append(req)``, ``+= [req]``), if it adds one."""
    if entry.element is not None:
        return entry.element
    if isinstance(entry.requests, ast.List | ast.Tuple) and len(entry.requests.elts) == 1:
        return entry.requests.elts[0]
    return None


class _Flow:
    """What can happen between a request's entry and its stamp: a poll of the queue."""

    def __init__(self, index: _ModuleIndex) -> None:
        self.index = index
        self._reaches: dict[str, bool] = {}

    def reaches_poll(self, function: ast.FunctionDef) -> bool:
        if function.name not in self._reaches:
            self._reaches[function.name] = False  # recursion guard
            self._reaches[function.name] = function.name == FUNCTION or self.may_poll(function)
        return self._reaches[function.name]

    def may_poll(self, node: ast.AST) -> bool:
        """Can running ``node`` poll the queue (the inflight function, an all-reduce, or a
        method that reaches one), or hand control away (``yield``/``await``)?"""
        for inner in walk(node):
            if isinstance(inner, ast.Yield | ast.YieldFrom | ast.Await):
                return True
            if (
                isinstance(inner, ast.Call)
                and isinstance(inner.func, ast.Name)
                and inner.func.id.startswith(POLL_ALL_REDUCE_PREFIX)
            ):
                return True
        return any(self.reaches_poll(callee) for callee in self.index.self_calls(node))


def _stamp_of(
    index: _ModuleIndex, flow: _Flow, entry: Entry, block: list[ast.stmt], position: int
) -> Stamp | None:
    """The stamp that every request of ``entry`` carries before anything can poll it: set in
    the statements before the entry, or after it with no possible poll in between."""
    single = single_request(entry)
    if isinstance(single, ast.Name):
        found = _stamp_around(
            index, flow, block, position, lambda s: _stamps_in(index, s, single.id)
        )
        if found is not None:
            return found
        return _loop_stamp(index, flow, block, position, single.id)
    if single is not None:  # one request named by an expression: batch.urgent
        request = single
        return _stamp_around(index, flow, block, position, lambda s: _stamps_in(index, s, request))
    if entry.requests is not None:
        requests = entry.requests
        return _stamp_around(
            index, flow, block, position, lambda s: _collection_stamp(index, s, requests)
        )
    return None


def _stamp_around(
    index: _ModuleIndex,
    flow: _Flow,
    block: list[ast.stmt],
    position: int,
    find: Callable[[ast.stmt], Stamp | None],
) -> Stamp | None:
    stamp = None
    for stmt in block[:position]:
        stamp = find(stmt) or stamp
    if stamp is not None:
        return stamp
    for stmt in block[position + 1 :]:
        found = find(stmt)
        if found is not None:
            return found
        if flow.may_poll(stmt):
            return None
    return None


def _loop_stamp(
    index: _ModuleIndex, flow: _Flow, block: list[ast.stmt], position: int, name: str
) -> Stamp | None:
    """``for req in reqs: queue.append(req)`` after a loop that stamped every one of ``reqs``."""
    loop = index.loop_of(block)
    if loop is None or not (isinstance(loop.target, ast.Name) and loop.target.id == name):
        return None
    outer, at = index.block_of(loop)
    if outer is None:
        return None
    requests = loop.iter
    return _stamp_around(index, flow, outer, at, lambda s: _collection_stamp(index, s, requests))


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a) == ast.dump(b)


def _collection_stamp(
    index: _ModuleIndex, stmt: ast.stmt, requests: ast.expr, depth: int = 0
) -> Stamp | None:
    """A stamp ``stmt`` puts on every one of ``requests``: ``for r in requests: r.t = clock()``,
    or a helper that does so with them."""
    for node in walk(stmt):
        if (
            isinstance(node, ast.For)
            and _same(node.iter, requests)
            and isinstance(node.target, ast.Name)
        ):
            for inner in node.body:
                found = _stamps_in(index, inner, node.target.id)
                if found is not None:
                    return found
        if isinstance(node, ast.Call) and depth < 2 and isinstance(requests, ast.Name):
            for callee in index.self_calls(node):
                params = [a.arg for a in callee.args.args[1:]]
                args = [a.id if isinstance(a, ast.Name) else None for a in node.args]
                if requests.id in args and args.index(requests.id) < len(params):
                    inner_name = ast.Name(params[args.index(requests.id)], ast.Load())
                    for inner_stmt in callee.body:
                        found = _collection_stamp(index, inner_stmt, inner_name, depth + 1)
                        if found is not None:
                            return found
    return None


def _queued_names(function: ast.FunctionDef) -> tuple[set[str], set[str]]:
    """In the inflight function: (names bound to requests taken from the queue, names of lists
    that become the queue again). Entries of those are keeps, not new requests."""
    taken: set[str] = set()
    for node in walk(function):
        if isinstance(node, ast.For | ast.comprehension) and any(
            _is_queue(n) for n in walk(node.iter)
        ):
            taken |= {n.id for n in walk(node.target) if isinstance(n, ast.Name)}
    kept: set[str] = set()
    for node in walk(function):
        entry = _entry(node) if isinstance(node, ast.stmt) else None
        if entry is not None and isinstance(entry.requests, ast.Name):
            kept.add(entry.requests.id)
    return taken, kept


def _keeps(entry: Entry, taken: set[str], kept: set[str]) -> bool:
    single = single_request(entry)
    if isinstance(single, ast.Name) and single.id in taken:
        return True
    return isinstance(entry.requests, ast.Name) and entry.requests.id in kept


# The nodes whose children the escapes read.
_ESCAPE_HOLDERS = frozenset(
    {
        ast.Attribute,
        ast.Call,
        ast.Subscript,
        ast.Starred,
        ast.Tuple,
        ast.List,
        ast.Set,
        ast.Assign,
        ast.AnnAssign,
        ast.NamedExpr,
    }
)


def _escapes(module: ast.Module) -> Iterator[Unmodelled]:
    """Uses of the queue that pdguard cannot follow: bound to another name, passed to a
    function, or a method it does not know."""
    # one pass: the queue's loads, and the parents the verdicts below read (of the queue,
    # and of an attribute of it: the call it may be the function of)
    parents: dict[int, ast.AST] = {}
    loads: list[ast.Attribute] = []
    for holder in walk(module):
        kind = type(holder)
        if kind not in _ESCAPE_HOLDERS:
            continue  # the most nodes: names, constants, operators
        if kind is ast.Attribute:
            assert isinstance(holder, ast.Attribute)
            if _is_queue(holder):
                if isinstance(holder.ctx, ast.Load):
                    loads.append(holder)
            elif _is_queue(holder.value):
                parents[id(holder.value)] = holder
        elif kind is ast.Call:
            assert isinstance(holder, ast.Call)
            if isinstance(holder.func, ast.Attribute) and _is_queue(holder.func.value):
                parents[id(holder.func)] = holder
            for arg in holder.args:
                if _is_queue(arg):
                    parents[id(arg)] = holder
                elif isinstance(arg, ast.Constant) and arg.value == QUEUE:
                    yield from _named_by_string(holder, [arg])
        elif kind is ast.Subscript:
            assert isinstance(holder, ast.Subscript)
            if isinstance(holder.slice, ast.Constant) and holder.slice.value == QUEUE:
                yield from _named_by_string(holder, [holder.slice])
        elif kind is ast.Starred:
            assert isinstance(holder, ast.Starred)
            if _is_queue(holder.value):
                parents[id(holder.value)] = holder
        elif isinstance(holder, ast.Tuple | ast.List | ast.Set):
            for element in holder.elts:
                if _is_queue(element):
                    parents[id(element)] = holder
        elif (
            isinstance(holder, ast.Assign | ast.AnnAssign | ast.NamedExpr)
            and holder.value is not None
            and _is_queue(holder.value)
        ):
            parents[id(holder.value)] = holder
    for node in loads:
        parent = parents.get(id(node))
        if isinstance(parent, ast.Starred | ast.Tuple | ast.List | ast.Set):
            what = "unpacked into" if isinstance(parent, ast.Starred) else "put in"
            yield Unmodelled(
                node.lineno,
                node.col_offset + 1,
                f"{QUEUE} is {what} a new {'collection' if what == 'put in' else 'list'} here: "
                "pdguard cannot follow requests that enter the queue through it",
            )
            continue
        if isinstance(parent, ast.Attribute):
            call = parents.get(id(parent))
            if not (isinstance(call, ast.Call) and call.func is parent) and (
                parent.attr in _ENTRY_METHODS
            ):
                yield Unmodelled(
                    node.lineno,
                    node.col_offset + 1,
                    f"{QUEUE}.{parent.attr} is taken as a bound method here: pdguard cannot "
                    "follow the requests it adds where it is called",
                )
                continue
            if parent.attr in _QUEUE_METHODS or parent.attr in _ENTRY_METHODS:
                continue
            if isinstance(call, ast.Call) and call.func is parent:
                yield Unmodelled(
                    node.lineno,
                    node.col_offset + 1,
                    f"{QUEUE}.{parent.attr}() is a method pdguard does not know: it cannot tell "
                    "whether it adds requests",
                )
            continue
        if isinstance(parent, ast.Assign | ast.AnnAssign | ast.NamedExpr) and parent.value is node:
            yield Unmodelled(
                node.lineno,
                node.col_offset + 1,
                f"{QUEUE} is bound to another name here: pdguard cannot follow requests that "
                "enter the queue through it",
            )
        elif isinstance(parent, ast.Call) and node in parent.args:
            func = parent.func
            name = func.id if isinstance(func, ast.Name) else None
            if name in _READERS or (name or "").startswith(POLL_ALL_REDUCE_PREFIX):
                continue
            called = ast.unparse(func)
            yield Unmodelled(
                node.lineno,
                node.col_offset + 1,
                f"{QUEUE} is passed to {called}(): pdguard cannot follow what it does with it",
            )


def _named_by_string(holder: ast.AST, parts: list[ast.expr]) -> Iterator[Unmodelled]:
    """The queue named by a string (``getattr(self, "<queue>")``, ``setattr``,
    ``self.__dict__["<queue>"]``, ``vars(self)["<queue>"]``): a way in pdguard does not follow."""
    for part in parts:
        if isinstance(part, ast.Constant) and part.value == QUEUE:
            how = ast.unparse(holder.func) + "()" if isinstance(holder, ast.Call) else "[...]"
            yield Unmodelled(
                part.lineno,
                part.col_offset + 1,
                f"{QUEUE} is reached by its name as a string ({how}): pdguard cannot follow "
                "requests that enter the queue through it",
            )


# Decorators that leave a function as written.
_INERT_DECORATORS = frozenset({"abstractmethod", "override", "staticmethod", "classmethod"})


def _replaces(decorator: ast.expr, module: ast.Module) -> bool:
    """Can ``decorator`` put another function in the place of the one it decorates? One
    defined in the module is read: it keeps the function if it calls a function it is given
    (a wrapper) or returns it; one the module imports is taken as a wrapper (SGLang's own, as
    ``scheduler_stage_method``; pdguard does not read other files for it); any other is
    followed by nothing."""
    called = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = called.id if isinstance(called, ast.Name) else None
    if name is None or name in _INERT_DECORATORS:
        return name is None and not (
            isinstance(called, ast.Attribute) and called.attr in _INERT_DECORATORS
        )
    if name in imported_names(module):
        return False
    definition = next(
        (n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == name), None
    )
    if definition is None:
        return True
    params = {
        a.arg for f in ast.walk(definition) if isinstance(f, ast.FunctionDef) for a in f.args.args
    }
    for node in ast.walk(definition):
        given = node.func if isinstance(node, ast.Call) else getattr(node, "value", None)
        if (
            isinstance(node, ast.Call | ast.Return)
            and isinstance(given, ast.Name)
            and given.id in params
        ):
            return False  # calls what it is given (a wrapper), or gives it back
    return True


def _rebindings(module: ast.Module, model: InflightModel) -> Iterator[Unmodelled]:
    """Later bindings of what the proof reads: a decorator on the inflight function or a
    method its deadline runs in, the name bound again in the class body or from outside
    (``Cls.m = ...``, ``setattr(Cls, "m", ...)``), and the mixin class defined again."""
    relied = {FUNCTION, SENDER_ABORT, "poll"}
    relied |= {c.method for c in model.checks} | {m for c in model.checks for m in c.callers}
    classes = [n for n in module.body if isinstance(n, ast.ClassDef)]
    mixins = [c for c in classes if c.name == model.class_name]
    for again in mixins[1:]:
        yield Unmodelled(
            again.lineno,
            again.col_offset + 1,
            f"{model.class_name} is defined again here (first on line {mixins[0].lineno}): the "
            "later class is the one that runs, and pdguard reads the first",
        )
    for cls in classes:
        for item in cls.body:
            if isinstance(item, ast.FunctionDef) and item.name in relied - {"poll", SENDER_ABORT}:
                for decorator in item.decorator_list:
                    if _replaces(decorator, module):
                        yield Unmodelled(
                            decorator.lineno,
                            decorator.col_offset + 1,
                            f"{item.name}() is decorated with @{ast.unparse(decorator)}: the "
                            "function that runs may not be the one pdguard reads",
                        )
            targets = (
                item.targets
                if isinstance(item, ast.Assign)
                else [item.target]
                if isinstance(item, ast.AnnAssign)
                else []
            )
            for target in targets:
                if isinstance(target, ast.Name) and target.id in relied:
                    yield Unmodelled(
                        item.lineno,
                        item.col_offset + 1,
                        f"{cls.name}.{target.id} is bound again in the class body: the method "
                        "that runs may not be the one pdguard reads",
                    )
    # what a class can be named by here: the module's classes and what it imports
    named = {c.name for c in classes} | imported_names(module)
    for stmt in statement_walk(module):  # an assignment, or setattr() as a statement
        node: ast.AST = stmt.value if isinstance(stmt, ast.Expr) else stmt
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr in relied
                    and isinstance(target.value, ast.Name)
                    and target.value.id in named
                ):
                    yield Unmodelled(
                        node.lineno,
                        node.col_offset + 1,
                        f"`{ast.unparse(target)}` is assigned here: the method that runs may "
                        "not be the one pdguard reads",
                    )
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in relied
        ):
            yield Unmodelled(
                node.lineno,
                node.col_offset + 1,
                f"{node.func.id}() binds `{node.args[1].value}` here: the method that runs may "
                "not be the one pdguard reads",
            )


def _clears(function: ast.FunctionDef, keep_sites: list[ast.Call]) -> list[Stamp]:
    """Attributes of a request set to None or deleted (also by ``setattr``/``delattr``, or
    through ``__dict__``) in a block that keeps it for another step."""
    kept_lines = {site.lineno for site in keep_sites}
    found = []
    for node in statement_walk(function):
        block = next(
            (
                b
                for b in _own_blocks(node)
                if any(
                    (s.end_lineno or s.lineno) >= line >= s.lineno for s in b for line in kept_lines
                )
            ),
            None,
        )
        for stmt in block or ():
            for attr in _cleared(stmt):
                found.append(Stamp(attr, stmt.lineno, stmt.col_offset, False))
    return found


def _cleared(stmt: ast.stmt) -> Iterator[str]:
    """The request attributes ``stmt`` itself clears."""
    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant):
        for target in stmt.targets if stmt.value.value is None else ():
            if isinstance(target, ast.Attribute) and not is_self_attr(target, target.attr):
                yield target.attr
            if (
                isinstance(target, ast.Subscript)
                and isinstance(target.value, ast.Attribute)
                and target.value.attr == "__dict__"
                and isinstance(target.slice, ast.Constant)
            ):
                yield str(target.slice.value)
    if isinstance(stmt, ast.Delete):
        for target in stmt.targets:
            if isinstance(target, ast.Attribute):
                yield target.attr
            if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant):
                yield str(target.slice.value)
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        name = call_name(call)
        constant = next((a.value for a in call.args[1:2] if isinstance(a, ast.Constant)), None)
        if name == "delattr" and isinstance(constant, str):
            yield constant
        if (
            name == "setattr"
            and isinstance(constant, str)
            and len(call.args) == 3
            and isinstance(call.args[2], ast.Constant)
            and call.args[2].value is None
        ):
            yield constant
        if name == "pop" and isinstance(call.func, ast.Attribute):
            holder = call.func.value
            first = call.args[0] if call.args else None
            if (
                isinstance(holder, ast.Attribute)
                and holder.attr == "__dict__"
                and isinstance(first, ast.Constant)
            ):
                yield str(first.value)


def analyse(module: ast.Module) -> InflightModel | None:
    """The model of ``prefill.py``; None without ``process_disagg_prefill_inflight_queue``.
    The model is read, never changed, by its callers (a run keeps it by the tree:
    ``checks.project.inflight_model``)."""
    index = _ModuleIndex(module)
    function = index.methods.get(FUNCTION)
    if function is None:
        return None
    flow = _Flow(index)
    scope = index.scope(function)
    poll_position = next((i for i, s in enumerate(function.body) if flow.may_poll(s)), None)
    model = InflightModel(index.owner[id(function)], function)
    taken, kept = _queued_names(function)
    model.keep_sites = _keep_sites(function, kept)
    model.unmodelled += _unrecognised(function, poll_position, model.keep_sites)
    blocks, model.assigned_attrs = _blocks_and_clock_attrs(module, scope)
    inside = {id(n) for n in walk(function)}
    for entry, block, position in _queue_entries(blocks):
        if id(entry.stmt) in inside and _keeps(entry, taken, kept):
            continue  # a request taken from the queue goes back: not a new entry
        model.entries.append(entry)
        model.stamps[id(entry.stmt)] = _stamp_of(index, flow, entry, block, position)
    model.unmodelled += _escapes(module)
    model.restamps = _restamps(function, scope)
    model.send_backs = list(_send_backs(index))
    model.parked_line = next(
        (
            n.lineno
            for n in walk(function)
            if isinstance(n, ast.If)
            and any(isinstance(a, ast.Attribute) and a.attr == PARKED for a in walk(n.test))
        ),
        0,
    )
    model.checks = _positioned_checks(index, function, poll_position)
    model.unmodelled += _rebindings(module, model)
    model.clears = _clears(function, model.keep_sites)
    if not model.valid_checks():
        model.unmodelled += _unknown_reach(model)
    return model


def _unknown_reach(model: InflightModel) -> Iterator[Unmodelled]:
    """Deadlines that would hold but for their loop, which pdguard cannot tell reaches every
    request of the queue (a ``while`` loop, another list, no loop at all)."""
    stamped = model.stamped_attrs()
    for check in model.checks:
        if (
            check.reaches
            and not check.partial
            and check.each_step
            and check.fails_sender
            and not check.via_sender
            and check.attr in stamped
        ):
            yield Unmodelled(
                check.line,
                check.col + 1,
                f"the inflight deadline reaches the requests through {check.reaches}, not a loop "
                f"over {QUEUE}: pdguard cannot tell that it looks at every request",
            )


def _keep_sites(function: ast.FunctionDef, kept: set[str]) -> list[ast.Call]:
    """Appends to the lists that become the queue again, in source order."""
    kept = kept | {
        node.value.id
        for node in walk(function)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Name)
        and any(_is_queue(t) for t in node.targets)
    }
    sites = [
        n
        for n in walk(function)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "append"
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id in kept
    ]
    sites.sort(key=lambda n: (n.lineno, n.col_offset))
    return sites


def _unrecognised(
    function: ast.FunctionDef, poll_position: int | None, keep_sites: list[ast.Call]
) -> Iterator[Unmodelled]:
    """What pdguard does not recognise in the inflight function itself."""
    where = (function.lineno, function.col_offset + 1)
    if poll_position is None:
        yield Unmodelled(
            *where,
            f"{FUNCTION}() polls its requests in no way pdguard recognises (no "
            f"{POLL_ALL_REDUCE_PREFIX}*() call, directly or in a method it calls)",
        )
    if not keep_sites:
        yield Unmodelled(
            *where,
            f"{FUNCTION}() keeps waiting requests in no way pdguard recognises (no list that "
            f"becomes {QUEUE} again)",
        )


def _blocks_and_clock_attrs(
    module: ast.Module, scope: _Scope
) -> tuple[list[list[ast.stmt]], set[str]]:
    """The module's statement blocks (to find the entry points), and the attributes given a
    clock value anywhere (to tell "stamped too early" from "never")."""
    blocks = [block for _, block in _held_blocks(module)]
    assigned_attrs: set[str] = set()
    for node in statement_walk(module):  # an assignment is a statement
        if isinstance(node, ast.Assign) and scope.is_clock(node.value):
            assigned_attrs |= {t.attr for t in node.targets if isinstance(t, ast.Attribute)}
    return blocks, assigned_attrs


def _queue_entries(
    blocks: list[list[ast.stmt]],
) -> Iterator[tuple[Entry, list[ast.stmt], int]]:
    """Every statement that puts requests into the queue, with its block and position."""
    for block in blocks:
        for position, stmt in enumerate(block):
            entry = _entry(stmt)
            if entry is not None:
                yield entry, block, position


# A request parked in the inflight queue until its bootstrap completes (0.5.16+).
PARKED = "pending_bootstrap"
# The poll state of a sender whose bootstrap runs.
POLL_BOOTSTRAPPING = KVPoll.Bootstrapping.name
# The poll state of a finished transfer.
POLL_SUCCESS = KVPoll.Success.name

# Queues a request passes before the inflight queue: one put back there can enter it again.
_EARLIER_QUEUES = ("waiting_queue", BOOTSTRAP_QUEUE)


def _send_backs(index: _ModuleIndex) -> Iterator[SendBack]:
    """Methods that put a request they are given back into an earlier queue
    (``self.waiting_queue.insert(0, req)``, ``self.disagg_prefill_bootstrap_queue.queue
    .append(req)``), with the request attributes they clear on the way (``req.x = None``,
    ``del req.x``)."""
    # the lines that name an earlier queue (the module's walk is kept: the escapes read it)
    named = {
        node.lineno
        for node in walk(index.module)
        if isinstance(node, ast.Attribute) and node.attr in _EARLIER_QUEUES
    }
    for method in index.methods.values():
        end = method.end_lineno or method.lineno
        if not any(first_line(method) <= line <= end for line in named):
            continue  # names no earlier queue: puts nothing back into one
        params = {a.arg for a in method.args.args[1:]}
        for node in walk(method):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _ENTRY_METHODS
            ):
                continue
            queue = _earlier_queue(node.func.value)
            if queue is None or not any(
                isinstance(a, ast.Name) and a.id in params for a in node.args
            ):
                continue
            resets = _resets(method, params)
            yield SendBack(method.name, node.lineno, node.col_offset, queue, resets)
            break


def _earlier_queue(node: ast.expr) -> str | None:
    """``self.waiting_queue`` or ``self.<bootstrap queue>[.queue]``: the queue's name."""
    while isinstance(node, ast.Attribute):
        if node.attr in _EARLIER_QUEUES and isinstance(node.value, ast.Name):
            return node.attr if node.value.id == "self" else None
        node = node.value
    return None


def _resets(method: ast.FunctionDef, params: set[str]) -> set[str]:
    """Attributes of the method's parameters set to None or deleted."""
    resets = set()
    for node in walk(method):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            if node.value.value is None:
                targets = node.targets
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id in params
            ):
                resets.add(target.attr)
    return resets


def _skips_every_parked(loop: ast.AST) -> tuple[int, int] | None:
    """Where ``loop`` skips a parked request (an ``if`` testing ``pending_bootstrap`` whose body
    has a ``continue``) without testing whether its sender still polls Bootstrapping."""
    for node in walk(loop):
        if not isinstance(node, ast.If):
            continue
        names = {n.attr for n in walk(node.test) if isinstance(n, ast.Attribute)}
        if (
            PARKED in names
            and POLL_BOOTSTRAPPING not in names
            and any(isinstance(stmt, ast.Continue) for stmt in node.body)
        ):
            return node.lineno, node.col_offset
    return None


def _restamps(function: ast.FunctionDef, scope: _Scope) -> list[Stamp]:
    """Clock values given to attributes inside ``function`` (a stamp rewritten on keep), except
    on a parked request (behind ``if req.pending_bootstrap:``): its deadline has not started."""
    parked = {
        id(inner)
        for node in walk(function)
        if isinstance(node, ast.If)
        and any(isinstance(a, ast.Attribute) and a.attr == PARKED for a in walk(node.test))
        for stmt in node.body
        for inner in walk(stmt)
    }
    restamps = []
    for node in walk(function):
        if id(node) in parked:
            continue
        if isinstance(node, ast.Assign) and scope.is_clock(node.value):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and isinstance(
                    _attribute_root(target.value), ast.Name
                ):  # req.entered, or req.stats.entered (as stamps are named)
                    restamps.append(Stamp(target.attr, node.lineno, node.col_offset, False))
                keyed = keyed_stamp(target)
                if keyed is not None:
                    restamps.append(Stamp(keyed, node.lineno, node.col_offset, False))
    return restamps


def _positioned_checks(
    index: _ModuleIndex, function: ast.FunctionDef, poll_position: int | None
) -> list[DeadlineCheck]:
    """The deadline checks, each with where it runs relative to the poll all-reduce."""
    checks = []
    # the statement that rebuilds the queue from the requests kept for the next step
    rebuilt = next(
        (
            i
            for i, stmt in enumerate(function.body)
            if poll_position is not None
            and i > poll_position
            and isinstance(stmt, ast.Assign)
            and any(_is_queue(t) for t in stmt.targets)
        ),
        None,
    )
    for position, stmt in enumerate(function.body):
        for check in _checks_in(index, function, stmt, {FUNCTION}):
            if rebuilt is not None and position > rebuilt and not _conditional(stmt):
                check.position = NEXT_STEP
            elif poll_position is None or position >= poll_position:
                check.position = "after"
            elif (
                _conditional(stmt)
                and not (check.skipped_under_pp and _pp_test(stmt))
                and not _while_queued(stmt)
            ):
                check.position = "conditional"
            else:
                check.position = "before"
            checks.append(check)
    return checks
