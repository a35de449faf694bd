"""What a bounded wait is, on ``ast``: the one home of its parts, used by every rule and fix.

A request waits for its peer; the wait is bounded when, on every step where the request can be
kept, something compares a reading of a clock with where the wait started, against a limit,
and the branch that runs once the limit has passed fails the request in a way every rank
agrees on. Each part has one reading here, with a typed answer:

* the clock (``Clock``): which function of which module, and what kind it is (wall,
  monotonic, perf_counter; seconds or nanoseconds), through imports and aliases;
* the start (``Start``): a stamp (a clock reading) or a stored deadline (a reading plus the
  limit);
* the test (``Comparison``): ``now - t > L``, ``now > deadline``, the time left (``deadline - now <=
  0``), scaled units (``(now - t) * 1000 > L_ms``), and whether it is true once the wait is
  overdue (``Direction.OVERDUE``), true while time is left (``Direction.TIME_LEFT``), or never
  true of an overdue wait (``Direction.NEVER``: a flipped or swapped comparison);
* the fail action (``FailAction``): does the called method make the polled state Failed, in
  this tree's own classes (``SenderIndex.abort_honoured``, for any method name);
* reachability (``Reach``, ``overdue_branch``, ``never_runs``): which statements run once the
  test says overdue, and code that never runs (after a ``return``, under ``if False``, in the
  handler of a ``try`` whose body cannot raise, in a lambda);
* unanimity (``Unanimity``): failing through the sender before the MIN reduce, or after it on
  the requests kept for the next step's reduce, is unanimous; editing the reduced poll or
  dropping the request on one rank is not.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeGuard

from pdguard.sglang_names import KVPoll

from ..classes import methods_of
from ..nodes import own_returns

__all__ = [
    "CLOCK_FUNCTIONS",
    "CLOCK_KINDS",
    "Clock",
    "ClockKind",
    "Comparison",
    "ComparisonKind",
    "Direction",
    "FailAction",
    "LimitKind",
    "Reach",
    "Start",
    "StartKind",
    "Unanimity",
    "call_name",
    "clock_aliases",
    "clock_of",
    "is_failed",
    "limit_of",
    "never_runs",
    "overdue_branch",
    "reach",
    "read_test",
    "start_of",
    "unanimity",
]


# -- the clock --------------------------------------------------------------------------------


class ClockKind(Enum):
    WALL = "wall"  # time.time(): jumps with NTP, shared by hosts
    MONOTONIC = "monotonic"  # time.monotonic(): since an unspecified point, per host
    PERF_COUNTER = "perf_counter"  # time.perf_counter(): since another point, per process


# ``time``'s clock functions: their kind, and whether they count nanoseconds.
CLOCK_KINDS: Mapping[str, tuple[ClockKind, bool]] = {
    "time": (ClockKind.WALL, False),
    "time_ns": (ClockKind.WALL, True),
    "monotonic": (ClockKind.MONOTONIC, False),
    "monotonic_ns": (ClockKind.MONOTONIC, True),
    "perf_counter": (ClockKind.PERF_COUNTER, False),
    "perf_counter_ns": (ClockKind.PERF_COUNTER, True),
}
CLOCK_FUNCTIONS = frozenset(CLOCK_KINDS)
CLOCK_MODULE = "time"


@dataclass(frozen=True)
class Clock:
    """A clock reading's source: ``time.monotonic`` read as ``_t.monotonic()`` or ``now()``."""

    function: str  # the function of ``time`` (monotonic, time, perf_counter, ..._ns)
    module: str = CLOCK_MODULE

    @property
    def kind(self) -> ClockKind:
        return CLOCK_KINDS[self.function][0]

    @property
    def nanoseconds(self) -> bool:
        return CLOCK_KINDS[self.function][1]

    def agrees(self, other: Clock) -> bool:
        """Is a difference of a reading of ``self`` and one of ``other`` an elapsed time (same
        kind, same unit)? A ``time.time()`` stamp read on ``time.monotonic()`` never expires."""
        return self.kind is other.kind and self.nanoseconds == other.nanoseconds

    def __str__(self) -> str:
        return f"{self.module}.{self.function}()"


def call_name(call: ast.Call) -> str | None:
    """The name a call is made by: ``f`` for ``f()``, ``m`` for ``x.m()``."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def clock_aliases(module: ast.Module) -> dict[str, Clock]:
    """The names a module reads a clock by: clock functions imported by name (``from time
    import perf_counter as now``: ``now``), and ``self.<m>`` for each method of its classes
    that only returns a clock reading (``def _now(self): return time.monotonic()``)."""
    names: dict[str, Clock] = {}
    for node in module.body:  # module-level imports are the ones functions see
        if isinstance(node, ast.ImportFrom) and node.module == CLOCK_MODULE:
            for alias in node.names:
                if alias.name in CLOCK_KINDS:
                    names[alias.asname or alias.name] = Clock(alias.name)
    for cls in module.body:
        if isinstance(cls, ast.ClassDef):
            for method in methods_of(cls).values():
                clocks = [clock_of(r.value, names) for r in own_returns(method)]
                first = clocks[0] if clocks else None
                if first is not None and all(c == first for c in clocks):
                    names[f"self.{method.name}"] = first
    return names


def clock_of(
    node: ast.AST | None,
    aliases: Mapping[str, Clock] | frozenset[str] | set[str] = frozenset(),
    held: Mapping[str, Clock | None] = {},  # read only
) -> Clock | None:
    """The clock ``node`` reads: ``time.monotonic()``, ``_t.time()``, ``monotonic()``, a
    method that returns one (``self._now()``, in ``aliases``), a name holding one (``held``),
    or ``x or time.monotonic()``. ``aliases`` given as a set of names knows only that they are
    clocks (their kind is then taken as monotonic)."""
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in CLOCK_KINDS:
            return Clock(func.attr)
        key = (
            f"self.{func.attr}"
            if isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
            else func.id
            if isinstance(func, ast.Name)
            else None
        )
        if key is not None and key in aliases:
            if isinstance(aliases, Mapping):
                return aliases[key]
            return Clock("monotonic")
        return None
    if isinstance(node, ast.Name):
        return held.get(node.id)
    if isinstance(node, ast.BoolOp):
        for value in node.values:
            found = clock_of(value, aliases, held)
            if found is not None:
                return found
    return None


# -- the start -----------------------------------------------------------------------------------


class StartKind(Enum):
    STAMP = "stamp"  # when the wait started: ``req.t = now``
    DEADLINE = "deadline"  # when it must end: ``req.deadline = now + limit``


@dataclass(frozen=True)
class Start:
    kind: StartKind
    clock: Clock
    limit: ast.expr | None = None  # a stored deadline's limit


def start_of(
    value: ast.AST | None, clock: Callable[[ast.AST | None], Clock | None]
) -> Start | None:
    """What assigning ``value`` to a request's attribute starts: a stamp (a clock reading), a
    stored deadline (a reading plus a limit, either side), or nothing."""
    found = clock(value)
    if found is not None:
        return Start(StartKind.STAMP, found)
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
        for reading, limit in ((value.left, value.right), (value.right, value.left)):
            found = clock(reading)
            if found is not None and clock(limit) is None:
                return Start(StartKind.DEADLINE, found, limit)
    return None


# -- the test ------------------------------------------------------------------------------------


class ComparisonKind(Enum):
    ELAPSED = "elapsed"  # now - stamp against a limit
    DEADLINE = "deadline"  # now against a stored deadline


class Direction(Enum):
    OVERDUE = "overdue"  # true once the wait is overdue: the branch taken fails it
    TIME_LEFT = "time left"  # true while time is left: the other branch fails it
    NEVER = "never"  # never true of an overdue wait, nor false: flipped or swapped


@dataclass(frozen=True)
class Comparison:
    kind: ComparisonKind
    direction: Direction
    clock_sign: int  # the sign of the clock reading in (greater side - lesser side)
    limit: tuple[ast.expr, ...] = ()  # the terms that are neither the clock nor the start


_GREATER = (ast.Gt, ast.GtE)
_LESSER = (ast.Lt, ast.LtE)


def _positive(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
        and node.value > 0
    )


def _terms(
    node: ast.expr, sign: int, expand: Callable[[ast.expr], ast.expr | None], depth: int = 3
) -> Iterator[tuple[ast.expr, int]]:
    """``node`` as a sum of signed terms, through ``+``, ``-``, unary ``-``, and scaling by a
    positive constant (``(now - t) * 1000``, ``/ 60``); names are followed to what they were
    assigned (``expand``) where that is itself a sum."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        yield from _terms(node.left, sign, expand, depth)
        right = -sign if isinstance(node.op, ast.Sub) else sign
        yield from _terms(node.right, right, expand, depth)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        yield from _terms(node.operand, -sign, expand, depth)
        return
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Div | ast.FloorDiv):
        pairs = [(node.left, node.right)]
        if isinstance(node.op, ast.Mult):
            pairs.append((node.right, node.left))
        for inner, factor in pairs:
            if _positive(factor):
                yield from _terms(inner, sign, expand, depth)
                return
    if isinstance(node, ast.Name) and depth:
        value = expand(node)
        if isinstance(value, ast.BinOp | ast.UnaryOp):
            yield from _terms(value, sign, expand, depth - 1)
            return
    yield node, sign


def read_test(
    compare: ast.Compare,
    is_clock: Callable[[ast.AST], bool],
    is_start: Callable[[ast.AST], StartKind | None],
    expand: Callable[[ast.expr], ast.expr | None] = lambda _: None,
) -> Comparison | None:
    """What ``compare`` tests of a wait, if it compares a clock reading with a start: which
    kind of test, and when it holds (``Direction``). ``is_start`` says whether a term reads a
    stamp or a stored deadline; ``expand`` follows a name to what it was assigned."""
    if len(compare.ops) != 1 or not isinstance(compare.ops[0], _GREATER + _LESSER):
        return None
    left, right = compare.left, compare.comparators[0]
    greater, lesser = (left, right) if isinstance(compare.ops[0], _GREATER) else (right, left)
    terms = [*_terms(greater, 1, expand), *_terms(lesser, -1, expand)]
    clock = sum(sign for node, sign in terms if is_clock(node))
    others = [(node, sign, is_start(node)) for node, sign in terms if not is_clock(node)]
    start = sum(sign for _, sign, kind in others if kind is not None)
    kinds = {kind for _, _, kind in others if kind is not None}
    if not clock or not kinds:
        return None
    kind = ComparisonKind.DEADLINE if kinds == {StartKind.DEADLINE} else ComparisonKind.ELAPSED
    limit = [
        sign
        for node, sign, k in others
        if k is None and not (isinstance(node, ast.Constant) and node.value == 0)
    ]
    limits = tuple(node for node, _, k in others if k is None)
    if start != -clock:  # ``t + now``, or ``now`` on both sides
        return Comparison(kind, Direction.NEVER, clock, limits)
    # a stamp's limit stands against the elapsed time: (now - t) - L; a limit on the same
    # side as the clock (``now - t + L > 0``, ``t - now > L``) never lets it expire
    if kind is ComparisonKind.ELAPSED and limit and sum(limit) == clock:
        return Comparison(kind, Direction.NEVER, clock, limits)
    direction = Direction.OVERDUE if clock > 0 else Direction.TIME_LEFT
    return Comparison(kind, direction, clock, limits)


# -- the limit -----------------------------------------------------------------------------------


class LimitKind(Enum):
    FINITE = "finite"  # a number, a registry or environment read, or what pdguard cannot tell
    INFINITE = "infinite"  # ``float("inf")``, ``math.inf``: the test never holds


def _infinite(value: ast.expr) -> bool:
    if isinstance(value, ast.Constant) and isinstance(value.value, float):
        return value.value == float("inf")
    if isinstance(value, ast.Attribute) and value.attr == "inf":
        return True  # math.inf, numpy.inf
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "float"
        and len(value.args) == 1
        and isinstance(value.args[0], ast.Constant)
        and str(value.args[0].value).strip().lower().lstrip("+") in ("inf", "infinity")
    )


def limit_of(limit: ast.expr, module: ast.Module) -> tuple[LimitKind, int]:
    """What a limit term is where the wait is tested: a module-level name is what its last
    module-level binding makes it (``TIMEOUT = float("inf")`` after the definition forces the
    test never to hold); with the line of that binding (0 for the term itself)."""
    if isinstance(limit, ast.Name):
        last = None
        for stmt in module.body:
            targets = (
                stmt.targets
                if isinstance(stmt, ast.Assign)
                else [stmt.target]
                if isinstance(stmt, ast.AnnAssign | ast.AugAssign)
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == limit.id for t in targets):
                last = stmt
        value = getattr(last, "value", None)
        if isinstance(last, ast.Assign | ast.AnnAssign) and value is not None and _infinite(value):
            return LimitKind.INFINITE, last.lineno
        return LimitKind.FINITE, 0
    return (LimitKind.INFINITE if _infinite(limit) else LimitKind.FINITE), 0


# -- reachability --------------------------------------------------------------------------------


class Reach(Enum):
    EVERY_STEP = "every step"
    CONDITIONAL = "conditional"  # behind a guard that need not hold on every step
    NEVER = "never"  # dead code


_JUMPS = (ast.Return, ast.Break, ast.Continue, ast.Raise)


def _falsy(test: ast.expr) -> bool:
    """``False``, ``0``, ``None``, ``""``: a test that never holds."""
    return isinstance(test, ast.Constant) and not test.value


def _cannot_raise(body: Sequence[ast.stmt]) -> bool:
    """Only ``pass``, ``...`` or constants: the ``try`` body never raises."""
    return all(
        isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        for s in body
    )


def never_runs(node: ast.AST, parents: Mapping[ast.AST, ast.AST], stop: ast.AST) -> str:
    """Why ``node`` (inside ``stop``, whose ``parents`` are given) never runs, in words, or "":
    after a ``return``/``break``/``continue``/``raise`` in a block around it, under ``if
    False`` (or in the ``else`` of ``if True``), under ``while False``, in a handler of a
    ``try`` whose body cannot raise, in a lambda (defined, not called here)."""
    child: ast.AST = node
    while child is not stop and child in parents:
        parent = parents[child]
        if isinstance(parent, ast.Lambda):
            return "it is only in a lambda"
        if isinstance(parent, ast.If | ast.While) and child is not parent.test:
            in_body = child in parent.body
            if in_body and _falsy(parent.test):
                return f"it is under `{ast.unparse(parent.test)}`"
            if (
                not in_body
                and isinstance(parent, ast.If)
                and isinstance(parent.test, ast.Constant)
                and parent.test.value
            ):
                return f"it is in the else of `{ast.unparse(parent.test)}`"
        if isinstance(parent, ast.ExceptHandler):
            holder = parents.get(parent)
            if isinstance(holder, ast.Try) and _cannot_raise(holder.body):
                return "it is only in an except of a try that cannot raise"
        for name in ("body", "orelse", "finalbody"):
            block = getattr(parent, name, None)
            if isinstance(block, list) and child in block:
                jump = next((s for s in block[: block.index(child)] if isinstance(s, _JUMPS)), None)
                if jump is not None:
                    word = ast.unparse(jump).split()[0]
                    return f"it comes after the `{word}` on line {jump.lineno}"
        child = parent
    if child is not stop:
        return "it is only in a lambda or a nested function"
    return ""


def reach(
    node: ast.AST,
    func: ast.FunctionDef,
    parents: Mapping[ast.AST, ast.AST],
    holds_back: Callable[[ast.expr], bool],
) -> Reach:
    """How often ``node`` (in ``func``, whose ``parents`` are given) runs, of the steps that
    run ``func``: NEVER where ``never_runs`` says so; CONDITIONAL where an ``if`` around it
    (either branch), or one around a ``return`` placed before it, has a test ``holds_back``
    says need not hold on every step (the decode queues' retraction gate: "while retracted
    requests wait"); EVERY_STEP otherwise."""
    if never_runs(node, parents, func):
        return Reach.NEVER
    child, parent = node, parents.get(node)
    while parent is not None and parent is not func:
        if isinstance(parent, ast.If) and child is not parent.test and holds_back(parent.test):
            return Reach.CONDITIONAL
        child, parent = parent, parents.get(parent)
    position = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
    for ret in own_returns(func):
        if (ret.lineno, ret.col_offset) >= position:
            continue
        holder = parents.get(ret)
        while holder is not None and holder is not func:
            if isinstance(holder, ast.If) and holds_back(holder.test):
                return Reach.CONDITIONAL
            holder = parents.get(holder)
    return Reach.EVERY_STEP


def overdue_branch(
    compare: ast.Compare, direction: Direction, parents: Mapping[ast.AST, ast.AST]
) -> list[ast.stmt] | None:
    """The statements that run once ``compare`` (a ``Comparison`` with ``direction``) says the wait
    is overdue, where it is the test of an ``if`` (alone, or under ``not``): the body, or the
    ``else`` and, when the body jumps away (``continue``, ``return``), what follows the ``if``
    in its block. [] for a test that never says so; None where ``compare`` is not an ``if``'s
    whole test (a predicate, part of an ``and``): then the caller reads what is around it."""
    node: ast.AST = compare
    negated = False
    parent = parents.get(node)
    # through ``not`` (which flips it) and ``and``/``or``: once overdue, the comparison is
    # true (or false) whatever the other operands are, so the branch it picks when they let
    # it decide is the one that runs for an overdue request (``if t is None or now - t <
    # limit: continue``: what follows the ``if``)
    while isinstance(parent, ast.BoolOp) or (
        isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not)
    ):
        if isinstance(parent, ast.UnaryOp):
            negated = not negated
        node, parent = parent, parents.get(parent)
    if not isinstance(parent, ast.If) or parent.test is not node:
        return None
    if direction is Direction.NEVER:
        return []
    overdue_in_body = (direction is Direction.OVERDUE) != negated
    if overdue_in_body:
        return list(parent.body)
    after: list[ast.stmt] = []
    if parent.body and isinstance(parent.body[-1], ast.Continue | ast.Return | ast.Break):
        holder = parents.get(parent)
        for name in ("body", "orelse", "finalbody"):
            block = getattr(holder, name, None)
            if isinstance(block, list) and parent in block:
                after = block[block.index(parent) + 1 :]
    return [*parent.orelse, *after]


# -- the fail action -----------------------------------------------------------------------------


class FailAction(Enum):
    FAILS = "fails"  # the polled state is Failed from then on, on every concrete sender
    DOES_NOT_FAIL = "does not fail"  # some concrete sender's poll() does not report Failed
    UNKNOWN = "unknown"  # no concrete sender in the tree to judge by


def is_failed(node: ast.AST | None) -> TypeGuard[ast.Attribute]:
    """``KVPoll.Failed`` (or ``<anything>.Failed``: the poll enum imported under another
    name)."""
    return isinstance(node, ast.Attribute) and node.attr == KVPoll.Failed.name


def fail_action(
    senders: Sequence[str], fails: Callable[[str, str], bool], methods: Sequence[str]
) -> FailAction:
    """Does calling ``methods`` on a request's sender make its ``poll()`` report Failed, on
    every concrete sender class ``senders`` of the tree (``fails(sender, method)``: the
    sender index's ``abort_honoured``)?"""
    if not senders:
        return FailAction.UNKNOWN
    if all(any(fails(s, m) for m in methods) for s in senders):
        return FailAction.FAILS
    return FailAction.DOES_NOT_FAIL


# -- unanimity -----------------------------------------------------------------------------------


class Unanimity(Enum):
    BEFORE_REDUCE = "before the reduce"  # failed through the sender, then MIN-reduced
    NEXT_REDUCE = "at the next reduce"  # failed through the sender on kept requests, after it
    PER_RANK = "per rank"  # the reduced poll edited, or the request dropped, on one rank

    @property
    def unanimous(self) -> bool:
        return self is not Unanimity.PER_RANK


def unanimity(before_reduce: bool, through_sender: bool, on_kept_only: bool) -> Unanimity:
    """How the ranks come to agree on a failure decided by each rank's own clock: failed
    through the sender before the MIN reduce, or after it on requests that stay for the next
    step (whose reduce then is unanimous); anything else is per rank."""
    if through_sender and before_reduce:
        return Unanimity.BEFORE_REDUCE
    if through_sender and on_kept_only:
        return Unanimity.NEXT_REDUCE
    return Unanimity.PER_RANK
