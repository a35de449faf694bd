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
from collections.abc import Iterator
from dataclasses import dataclass, field

from pdguard.sglang_names import INFLIGHT_FUNCTION as FUNCTION
from pdguard.sglang_names import INFLIGHT_QUEUE as QUEUE
from pdguard.sglang_names import POLL_ALL_REDUCE_PREFIX
from pdguard.sglang_names import REQ_SENDER as SENDER

from .classes import methods_of
from .kv_senders import is_self_attr

CLOCK_FUNCTIONS = frozenset({"monotonic", "time", "perf_counter", "monotonic_ns", "time_ns"})


def clock_names(module: ast.Module) -> set[str]:
    """Local names of clock functions imported by name (``from time import monotonic``)."""
    names = set()
    for node in module.body:  # module-level imports are the ones functions see
        if isinstance(node, ast.ImportFrom) and node.module == "time":
            names |= {a.asname or a.name for a in node.names if a.name in CLOCK_FUNCTIONS}
    return names


def is_clock(node: ast.AST, clocks: set[str], clock_vars: set[str] = frozenset()) -> bool:  # type: ignore[assignment]
    """A clock reading: ``time.monotonic()``, ``_t.time()``, ``monotonic()``, a name holding one,
    or ``x or time.monotonic()``."""
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in CLOCK_FUNCTIONS:
            return True
        return isinstance(func, ast.Name) and func.id in clocks
    if isinstance(node, ast.Name):
        return node.id in clock_vars
    if isinstance(node, ast.BoolOp):
        return any(is_clock(v, clocks, clock_vars) for v in node.values)
    return False


@dataclass
class Stamp:
    attr: str
    line: int
    col: int
    guarded: bool  # only set when not set yet (a re-queue keeps the first stamp)


@dataclass
class DeadlineCheck:
    attr: str  # the attribute the deadline measures from
    via_sender: bool  # read off the request's sender (e.g. sender.init_time)
    line: int
    col: int
    method: str  # where the comparison is
    fails_sender: bool  # the expired branch acts on the request's sender
    position: str = ""  # "before" / "after" the poll all-reduce, "conditional" before it


@dataclass
class InflightModel:
    class_name: str
    function: ast.FunctionDef
    poll_line: int
    keep_sites: list[ast.Call] = field(default_factory=list)
    appends: list[ast.Call] = field(default_factory=list)
    stamps: dict[int, Stamp | None] = field(default_factory=dict)  # id(append) -> stamp
    checks: list[DeadlineCheck] = field(default_factory=list)
    restamps: list[Stamp] = field(default_factory=list)  # stamps inside FUNCTION (on keep)
    assigned_attrs: set[str] = field(default_factory=set)  # attrs given a clock value anywhere

    def stamped_attrs(self) -> set[str]:
        """Attributes stamped at every append site."""
        stamps = list(self.stamps.values())
        if not stamps or any(s is None for s in stamps):
            return set()
        return set.intersection(*({s.attr} for s in stamps if s is not None))

    def valid_checks(self) -> list[DeadlineCheck]:
        stamped = self.stamped_attrs()
        return [
            c
            for c in self.checks
            if c.position == "before" and c.fails_sender and not c.via_sender and c.attr in stamped
        ]


class _Scope:
    """Names a function assigns from clock calls and from attribute reads."""

    def __init__(self, function: ast.FunctionDef, clocks: set[str]) -> None:
        self.clocks = clocks
        self.clock_vars: set[str] = set()
        self.reads: dict[str, tuple[str, bool]] = {}  # name -> (attr, via_sender)
        self.senders: set[str] = set()
        self.values: dict[str, ast.expr] = {}  # name -> the expression last assigned to it
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if not isinstance(target, ast.Name):
                    continue
                self.values[target.id] = node.value
                if self.is_clock(node.value):
                    self.clock_vars.add(target.id)
                read = self.stamp_read(node.value)
                if read is not None:
                    self.reads[target.id] = read
                if isinstance(node.value, ast.Attribute) and node.value.attr == SENDER:
                    self.senders.add(target.id)

    def is_clock(self, node: ast.AST) -> bool:
        return is_clock(node, self.clocks, self.clock_vars)

    def stamp_read(self, node: ast.AST) -> tuple[str, bool] | None:
        """``req.attr`` / ``getattr(req, "attr", ...)`` / a name holding one: (attr, via_sender)."""
        if isinstance(node, ast.Name):
            return self.reads.get(node.id)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                return None  # scheduler state, not something stamped on a request
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
    return any(isinstance(n, ast.Attribute) and n.attr == SENDER for n in ast.walk(node))


def _name_in(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _expanded(parts: list[ast.expr], scope: _Scope, depth: int = 3) -> list[ast.AST]:
    """The nodes of ``parts``, and of what the names in them were assigned (``waited = now -
    req.entered_at; if waited > TIMEOUT``)."""
    nodes: list[ast.AST] = [n for part in parts for n in ast.walk(part)]
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
    for node in nodes:
        if scope.is_clock(node) or (isinstance(node, ast.Name) and node.id in scope.clock_vars):
            continue
        read = scope.stamp_read(node)
        if read is not None and read[0] not in CLOCK_FUNCTIONS:
            return read
    return None


class _ModuleIndex:
    def __init__(self, module: ast.Module) -> None:
        self.module = module
        self.clocks = clock_names(module)
        self.methods: dict[str, ast.FunctionDef] = {}
        self.owner: dict[int, str] = {}
        self._scopes: dict[int, _Scope] = {}
        for cls in module.body:
            if isinstance(cls, ast.ClassDef):
                for item in methods_of(cls).values():
                    self.methods.setdefault(item.name, item)
                    self.owner[id(item)] = cls.name

    def scope(self, function: ast.FunctionDef) -> _Scope:
        """The function's names, analysed once however many statements ask."""
        if id(function) not in self._scopes:
            self._scopes[id(function)] = _Scope(function, self.clocks)
        return self._scopes[id(function)]

    def self_calls(self, node: ast.AST) -> Iterator[ast.FunctionDef]:
        for call in ast.walk(node):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Name)
                and call.func.value.id == "self"
                and call.func.attr in self.methods
            ):
                yield self.methods[call.func.attr]


def _checks_in(
    index: _ModuleIndex, function: ast.FunctionDef, region: ast.AST, seen: set[str]
) -> list[DeadlineCheck]:
    """Deadline checks in ``region`` of ``function``, and in the methods it calls."""
    scope = index.scope(function)
    loops = [n for n in ast.walk(region) if isinstance(n, ast.For | ast.While)]
    found = []
    for node in ast.walk(region):
        if not isinstance(node, ast.Compare):
            continue
        read = _deadline_compare(node, scope)
        if read is None:
            continue
        loop = next((lp for lp in loops if any(n is node for n in ast.walk(lp))), region)
        fails = _fails_sender(index, loop, scope, node)
        found.append(
            DeadlineCheck(read[0], read[1], node.lineno, node.col_offset, function.name, fails)
        )
    for callee in index.self_calls(region):
        if callee.name not in seen:
            seen.add(callee.name)
            found += _checks_in(index, callee, callee, seen)
    return found


def _fails_sender(
    index: _ModuleIndex, region: ast.AST, scope: _Scope, compare: ast.Compare
) -> bool:
    """Does ``region`` (the loop around a deadline check) act on the request's sender, other than
    polling it?"""
    for node in ast.walk(region):
        if node is compare:
            continue
        if isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr != "poll"
                and scope.touches_sender(func.value)
            ):
                return True
            if isinstance(func, ast.Name) and func.id.startswith(POLL_ALL_REDUCE_PREFIX):
                continue
            for callee in index.self_calls(node):
                if callee is not None and _mentions_sender(callee) and callee.name != FUNCTION:
                    return True
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and scope.touches_sender(target.value):
                    return True
    return False


def _enclosing_statement(body: list[ast.stmt], node: ast.AST) -> int | None:
    for position, stmt in enumerate(body):
        if any(n is node for n in ast.walk(stmt)):
            return position
    return None


def _conditional(stmt: ast.stmt) -> bool:
    """Does what ``stmt`` holds run behind a condition, rather than on every call?"""
    return isinstance(stmt, ast.If | ast.While | ast.Try | ast.With | ast.Match)


def _stamp_before(
    index: _ModuleIndex, append: ast.Call, block: list[ast.stmt], position: int, req: str
) -> Stamp | None:
    """The stamp set on ``req`` by the statements before ``append`` in its block."""
    stamp = None
    for stmt in block[:position]:
        found = _stamps_in(index, stmt, req)
        if found is not None:
            stamp = found
    return stamp


def _stamps_in(index: _ModuleIndex, stmt: ast.stmt, req: str, depth: int = 0) -> Stamp | None:
    for node in ast.walk(stmt):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == req
                    and is_clock(node.value, index.clocks)
                ):
                    guarded = _guarded(stmt, node, target.attr) or any(
                        (isinstance(n, ast.Attribute) and n.attr == target.attr)
                        or (isinstance(n, ast.Constant) and n.value == target.attr)
                        for n in ast.walk(node.value)
                    )
                    return Stamp(target.attr, node.lineno, node.col_offset, guarded)
        if isinstance(node, ast.Call) and depth < 2:
            # A helper that stamps its argument: self._stamp(req)
            for callee in index.self_calls(node):
                params = [a.arg for a in callee.args.args[1:]]
                args = [a.id if isinstance(a, ast.Name) else None for a in node.args]
                if req in args and args.index(req) < len(params):
                    inner = params[args.index(req)]
                    for inner_stmt in callee.body:
                        found = _stamps_in(index, inner_stmt, inner, depth + 1)
                        if found is not None:
                            return found
    return None


def _guarded(stmt: ast.stmt, assign: ast.Assign, attr: str) -> bool:
    """Is ``assign`` behind an ``if`` that tests the stamp attribute (set only once)?"""
    for node in ast.walk(stmt):
        if isinstance(node, ast.If) and any(n is assign for n in ast.walk(node)):
            mentions = any(
                (isinstance(n, ast.Attribute) and n.attr == attr)
                or (isinstance(n, ast.Constant) and n.value == attr)
                for n in ast.walk(node.test)
            )
            if mentions:
                return True
    return False


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


def analyse(module: ast.Module) -> InflightModel | None:
    """The model of ``prefill.py``; None without ``process_disagg_prefill_inflight_queue``."""
    index = _ModuleIndex(module)
    function = index.methods.get(FUNCTION)
    if function is None:
        return None
    polls = [
        n
        for n in ast.walk(function)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id.startswith(POLL_ALL_REDUCE_PREFIX)
    ]
    poll = polls[0] if polls else None
    model = InflightModel(index.owner[id(function)], function, poll.lineno if poll else 0)

    # Keep sites: appends to the list that becomes the new queue.
    kept = {
        node.value.id
        for node in ast.walk(function)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Name)
        and any(is_self_attr(t, QUEUE) for t in node.targets)
    }
    model.keep_sites = [
        n
        for n in ast.walk(function)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "append"
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id in kept
    ]
    model.keep_sites.sort(key=lambda n: (n.lineno, n.col_offset))

    # One walk of the module: its statement blocks (to find the entry points), and the clock
    # values given to attributes anywhere (to tell "stamped too early" from "never").
    scope = index.scope(function)
    blocks = []
    for node in ast.walk(module):
        blocks += _own_blocks(node)
        if isinstance(node, ast.Assign) and scope.is_clock(node.value):
            model.assigned_attrs |= {t.attr for t in node.targets if isinstance(t, ast.Attribute)}

    # Entry points and their stamps.
    for block in blocks:
        for position, stmt in enumerate(block):
            if not (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Call)
                and isinstance(stmt.value.func, ast.Attribute)
                and stmt.value.func.attr == "append"
                and is_self_attr(stmt.value.func.value, QUEUE)
            ):
                continue
            append = stmt.value
            model.appends.append(append)
            arg = append.args[0] if append.args else None
            req = arg.id if isinstance(arg, ast.Name) else None
            model.stamps[id(append)] = (
                _stamp_before(index, append, block, position, req) if req else None
            )

    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and scope.is_clock(node.value):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    model.restamps.append(Stamp(target.attr, node.lineno, node.col_offset, False))

    # Deadline checks, by where they run relative to the poll all-reduce.
    poll_position = _enclosing_statement(function.body, poll) if poll is not None else None
    for position, stmt in enumerate(function.body):
        for check in _checks_in(index, function, stmt, {FUNCTION}):
            if poll_position is None or position >= poll_position:
                check.position = "after"
            elif _conditional(stmt):
                check.position = "conditional"
            else:
                check.position = "before"
            model.checks.append(check)
    return model
