"""The KV sender classes of an SGLang tree, resolved across files through inheritance.

Read-only analysis on ``ast``: which ``BaseKVSender`` subclasses can report Bootstrapping, when
their ``init_time`` becomes a time, whether their ``poll()`` (or a helper it calls) reaches a
bootstrap-timeout check, and what the release offers to build one from
(``_check_bootstrap_timeout``, the manager's timeout attribute, how it reads the timeout).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeGuard

from pdguard.sglang_names import (
    BASE_SENDER,
    BOOTSTRAP_TIMEOUT_ENV,
    CHECK_BOOTSTRAP_TIMEOUT,
    MANAGER_CHECK_STATUS,
    MANAGER_RECORD_FAILURE,
    MANAGER_UPDATE_STATUS,
    SENDER_INIT_TIME,
)

from .classes import find_method, methods_of
from .env_reads import env_reader, reads_env
from .nodes import walk

__all__ = ["BASE_SENDER", "BOOTSTRAP_TIMEOUT_ENV", "ClassIndex", "SenderFacts", "is_self_attr"]


@dataclass
class ClassInfo:
    name: str
    rel: str
    node: ast.ClassDef
    bases: list[str]
    methods: dict[str, ast.FunctionDef] = field(default_factory=dict)


def _base_name(expr: ast.expr) -> str:
    if isinstance(expr, ast.Attribute):
        return expr.attr
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Subscript):
        return _base_name(expr.value)
    return ast.unparse(expr)


def is_self_attr(node: ast.AST, attr: str) -> TypeGuard[ast.Attribute]:
    """``self.<attr>``"""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attr
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _is_super_init(call: ast.Call) -> bool:
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "__init__"
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "super"
    )


@dataclass
class SenderFacts:
    """What a sender class does, as resolved through its class hierarchy."""

    name: str
    rel: str
    poll_owner: ClassInfo | None
    init_owner: ClassInfo | None
    can_bootstrap: bool
    init_time: str  # "time" (set at construction), "none" (only None / later), "unset"
    check_reached: bool  # an elapsed time since init_time is compared with a timeout
    has_helper: bool
    # A test of init_time that decides poll()'s result (``if self.init_time is None: return
    # KVPoll.Bootstrapping``): init_time is a state flag there, not a clock. Its line, or 0.
    init_time_flag: int = 0

    @property
    def healthy(self) -> bool:
        """Its bootstrap timeout can fire whenever it reports Bootstrapping (or it never does):
        what PDG004 checks and what the sender-bootstrap-timeout fix makes true."""
        return not self.can_bootstrap or (
            self.init_time == "time" and self.check_reached and not self.init_time_flag
        )


class ClassIndex:
    """Top-level classes of several modules, by name (the first definition of a name wins)."""

    def __init__(self) -> None:
        self.classes: dict[str, ClassInfo] = {}
        self.modules: dict[str, ast.Module] = {}
        self.texts: dict[str, str] = {}
        self._mro: dict[str, list[ClassInfo]] = {}

    def add_module(self, rel: str, tree: ast.Module, text: str) -> None:
        self.modules[rel] = tree
        self.texts[rel] = text
        self._mro.clear()
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name not in self.classes:
                bases = [_base_name(b) for b in node.bases]
                self.classes[node.name] = ClassInfo(node.name, rel, node, bases, methods_of(node))

    def mro(self, name: str) -> list[ClassInfo]:
        """``name`` and its bases, depth first (a base once); worked out once per class."""
        if name not in self._mro:
            self._mro[name] = self._linearise(name)
        return list(self._mro[name])

    def _linearise(self, name: str) -> list[ClassInfo]:
        order: list[ClassInfo] = []
        seen: set[str] = set()

        def walk(cls_name: str) -> None:
            info = self.classes.get(cls_name)
            if info is None or cls_name in seen:
                return
            seen.add(cls_name)
            order.append(info)
            for base in info.bases:
                walk(base)

        walk(name)
        return order

    def classes_in(self, rel: str) -> list[ClassInfo]:
        """The classes defined in file ``rel``, in definition order."""
        return [info for info in self.classes.values() if info.rel == rel]

    def resolve(self, name: str, method: str, after: str | None = None) -> ClassInfo | None:
        """The class whose ``method`` ``name`` uses (after class ``after`` in the MRO: super())."""
        chain = self.mro(name)
        if after is not None:
            names = [c.name for c in chain]
            chain = chain[names.index(after) + 1 :] if after in names else []
        found = find_method(chain, method, lambda c: c.methods)
        return found[0] if found is not None else None

    def senders(self) -> list[str]:
        return sorted(
            name
            for name in self.classes
            if name != BASE_SENDER and any(c.name == BASE_SENDER for c in self.mro(name)[1:])
        )

    # -- what a method reaches ----------------------------------------------------------

    def reached(self, name: str, method: str, after: str | None = None) -> Iterator[ast.AST]:
        """Nodes of ``method`` as ``name`` resolves it, and of the ``self.*()`` helpers and
        ``super()`` methods it calls, transitively."""
        seen: set[tuple[str, str]] = set()
        stack: list[tuple[str, str | None]] = [(method, after)]
        while stack:
            meth, after_cls = stack.pop()
            owner = self.resolve(name, meth, after_cls)
            if owner is None or (owner.name, meth) in seen:
                continue
            seen.add((owner.name, meth))
            for node in walk(owner.methods[meth]):
                yield node
                if isinstance(node, ast.Call):
                    func = node.func
                    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                        if func.value.id == "self":
                            stack.append((func.attr, None))
                    elif (
                        isinstance(func, ast.Attribute)
                        and isinstance(func.value, ast.Call)
                        and isinstance(func.value.func, ast.Name)
                        and func.value.func.id == "super"
                    ):
                        stack.append((func.attr, owner.name))

    def init_time_state(self, name: str, after: str | None = None) -> str:
        """When ``self.init_time`` of a new ``name`` instance is a time: "time" once
        ``__init__`` returns, "none" if it is left None, "unset" if never assigned there."""
        owner = self.resolve(name, "__init__", after)
        if owner is None:
            return "unset"
        state = "unset"
        for node in _in_source_order(owner.methods["__init__"]):
            if isinstance(node, ast.Call) and _is_super_init(node):
                inherited = self.init_time_state(name, owner.name)
                if inherited != "unset":
                    state = inherited
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            if any(is_self_attr(t, SENDER_INIT_TIME) for t in targets):
                is_none = isinstance(value, ast.Constant) and value.value is None
                state = "none" if is_none else "time"
        return state

    def facts(self, name: str) -> SenderFacts:
        poll_nodes = list(self.reached(name, "poll"))
        init_nodes = list(self.reached(name, "__init__"))
        reads_status = any(
            isinstance(n, ast.Call) and _call_name(n) == MANAGER_CHECK_STATUS for n in poll_nodes
        ) or any(
            # check_status passed as a callable: 0.5.22 _poll_with_status(kv_mgr.check_status)
            isinstance(n, ast.Attribute) and n.attr == MANAGER_CHECK_STATUS
            for n in poll_nodes
        )
        returns_bootstrapping = any(
            isinstance(n, ast.Return) and "Bootstrapping" in _poll_states(n.value, owner=None)
            for n in poll_nodes
        )
        sets_bootstrapping = any(
            isinstance(n, ast.Call)
            and _call_name(n) == MANAGER_UPDATE_STATUS
            and n.args
            and isinstance(n.args[-1], ast.Attribute)
            and n.args[-1].attr == "Bootstrapping"
            for n in init_nodes
        )
        check_reached = _elapsed_checked(poll_nodes)
        return SenderFacts(
            name=name,
            rel=self.classes[name].rel,
            poll_owner=self.resolve(name, "poll"),
            init_owner=self.resolve(name, "__init__"),
            can_bootstrap=returns_bootstrapping or (reads_status and sets_bootstrapping),
            init_time=self.init_time_state(name),
            check_reached=check_reached,
            init_time_flag=_init_time_flag(poll_nodes),
            has_helper=self.resolve(name, CHECK_BOOTSTRAP_TIMEOUT) is not None,
        )

    # -- how a sender can be failed from outside -------------------------------------------

    def is_concrete(self, name: str) -> bool:
        """Its ``poll()`` does something (not ``pass``, ``...``, a docstring, or
        ``raise NotImplementedError``): a backend, not a base."""
        owner = self.resolve(name, "poll")
        return owner is not None and not _is_stub(owner.methods["poll"])

    def abort_honoured(self, name: str) -> bool:
        """Does ``abort()`` make this sender's ``poll()`` return Failed from then on? Either
        ``abort()`` sets ``self.conclude_state = KVPoll.Failed`` (or to the status a
        notification of Failed concluded with: Failed, or a terminal status sent before) and
        ``poll()`` (or the helper
        it returns) starts by returning a set ``conclude_state``; or ``abort()`` sets the room's
        status to Failed and no return of ``poll()`` can skip a Failed status (NIXL up to
        0.5.11 returns its transfer handles' state once it has sent: not honoured)."""
        abort_owner = self.resolve(name, "abort")
        poll = self._poll_body(name)
        if abort_owner is None or poll is None:
            return False
        abort = list(self.reached(name, "abort"))
        sets_status = any(
            isinstance(n, ast.Call)
            and _call_name(n) == MANAGER_UPDATE_STATUS
            and n.args
            and _is_failed(n.args[-1])
            for n in abort
        )
        return (self.abort_concludes(name) and _returns_conclude_first(poll)) or (
            sets_status and _status_failed_kept(poll)
        )

    def abort_concludes(self, name: str) -> bool:
        """Does this sender's ``abort()`` set ``self.conclude_state`` to Failed (or to the
        status a notification of Failed concluded with)?"""
        abort = list(self.reached(name, "abort"))
        # names holding what a notification of Failed returns: the status it concluded with
        # (Mori 0.5.13+: ``sent_status, _ = self._notify_decode(KVPoll.Failed, reason)``)
        notified = {
            target.id
            for n in abort
            if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Call)
            and any(_is_failed(a) for a in n.value.args)
            for t in n.targets
            for target in (t.elts[:1] if isinstance(t, ast.Tuple) else [t])
            if isinstance(target, ast.Name)
        }
        return any(
            isinstance(n, ast.Assign)
            and any(is_self_attr(t, CONCLUDE_STATE) for t in n.targets)
            and (_is_failed(n.value) or (isinstance(n.value, ast.Name) and n.value.id in notified))
            for n in abort
        )

    def abort_gap(self, name: str) -> tuple[bool, bool, bool]:
        """What this sender lacks for ``abort()`` to make its ``poll()`` report Failed through
        a concluded state: (no ``abort()`` but a stub, ``poll()`` does not return a set
        ``conclude_state`` first, ``__init__`` never sets ``conclude_state``)."""
        poll = self._poll_body(name)
        abort_owner = self.resolve(name, "abort")
        sets_initial = any(
            isinstance(n, ast.Assign | ast.AnnAssign)
            and any(
                is_self_attr(t, CONCLUDE_STATE)
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            )
            for n in self.reached(name, "__init__")
        )
        return (
            abort_owner is None or _is_stub(abort_owner.methods["abort"]),
            poll is None or not _returns_conclude_first(poll),
            not sets_initial,
        )

    def pops_failure_records(self, name: str) -> bool:
        """Does ``failure_exception()`` take the room's failure record out of the manager?"""
        return any(
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "pop"
            and isinstance(n.func.value, ast.Attribute)
            and n.func.value.attr == FAILURE_RECORDS
            for n in self.reached(name, "failure_exception")
        )

    def keeps_failure_records(self, sender: str) -> bool:
        """Does the sender's manager keep failure records (a ``record_failure()`` that is not a
        stub: NIXL's is ``pass`` up to 0.5.9)?"""
        manager = self.manager_of(sender)
        owner = self.resolve(manager, MANAGER_RECORD_FAILURE) if manager else None
        return owner is not None and not _is_stub(owner.methods[MANAGER_RECORD_FAILURE])

    def _poll_body(self, name: str) -> list[ast.stmt] | None:
        """``poll()``'s statements, or those of the helper it returns
        (``return self._poll_with_status(...)``)."""
        owner = self.resolve(name, "poll")
        if owner is None:
            return None
        body = _without_docstring(owner.methods["poll"].body)
        if (
            len(body) == 1
            and isinstance(body[0], ast.Return)
            and isinstance(body[0].value, ast.Call)
            and is_self_attr(body[0].value.func, _call_name(body[0].value) or "")
        ):
            helper = self.resolve(name, _call_name(body[0].value) or "")
            if helper is not None:
                return _without_docstring(helper.methods[_call_name(body[0].value) or ""].body)
        return body

    # -- what the release offers to build a check from --------------------------------------

    def manager_of(self, sender: str) -> str | None:
        """The manager class named by the annotation of ``__init__``'s first parameter."""
        owner = self.resolve(sender, "__init__")
        if owner is None:
            return None
        args = owner.methods["__init__"].args.args
        if len(args) < 2 or args[1].annotation is None:
            return None
        return _base_name(args[1].annotation)

    def manager_timeout_attr(self, manager: str) -> str | None:
        """``self.<attr>`` a manager's ``__init__`` chain sets from the bootstrap timeout."""
        for node in self.reached(manager, "__init__"):
            if isinstance(node, ast.Assign) and reads_env(node.value, BOOTSTRAP_TIMEOUT_ENV):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and is_self_attr(target, target.attr):
                        return target.attr
        return None

    def manager_has(self, manager: str, method: str) -> bool:
        return self.resolve(manager, method) is not None

    def timeout_reader(self) -> tuple[str, str, str | None] | None:
        """An expression the release reads the bootstrap timeout with, anywhere in the tree:
        (its source text, module its root name is imported from, imported name or None)."""
        return env_reader(self.texts, self.modules.get, BOOTSTRAP_TIMEOUT_ENV)


CONCLUDE_STATE = "conclude_state"
FAILURE_RECORDS = "failure_records"


def _is_failed(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "Failed"


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return body[1:]
    return body


def _is_stub(function: ast.FunctionDef) -> bool:
    body = _without_docstring(function.body)
    return all(
        isinstance(s, ast.Pass)
        or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        or (isinstance(s, ast.Raise) and "NotImplementedError" in ast.unparse(s))
        for s in body
    )


_EXITS = (ast.Return, ast.Raise)


def _returns_conclude_first(body: list[ast.stmt]) -> bool:
    """The first statement returns ``self.conclude_state`` when it is set:
    ``if self.conclude_state is not None: return self.conclude_state``, or
    ``if self.conclude_state is None: ... else: return self.conclude_state``, or that ``if``
    without ``else``, its body ending in a ``return`` (or ``raise``), then
    ``return self.conclude_state``."""
    if not body or not isinstance(body[0], ast.If):
        return False
    first = body[0]
    test = first.test
    if not (
        isinstance(test, ast.Compare)
        and is_self_attr(test.left, CONCLUDE_STATE)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        return False
    branch = first.body if isinstance(test.ops[0], ast.IsNot) else first.orelse
    if isinstance(test.ops[0], ast.Is) and not branch and isinstance(first.body[-1], _EXITS):
        branch = body[1:]  # the unset case never falls through: what follows is the set one
    return bool(branch) and all(
        isinstance(s, ast.Return) and s.value is not None and is_self_attr(s.value, CONCLUDE_STATE)
        for s in branch[:1]
    )


def _status_failed_kept(body: list[ast.stmt]) -> bool:
    """Every ``return`` of ``body`` returns Failed, the room's status (a ``check_status(...)``
    call or a name holding one), or sits behind a test that the status is something other than
    Failed (``if status == KVPoll.Bootstrapping:``)."""
    status_names: set[str] = set()
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Assign) and any(
            # ``check_status(room)``, or ``self.conclude_state or check_status(room)``
            isinstance(n, ast.Call) and _call_name(n) == MANAGER_CHECK_STATUS
            for n in ([node.value] if not isinstance(node.value, ast.BoolOp) else node.value.values)
        ):
            status_names |= {t.id for t in node.targets if isinstance(t, ast.Name)}

    def is_status(node: ast.AST | None) -> bool:
        return (isinstance(node, ast.Call) and _call_name(node) == MANAGER_CHECK_STATUS) or (
            isinstance(node, ast.Name) and node.id in status_names
        )

    def excludes_failed(test: ast.expr) -> bool:
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
            return any(excludes_failed(v) for v in test.values)
        return (
            isinstance(test, ast.Compare)
            and is_status(test.left)
            and isinstance(test.ops[0], ast.Eq)
            and isinstance(test.comparators[0], ast.Attribute)
            and not _is_failed(test.comparators[0])
        )

    def walk(stmts: list[ast.stmt], guarded: bool) -> bool:
        for stmt in stmts:
            if isinstance(stmt, ast.Return):
                if not (guarded or _is_failed(stmt.value) or is_status(stmt.value)):
                    return False
            elif isinstance(stmt, ast.If):
                if not walk(stmt.body, guarded or excludes_failed(stmt.test)):
                    return False
                if not walk(stmt.orelse, guarded):
                    return False
            else:
                for block in ("body", "orelse", "finalbody"):
                    inner = getattr(stmt, block, None)
                    if isinstance(inner, list) and not walk(inner, guarded):
                        return False
                for handler in getattr(stmt, "handlers", []):
                    if not walk(handler.body, guarded):
                        return False
        return True

    return walk(body, False)


CLOCK_FUNCTIONS = frozenset({"monotonic", "time", "perf_counter", "monotonic_ns", "time_ns"})


def _is_clock_call(node: ast.AST) -> bool:
    """``time.time()``, ``_t.monotonic()``, ``monotonic()``."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr in CLOCK_FUNCTIONS
    return isinstance(func, ast.Name) and func.id in CLOCK_FUNCTIONS


def _reads_init_time(node: ast.AST) -> bool:
    return is_self_attr(node, SENDER_INIT_TIME) and isinstance(getattr(node, "ctx", None), ast.Load)


def _elapsed_checked(nodes: list[ast.AST]) -> bool:
    """Is an elapsed time since ``init_time`` (a clock reading minus it, directly or through
    local names) compared with something, among ``nodes``? A mere read of ``init_time`` (a
    ``None`` test, a log line) is no timeout."""
    values: dict[str, ast.expr] = {}
    for node in nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                values[target.id] = node.value

    def expanded(expr: ast.AST, depth: int = 3) -> list[ast.AST]:
        found = list(walk(expr))
        if depth:
            for name in [n for n in found if isinstance(n, ast.Name) and n.id in values]:
                found += expanded(values[name.id], depth - 1)
        return found

    for node in nodes:
        if isinstance(node, ast.Compare):
            parts = expanded(node)
            if any(_is_clock_call(n) for n in parts) and any(_reads_init_time(n) for n in parts):
                return True
    return False


def _poll_states(expr: ast.expr | None, owner: str | None = "KVPoll") -> set[str]:
    """The poll states ``expr`` can evaluate to, as far as it names them: ``KVPoll.X`` (any
    ``<name>.X`` with ``owner`` None), and either side of ``A if test else B``."""
    if isinstance(expr, ast.IfExp):
        return _poll_states(expr.body, owner) | _poll_states(expr.orelse, owner)
    if isinstance(expr, ast.Attribute) and (
        owner is None or (isinstance(expr.value, ast.Name) and expr.value.id == owner)
    ):
        return {expr.attr}
    return set()


def _init_time_flag(nodes: list[ast.AST]) -> int:
    """The line of an ``if`` (or a conditional expression) on ``init_time``, no clock in its
    test, whose own branch returns a poll state other than Failed: ``init_time`` then decides
    what poll() reports."""

    def flag_test(test: ast.expr) -> bool:
        read = list(walk(test))
        return any(_reads_init_time(n) for n in read) and not any(_is_clock_call(n) for n in read)

    for node in nodes:
        if isinstance(node, ast.If) and flag_test(node.test):
            for stmt in [*node.body, *node.orelse]:
                if isinstance(stmt, ast.Return) and _poll_states(stmt.value) - {"Failed"}:
                    return node.lineno
        if (
            isinstance(node, ast.Return)
            and isinstance(node.value, ast.IfExp)
            and flag_test(node.value.test)
            and _poll_states(node.value) - {"Failed"}
        ):
            return node.lineno
    return 0


def _in_source_order(node: ast.AST) -> list[ast.AST]:
    return sorted(
        (n for n in walk(node) if hasattr(n, "lineno")),
        key=lambda n: (n.lineno, n.col_offset),  # type: ignore[attr-defined]  # hasattr-filtered; AST has no lineno
    )
