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

Unknown values are taken as not ``None`` (a value computed from something else than the
literal ``None``): the analysis follows what the code writes, not what the network returns.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import TypeGuard, TypeVar

from pdguard.sglang_names import (
    BASE_RECEIVER,
    KVPOLL,
    MANAGER_CHECK_STATUS,
    MANAGER_UPDATE_STATUS,
    RECEIVER_SEND_METHODS,
    KVPoll,
)

from .kv_senders import ClassIndex, ClassInfo

__all__ = ["PollVerdict", "ReceiverIndex", "is_abstract"]

CLOCKS = frozenset({"monotonic", "time", "perf_counter", "monotonic_ns", "time_ns"})
UNKNOWN = "?"
NONE, TRUE, FALSE = "None", "True", "False"
CLOCK, ELAPSED, DEADLINE = "clock", "elapsed", "deadline"
STATUS = "@status"  # the status the receiver last wrote for its room
TERMINAL = frozenset({f"P:{KVPoll.Success.name}", f"P:{KVPoll.Failed.name}"})
FAILED = frozenset({f"P:{KVPoll.Failed.name}"})
ANY_POLL = frozenset(f"P:{p.name}" for p in KVPoll)
NON_TERMINAL = ANY_POLL - TERMINAL

Val = frozenset[str]
_UNK: Val = frozenset({UNKNOWN})
MAX_STATES = 96
MAX_DEPTH = 6


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

    @property
    def waits_forever(self) -> bool:
        """A receiver that is always terminal once its indices were sent (a fake one) does
        not wait, whether or not it can fail."""
        return bool(self.uncovered)


class _Interpreter:
    """Runs one receiver's methods abstractly (see the module docstring)."""

    def __init__(self, index: ClassIndex, cls: str) -> None:
        self.index = index
        self.cls = cls
        self.stack: list[tuple[str, str]] = []
        self.effective: set[int] = set()  # checks whose expired side fails the request

    # -- methods ---------------------------------------------------------------------

    def call_method(self, method: str, state: State, after: str | None = None) -> list[Outcome]:
        owner = self.index.resolve(self.cls, method, after)
        if owner is None or is_abstract(owner.methods[method]):
            return [("return", state, _UNK)]
        key = (owner.name, method)
        if key in self.stack or len(self.stack) >= MAX_DEPTH:
            return [("return", state, _UNK)]
        self.stack.append(key)
        try:
            func = owner.methods[method]
            frame = state.frame()
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
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub | ast.Add):
            out = []
            for st, left in self.expr(node.left, state, owner):
                for st2, right in self.expr(node.right, st, owner):
                    out.append((st2, _arith(node.op, left, right)))
            return out
        if isinstance(node, ast.IfExp):
            out = []
            for st, value in self.expr(node.body, state, owner):
                for st2, other in self.expr(node.orelse, st, owner):
                    out.append((st2, value | other))
            return out
        return [(state, _UNK)]

    def call(self, node: ast.Call, state: State, owner: ClassInfo) -> list[tuple[State, Val]]:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in CLOCKS:
            return [(state, frozenset({CLOCK}))]
        if name == MANAGER_CHECK_STATUS:
            status = state.attr(STATUS)
            known = status <= ANY_POLL
            return [(state, (status | TERMINAL) if known else ANY_POLL)]
        if name == MANAGER_UPDATE_STATUS and node.args:
            value = _poll_const(node.args[-1])
            if value is not None:
                return [(state.with_attr(STATUS, frozenset({value})), _UNK)]
        if isinstance(func, ast.Attribute) and _self_attr(func) is not None:
            return [(s, v) for _, s, v in self.call_method(func.attr, state)]
        if _is_super_call(func):
            return [(s, v) for _, s, v in self.call_method(func.attr, state, owner.name)]
        return [(state, _UNK)]

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
            if not value <= {FALSE, NONE}:
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
        if isinstance(node, ast.Break):
            return [("break", state, _UNK)]
        if isinstance(node, ast.Continue):
            return [("continue", state, _UNK)]
        return [("fall", state, _UNK)]


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


def _arith(op: ast.operator, left: Val, right: Val) -> Val:
    if isinstance(op, ast.Sub) and CLOCK in left and CLOCK in right:
        return frozenset({ELAPSED})
    if isinstance(op, ast.Add) and (CLOCK in left or CLOCK in right):
        return frozenset({DEADLINE})
    return _UNK


def _timeout_side(op: ast.cmpop, left: Val, right: Val) -> bool | None:
    """For a waiting-timeout comparison: True if its *true* side is the expired one, False if
    its false side is; None if ``op`` compares no elapsed time (or clock with deadline)."""
    grows_left = ELAPSED in left or (CLOCK in left and DEADLINE in right)
    grows_right = ELAPSED in right or (CLOCK in right and DEADLINE in left)
    if grows_left == grows_right:
        return None
    if isinstance(op, ast.Gt | ast.GtE):
        return grows_left
    if isinstance(op, ast.Lt | ast.LtE):
        return grows_right
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

    def __init__(self, index: ClassIndex) -> None:
        self.index = index
        self._verdicts: dict[str, PollVerdict] = {}

    def receivers(self) -> list[str]:
        return sorted(
            name
            for name in self.index.classes
            if name != BASE_RECEIVER
            and any(c.name == BASE_RECEIVER for c in self.index.mro(name)[1:])
        )

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
        by the time the last of them runs."""
        run = _Interpreter(self.index, name)
        states = [State()]
        sends = [m for m in RECEIVER_SEND_METHODS if self._implemented(name, m)]
        for method in ("__init__", *sends):
            if sends and method == sends[-1]:
                states = [_waiting(st) for st in states]
            nxt: list[State] = []
            for st in states:
                nxt += [out for _, out, _ in run.call_method(method, st)]
            states = _cap(nxt)
        return states

    def verdict(self, name: str) -> PollVerdict:
        if name not in self._verdicts:
            self._verdicts[name] = self._verdict(name)
        return self._verdicts[name]

    def _verdict(self, name: str) -> PollVerdict:
        states = self.post_send_states(name)
        run = _Interpreter(self.index, name)
        outcomes: list[Outcome] = []
        for st in states:
            outcomes += run.call_method("poll", State(st.attrs))
        verdict = PollVerdict(name)
        for _, st, value in outcomes:
            if value & FAILED or st.marked_failed:
                verdict.returns_failed = True
            open_states = value & NON_TERMINAL if UNKNOWN not in value else NON_TERMINAL
            if open_states and not (st.checked & run.effective):
                verdict.uncovered |= {s.removeprefix("P:") for s in open_states}
        return verdict
