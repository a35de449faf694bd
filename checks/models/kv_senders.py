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
    SENDER_ABORT,
    SENDER_INIT_TIME,
    KVPoll,
)

from ..classes import find_method, methods_of
from ..nodes import kept, own_nodes, own_parents, own_returns, walk
from .bounded_wait import CLOCK_FUNCTIONS, call_name, is_failed
from .env_reads import env_reader, reads_env

__all__ = ["BASE_SENDER", "BOOTSTRAP_TIMEOUT_ENV", "ClassIndex", "SenderFacts", "is_self_attr"]


@dataclass
class ClassInfo:
    name: str
    rel: str
    node: ast.ClassDef
    bases: list[str]
    methods: dict[str, ast.FunctionDef] = field(default_factory=dict)
    # names the class body binds to something other than a method of its own
    # (``poll = make_poll()``): their line
    opaque: dict[str, int] = field(default_factory=dict)


# Bases a KV class may have that come from Python itself: nothing of the liveness lives there.
PYTHON_BASES = frozenset(
    {"ABC", "object", "Generic", "Protocol", "Enum", "IntEnum", "Exception", "NamedTuple"}
)


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


def _is_super_init(call: ast.Call) -> bool:
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "__init__"
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "super"
    )


def _bind_aliases(info: ClassInfo) -> None:
    """A method bound to another name in the class body (``poll = _drive``) is that method
    under both names; any other binding of a name there (``poll = make_poll()``) is opaque."""
    for stmt in info.node.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
            continue
        target = stmt.targets[0]
        if not isinstance(target, ast.Name):
            continue
        value = stmt.value
        defined = info.methods.get(target.id)
        if defined is not None and defined.lineno > stmt.lineno:
            continue  # a later def wins
        if isinstance(value, ast.Name) and value.id in info.methods:
            info.methods[target.id] = info.methods[value.id]
        elif target.id in info.methods or not isinstance(value, ast.Constant):
            info.methods.pop(target.id, None)
            info.opaque[target.id] = stmt.lineno


@dataclass
class SenderFacts:
    """What a sender class does, as resolved through its class hierarchy."""

    name: str
    rel: str
    poll_owner: ClassInfo | None
    init_owner: ClassInfo | None
    can_bootstrap: bool
    init_time: str  # "time" (set at construction), "none" (only None / later), "unset"
    check_reached: bool  # an elapsed time since init_time decides a Failed (``_timeout_fires``)
    has_helper: bool
    # A test of init_time that decides poll()'s result (``if self.init_time is None: return
    # KVPoll.Bootstrapping``): init_time is a state flag there, not a clock. Its line, or 0.
    init_time_flag: int = 0
    # A test of the time since init_time whose outcome reports no Failed (it only logs, or
    # raises out of poll()): its line, or 0; with whether it raises.
    inert_check: int = 0
    # why it reports no Failed: "raises" (out of poll()), "gated" (tested only in another
    # state than Bootstrapping), or "" (its branch does something else, e.g. logs)
    inert_why: str = ""
    # ``self.init_time = <clock>`` on every poll() (not behind ``if self.init_time is None``):
    # the time since it never grows. Its line, or 0.
    restamp: int = 0
    # A return of poll() that can report Bootstrapping before the timeout can fire, and the
    # line where it first can (``_unchecked_return``); (0, 0) for none.
    unchecked_return: tuple[int, int] = (0, 0)

    @property
    def healthy(self) -> bool:
        """Its bootstrap timeout can fire whenever it reports Bootstrapping (or it never does):
        what PDG004 checks and what the sender-bootstrap-timeout fix makes true."""
        return not self.can_bootstrap or (
            self.init_time == "time"
            and self.check_reached
            and not self.init_time_flag
            and not self.restamp
            and not self.unchecked_return[0]
        )


class ClassIndex:
    """Top-level classes of several modules, by name (the first definition of a name wins)."""

    def __init__(self) -> None:
        self.classes: dict[str, ClassInfo] = {}
        self.modules: dict[str, ast.Module] = {}
        self.texts: dict[str, str] = {}
        self._mro: dict[str, list[ClassInfo]] = {}
        self._facts: dict[str, SenderFacts] = {}  # facts() by sender, for the index's modules
        self._dead: frozenset[str] | None = None

    def add_module(self, rel: str, tree: ast.Module, text: str) -> None:
        self.modules[rel] = tree
        self.texts[rel] = text
        self._mro.clear()
        self._facts.clear()
        self._dead = None
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name not in self.classes:
                bases = [_base_name(b) for b in node.bases]
                info = ClassInfo(node.name, rel, node, bases, methods_of(node))
                _bind_aliases(info)
                self.classes[node.name] = info

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

    def unknown_bases(self, name: str) -> list[tuple[ClassInfo, str]]:
        """(class, base name) for each base in ``name``'s ancestry that the index has no class
        for and that is not Python's own (``ABC``, ``object``, ``Generic``, ...): methods it
        defines may be the ones that run, and nothing of it can be read."""
        return [
            (info, base)
            for info in self.mro(name)
            for base in info.bases
            if base not in self.classes and base not in PYTHON_BASES
        ]

    def senders(self) -> list[str]:
        """The sender classes the tree can run (not the dead ones: ``dead_senders``)."""
        dead = self.dead_senders()
        return [name for name in self._all_senders() if name not in dead]

    def _all_senders(self) -> list[str]:
        return sorted(
            name
            for name in self.classes
            if name != BASE_SENDER and any(c.name == BASE_SENDER for c in self.mro(name)[1:])
        )

    def dead_senders(self) -> frozenset[str]:
        """Sender classes the tree never uses (``checks.backends``): nothing live names them,
        and the tree has a registration function (``get_kv_class``) that does not."""
        if self._dead is None:
            from .backends import dead_classes

            self._dead = dead_classes(
                self.modules.values(),
                self._all_senders(),
                {name: info.bases for name, info in self.classes.items()},
            )
        return self._dead

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
        """What this sender's ``poll()`` and ``__init__`` do about Bootstrapping and its
        timeout; worked out once per sender and index (PDG000, PDG004 and the fix all ask)."""
        if name not in self._facts:
            self._facts[name] = self._facts_of(name)
        return self._facts[name]

    def _facts_of(self, name: str) -> SenderFacts:
        poll_nodes = list(self.reached(name, "poll"))
        init_nodes = list(self.reached(name, "__init__"))
        reads_status = any(
            isinstance(n, ast.Call) and call_name(n) == MANAGER_CHECK_STATUS for n in poll_nodes
        ) or any(
            # check_status passed as a callable: 0.5.22 _poll_with_status(kv_mgr.check_status)
            isinstance(n, ast.Attribute) and n.attr == MANAGER_CHECK_STATUS
            for n in poll_nodes
        )
        returns_bootstrapping = any(
            isinstance(n, ast.Return) and "Bootstrapping" in _poll_states(n.value, owner=None)
            for n in poll_nodes
        ) or self._returns_held_bootstrapping(name, poll_nodes)
        sets_bootstrapping = any(
            isinstance(n, ast.Call)
            and call_name(n) == MANAGER_UPDATE_STATUS
            and n.args
            and isinstance(n.args[-1], ast.Attribute)
            and n.args[-1].attr == "Bootstrapping"
            for n in init_nodes
        )
        functions = [n for n in poll_nodes if isinstance(n, ast.FunctionDef)]
        timers = self._timers(name)
        fired, inert_check, inert_why = _timeout_fires(functions, timers=timers)
        poll_owner = self.resolve(name, "poll")
        unchecked = (0, 0)
        if poll_owner is not None and fired:
            unchecked = _unchecked_return(poll_owner.methods["poll"], fired, functions)
        lazy, restamp = _poll_stamps(functions, timers=timers)
        init_time = self.init_time_state(name)
        own = _own_clocks(init_nodes, timers)
        if own and not (fired and init_time == "time"):
            # a clock of its own, read at construction (``self.give_up_at = time.monotonic()
            # + limit``), that poll() tests and fails on, bounds Bootstrapping as init_time does
            own_fired, own_inert, own_why = _timeout_fires(functions, own, timers)
            if not own_fired and own_inert and not inert_check:
                inert_check, inert_why = own_inert, own_why
            if own_fired:
                fired, inert_check, inert_why, init_time = own_fired, 0, "", "time"
                restamp = _poll_stamps(functions, own, timers)[1]
                unchecked = (0, 0)
                if poll_owner is not None:
                    unchecked = _unchecked_return(poll_owner.methods["poll"], fired, functions)
        if lazy and init_time != "time":
            # started at the first poll(): every Bootstrapping after it has a running clock
            init_time = "time"
        return SenderFacts(
            name=name,
            rel=self.classes[name].rel,
            poll_owner=self.resolve(name, "poll"),
            init_owner=self.resolve(name, "__init__"),
            can_bootstrap=returns_bootstrapping or (reads_status and sets_bootstrapping),
            init_time=init_time,
            restamp=restamp,
            check_reached=bool(fired),
            unchecked_return=unchecked,
            init_time_flag=_init_time_flag(poll_nodes),
            inert_check=inert_check,
            inert_why=inert_why,
            has_helper=self.resolve(name, CHECK_BOOTSTRAP_TIMEOUT) is not None,
        )

    def _timers(self, name: str) -> frozenset[str]:
        """A sender's own names for a clock: what its modules import a clock function as
        (``from time import perf_counter as now``), and its helpers that return a clock
        reading (``def _now(self): return time.monotonic()``)."""
        names: set[str] = set()
        for info in self.mro(name):
            for stmt in self.modules[info.rel].body:
                if isinstance(stmt, ast.ImportFrom) and stmt.module == "time":
                    names |= {a.asname or a.name for a in stmt.names if a.name in CLOCK_FUNCTIONS}
        for info in self.mro(name):
            for method, function in info.methods.items():
                returns = list(own_returns(function))
                if returns and all(
                    r.value is not None and _is_clock_call(r.value, frozenset(names))
                    for r in returns
                ):
                    names.add(method)
        return frozenset(names)

    def _returns_held_bootstrapping(self, name: str, poll_nodes: list[ast.AST]) -> bool:
        """Does a ``return`` of ``poll()`` read a module-level name or a ``self`` attribute
        that holds Bootstrapping somewhere (``_PHASES = {0: KVPoll.Bootstrapping, ...}`` then
        ``return _PHASES[self.phase]``; ``self._state = KVPoll.Bootstrapping`` then ``return
        self._state``)? Such a poll() can report Bootstrapping as surely as one that names it."""
        held: dict[str, list[ast.expr]] = {}
        for info in self.mro(name):
            for source in (self.modules[info.rel], info.node):
                for key, values in kept(source, _HELD, _assigned_values).items():
                    held.setdefault(key, []).extend(values)

        def holds_bootstrapping(key: str) -> bool:
            return any(
                isinstance(n, ast.Attribute) and n.attr == "Bootstrapping"
                for value in held.get(key, [])
                for n in walk(value)
            )

        for node in poll_nodes:
            if isinstance(node, ast.Return) and node.value is not None:
                for read in walk(node.value):
                    if isinstance(read, ast.Name) and holds_bootstrapping(read.id):
                        return True
                    if (
                        isinstance(read, ast.Attribute)
                        and is_self_attr(read, read.attr)
                        and holds_bootstrapping("self." + read.attr)
                    ):
                        return True
        return False

    def opaque_poll(self, name: str) -> tuple[ClassInfo, int, str] | None:
        """The class, line and expression where this sender's ``poll`` is bound to something
        pdguard cannot read: ``poll = make_poll()`` before any class defines it, or a ``poll``
        wrapped by a decorator (``@honour_abort``: what runs is what the decorator makes of
        the body pdguard reads; ``@abstractmethod`` and ``@override`` change nothing). None if
        none."""
        for info in self.mro(name):
            if "poll" in info.methods:
                for decorator in info.methods["poll"].decorator_list:
                    text = ast.unparse(decorator)
                    if text.split(".")[-1] not in _INERT_DECORATORS:
                        return info, decorator.lineno, f"@{text}"
                return None
            if "poll" in info.opaque:
                return info, info.opaque["poll"], "poll = ..."
        return None

    def unread_return(self, name: str) -> tuple[ClassInfo, ast.Return] | None:
        """A ``return`` of this sender's ``poll()`` (or of a helper it reaches) whose value
        pdguard cannot trace to poll states, when nothing else says it can report
        Bootstrapping: a call it does not know (``self.machine.current()``), a parameter, an
        attribute or a name whose assignments it cannot read. PDG004 says nothing of such a
        sender, so PDG000 says that it cannot tell. None when every return is read."""
        chain = self.mro(name)
        held: dict[str, list[ast.expr]] = {}
        for info in chain:
            for stmt in self.modules[info.rel].body:
                if isinstance(stmt, ast.Assign):
                    for target in stmt.targets:
                        if isinstance(target, ast.Name):
                            held.setdefault(target.id, []).append(stmt.value)
            for node in walk(info.node):
                if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        if isinstance(target, ast.Attribute) and is_self_attr(target, target.attr):
                            held.setdefault("self." + target.attr, []).append(node.value)
        seen: set[tuple[str, str]] = set()
        stack = ["poll"]
        while stack:
            meth = stack.pop()
            owner = self.resolve(name, meth)
            if owner is None or (owner.name, meth) in seen:
                continue
            seen.add((owner.name, meth))
            function = owner.methods[meth]
            if _is_stub(function):
                continue
            local = _local_values(function)
            for node in own_nodes(function):
                if isinstance(node, ast.Call) and is_self_attr(node.func, call_name(node) or ""):
                    stack.append(call_name(node) or "")
                if isinstance(node, ast.Return) and not _read(node.value, local, held, 3):
                    return owner, node
        return None

    # -- how a sender can be failed from outside -------------------------------------------

    def is_concrete(self, name: str) -> bool:
        """Its ``poll()`` does something (not ``pass``, ``...``, a docstring, or
        ``raise NotImplementedError``): a backend, not a base."""
        owner = self.resolve(name, "poll")
        return owner is not None and not _is_stub(owner.methods["poll"])

    def abort_honoured(self, name: str, method: str = SENDER_ABORT) -> bool:
        """Does ``abort()`` make this sender's ``poll()`` return Failed from then on? Either
        ``abort()`` sets ``self.conclude_state = KVPoll.Failed`` (or to the status a
        notification of Failed concluded with: Failed, or a terminal status sent before) and
        ``poll()`` (or the helper
        it returns) starts by returning a set ``conclude_state``; or ``abort()`` sets the room's
        status to Failed and no return of ``poll()`` can skip a Failed status (NIXL up to
        0.5.11 returns its transfer handles' state once it has sent: not honoured).
        ``method``: another method the deadline calls instead (``cleanup()``), judged the same
        way, through what it calls (``bounded_wait.fail_action``)."""
        abort_owner = self.resolve(name, method)
        poll = self._poll_body(name)
        if poll is None:
            return False
        manager = self.manager_of(name)
        if abort_owner is None and manager is not None and self.manager_has(manager, method):
            # a method of the sender's manager (``sender.kv_mgr.conclude_failure(...)``,
            # 0.5.20+): it fails the sender when it marks the room Failed, through what it
            # calls, and no return of ``poll()`` can skip a Failed status
            return self.marks_room_failed(manager, method) and _status_failed_kept(
                poll, self.concludes_terminal(name)
            )
        if abort_owner is None:
            return False
        abort = list(self.reached(name, method))
        sets_status = any(
            isinstance(n, ast.Call)
            and call_name(n) == MANAGER_UPDATE_STATUS
            and n.args
            and is_failed(n.args[-1])
            for n in abort
        )
        marks = {
            target.attr: n.value
            for n in abort
            if isinstance(n, ast.Assign)
            for target in n.targets
            if isinstance(target, ast.Attribute) and is_self_attr(target, target.attr)
        }
        return (
            (self.abort_concludes(name, method) and _returns_conclude_first(poll))
            or (sets_status and _status_failed_kept(poll))
            or _fails_first_on_mark(poll, marks)
        )

    def concludes_terminal(self, name: str) -> bool:
        """Is every value any method of this sender's classes gives ``self.conclude_state``
        None, Success or Failed (``KVPoll.X``, or a name tested to be one of them just
        before: ``if status in (KVPoll.Success, KVPoll.Failed): self.conclude_state =
        status``)? Then a ``poll()`` that returns a set ``conclude_state`` reports a transfer
        that ended, which the inflight deadline never fails."""
        terminal = {KVPoll.Success.name, KVPoll.Failed.name}
        for info in self.mro(name):
            for function in info.methods.values():
                checked: set[int] = set()
                for node in walk(function):
                    if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
                        test = node.test
                        right = test.comparators[0]
                        elements = (
                            right.elts
                            if isinstance(right, ast.Tuple | ast.List | ast.Set)
                            else [right]
                        )
                        states = {a for e in elements for a in _poll_states(e, None)}
                        if len(states) < len(elements):
                            states = set()
                        if (
                            isinstance(test.left, ast.Name)
                            and isinstance(test.ops[0], ast.In | ast.Eq)
                            and states
                            and states <= terminal
                        ):
                            checked |= {
                                id(n)
                                for stmt in node.body
                                for n in walk(stmt)
                                if isinstance(n, ast.Assign)
                                and isinstance(n.value, ast.Name)
                                and n.value.id == test.left.id
                            }
                for node in walk(function):
                    if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
                        continue
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    if not any(is_self_attr(t, CONCLUDE_STATE) for t in targets):
                        continue
                    value = node.value
                    if id(node) in checked or (
                        isinstance(value, ast.Constant) and value.value is None
                    ):
                        continue
                    if not (isinstance(value, ast.Attribute) and value.attr in terminal):
                        return False
        return True

    def marks_room_failed(
        self, name: str, method: str, failed: frozenset[str] = frozenset(), depth: int = 0
    ) -> bool:
        """Does ``method`` of class ``name`` call ``update_status(room, <Failed>)``, itself or
        through the ``self.*()`` methods it calls? ``<Failed>`` is ``KVPoll.Failed``, or a
        parameter in ``failed`` that the caller bound to it and the method never assigns
        anything else (``conclude_failure`` calls ``conclude_transfer(status=KVPoll.Failed)``,
        which calls ``update_status(bootstrap_room, status)``)."""
        owner = self.resolve(name, method)
        if owner is None or depth > 4:
            return False
        function = owner.methods[method]
        reassigned = {
            target.id
            for n in walk(function)
            if isinstance(n, ast.Assign) and not is_failed(n.value)
            for target in n.targets
            if isinstance(target, ast.Name)
        }
        holding = failed - reassigned

        def fails(value: ast.expr) -> bool:
            return is_failed(value) or (isinstance(value, ast.Name) and value.id in holding)

        for node in walk(function):
            if not isinstance(node, ast.Call) or not is_self_attr(node.func, call_name(node) or ""):
                continue
            callee = call_name(node) or ""
            if callee == MANAGER_UPDATE_STATUS:
                values = [*node.args, *(k.value for k in node.keywords if k.arg == "status")]
                if values and fails(values[-1]):
                    return True
                continue
            target = self.resolve(name, callee)
            if target is None:
                continue
            params = [a.arg for a in target.methods[callee].args.args[1:]]
            params += [a.arg for a in target.methods[callee].args.kwonlyargs]
            bound = {params[i] for i, a in enumerate(node.args) if i < len(params) and fails(a)}
            bound |= {k.arg for k in node.keywords if k.arg is not None and fails(k.value)}
            if self.marks_room_failed(name, callee, frozenset(bound), depth + 1):
                return True
        return False

    def abort_marks(self, name: str) -> list[str]:
        """The ``self`` attributes this sender's ``abort()`` (and what it calls) assigns."""
        return sorted(
            {
                target.attr
                for n in self.reached(name, "abort")
                if isinstance(n, ast.Assign)
                for target in n.targets
                if isinstance(target, ast.Attribute) and is_self_attr(target, target.attr)
            }
        )

    def abort_concludes(self, name: str, method: str = SENDER_ABORT) -> bool:
        """Does this sender's ``abort()`` (or ``method``) set ``self.conclude_state`` to Failed
        (or to the status a notification of Failed concluded with)?"""
        abort = list(self.reached(name, method))
        # names holding what a notification of Failed returns: the status it concluded with
        # (Mori 0.5.13+: ``sent_status, _ = self._notify_decode(KVPoll.Failed, reason)``)
        notified = {
            target.id
            for n in abort
            if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Call)
            and any(is_failed(a) for a in n.value.args)
            for t in n.targets
            for target in (t.elts[:1] if isinstance(t, ast.Tuple) else [t])
            if isinstance(target, ast.Name)
        }
        return any(
            isinstance(n, ast.Assign)
            and any(is_self_attr(t, CONCLUDE_STATE) for t in n.targets)
            and (is_failed(n.value) or (isinstance(n.value, ast.Name) and n.value.id in notified))
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
            and is_self_attr(body[0].value.func, call_name(body[0].value) or "")
        ):
            helper = self.resolve(name, call_name(body[0].value) or "")
            if helper is not None:
                return _without_docstring(helper.methods[call_name(body[0].value) or ""].body)
        return body

    # -- what the release offers to build a check from --------------------------------------

    def manager_of(self, sender: str, after: str | None = None) -> str | None:
        """The manager class named by the annotation of ``__init__``'s first parameter; when
        it has none and is handed on as the first argument of ``super().__init__()``, the
        annotation of the base's (the same object)."""
        owner = self.resolve(sender, "__init__", after)
        if owner is None:
            return None
        init = owner.methods["__init__"]
        args = init.args.args
        if len(args) < 2:
            return None
        if args[1].annotation is not None:
            return _base_name(args[1].annotation)
        handed_on = any(
            isinstance(n, ast.Call)
            and _is_super_init(n)
            and n.args
            and isinstance(n.args[0], ast.Name)
            and n.args[0].id == args[1].arg
            for n in walk(init)
        )
        return self.manager_of(sender, owner.name) if handed_on else None

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


# decorators that leave a method as written
_INERT_DECORATORS = frozenset({"abstractmethod", "override"})

CONCLUDE_STATE = "conclude_state"
FAILURE_RECORDS = "failure_records"


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


_HELD = "_pdguard_assigned_values"


def _assigned_values(node: ast.AST) -> dict[str, list[ast.expr]]:
    """What a module binds to its module-level names (``NAME = value``), or what a class's
    methods give its ``self`` attributes (``self.x = value``, under ``self.x``); kept on the
    node (``_returns_held_bootstrapping``)."""
    held: dict[str, list[ast.expr]] = {}
    if isinstance(node, ast.Module):
        for stmt in node.body:
            if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
                for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                    if isinstance(target, ast.Name):
                        held.setdefault(target.id, []).append(stmt.value)
        return held
    for inner in walk(node):
        if isinstance(inner, ast.Assign):
            for target in inner.targets:
                if isinstance(target, ast.Attribute) and is_self_attr(target, target.attr):
                    held.setdefault("self." + target.attr, []).append(inner.value)
    return held


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
    while branch and _holds_while_draining(branch[0]):
        branch = branch[1:]
    return bool(branch) and all(
        isinstance(s, ast.Return) and s.value is not None and is_self_attr(s.value, CONCLUDE_STATE)
        for s in branch[:1]
    )


def _holds_while_draining(stmt: ast.stmt) -> bool:
    """Before returning the concluded state: a name assigned, or ``if ...: return
    KVPoll.Transferring`` (no ``else``): Failed held while transfers the sender posted still
    run (pdguard's sender-abort on NIXL up to 0.5.11; upstream's deferred abort ack holds the
    pages alike). Bounded by the transport, which ends or errors a posted transfer."""
    if isinstance(stmt, ast.Assign):
        return all(isinstance(t, ast.Name) for t in stmt.targets)
    return (
        isinstance(stmt, ast.If)
        and not stmt.orelse
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], ast.Return)
        and isinstance(stmt.body[0].value, ast.Attribute)
        and stmt.body[0].value.attr == "Transferring"
    )


def _fails_first_on_mark(body: list[ast.stmt], marks: dict[str, ast.expr]) -> bool:
    """``abort()`` marks the sender in an attribute of its own (``self.<attr> = <value>``:
    ``self.cancelled = True``, ``self._state = KVPoll.Failed``) and the first statement of
    ``poll()`` is an ``if`` that holds for that value and returns Failed (``KVPoll.Failed``, or
    the attribute when the value is Failed): every poll after ``abort()`` reports Failed."""
    if body and isinstance(body[0], ast.Match):
        return any(
            is_self_attr(body[0].subject, attr) and _match_fails(body[0], attr, value)
            for attr, value in marks.items()
        )
    if not body or not isinstance(body[0], ast.If) or not body[0].body:
        return False
    first = body[0]
    answer = first.body[0]
    if not isinstance(answer, ast.Return):
        return False
    for attr, value in marks.items():
        returns_failed = is_failed(answer.value) or (
            is_failed(value) and answer.value is not None and is_self_attr(answer.value, attr)
        )
        if returns_failed and _holds_for(first.test, attr, value):
            return True
    return False


def _match_fails(match: ast.Match, attr: str, value: ast.expr) -> bool:
    """``match self.<attr>:`` once it is ``value``: the first case that takes the value (a
    literal or ``None`` equal to it, a capture or ``_``; a case with a guard, or a pattern
    pdguard cannot decide, ends the search) starts by returning Failed (``KVPoll.Failed``, or
    the captured value or the attribute when the value is Failed)."""
    same = ast.dump(value)

    def takes(pattern: ast.pattern) -> bool | None:
        if isinstance(pattern, ast.MatchAs):
            return True if pattern.pattern is None else takes(pattern.pattern)
        if isinstance(pattern, ast.MatchSingleton):
            return isinstance(value, ast.Constant) and value.value is pattern.value
        if isinstance(pattern, ast.MatchValue):
            if ast.dump(pattern.value) == same:
                return True
            known = (ast.Constant, ast.Attribute)
            return False if isinstance(value, known) and isinstance(pattern.value, known) else None
        if isinstance(pattern, ast.MatchOr):
            found = [takes(p) for p in pattern.patterns]
            return True if any(found) else (False if all(f is False for f in found) else None)
        return None

    for case in match.cases:
        taken = takes(case.pattern)
        if taken is False:
            continue
        if taken is None or case.guard is not None or not case.body:
            return False
        answer = case.body[0]
        if not isinstance(answer, ast.Return) or answer.value is None:
            return False
        captured = case.pattern.name if isinstance(case.pattern, ast.MatchAs) else None
        returned = answer.value
        return is_failed(returned) or (
            is_failed(value)
            and (
                is_self_attr(returned, attr)
                or (isinstance(returned, ast.Name) and returned.id == captured)
            )
        )
    return False


def _holds_for(test: ast.expr, attr: str, value: ast.expr) -> bool:
    """Is ``test`` true once ``self.<attr>`` is ``value`` (a constant or a ``KVPoll`` member),
    whatever else holds? Only what can be told from the test itself: ``self.<attr>`` (a true
    constant; ``KVPoll.Failed`` is 0, so false), ``is not None``, ``==`` / ``is`` the value,
    ``in`` a tuple, list or set holding it, ``or`` of such tests, ``and`` of them all."""
    same = ast.dump(value)
    if isinstance(test, ast.BoolOp):
        held = [_holds_for(v, attr, value) for v in test.values]
        return any(held) if isinstance(test.op, ast.Or) else all(held)
    if is_self_attr(test, attr):
        return isinstance(value, ast.Constant) and bool(value.value)
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    if not is_self_attr(test.left, attr):
        return False
    op, right = test.ops[0], test.comparators[0]
    if isinstance(op, ast.IsNot | ast.NotEq) and isinstance(right, ast.Constant):
        is_none = isinstance(value, ast.Constant) and value.value is None
        return right.value is None and not is_none
    if isinstance(op, ast.Is | ast.Eq):
        return ast.dump(right) == same
    if isinstance(op, ast.In) and isinstance(right, ast.Tuple | ast.List | ast.Set):
        return any(ast.dump(e) == same for e in right.elts)
    return False


def _status_failed_kept(body: list[ast.stmt], concluded_ended: bool = False) -> bool:
    """Every ``return`` of ``body`` returns Failed, the room's status (a ``check_status(...)``
    call or a name holding one), or sits behind a test that the status is something other than
    Failed (``if status == KVPoll.Bootstrapping:``). ``concluded_ended``: the sender only
    ever concludes Success or Failed (``ClassIndex.concludes_terminal``), so a return of
    ``self.conclude_state`` reports a transfer that ended (and is left alone by the
    deadline)."""
    status_names: set[str] = set()
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Assign) and any(
            # ``check_status(room)``, or ``self.conclude_state or check_status(room)``
            isinstance(n, ast.Call) and call_name(n) == MANAGER_CHECK_STATUS
            for n in ([node.value] if not isinstance(node.value, ast.BoolOp) else node.value.values)
        ):
            status_names |= {t.id for t in node.targets if isinstance(t, ast.Name)}

    def is_status(node: ast.AST | None) -> bool:
        return (isinstance(node, ast.Call) and call_name(node) == MANAGER_CHECK_STATUS) or (
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
            and not is_failed(test.comparators[0])
        )

    def walk(stmts: list[ast.stmt], guarded: bool) -> bool:
        for stmt in stmts:
            if isinstance(stmt, ast.Return):
                concluded = (
                    concluded_ended
                    and stmt.value is not None
                    and is_self_attr(stmt.value, CONCLUDE_STATE)
                )
                if not (guarded or concluded or is_failed(stmt.value) or is_status(stmt.value)):
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


def _is_clock_call(node: ast.AST, timers: frozenset[str] = frozenset()) -> bool:
    """``time.time()``, ``_t.monotonic()``, ``monotonic()``; and with ``timers`` (a sender's
    own names for a clock, ``_timers``), ``now()`` after ``from time import perf_counter as
    now`` or ``self._now()`` for a helper that returns a clock reading."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr in CLOCK_FUNCTIONS or (
            func.attr in timers and is_self_attr(func, func.attr)
        )
    return isinstance(func, ast.Name) and (func.id in CLOCK_FUNCTIONS or func.id in timers)


def _reads_init_time(node: ast.AST, clocks: frozenset[str] = frozenset({SENDER_INIT_TIME})) -> bool:
    """A read of ``self.init_time`` (or of another of the sender's ``clocks``)."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr in clocks
        and is_self_attr(node, node.attr)
        and isinstance(node.ctx, ast.Load)
    )


def _local_values(function: ast.FunctionDef) -> dict[str, ast.expr]:
    """What each local name of ``function`` is assigned (the last assignment wins)."""
    values: dict[str, ast.expr] = {}
    for node in walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                values[target.id] = node.value
    return values


def _expanded(expr: ast.AST, values: dict[str, ast.expr], depth: int = 3) -> list[ast.AST]:
    """The nodes of ``expr``, and of what the local names it reads were assigned."""
    found = list(walk(expr))
    if depth:
        for name in [n for n in found if isinstance(n, ast.Name) and n.id in values]:
            found += _expanded(values[name.id], values, depth - 1)
    return found


def _is_elapsed(
    expr: ast.AST,
    values: dict[str, ast.expr],
    predicates: set[str],
    clocks: frozenset[str] = frozenset({SENDER_INIT_TIME}),
    timers: frozenset[str] = frozenset(),
) -> bool:
    """Does ``expr`` compare an elapsed time since ``init_time`` (a clock reading minus it,
    directly or through local names) with something, or call a ``self.<helper>()`` that
    returns such a comparison? A mere read of ``init_time`` (a ``None`` test) is no timeout."""
    parts = _expanded(expr, values)
    for node in parts:
        if isinstance(node, ast.Compare):
            inner = _expanded(node, values)
            if any(_is_clock_call(n, timers) for n in inner) and any(
                _reads_init_time(n, clocks) for n in inner
            ):
                return True
        if (
            isinstance(node, ast.Call)
            and call_name(node) in predicates
            and is_self_attr(node.func, call_name(node) or "")
        ):
            return True
    return False


def _reports_failed(nodes: list[ast.AST], failing: set[str]) -> bool:
    """Among ``nodes``: a Failed returned, stored (``self.conclude_state = KVPoll.Failed``) or
    reported (``update_status(room, KVPoll.Failed)``), or a call of a ``self.<helper>()`` that
    does one of those."""
    for node in nodes:
        if isinstance(node, ast.Return) and "Failed" in _poll_states(node.value, owner=None):
            return True
        if isinstance(node, ast.Assign) and is_failed(node.value):
            return True
        if isinstance(node, ast.Call):
            if any(is_failed(a) for a in node.args):
                return True
            if is_self_attr(node.func, call_name(node) or "") and call_name(node) in failing:
                return True
    return False


def _block_nodes(stmts: list[ast.stmt]) -> list[ast.AST]:
    return [n for s in stmts for n in walk(s)]


def _exits(stmts: list[ast.stmt]) -> bool:
    return bool(stmts) and isinstance(stmts[-1], _EXITS)


def _timeout_fires(
    functions: list[ast.FunctionDef],
    clocks: frozenset[str] = frozenset({SENDER_INIT_TIME}),
    timers: frozenset[str] = frozenset(),
) -> tuple[dict[str, int], int, str]:
    """Does a test of the time since ``init_time`` in ``functions`` (``poll()`` and the
    helpers it reaches) decide a Failed: in its own branches (an ``if``, a conditional
    expression, a ``case`` guard), or after a branch that returns (``if elapsed < limit:
    return None`` then Failed)? Returns (the functions where one does, by name, with the line
    of its first such test; the line of a test that does not; why not: "raises", an
    exception out of ``poll()`` is no Failed, the scheduler's poll loop does not catch it;
    "gated", tested only in another state than Bootstrapping; "" otherwise)."""
    values_of = {id(f): _local_values(f) for f in functions}
    predicates = {
        f.name
        for f in functions
        if any(
            isinstance(n, ast.Return)
            and n.value is not None
            and _is_elapsed(n.value, values_of[id(f)], set(), clocks, timers)
            for n in walk(f)
        )
    }
    failing = {f.name for f in functions if _reports_failed(walk(f)[1:], set())}
    inert, raises, gated_at = 0, False, 0

    def block(
        stmts: list[ast.stmt],
        values: dict[str, ast.expr],
        parents: dict[ast.AST, ast.AST],
        top: bool = True,
    ) -> int:
        """The line where a test decides a Failed in ``stmts``, or 0. A statement's conditional
        expressions, nested ones included, are looked at once, from the outermost block."""
        nonlocal inert, raises, gated_at

        def gated(test: ast.expr, node: ast.AST) -> bool:
            # tested only in another state: it never fires while Bootstrapping
            nonlocal gated_at
            if (
                _excludes_bootstrapping(test)
                or _behind_not_bootstrapping(node, parents)
                or (isinstance(node, ast.match_case) and _other_state_case(node.pattern))
            ):
                gated_at = gated_at or test.lineno
                return True
            return False

        for i, stmt in enumerate(stmts):
            branches: list[list[ast.stmt]] = []
            if (
                isinstance(stmt, ast.If | ast.While)
                and _is_elapsed(stmt.test, values, predicates, clocks, timers)
                and not gated(stmt.test, stmt)
            ):
                branches = [stmt.body, stmt.orelse]
                rest = stmts[i + 1 :] if isinstance(stmt, ast.If) else []
                taken = [b for b in branches if b] + [rest] * any(_exits(b) for b in branches)
                if any(_reports_failed(_block_nodes(b), failing) for b in taken):
                    return stmt.lineno
                inert = inert or stmt.lineno
                raises = raises or any(isinstance(n, ast.Raise) for n in _block_nodes(stmt.body))
            if isinstance(stmt, ast.Match):
                for case in stmt.cases:
                    if (
                        case.guard is not None
                        and _is_elapsed(case.guard, values, predicates, clocks, timers)
                        and not gated(case.guard, case)
                    ):
                        if _reports_failed(_block_nodes(case.body), failing):
                            return case.guard.lineno
                        inert = inert or case.guard.lineno
                        raises = raises or any(
                            isinstance(n, ast.Raise) for n in _block_nodes(case.body)
                        )
            for node in walk(stmt) if top else ():
                if (
                    isinstance(node, ast.IfExp)
                    and _is_elapsed(node.test, values, predicates, clocks, timers)
                    and not gated(node.test, node)
                ):
                    # its value (returned or stored) is Failed on one side, or a side fails
                    either = [*walk(node.body), *walk(node.orelse)]
                    if "Failed" in _poll_states(node, None) or _reports_failed(either, failing):
                        return node.lineno
                    inert = inert or node.lineno
            for inner in _sub_blocks(stmt):
                line = block(inner, values, parents, top=False)
                if line:
                    return line
        return 0

    fired = {
        f.name: line for f in functions if (line := block(f.body, values_of[id(f)], own_parents(f)))
    }
    if fired:
        return fired, 0, ""
    if inert:
        return fired, inert, "raises" if raises else ""
    return fired, gated_at, "gated" if gated_at else ""


def _unchecked_return(
    poll: ast.FunctionDef, fired: dict[str, int], functions: list[ast.FunctionDef]
) -> tuple[int, int]:
    """A ``return`` of ``poll()`` that can report Bootstrapping (the room's status from
    ``check_status()``, directly or through a local name, or Bootstrapping itself) and comes
    before the first place where the timeout can fire (its test in ``poll()``, or a call of a
    helper that tests it): that path reports Bootstrapping without the test. Returns (its
    line, that place's line), or (0, 0)."""
    called = {
        f.name: {
            call_name(n)
            for n in walk(f)
            if isinstance(n, ast.Call) and is_self_attr(n.func, call_name(n) or "")
        }
        for f in functions
    }
    reaches = set(fired)  # helpers that test the timeout, or call one that does
    while grown := {name for name, names in called.items() if names & reaches} - reaches:
        reaches |= grown
    firsts = [fired[poll.name]] if poll.name in fired else []
    parents = own_parents(poll)
    firsts += [
        node.lineno
        for node in walk(poll)
        if isinstance(node, ast.Call)
        and is_self_attr(node.func, call_name(node) or "")
        and call_name(node) in reaches
        and not _behind_not_bootstrapping(node, parents)
    ]
    # none: the timeout is tested only behind a test of another state (0 in the answer)
    first = min(firsts) if firsts else 1 << 30
    statuses = {
        t.id
        for n in walk(poll)
        if isinstance(n, ast.Assign)
        and isinstance(n.value, ast.Call)
        and call_name(n.value) == MANAGER_CHECK_STATUS
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    for node in own_nodes(poll):
        if not isinstance(node, ast.Return) or node.value is None or node.lineno >= first:
            continue
        if _behind_not_bootstrapping(node, parents):
            continue
        parts = [node.value]  # and either side of ``or`` / a conditional expression
        while any(isinstance(p, ast.BoolOp | ast.IfExp) for p in parts):
            p = next(p for p in parts if isinstance(p, ast.BoolOp | ast.IfExp))
            parts.remove(p)
            parts += p.values if isinstance(p, ast.BoolOp) else [p.body, p.orelse]
        if any(
            (isinstance(value, ast.Call) and call_name(value) == MANAGER_CHECK_STATUS)
            or (isinstance(value, ast.Name) and value.id in statuses)
            or "Bootstrapping" in _poll_states(value, None)
            for value in parts
        ):
            return node.lineno, first if firsts else 0
    return 0, 0


def _excludes_bootstrapping(test: ast.expr, negated: bool = False) -> bool:
    """Is ``test`` (or, ``negated``, its negation) false whenever the state is Bootstrapping:
    ``status != KVPoll.Bootstrapping``, ``status == KVPoll.Transferring``, ``status in
    (KVPoll.Success, KVPoll.Failed)``, an ``and`` holding one of those?"""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and not negated:
        return any(_excludes_bootstrapping(v) for v in test.values)
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    op, right = test.ops[0], test.comparators[0]
    named = "Bootstrapping" in _poll_states(right, None)
    if isinstance(right, ast.Tuple | ast.List | ast.Set):
        named = any("Bootstrapping" in _poll_states(e, None) for e in right.elts)
    if negated:
        return isinstance(op, ast.Eq | ast.Is | ast.In) and named
    if isinstance(op, ast.NotEq | ast.IsNot | ast.NotIn):
        return named
    return (
        isinstance(op, ast.Eq | ast.Is | ast.In)
        and not named
        and bool(_poll_states(right, None) or isinstance(right, ast.Tuple | ast.List | ast.Set))
    )


def _behind_not_bootstrapping(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Does ``node`` sit behind a test that the state is not Bootstrapping (``if status !=
    KVPoll.Bootstrapping:``, ``if status in (KVPoll.Success, KVPoll.Failed):``, the ``else``
    of ``if status == KVPoll.Bootstrapping:``, a ``case`` of another state)?"""
    child = node
    parent = parents.get(child)
    while parent is not None:
        if isinstance(parent, ast.If | ast.IfExp):
            body = parent.body if isinstance(parent.body, list) else [parent.body]
            orelse = parent.orelse if isinstance(parent.orelse, list) else [parent.orelse]
            if child in body and _excludes_bootstrapping(parent.test):
                return True
            if child in orelse and _excludes_bootstrapping(parent.test, negated=True):
                return True
        if isinstance(parent, ast.match_case) and _other_state_case(parent.pattern):
            return True
        child, parent = parent, parents.get(parent)
    return False


def _other_state_case(pattern: ast.pattern) -> bool:
    """``case KVPoll.Transferring:`` (or an ``|`` of states without Bootstrapping)."""
    if isinstance(pattern, ast.MatchOr):
        return all(_other_state_case(p) for p in pattern.patterns)
    return isinstance(pattern, ast.MatchValue) and bool(
        _poll_states(pattern.value, None) - {"Bootstrapping"}
    )


def _read(
    value: ast.expr | None,
    local: dict[str, ast.expr],
    held: dict[str, list[ast.expr]],
    depth: int,
) -> bool:
    """Can pdguard tell which poll states ``value`` (a ``return`` of ``poll()``) takes? A
    ``KVPoll`` member (any ``<Name>.<Member>``), the room's status, a ``self.<helper>()`` or
    ``super()`` call (read on its own), a conditional or ``or`` of those, a local, module or
    ``self`` name every assignment of which is read (``None`` included), a lookup in a
    table of them."""
    if value is None or (isinstance(value, ast.Constant) and value.value is None):
        return True
    if depth < 0:
        return False

    def again(expr: ast.expr | None) -> bool:
        return _read(expr, local, held, depth - 1)

    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
        if value.value.id != "self":
            return True  # KVPoll.Success, and the like
        values = held.get("self." + value.attr)
        return values is not None and all(again(v) for v in values)
    if isinstance(value, ast.IfExp):
        return again(value.body) and again(value.orelse)
    if isinstance(value, ast.BoolOp):
        return all(again(v) for v in value.values)
    if isinstance(value, ast.Call):
        func = value.func
        name = call_name(value)
        if name == MANAGER_CHECK_STATUS or is_self_attr(func, name or ""):
            return True
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):
            return isinstance(func.value.func, ast.Name) and func.value.func.id == "super"
        return False
    if isinstance(value, ast.Name):
        if value.id in local:
            return again(local[value.id])
        values = held.get(value.id)
        return values is not None and all(again(v) for v in values)
    if isinstance(value, ast.Subscript):
        return again(value.value)
    if isinstance(value, ast.Dict):
        return all(again(v) for v in value.values)
    return False


def _poll_stamps(
    functions: list[ast.FunctionDef],
    clocks: frozenset[str] = frozenset({SENDER_INIT_TIME}),
    timers: frozenset[str] = frozenset(),
) -> tuple[int, int]:
    """``self.init_time = <clock>`` in ``poll()`` or a helper it reaches: the line of one
    behind ``if self.init_time is None:`` (or ``if not self.init_time:``), and not behind a
    test of another state than Bootstrapping, which starts the clock at the first poll in
    Bootstrapping, and of one straight in a function's body, run on every call, which
    restarts it (0 for none)."""
    lazy = restamp = 0

    def stamps(stmts: list[ast.stmt]) -> list[ast.stmt]:
        return [
            s
            for s in stmts
            if isinstance(s, ast.Assign)
            and any(_reads_init_time(t, clocks) or _stores(t, clocks) for t in s.targets)
            and any(_is_clock_call(n, timers) for n in walk(s.value))
        ]

    for function in functions:
        for stmt in stamps(function.body):
            restamp = restamp or stmt.lineno
        parents = own_parents(function)
        for node in walk(function):
            # not behind a test of another state: it runs on the first poll in Bootstrapping
            if (
                isinstance(node, ast.If)
                and _unset_test(node.test)
                and not _behind_not_bootstrapping(node, parents)
            ):
                for stmt in stamps(node.body):
                    lazy = lazy or stmt.lineno
    return lazy, restamp


def _stores(node: ast.AST, clocks: frozenset[str]) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in clocks and is_self_attr(node, node.attr)


def _own_clocks(init_nodes: list[ast.AST], timers: frozenset[str]) -> frozenset[str]:
    """``self`` attributes other than ``init_time`` that ``__init__`` (and what it calls)
    sets from a clock reading: a stamp or a deadline of the sender's own."""
    return frozenset(
        target.attr
        for n in init_nodes
        if isinstance(n, ast.Assign) and any(_is_clock_call(v, timers) for v in walk(n.value))
        for target in n.targets
        if isinstance(target, ast.Attribute)
        and is_self_attr(target, target.attr)
        and target.attr != SENDER_INIT_TIME
    )


def _unset_test(test: ast.expr) -> bool:
    """``self.init_time is None`` or ``not self.init_time``."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return is_self_attr(test.operand, SENDER_INIT_TIME)
    return (
        isinstance(test, ast.Compare)
        and is_self_attr(test.left, SENDER_INIT_TIME)
        and isinstance(test.ops[0], ast.Is)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    )


def _sub_blocks(stmt: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists nested in ``stmt`` (not in nested functions)."""
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return []
    blocks = [
        getattr(stmt, name)
        for name in ("body", "orelse", "finalbody")
        if isinstance(getattr(stmt, name, None), list)
    ]
    blocks += [h.body for h in getattr(stmt, "handlers", [])]
    blocks += [c.body for c in getattr(stmt, "cases", [])]
    return blocks


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
