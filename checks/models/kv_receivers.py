"""The KV receiver classes of an SGLang tree, and what their ``poll()`` can do once the KV
indices were sent to the prefill.

Read-only analysis on ``ast``. Receivers are the ``BaseKVReceiver`` subclasses, resolved across
files through inheritance with the same ``ClassIndex`` as the senders. For each concrete one
(its ``poll`` is not abstract), a small path-sensitive interpreter runs the receiver's life:

1. ``__init__`` (with its ``super()`` chain), then the methods that hand the KV indices to the
   prefill (``RECEIVER_SEND_METHODS``: ``init``, and ``send_metadata`` where the release has
   it), in that order. This gives the possible *post-send states*: what ``self.<attr>`` holds
   (``None``, a flag, a clock stamp, a ``KVPoll`` value, or unknown) and the last status the
   receiver wrote for its room with ``kv_mgr.update_status``.
2. ``poll()`` from each post-send state, through the ``self.*()`` helpers it calls. The
   manager's ``check_status`` returns the room's post-send status, or a terminal status (the
   prefill peer reports only Success or Failed to a decode room).

A ``return`` that can give a non-terminal ``KVPoll`` is *covered* when the path to it went
through the not-expired side of a waiting-timeout check: an elapsed time since a clock stamp
(a stamp that is a time in that state) compared with anything, whose expired side fails the
request (returns ``KVPoll.Failed`` or stores ``KVPoll.Failed``, itself or through ``abort()``).
An elapsed time is a difference of two readings of the *same* clock (``time.monotonic()``
minus a ``time.time()`` stamp measures nothing and never reaches a limit). A stamp already
taken before the last index-sending method runs (in ``__init__``, or in ``init()`` where
``send_metadata()`` sends the indices) is *early*: a timeout on it also counts the time the
request waited in the prealloc queue for decode memory, so it fails requests under plain
back-pressure (upstream starts the clock where the indices are sent; sgl-project/sglang#21477,
which moved it to the constructor, was closed unmerged). Such a receiver is reported too.

The heartbeat: a manager class beside the receiver whose node-failure handler
(``_handle_node_failure``, the heartbeat's verdict on a lost prefill) fails the rooms it
tracked for that prefill must fail each of them: a failing statement (``update_status(room,
KVPoll.Failed)``, ``record_failure(room, ...)``, a write into the room's entry of a table)
that runs only while ``room in self.<table>``, for a table that neither the receiver's
constructor nor its index-sending methods fill (themselves or through the manager's methods
they call), skips the rooms the prefill had not reached yet (NIXL 0.5.3 - 0.5.5.post3:
``transfer_statuses``, filled when a chunk arrives).

Unknown values are taken as not ``None`` (a value computed from something else than the
literal ``None``): the analysis follows what the code writes, not what the network returns.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeGuard, TypeVar

from pdguard.run import Kept
from pdguard.sglang_names import (
    BASE_RECEIVER,
    HANDLE_NODE_FAILURE,
    KVPOLL,
    MANAGER_CHECK_STATUS,
    MANAGER_RECORD_FAILURE,
    MANAGER_UPDATE_STATUS,
    RECEIVER_SEND_METHODS,
    KVPoll,
)

from ..nodes import walk
from .bounded_wait import CLOCK_FUNCTIONS
from .kv_senders import ClassIndex, ClassInfo

__all__ = ["PollVerdict", "ReceiverIndex", "is_abstract"]

CLOCKS = CLOCK_FUNCTIONS
UNKNOWN = "?"
NONE, TRUE, FALSE = "None", "True", "False"
# A clock reading is "clock:<function>"; a reading taken before the last index-sending method
# ran is "early:<function>" (see the module docstring). An elapsed time is a difference of
# readings of one clock; a deadline is a reading plus something.
CLOCK, EARLY = "clock:", "early:"
ELAPSED, EARLY_ELAPSED = "elapsed", "early-elapsed"
# The time left before a deadline: a deadline minus a reading of its clock (shrinks with time).
REMAINING, EARLY_REMAINING = "remaining", "early-remaining"
DEADLINE, EARLY_DEADLINE = "deadline:", "early-deadline:"
STATUS = "@status"  # the status the receiver last wrote for its room
# What a call the analysis cannot follow returned (a dispatch table's handler, a function of
# another module): "opaque:<callee source>", always beside UNKNOWN.
OPAQUE = "opaque:"
TERMINAL = frozenset({f"P:{KVPoll.Success.name}", f"P:{KVPoll.Failed.name}"})
FAILED = frozenset({f"P:{KVPoll.Failed.name}"})
ANY_POLL = frozenset(f"P:{p.name}" for p in KVPoll)
NON_TERMINAL = ANY_POLL - TERMINAL
# Values that test false: ``KVPoll.Failed`` is 0 (``state or fallback`` skips it).
FALSY = frozenset({NONE, FALSE, f"P:{KVPoll.Failed.name}"})

Val = frozenset[str]
_UNK: Val = frozenset({UNKNOWN})
MAX_STATES = 96
MAX_DEPTH = 6


_BUILTINS = frozenset(dir(builtins))


def is_abstract(func: ast.FunctionDef) -> bool:
    """``@abstractmethod``, or a body of only a docstring, ``...``, ``pass`` or a raise of
    ``NotImplementedError``."""
    for deco in func.decorator_list:
        name = deco.attr if isinstance(deco, ast.Attribute) else getattr(deco, "id", "")
        if name == "abstractmethod":
            return True
    for stmt in func.body:
        if isinstance(stmt, ast.Pass):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstring or ...
        if isinstance(stmt, ast.Raise):
            exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
            if getattr(exc, "id", None) == "NotImplementedError":
                continue
        return False
    return True


def _poll_const(node: ast.AST) -> str | None:
    """``KVPoll.X`` (or ``<module>.KVPoll.X``) -> ``P:X``."""
    if isinstance(node, ast.Attribute) and node.attr in KVPoll.__members__:
        base = node.value
        name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
        if name == KVPOLL:
            return f"P:{node.attr}"
    return None


def _self_attr(node: ast.AST) -> str | None:
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    ):
        return node.attr
    return None


def _is_super_call(func: ast.expr) -> TypeGuard[ast.Attribute]:
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "super"
    )


@dataclass(frozen=True)
class State:
    attrs: frozenset[tuple[str, Val]] = frozenset()
    locals: frozenset[tuple[str, Val]] = frozenset()
    checked: frozenset[int] = frozenset()  # timeout checks passed on their not-expired side
    expired: frozenset[int] = frozenset()  # timeout checks taken on their expired side
    marked_failed: bool = False  # KVPoll.Failed was stored on this path

    def attr(self, name: str) -> Val:
        return dict(self.attrs).get(name, _UNK)

    def local(self, name: str) -> Val:
        return dict(self.locals).get(name, _UNK)

    def with_attr(self, name: str, value: Val) -> State:
        attrs = dict(self.attrs)
        attrs[name] = value
        if value == _UNK:  # a missing attribute reads as unknown: fewer distinct states
            del attrs[name]
        failed = self.marked_failed or value == FAILED
        return State(frozenset(attrs.items()), self.locals, self.checked, self.expired, failed)

    def with_local(self, name: str, value: Val) -> State:
        local = dict(self.locals)
        local[name] = value
        if value == _UNK:
            del local[name]
        return State(self.attrs, frozenset(local.items()), self.checked, self.expired,
                     self.marked_failed)  # fmt: skip

    def bind(self, name: str | None, attr: str | None, value: Val) -> State:
        if attr is not None:
            return self.with_attr(attr, value)
        if name is not None:
            return self.with_local(name, value)
        return self

    def frame(self, local: frozenset[tuple[str, Val]] = frozenset()) -> State:
        return State(self.attrs, local, self.checked, self.expired, self.marked_failed)

    def note(self, site: int, expired: bool) -> State:
        if expired:
            return State(self.attrs, self.locals, self.checked, self.expired | {site},
                         self.marked_failed)  # fmt: skip
        return State(self.attrs, self.locals, self.checked | {site}, self.expired,
                     self.marked_failed)  # fmt: skip


_T = TypeVar("_T")


# An outcome of running statements: how control left them, the state, the returned value.
Outcome = tuple[str, State, Val]


def _cap(items: list[_T], key: Callable[[_T], Hashable] = lambda x: x) -> list[_T]:
    seen: dict[Hashable, _T] = {}
    for item in items:
        seen.setdefault(key(item), item)
    return list(seen.values())[:MAX_STATES]


@dataclass
class PollVerdict:
    """What a concrete receiver's ``poll()`` does after its indices were sent."""

    name: str
    uncovered: set[str] = field(default_factory=set)  # non-terminal KVPoll names left open
    returns_failed: bool = False
    early_clock: bool = False  # a timeout that fires counts from before the indices were sent
    # (manager, table): the manager's node-failure handler fails a room of a lost prefill only
    # if it is in self.<table>, which the receiver's side never fills for its room
    heartbeat_gap: tuple[str, str] | None = None
    # a non-terminal return left open gives what these calls returned, which the analysis
    # cannot follow: it cannot tell whether the receiver waits forever (PDG000)
    opaque: tuple[str, ...] = ()

    @property
    def waits_forever(self) -> bool:
        """A receiver that is always terminal once its indices were sent (a fake one) does
        not wait, whether or not it can fail."""
        return bool(self.uncovered)

    @property
    def violates(self) -> bool:
        """What PDG006 reports: a wait with no bound, a bound that also counts the wait for
        decode memory, or a lost prefill that leaves some of its rooms waiting."""
        return self.waits_forever or self.early_clock or self.heartbeat_gap is not None


class _Interpreter:
    """Runs one receiver's methods abstractly (see the module docstring)."""

    def __init__(self, index: ClassIndex, cls: str) -> None:
        self.index = index
        self.cls = cls
        self.stack: list[tuple[str, str]] = []
        self.effective: set[int] = set()  # checks whose expired side fails the request
        self.early: set[int] = set()  # checks on a clock read before the indices were sent

    # -- methods ---------------------------------------------------------------------

    def call_method(
        self,
        method: str,
        state: State,
        after: str | None = None,
        args: tuple[Val, ...] = (),
        kwargs: tuple[tuple[str, Val], ...] = (),
    ) -> list[Outcome]:
        """Runs ``self.<method>()`` (after ``after`` in the MRO, for ``super()``); ``args`` and
        ``kwargs`` are the values passed, bound to its parameters (``now_status`` handed to a
        helper keeps what the caller's test narrowed it to)."""
        owner = self.index.resolve(self.cls, method, after)
        if owner is None or is_abstract(owner.methods[method]):
            return [("return", state, _UNK)]
        key = (owner.name, method)
        if key in self.stack or len(self.stack) >= MAX_DEPTH:
            return [("return", state, _UNK)]
        self.stack.append(key)
        try:
            func = owner.methods[method]
            params = [a.arg for a in func.args.posonlyargs + func.args.args][1:]  # not self
            bound = dict(zip(params, args, strict=False)) | dict(kwargs)
            frame = state.frame(
                frozenset((k, v) for k, v in bound.items() if k in params and v != _UNK)
            )
            results = []
            for kind, out, value in self.block(func.body, frame, owner):
                if kind == "return":
                    results.append(("return", out.frame(state.locals), value))
                elif kind == "fall":  # off the end: returns None
                    results.append(("return", out.frame(state.locals), frozenset({NONE})))
            return _cap(results, key=lambda o: (o[1], o[2]))
        finally:
            self.stack.pop()

    # -- expressions -----------------------------------------------------------------

    def expr(self, node: ast.expr, state: State, owner: ClassInfo) -> list[tuple[State, Val]]:
        const = _poll_const(node)
        if const is not None:
            return [(state, frozenset({const}))]
        if isinstance(node, ast.Constant):
            if node.value is None:
                return [(state, frozenset({NONE}))]
            if node.value is True:
                return [(state, frozenset({TRUE}))]
            if node.value is False:
                return [(state, frozenset({FALSE}))]
            return [(state, _UNK)]
        if isinstance(node, ast.Name):
            return [(state, state.local(node.id))]
        attr = _self_attr(node)
        if attr is not None:
            return [(state, state.attr(attr))]
        if isinstance(node, ast.Call):
            return self.call(node, state, owner)
        if isinstance(node, ast.BinOp) and isinstance(
            node.op, ast.Sub | ast.Add | ast.Mult | ast.Div | ast.FloorDiv
        ):
            out = []
            for st, left in self.expr(node.left, state, owner):
                for st2, right in self.expr(node.right, st, owner):
                    out.append((st2, _arith(node.op, left, right)))
            return out
        if isinstance(node, ast.NamedExpr):  # ``(waited := now - stamp) > limit``
            return [
                (st.with_local(node.target.id, value), value)
                for st, value in self.expr(node.value, state, owner)
            ]
        if isinstance(node, ast.IfExp):  # as the if statement is: each side in its states
            yes, no = self.test(node.test, state, owner)
            out = []
            for st in yes:
                out += self.expr(node.body, st, owner)
            for st in no:
                out += self.expr(node.orelse, st, owner)
            return out
        if isinstance(node, ast.Compare) or (
            isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)
        ):
            # a test kept as a value (``overdue = waited > limit``, ``return waited > limit``):
            # its truth travels with the states, and a later ``if`` on it decides by them
            yes, no = self.test(node, state, owner)
            return [(st, frozenset({TRUE})) for st in yes] + [(st, frozenset({FALSE})) for st in no]
        if isinstance(node, ast.BoolOp):
            return self.bool_value(node, state, owner)
        return [(state, _UNK)]

    def bool_value(
        self, node: ast.BoolOp, state: State, owner: ClassInfo
    ) -> list[tuple[State, Val]]:
        """``a or b`` is ``a`` where ``a`` is true, else ``b``; ``a and b`` the reverse."""
        is_or = isinstance(node.op, ast.Or)
        out: list[tuple[State, Val]] = []
        pending = [state]
        for n, operand in enumerate(node.values):
            last = n == len(node.values) - 1
            nxt = []
            for st in pending:
                for st2, value in self.expr(operand, st, owner):
                    known = UNKNOWN not in value
                    truthy = value - FALSY if known else value
                    falsy = value & FALSY if known else value
                    stop, go_on = (truthy, falsy) if is_or else (falsy, truthy)
                    if last:
                        out.append((st2, value))
                        continue
                    if stop:
                        out.append((st2, stop))
                    if go_on:
                        nxt.append(st2)
            pending = _cap(nxt)
        return _cap(out, key=lambda o: o)

    def call(self, node: ast.Call, state: State, owner: ClassInfo) -> list[tuple[State, Val]]:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in CLOCKS:
            return [(state, frozenset({CLOCK + name}))]
        if name == MANAGER_CHECK_STATUS:
            status = state.attr(STATUS)
            known = status <= ANY_POLL
            return [(state, (status | TERMINAL) if known else ANY_POLL)]
        if name == MANAGER_UPDATE_STATUS and node.args:
            value = _poll_const(node.args[-1])
            if value is not None:
                return [(state.with_attr(STATUS, frozenset({value})), _UNK)]
        if isinstance(func, ast.Attribute) and (
            _self_attr(func) is not None or _is_super_call(func)
        ):
            after = owner.name if _is_super_call(func) else None
            out = []
            for st, args, kwargs in self.arguments(node, state, owner):
                out += [(s, v) for _, s, v in self.call_method(func.attr, st, after, args, kwargs)]
            return out
        if isinstance(func, ast.Name) and func.id in _BUILTINS:
            return [(state, _UNK)]
        return [(state, frozenset({UNKNOWN, OPAQUE + ast.unparse(func)}))]

    def arguments(
        self, node: ast.Call, state: State, owner: ClassInfo
    ) -> list[tuple[State, tuple[Val, ...], tuple[tuple[str, Val], ...]]]:
        """The values of a call's arguments, in each state their evaluation can leave; a
        ``*args`` or ``**kwargs`` ends what is known."""
        forks: list[tuple[State, tuple[Val, ...], tuple[tuple[str, Val], ...]]] = [(state, (), ())]
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                break
            forks = [
                (st2, (*args, v), kw)
                for st, args, kw in forks
                for st2, v in self.expr(arg, st, owner)
            ][:MAX_STATES]
        for keyword in node.keywords:
            if keyword.arg is None:
                continue
            name = keyword.arg
            forks = [
                (st2, args, (*kw, (name, v)))
                for st, args, kw in forks
                for st2, v in self.expr(keyword.value, st, owner)
            ][:MAX_STATES]
        return forks

    # -- conditions ------------------------------------------------------------------

    def test(
        self, node: ast.expr, state: State, owner: ClassInfo
    ) -> tuple[list[State], list[State]]:
        """The states in which ``node`` can be true, and those in which it can be false."""
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yes, no = self.test(node.operand, state, owner)
            return no, yes
        if isinstance(node, ast.BoolOp):
            is_and = isinstance(node.op, ast.And)
            pending, yes, no = [state], [], []
            for operand in node.values:
                nxt = []
                for st in pending:
                    t, f = self.test(operand, st, owner)
                    if is_and:
                        no += f
                        nxt += t
                    else:
                        yes += t
                        nxt += f
                pending = nxt
            (yes if is_and else no).extend(pending)
            return _cap(yes), _cap(no)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return self.compare(node, state, owner)
        yes, no = [], []
        for st, value in self.expr(node, state, owner):
            if value != frozenset({TRUE}):
                no.append(st)
            if not value <= FALSY:
                yes.append(st)
        return yes, no

    def compare(
        self, node: ast.Compare, state: State, owner: ClassInfo
    ) -> tuple[list[State], list[State]]:
        op, right_node = node.ops[0], node.comparators[0]
        yes: list[State] = []
        no: list[State] = []
        for st, left in self.expr(node.left, state, owner):
            for st2, right in self.expr(right_node, st, owner):
                timed = _timeout_side(op, left, right)
                if timed is not None:
                    site = id(node)
                    if _grows(left, right)[1] or _grows(right, left)[1]:
                        self.early.add(site)
                    (yes if timed else no).append(st2.note(site, True))
                    (no if timed else yes).append(st2.note(site, False))
                    continue
                target = _binding(node.left)
                t, f = _decide(op, left, right_node, right)
                if t is not None:
                    yes.append(st2.bind(*target, t) if t != left else st2)
                if f is not None:
                    no.append(st2.bind(*target, f) if f != left else st2)
        return yes, no

    # -- statements ------------------------------------------------------------------

    def block(self, body: list[ast.stmt], state: State, owner: ClassInfo) -> list[Outcome]:
        done: list[Outcome] = []
        live = [state]
        for stmt in body:
            nxt = []
            for st in live:
                for kind, out, value in self.stmt(stmt, st, owner):
                    if kind == "fall":
                        nxt.append(out)
                    else:
                        done.append((kind, out, value))
            live = _cap(nxt)
            if not live:
                break
        return _cap(done + [("fall", st, _UNK) for st in live], key=lambda o: o)

    def stmt(self, node: ast.stmt, state: State, owner: ClassInfo) -> list[Outcome]:
        if isinstance(node, ast.Return):
            if node.value is None:
                return [("return", state, frozenset({NONE}))]
            out: list[Outcome] = [
                ("return", st, v) for st, v in self.expr(node.value, state, owner)
            ]
            for _, st, value in out:
                if st.expired and (value == FAILED or st.marked_failed):
                    self.effective |= st.expired
            return out
        if isinstance(node, ast.Raise):
            return [("raise", state, _UNK)]
        if isinstance(node, ast.Assign | ast.AnnAssign):
            if node.value is None:
                return [("fall", state, _UNK)]
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out = []
            for st, value in self.expr(node.value, state, owner):
                for target in targets:
                    if isinstance(target, ast.Tuple | ast.List):
                        for sub in target.elts:
                            st = st.bind(*_binding(sub), _UNK)
                    else:
                        st = st.bind(*_binding(target), value)
                if st.expired and value == FAILED:
                    self.effective |= st.expired
                out.append(("fall", st, _UNK))
            return out
        if isinstance(node, ast.AugAssign):
            return [("fall", state.bind(*_binding(node.target), _UNK), _UNK)]
        if isinstance(node, ast.Expr):
            out = []
            for st, _ in self.expr(node.value, state, owner):
                if st.expired and st.marked_failed:
                    self.effective |= st.expired
                out.append(("fall", st, _UNK))
            return out
        if isinstance(node, ast.If):
            yes, no = self.test(node.test, state, owner)
            out = []
            for st in yes:
                out += self.block(node.body, st, owner)
            for st in no:
                out += self.block(node.orelse, st, owner) if node.orelse else [("fall", st, _UNK)]
            return out
        if isinstance(node, ast.For | ast.AsyncFor | ast.While):
            out = [("fall", state, _UNK)]  # no iteration
            for kind, st, value in self.block(node.body, state, owner):
                out.append(
                    ("fall", st, _UNK)
                    if kind in ("fall", "break", "continue")
                    else (kind, st, value)
                )
            return out
        if isinstance(node, ast.With | ast.AsyncWith):
            return self.block(node.body, state, owner)
        if isinstance(node, ast.Try):
            out = self.block(node.body + node.orelse, state, owner)
            for handler in node.handlers:
                out += self.block(handler.body, state, owner)
            return out
        if isinstance(node, ast.Match):
            return self.match(node, state, owner)
        if isinstance(node, ast.Break):
            return [("break", state, _UNK)]
        if isinstance(node, ast.Continue):
            return [("continue", state, _UNK)]
        return [("fall", state, _UNK)]

    def match(self, node: ast.Match, state: State, owner: ClassInfo) -> list[Outcome]:
        """``match`` on a status: each case narrows the subject as ``==`` (a ``KVPoll``,
        ``None``, ``True`` or ``False`` value) or ``in`` (``A | B``) would; a capture binds it;
        a guard is a test; a pattern of another kind may match or not."""
        target = _binding(node.subject)
        out: list[Outcome] = []
        for st, value in self.expr(node.subject, state, owner):
            pending = [(st.bind(*target, value), value)]
            for case in node.cases:
                rest: list[tuple[State, Val]] = []
                for st2, v in pending:
                    hit, miss = self.pattern(case.pattern, st2, v, target, owner)
                    rest += miss
                    for st3, _ in hit:
                        if case.guard is None:
                            out += self.block(case.body, st3, owner)
                            continue
                        yes, no = self.test(case.guard, st3, owner)
                        for st4 in yes:
                            out += self.block(case.body, st4, owner)
                        rest += [(st4, v) for st4 in no]
                pending = _cap(rest, key=lambda o: o)
            out += [("fall", st2, _UNK) for st2, _ in pending]
        return _cap(out, key=lambda o: o)

    def pattern(
        self,
        pat: ast.pattern,
        state: State,
        value: Val,
        target: tuple[str | None, str | None],
        owner: ClassInfo,
    ) -> tuple[list[tuple[State, Val]], list[tuple[State, Val]]]:
        """(the states and subject values in which ``pat`` matches, those in which not)."""
        if isinstance(pat, ast.MatchAs):
            if pat.pattern is None:
                hit = [(state, value)]
                miss: list[tuple[State, Val]] = []
            else:
                hit, miss = self.pattern(pat.pattern, state, value, target, owner)
            if pat.name is not None:
                hit = [(st.with_local(pat.name, v), v) for st, v in hit]
            return hit, miss
        if isinstance(pat, ast.MatchOr):
            hits: list[tuple[State, Val]] = []
            pending = [(state, value)]
            for sub in pat.patterns:
                rest = []
                for st, v in pending:
                    hit, miss = self.pattern(sub, st, v, target, owner)
                    hits += hit
                    rest += miss
                pending = rest
            return hits, pending
        const: ast.expr | None = None
        if isinstance(pat, ast.MatchValue):
            const = pat.value
        elif isinstance(pat, ast.MatchSingleton):
            const = ast.Constant(pat.value)
        if const is None:
            return [(state, value)], [(state, value)]
        expected = [v for _, v in self.expr(const, state, owner)]
        if len(expected) != 1:
            return [(state, value)], [(state, value)]
        yes, no = _decide(ast.Eq(), value, const, expected[0])
        if yes == value and no == value:  # not a value the analysis tells apart
            return [(state, value)], [(state, value)]
        hit = [(state.bind(*target, yes), yes)] if yes is not None else []
        miss = [(state.bind(*target, no), no)] if no is not None else []
        return hit, miss


def _sent_from_here(state: State) -> State:
    """``state`` as the last index-sending method starts: every clock reading taken so far is
    early."""
    attrs = frozenset((name, _early(value)) for name, value in state.attrs)
    return State(attrs, state.locals, state.checked, state.expired, state.marked_failed)


def _table(target: ast.expr, depth: int) -> str | None:
    """``<table>`` of ``self.<table>[...]`` (depth 1) or ``self.<x>.<table>[...]`` (depth 2)
    written by an assignment (also through an attribute of the entry)."""
    while isinstance(target, ast.Attribute):
        target = target.value
    if not isinstance(target, ast.Subscript) or not isinstance(target.value, ast.Attribute):
        return None
    table = target.value
    base = table.value
    if depth == 1 and _self_attr(table) is not None:
        return table.attr
    if depth == 2 and isinstance(base, ast.Attribute) and _self_attr(base) is not None:
        return table.attr
    return None


def _acts_on(loop: ast.For, room: str) -> list[ast.stmt]:
    """The statements of ``loop`` that fail ``room``: ``update_status(room, KVPoll.Failed)``,
    ``record_failure(room, ...)``, or a write into the room's entry of a table."""
    acts: list[ast.stmt] = []
    for node in walk(loop):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call = node.value
            name = call.func.attr if isinstance(call.func, ast.Attribute) else None
            first = call.args[0] if call.args else None
            if (
                name in (MANAGER_UPDATE_STATUS, MANAGER_RECORD_FAILURE)
                and isinstance(first, ast.Name)
                and first.id == room
                and (name == MANAGER_RECORD_FAILURE or _poll_const(call.args[-1]) in FAILED)
            ):
                acts.append(node)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                while isinstance(target, ast.Attribute):
                    target = target.value
                if (
                    isinstance(target, ast.Subscript)
                    and isinstance(target.slice, ast.Name)
                    and target.slice.id == room
                ):
                    acts.append(node)
    return acts


def _membership_guards(act: ast.stmt, loop: ast.For, room: str) -> set[str]:
    """The tables ``t`` for which ``act`` runs only when ``room in self.t`` (a conjunct of an
    enclosing ``if`` of ``loop``)."""
    tables: set[str] = set()
    for node in walk(loop):
        if not isinstance(node, ast.If) or not any(
            act is n for stmt in node.body for n in walk(stmt)
        ):
            continue
        conjuncts = (
            node.test.values
            if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And)
            else [node.test]
        )
        for test in conjuncts:
            if (
                isinstance(test, ast.Compare)
                and len(test.ops) == 1
                and isinstance(test.ops[0], ast.In)
                and isinstance(test.left, ast.Name)
                and test.left.id == room
                and (table := _self_attr(test.comparators[0])) is not None
            ):
                tables.add(table)
    return tables


def _waiting(state: State) -> State:
    status = state.attr(STATUS)
    if status <= NON_TERMINAL:
        return state.with_attr(STATUS, frozenset({f"P:{KVPoll.WaitingForInput.name}"}))
    return state


def _binding(target: ast.AST) -> tuple[str | None, str | None]:
    """(local name, self attribute) a target or tested expression stands for."""
    if isinstance(target, ast.Name):
        return target.id, None
    attr = _self_attr(target)
    if attr is not None:
        return None, attr
    return None, None


def _readings(value: Val, *kinds: str) -> set[tuple[str, str]]:
    """(kind, clock function) of each clock reading or deadline ``value`` may hold."""
    return {(kind, v.removeprefix(kind)) for v in value for kind in kinds if v.startswith(kind)}


_SPANS = frozenset({ELAPSED, EARLY_ELAPSED, REMAINING, EARLY_REMAINING})
_CLOCKED = (CLOCK, EARLY, DEADLINE, EARLY_DEADLINE)


def _arith(op: ast.operator, left: Val, right: Val) -> Val:
    """An elapsed time (or a time left) stays one when scaled or offset by a value that is
    no clock reading: ``(now_ns - stamp_ns) // 10**6`` is an elapsed time in milliseconds."""
    spans = (left | right) & _SPANS
    if spans and not _readings(left | right, *_CLOCKED):
        return frozenset(spans) if isinstance(op, ast.Mult | ast.Div | ast.FloorDiv | ast.Add |
                                               ast.Sub) else _UNK  # fmt: skip
    if isinstance(op, ast.Sub):
        out = set()
        for _, clock in _readings(left, CLOCK):
            for kind, stamp_clock in _readings(right, CLOCK, EARLY):
                if stamp_clock == clock:
                    out.add(EARLY_ELAPSED if kind == EARLY else ELAPSED)
        for kind, clock in _readings(left, DEADLINE, EARLY_DEADLINE):
            if clock in {c for _, c in _readings(right, CLOCK)}:
                out.add(EARLY_REMAINING if kind == EARLY_DEADLINE else REMAINING)
        return frozenset(out) if out else _UNK
    if isinstance(op, ast.Add):
        found = _readings(left, CLOCK, EARLY) | _readings(right, CLOCK, EARLY)
        if found:
            return frozenset(
                (EARLY_DEADLINE if kind == EARLY else DEADLINE) + clock for kind, clock in found
            )
    return _UNK


def _grows(value: Val, other: Val) -> tuple[int, bool]:
    """(1 if ``value`` grows with time against ``other``, -1 if it shrinks, else 0; is its
    clock early): an elapsed time, or a reading of the clock a deadline ``other`` was
    computed on, grows; the time left before a deadline shrinks."""
    if ELAPSED in value or EARLY_ELAPSED in value:
        return 1, EARLY_ELAPSED in value and ELAPSED not in value
    if REMAINING in value or EARLY_REMAINING in value:
        return -1, EARLY_REMAINING in value and REMAINING not in value
    now = {clock for _, clock in _readings(value, CLOCK)}
    deadlines = _readings(other, DEADLINE, EARLY_DEADLINE)
    matched = [kind for kind, clock in deadlines if clock in now]
    return int(bool(matched)), bool(matched) and DEADLINE not in matched


def _early(value: Val) -> Val:
    """``value`` with its clock readings and deadlines marked early."""
    marked = {
        (EARLY + v.removeprefix(CLOCK))
        if v.startswith(CLOCK)
        else (EARLY_DEADLINE + v.removeprefix(DEADLINE))
        if v.startswith(DEADLINE)
        else v
        for v in value
    }
    return frozenset(marked)


def _timeout_side(op: ast.cmpop, left: Val, right: Val) -> bool | None:
    """For a waiting-timeout comparison: True if its *true* side is the expired one, False if
    its false side is; None if ``op`` compares no elapsed time (or clock with deadline)."""
    grows_left, _ = _grows(left, right)
    grows_right, _ = _grows(right, left)
    if grows_left == grows_right:
        return None
    if isinstance(op, ast.Gt | ast.GtE):
        return grows_left > grows_right
    if isinstance(op, ast.Lt | ast.LtE):
        return grows_right > grows_left
    return None


def _members(node: ast.expr) -> Val | None:
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        values = [v for e in node.elts if (v := _poll_const(e))]
        if len(values) == len(node.elts):
            return frozenset(values)
    return None


def _decide(
    op: ast.cmpop, left: Val, right_node: ast.expr, right: Val
) -> tuple[Val | None, Val | None]:
    """(value of the left operand when the comparison is true, when false); None for a side
    that cannot happen."""
    if (
        isinstance(op, ast.Is | ast.IsNot | ast.Eq | ast.NotEq)
        and len(right) == 1
        and next(iter(right)) in (NONE, TRUE, FALSE)
    ):
        token = next(iter(right))
        if token == NONE:
            # unknown values are taken as not None
            t = frozenset({NONE}) if NONE in left else None
            f = (left - {NONE}) or None
        else:
            t = frozenset({token}) if token in left or UNKNOWN in left else None
            f = (left - {token}) or None
        if isinstance(op, ast.IsNot | ast.NotEq):
            t, f = f, t
        return t, f
    members: Val | None = None
    if isinstance(op, ast.Eq | ast.NotEq) and right <= ANY_POLL and len(right) == 1:
        members = right
    elif isinstance(op, ast.In | ast.NotIn):
        members = _members(right_node)
    if members is not None:
        pool = (left - {UNKNOWN}) | (ANY_POLL if UNKNOWN in left else frozenset())
        t, f = (pool & members) or None, (pool - members) or None
        if isinstance(op, ast.NotEq | ast.NotIn):
            t, f = f, t
        return t, f
    return left, left


class ReceiverIndex:
    """The receiver classes of a tree and the verdict on each concrete one's ``poll()``."""

    def __init__(self, index: ClassIndex, kept: Kept[str, list[Any]] | None = None) -> None:
        """``kept``: the verdicts of a run (``Run.verdicts``), reused by the receiver indexes
        of its other projects where the classes a verdict read are the same nodes."""
        self.index = index
        self._kept = kept
        self._verdicts: dict[str, PollVerdict] = {}
        self._dead: frozenset[str] | None = None

    def receivers(self) -> list[str]:
        """The receiver classes the tree can run (not the dead ones: ``dead_receivers``)."""
        dead = self.dead_receivers()
        return [name for name in self._all_receivers() if name not in dead]

    def _all_receivers(self) -> list[str]:
        return sorted(
            name
            for name in self.index.classes
            if name != BASE_RECEIVER
            and any(c.name == BASE_RECEIVER for c in self.index.mro(name)[1:])
        )

    def dead_receivers(self) -> frozenset[str]:
        """Receiver classes the tree never uses, as ``ClassIndex.dead_senders`` judges senders
        (``checks.models.backends``): nothing live names them, and the tree has a registration
        function that does not."""
        if self._dead is None:
            from .backends import dead_classes

            self._dead = dead_classes(
                self.index.modules.values(),
                self._all_receivers(),
                {name: info.bases for name, info in self.index.classes.items()},
            )
        return self._dead

    def _implemented(self, name: str, method: str) -> bool | None:
        """True if ``name`` has a non-abstract ``method``, False if only an abstract one,
        None if none at all."""
        owner = self.index.resolve(name, method)
        return None if owner is None else not is_abstract(owner.methods[method])

    def concrete(self) -> Iterator[str]:
        """Receivers whose ``poll`` and index-sending methods are all implemented (not
        ``CommonKVReceiver`` while its ``send_metadata`` raises ``NotImplementedError``)."""
        for name in self.receivers():
            if self._implemented(name, "poll") and all(
                self._implemented(name, method) is not False for method in RECEIVER_SEND_METHODS
            ):
                yield name

    def post_send_states(self, name: str) -> list[State]:
        """``__init__``, then each index-sending method the receiver has. The decode queue
        sends the indices only once ``poll()`` said WaitingForInput (``_update_handshake_waiters``
        preallocates only those requests), so a room still Bootstrapping is WaitingForInput
        by the time the last of them runs; and the queue has polled it by then: ``poll()`` runs
        once before that method, from the states in which it can say WaitingForInput (a stamp
        ``poll()`` takes on its first call, or when it first sees WaitingForInput, is early)."""
        run = _Interpreter(self.index, name)
        states = [State()]
        sends = [m for m in RECEIVER_SEND_METHODS if self._implemented(name, m)]
        for method in ("__init__", *sends):
            if sends and method == sends[-1]:
                states = [_sent_from_here(st) for st in self._polled(run, states)]
            nxt: list[State] = []
            for st in states:
                nxt += [out for _, out, _ in run.call_method(method, st)]
            states = _cap(nxt)
        return states

    def _polled(self, run: _Interpreter, states: list[State]) -> list[State]:
        """``states`` after the prealloc queue's poll that saw WaitingForInput (``states``
        themselves if ``poll()`` cannot say so from any of them)."""
        waiting = f"P:{KVPoll.WaitingForInput.name}"
        polled: list[State] = []
        for st in states:
            for _, out, value in run.call_method("poll", _waiting(st)):
                if waiting in value or UNKNOWN in value:
                    polled.append(State(out.attrs))
        return _cap(polled) or [_waiting(st) for st in states]

    def verdict(self, name: str) -> PollVerdict:
        if name not in self._verdicts:
            self._verdicts[name] = _kept_verdict(self.index, name, self._kept)
        return self._verdicts[name]

    def _verdict(self, name: str) -> PollVerdict:
        states = self.post_send_states(name)
        run = _Interpreter(self.index, name)
        outcomes: list[Outcome] = []
        for st in states:
            outcomes += run.call_method("poll", State(st.attrs))
        verdict = PollVerdict(name)
        opaque: set[str] = set()
        for _, st, value in outcomes:
            if value & FAILED or st.marked_failed:
                verdict.returns_failed = True
            open_states = value & NON_TERMINAL if UNKNOWN not in value else NON_TERMINAL
            if open_states and not (st.checked & run.effective) and not self._fails_next(name, st):
                verdict.uncovered |= {s.removeprefix("P:") for s in open_states}
                opaque |= {v.removeprefix(OPAQUE) for v in value if v.startswith(OPAQUE)}
        verdict.opaque = tuple(sorted(opaque))
        verdict.early_clock = bool(run.effective & run.early)
        verdict.heartbeat_gap = self._heartbeat_gap(name)
        return verdict

    def _fails_next(self, name: str, state: State) -> bool:
        """A poll that took an expired timeout and stored Failed, but still returned the
        status it read (``return self.conclude_state or status``: Failed is 0): the request
        fails at the next poll, if that one returns Failed on every path."""
        if not (state.expired and state.marked_failed):
            return False
        again = _Interpreter(self.index, name).call_method("poll", State(state.attrs))
        return all(value == FAILED for _, _, value in again)

    # -- the heartbeat: a lost prefill fails every room tracked for it --------------------

    def _life(self, name: str) -> list[ast.FunctionDef]:
        """The receiver's methods that run before its room can wait on the prefill: every
        ``__init__`` and index-sending method along its MRO, and the ``self.*()`` helpers
        they call."""
        found: dict[int, ast.FunctionDef] = {}
        stack = [
            c.methods[m]
            for c in self.index.mro(name)
            for m in ("__init__", *RECEIVER_SEND_METHODS)
            if m in c.methods
        ]
        while stack:
            func = stack.pop()
            if id(func) in found:
                continue
            found[id(func)] = func
            for node in walk(func):
                helper = _self_attr(node.func) if isinstance(node, ast.Call) else None
                owner = self.index.resolve(name, helper) if helper is not None else None
                if helper is not None and owner is not None:
                    stack.append(owner.methods[helper])
        return list(found.values())

    def _filled_tables(self, name: str, manager: str) -> set[str]:
        """The manager tables (``self.<table>[...] = ...``) the receiver's life writes: itself
        (``self.kv_mgr.<table>[...] = ...``) or through a manager method it calls."""
        tables: set[str] = set()
        for func in self._life(name):
            for node in walk(func):
                if isinstance(node, ast.Assign):
                    tables |= {t for target in node.targets if (t := _table(target, 2))}
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and _self_attr(node.func.value) is not None
                ):
                    owner = self.index.resolve(manager, node.func.attr)
                    if owner is None:
                        continue
                    for sub in walk(owner.methods[node.func.attr]):
                        if isinstance(sub, ast.Assign):
                            tables |= {t for target in sub.targets if (t := _table(target, 1))}
        return tables

    def _heartbeat_gap(self, name: str) -> tuple[str, str] | None:
        info = self.index.classes[name]
        managers = [
            c.name
            for c in self.index.classes_in(info.rel)
            if c.name != name and HANDLE_NODE_FAILURE in c.methods
        ]
        for manager in managers:
            handler = self.index.classes[manager].methods[HANDLE_NODE_FAILURE]
            filled = self._filled_tables(name, manager)
            guards = [  # for each statement that fails a tracked room, the tables it needs
                _membership_guards(act, loop, loop.target.id)
                for loop in walk(handler)
                if isinstance(loop, ast.For) and isinstance(loop.target, ast.Name)
                for act in _acts_on(loop, loop.target.id)
            ]
            if guards and all(g - filled for g in guards):
                return manager, sorted(set().union(*guards) - filled)[0]
        return None


# -- verdicts kept across indexes ---------------------------------------------------------


# A question a verdict asked of the class index, and the class nodes the answer named.
_Answer = tuple[tuple[str | None, ...], tuple[ast.ClassDef, ...]]


class _Recorded(ClassIndex):
    """A class index as one verdict reads it, every answer recorded as the class nodes it
    names: a verdict worked out on one index holds on any other that gives the same answers.
    ``apply``'s re-check and ``verify``'s next ref change ``decode.py`` (which names
    ``KVReceiver``, so it is in the receivers' index) but none of the receiver classes."""

    def __init__(self, index: ClassIndex) -> None:
        super().__init__()
        self.inner = index
        self.modules, self.texts = index.modules, index.texts
        self.answers: list[_Answer] = []
        self.classes = _RecordedClasses(self)

    def mro(self, name: str) -> list[ClassInfo]:
        chain = self.inner.mro(name)
        self.answers.append((("mro", name), tuple(c.node for c in chain)))
        return chain

    def resolve(self, name: str, method: str, after: str | None = None) -> ClassInfo | None:
        owner = self.inner.resolve(name, method, after)
        self.answers.append((("resolve", name, method, after), (owner.node,) if owner else ()))
        return owner

    def classes_in(self, rel: str) -> list[ClassInfo]:
        found = self.inner.classes_in(rel)
        self.answers.append((("in", rel), tuple(c.node for c in found)))
        return found


class _RecordedClasses(dict[str, ClassInfo]):
    """``classes[name]`` and ``get(name)`` recorded; anything that would read every class
    raises (a verdict reads a file's classes with ``classes_in``), so no read goes
    unrecorded."""

    def __init__(self, owner: _Recorded) -> None:
        super().__init__()
        self.owner = owner

    # dict.get is overloaded; this one takes the only form a verdict uses
    def get(self, name: str, default: ClassInfo | None = None) -> ClassInfo | None:  # type: ignore[override]
        info = self.owner.inner.classes.get(name)
        self.owner.answers.append((("class", name), (info.node,) if info else ()))
        return info if info is not None else default

    def __getitem__(self, name: str) -> ClassInfo:
        info = self.get(name)
        if info is None:
            raise KeyError(name)
        return info

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def _unrecorded(self, *_: object) -> NoReturn:
        raise NotImplementedError("a verdict reads classes by name, or a file's (classes_in)")

    __iter__ = __len__ = keys = values = items = _unrecorded  # each raises


def _answers_hold(
    index: ClassIndex, answers: list[tuple[tuple[str | None, ...], tuple[ast.ClassDef, ...]]]
) -> bool:
    for question, nodes in answers:
        kind, name = question[0], question[1]
        assert name is not None
        if kind == "mro":
            got = tuple(c.node for c in index.mro(name))
        elif kind == "resolve":
            method, after = question[2], question[3]
            assert method is not None
            owner = index.resolve(name, method, after)
            got = (owner.node,) if owner else ()
        elif kind == "in":
            got = tuple(c.node for c in index.classes_in(name))
        else:
            info = index.classes.get(name)
            got = (info.node,) if info else ()
        if len(got) != len(nodes) or any(a is not b for a, b in zip(got, nodes, strict=True)):
            return False
    return True


# A class name's verdicts kept in a run (``Run.verdicts``), at most: each with the answers it
# was worked out from (holding their nodes, so an identity compared is never another node's).
_KEPT_PER_NAME = 8


def _kept_verdict(index: ClassIndex, name: str, kept: Kept[str, list[Any]] | None) -> PollVerdict:
    """The verdict on ``name``: one ``kept`` holds whose answers still hold in ``index``, or a
    new one, worked out and kept (no ``kept``: worked out, kept nowhere)."""
    known = kept.get(name) if kept is not None else None
    for answers, verdict in known or []:
        if _answers_hold(index, answers):
            return verdict
    recorded = _Recorded(index)
    verdict = ReceiverIndex(recorded)._verdict(name)
    if kept is not None:
        kept.put(name, [(recorded.answers, verdict), *(known or [])][:_KEPT_PER_NAME])
    return verdict
