"""Which names the target's code only *passes along*: the ones a recording stand-in may take.

A fork's inflight function calls things no release has: its own metrics collector, a tracer,
a logprob processor. None of them decides whether a request lives or dies, and the simulation
should run the fork with them. A name (a module-level name, a name imported inside a function,
or an attribute read as ``<anything>.name``) gets a :class:`~.standins.Recorder` only when
**both** hold, so that exit 2 stays for every name the liveness logic depends on:

1. **Its name says telemetry** (a conservative allow-list): one of its words (split at ``_``
   and at case changes) is in :data:`TELEMETRY_WORDS` (``log``, ``logger``, ``logprob``,
   ``metric(s)``, ``stat(s)``, ``trace``/``tracer``/``tracing``, ``span``, ``profiler``,
   ``telemetry``, ``monitor``, ``histogram``, ``counter``, ``gauge``, ``recorder``,
   ``reporter``, ...), or it holds both ``output`` and ``processor``. The poll, the sender,
   ``KVPoll``, the queues and the clock are never on it.
2. **Every use of it in the loaded code only passes it along**: the value (after any chain of
   attribute reads and calls on it) is

   * discarded: the whole statement is the call (``self.my_metrics.observe(x)``);
   * a context manager (``with self.tracer.span("inflight"):``; a name bound by ``as`` must
     itself be only passed along);
   * an argument of a call that is itself a recording call passed along
     (``logger.info("%s", self.stats.snapshot())``, also through an f-string);
   * the test of an ``if`` (alone, under ``not``/``and``/``or``, or ``is [not] None``) whose
     branches do nothing but recording statements (``if self.enable_fork_metrics:
     self.fork_metrics.observe(...)``).

   A value that is compared, assigned, returned, iterated, indexed, used in arithmetic, passed
   to any other call or branched on around anything else is *used*: the name stays a load
   error (exit 2) that names it, its line and the use.

A *recording statement* is ``pass``, a call statement whose callee chain has a telemetry name
(``logger.warning(...)``, ``req.time_stats.set_x()``), an assignment into an attribute chain
with a telemetry name (``self.metrics_reporter.latency = x``), or an ``if``/``with`` of such.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

TELEMETRY_WORDS = frozenset(
    {
        "log",
        "logs",
        "logger",
        "loggers",
        "logging",
        "logprob",
        "logprobs",
        "metric",
        "metrics",
        "stat",
        "stats",
        "statistics",
        "trace",
        "traces",
        "tracer",
        "tracing",
        "span",
        "spans",
        "profiler",
        "profiling",
        "telemetry",
        "monitor",
        "monitoring",
        "observability",
        "histogram",
        "histograms",
        "counter",
        "counters",
        "gauge",
        "gauges",
        "recorder",
        "reporter",
    }
)
TELEMETRY_PAIRS = (frozenset({"output", "processor"}),)


def words(name: str) -> set[str]:
    """``enable_forkMetrics`` -> {"enable", "fork", "metrics"}."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return {w.lower() for w in spaced.split("_") if w}


def is_telemetry_name(name: str) -> bool:
    found = words(name)
    return bool(found & TELEMETRY_WORDS) or any(pair <= found for pair in TELEMETRY_PAIRS)


@dataclass(frozen=True)
class Verdict:
    """Whether a name may get a recording stand-in; if not, the use that needs its value."""

    passes_along: bool
    line: int = 0  # the first use (or the use that needs the value)
    why: str = ""  # why not, for the error message


NOT_TELEMETRY = (
    "only names of loggers, metrics, stats, tracing and logprob or output processors get a "
    "recording stand-in"
)


class Uses:
    """The uses of names in some loaded code (functions and module-level statements)."""

    def __init__(self, nodes: Iterable[ast.AST]) -> None:
        self.parents: dict[ast.AST, ast.AST] = {}
        self.roots = list(nodes)
        self._attributes: dict[str, list[ast.Attribute]] = {}
        for root in self.roots:
            for parent in ast.walk(root):
                for child in ast.iter_child_nodes(parent):
                    self.parents[child] = parent
                if isinstance(parent, ast.Attribute) and isinstance(parent.ctx, ast.Load):
                    self._attributes.setdefault(parent.attr, []).append(parent)

    def attribute(self, attr: str) -> Verdict:
        """``<anything>.attr`` read anywhere in the code."""
        return self._judge(attr, self._attributes.get(attr, []))

    def attributes_read(self) -> list[str]:
        """Every attribute the code reads."""
        return sorted(self._attributes)

    def name(self, name: str, within: ast.AST | None = None, *, named: bool = True) -> Verdict:
        """The global (or, ``within`` a function, the local) ``name`` read in the code;
        ``named=False``: a local that holds a recorder already, whatever its name."""
        return self._judge(name, self._reads(name, within), named=named)

    def _reads(self, name: str, within: ast.AST | None) -> list[ast.Name]:
        roots = [within] if within is not None else self.roots
        return [
            n
            for root in roots
            for n in ast.walk(root)
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
        ]

    def _judge(
        self,
        name: str,
        uses: Sequence[ast.expr],
        seen: frozenset[str] = frozenset(),
        named: bool = True,
    ) -> Verdict:
        first = min((u.lineno for u in uses), default=0)
        if named and not is_telemetry_name(name):
            return Verdict(False, first, NOT_TELEMETRY)
        for use in sorted(uses, key=lambda u: (u.lineno, u.col_offset)):
            why = self._passed_along(use, seen | {name})
            if why is not None:
                return Verdict(False, use.lineno, why)
        return Verdict(True, first)

    # -- one use ------------------------------------------------------------------------------

    def _climb(self, node: ast.expr) -> ast.expr:
        """Up the chain of attribute reads and calls on ``node``'s value."""
        while True:
            parent = self.parents.get(node)
            chained = (isinstance(parent, ast.Attribute) and parent.value is node) or (
                isinstance(parent, ast.Call) and parent.func is node
            )
            if not chained:
                return node
            assert isinstance(parent, ast.expr)
            node = parent

    def _passed_along(self, use: ast.expr, seen: frozenset[str]) -> str | None:
        """None when the value of ``use`` is only passed along; otherwise the use, in words."""
        top = self._climb(use)
        parent = self.parents.get(top)
        line = getattr(top, "lineno", 0)
        if isinstance(parent, ast.Expr):
            return None
        if (
            isinstance(top, ast.Attribute)
            and isinstance(top.ctx, ast.Store)
            and isinstance(parent, ast.Assign | ast.AnnAssign)
        ):
            return None  # an attribute set on the recorder: ``self.fork_stats.last = x``
        if isinstance(parent, ast.withitem) and parent.context_expr is top:
            target = parent.optional_vars
            if target is None:
                return None
            if isinstance(target, ast.Name):
                if target.id in seen:
                    return None
                reads = self._reads(target.id, self._function_of(parent))
                if self._judge(target.id, reads, seen, named=False).passes_along:
                    return None
            return f"its value is bound by `with ... as` and used at line {line}"
        if isinstance(parent, ast.FormattedValue):
            joined = self.parents.get(parent)
            if isinstance(joined, ast.JoinedStr):
                return self._argument(joined, seen)
        if isinstance(parent, ast.Call | ast.keyword | ast.Starred):
            return self._argument(top, seen)
        if self._guard(top) is not None:
            guard = self._guard(top)
            assert guard is not None
            if all(_recording(s) for s in (*guard.body, *guard.orelse)):
                return None
            return f"it is branched on at line {guard.lineno} around more than recording calls"
        return f"its value is {_how(parent, top)} at line {line}"

    def _argument(self, node: ast.expr, seen: frozenset[str]) -> str | None:
        """``node`` is an argument: passed along if the call takes it to a recording call whose
        own value is passed along."""
        call = self.parents.get(node)
        if isinstance(call, ast.keyword | ast.Starred):
            call = self.parents.get(call)
        line = getattr(node, "lineno", 0)
        if not isinstance(call, ast.Call) or call.func is node:
            return f"its value is used at line {line}"
        if not _telemetry_chain(call.func):
            return f"its value is passed to {_callee(call)}() at line {line}"
        return self._passed_along(call, seen)

    def _guard(self, node: ast.expr) -> ast.If | None:
        """The ``if`` whose test is ``node`` (through not/and/or and ``is [not] None``)."""
        while True:
            parent = self.parents.get(node)
            if isinstance(parent, ast.If) and parent.test is node:
                return parent
            logic = isinstance(parent, ast.BoolOp) or (
                isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not)
            )
            none_test = (
                isinstance(parent, ast.Compare)
                and parent.left is node
                and all(isinstance(op, ast.Is | ast.IsNot) for op in parent.ops)
                and all(isinstance(c, ast.Constant) and c.value is None for c in parent.comparators)
            )
            if not (logic or none_test):
                return None
            assert isinstance(parent, ast.expr)
            node = parent

    def _function_of(self, node: ast.AST) -> ast.AST | None:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                return node
        return None


def _chain(node: ast.expr) -> Iterator[str]:
    """The names along a callee or target chain: ``self.my_metrics.observe`` -> self,
    my_metrics, observe."""
    while True:
        if isinstance(node, ast.Attribute):
            yield node.attr
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            if isinstance(node, ast.Name):
                yield node.id
            return


def _telemetry_chain(node: ast.expr) -> bool:
    return any(is_telemetry_name(name) for name in _chain(node))


def _recording(stmt: ast.stmt) -> bool:
    """A statement that only records (see the module docstring)."""
    if isinstance(stmt, ast.Pass):
        return True
    if isinstance(stmt, ast.Expr):
        return isinstance(stmt.value, ast.Call) and _telemetry_chain(stmt.value.func)
    if isinstance(stmt, ast.Assign | ast.AugAssign | ast.AnnAssign):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return all(isinstance(t, ast.Attribute) and _telemetry_chain(t) for t in targets)
    if isinstance(stmt, ast.If):
        return all(_recording(s) for s in (*stmt.body, *stmt.orelse))
    if isinstance(stmt, ast.With):
        items = all(
            isinstance(i.context_expr, ast.Call) and _telemetry_chain(i.context_expr.func)
            for i in stmt.items
        )
        return items and all(_recording(s) for s in stmt.body)
    return False


def _callee(call: ast.Call) -> str:
    return ".".join(reversed(list(_chain(call.func)))) or "a call"


def _how(parent: ast.AST | None, node: ast.expr) -> str:
    """How ``parent`` uses the value ``node``, in words."""
    if isinstance(parent, ast.Compare):
        return "compared"
    if isinstance(parent, ast.If | ast.While | ast.IfExp | ast.Assert | ast.BoolOp | ast.UnaryOp):
        return "branched on"
    if isinstance(parent, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
        return "assigned"
    if isinstance(parent, ast.Return | ast.Yield | ast.YieldFrom):
        return "returned"
    if isinstance(parent, ast.For | ast.comprehension):
        return "iterated"
    if isinstance(parent, ast.Subscript):
        return "indexed"
    if isinstance(parent, ast.BinOp):
        return "used in arithmetic"
    return "used"
