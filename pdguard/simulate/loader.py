"""Load the target's own code for the simulation, without importing SGLang: the machinery both
halves' loaders (``prefill.loader``, ``decode.loader``) plan their classes with.

From each module the simulation needs, the loader takes:

* the methods of one class that the simulation calls (its *entry points*) and every method of
  the class (and of its base classes) that those reach through ``self.<name>``;
* the module-level statements that bind a name those methods use and that no stand-in gives
  (pdguard's ``_INFLIGHT_TIMEOUT_ENV`` name, for instance). Imports are never run.

It compiles them, finds the free global names of the compiled code (from its bytecode, so
comprehensions, lambdas and nested functions count) and resolves each name the module binds
(by an import, a statement, a class or a function) to a class loaded from the tree, a stand-in,
the module's own statement, or, for a name the code only passes along (``passalong``), a
recording stand-in. A bound name none of these gives is a :class:`LoadError`:
``<file>:<line>: cannot load: <name> is needed by <function> and has no stand-in (<why>)``. A
name the module does not bind at all (``time`` without ``import time``) is left unbound: the
code raises NameError when it runs, in the simulation as in SGLang.

An import inside a loaded function is never run either: it is rewritten into an assignment of
the same stand-ins (``import time`` in a function gets the rank's clock); an imported name with
none is a LoadError that names the module and the line of the import. ``__import__`` itself
raises :class:`~.standins.MissingStandIn` in the loaded code.

:meth:`Target.build` then executes the compiled code in a fresh namespace per simulated rank,
filled with that rank's stand-ins, and returns the classes.
"""

from __future__ import annotations
import __future__

import ast
import dis
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import CodeType

from ..checks.classes import find_method
from ..checks.classes import methods_of as _class_methods
from ..errors import LoadError, parse
from ..fix_names import INFLIGHT_TIMEOUT_READER
from ..tree import SourceTree
from . import passalong, sandbox

# Module-level functions of the target that are loaded rather than given a stand-in: the
# release's own test hook that sends a request through optimistic prefill's requeue (0.5.13+),
# and the reader of the inflight timeout that pdguard's fix writes before 0.5.8.
LOADED_FUNCTIONS = frozenset({"should_force_retry", INFLIGHT_TIMEOUT_READER})

_FLAGS = __future__.annotations.compiler_flag  # every SGLang module has the future import
_BUILTINS = sandbox.BUILTIN_NAMES | sandbox.REFUSED_BUILTINS


@dataclass
class _ClassPlan:
    rel: str
    node: ast.ClassDef
    methods: list[str]
    bases: list[str]  # names in the module's namespace


@dataclass
class _ModulePlan:
    rel: str
    module: ast.Module
    classes: list[_ClassPlan] = field(default_factory=list)
    statements: list[ast.stmt] = field(default_factory=list)
    # module-level statements that rebind an attribute of a loaded class (``Cls.abort = ...``,
    # ``setattr(Cls, ...)``): run after the classes, as importing the module would
    patches: list[ast.stmt] = field(default_factory=list)
    standins: dict[str, str] = field(default_factory=dict)  # local name -> stand-in key
    foreign: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (rel, class)
    unbound: dict[str, str] = field(default_factory=dict)  # name -> the function using it
    recorders: dict[str, str] = field(default_factory=dict)  # name -> a Recorder's label
    code: CodeType | None = None


@dataclass
class EnvRegistry:
    """The release's typed environment (``environ.py``): its own Env classes (``EnvField``
    and its subclasses), compiled, and each registry entry with a literal default: name ->
    (its Env class, the default). ``envs.NAME.get()`` in the simulation runs that code."""

    code: CodeType
    entries: dict[str, tuple[str, object]]


@dataclass
class Built:
    """One rank's copy of the target's classes."""

    mixin: type
    bootstrap_queue: type
    nixl_sender: type | None
    mooncake_sender: type | None = None


@dataclass
class Target:
    """The target's code, compiled once and built per rank."""

    label: str
    version: str | None
    mixin: tuple[str, str]  # (module, class)
    bootstrap_queue: tuple[str, str]
    nixl_sender: tuple[str, str] | None
    modules: list[_ModulePlan]  # in build order (a base class's module first)
    # class -> attribute read as self.X -> (function, line)
    self_reads: dict[str, dict[str, tuple[str, int]]]
    loaded: dict[str, list[str]]  # class -> the methods loaded from the target
    replaced: tuple[str, ...]  # mixin methods the simulated scheduler replaces
    # attributes the loaded code only passes along: a stand-in that has none gives a Recorder
    pass_along: frozenset[str] = frozenset()
    # every attribute the loaded code reads -> whether it may get a Recorder, and why not
    attributes: dict[str, passalong.Verdict] = field(default_factory=dict)
    display: dict[str, str] = field(default_factory=dict)  # module -> how messages name it
    # the release's own MooncakeKVSender (module, class): every request's sender, unless the
    # tree has none (then a scripted one)
    mooncake_sender: tuple[str, str] | None = None
    # the release's default of SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT (None: it has none)
    bootstrap_timeout_default: int | None = None
    # mixin methods the target defines (all of them, loaded or not)
    mixin_methods: frozenset[str] = frozenset()
    # attributes the target's inflight function reads (``pending_bootstrap``, ...)
    inflight_attrs: frozenset[str] = frozenset()
    # the target's NixlKVSender reads its status from its KV manager (``check_status``), so the
    # scripted transport moves it; 0.4.6.x polls its transfer engine's handles instead
    nixl_polls_manager: bool = False
    # the parameters of the target's inflight function (``rids_to_check``: PP, 0.4.7.post1+)
    inflight_args: tuple[str, ...] = ()
    # the release's env registry (0.5.3+), None where it has none
    env_registry: EnvRegistry | None = None
    # class -> the fork's own containers its loaded methods keep on self (``own_state``)
    own_state: dict[str, dict[str, str]] = field(default_factory=dict)

    def where(self, rel: str, line: int) -> str:
        """``<file>:<line>`` as messages name a line of the target's module ``rel``."""
        return f"{self.display.get(rel, rel)}:{line}"

    def namespaces(
        self,
        standin: Callable[[str], object],
        recorder: Callable[[str], object] | None = None,
        no_import: Callable[..., object] | None = None,
    ) -> dict[str, dict[str, object]]:
        """Execute the compiled code in fresh namespaces, one per module (see ``build``)."""
        namespaces: dict[str, dict[str, object]] = {}
        loaded_builtins = sandbox.builtins_for_target()
        if no_import is not None:
            loaded_builtins["__import__"] = no_import
        for plan in self.modules:
            namespace: dict[str, object] = {
                "__name__": _module_name(plan.rel),
                "__builtins__": loaded_builtins,
                sandbox.TARGET_FILE: self.display.get(plan.rel, plan.rel),
            }
            for name, key in plan.standins.items():
                namespace[name] = standin(key)
            for name, label in plan.recorders.items():
                if recorder is None:
                    raise LoadError(f"cannot load: {label} needs a recording stand-in")
                namespace[name] = recorder(label)
            for name, (rel, class_name) in plan.foreign.items():
                namespace[name] = namespaces[rel][class_name]
            assert plan.code is not None
            try:
                exec(plan.code, namespace)
            except Exception as exc:  # the target's module-level code fails: so would import
                frames = [
                    f for f in traceback.extract_tb(exc.__traceback__) if f.filename == plan.rel
                ]
                line = frames[-1].lineno if frames else 0
                raise LoadError(
                    f"{self.where(plan.rel, line or 0)}: cannot load: the module-level code of "
                    f"{plan.rel} raised {type(exc).__name__}: {exc}"
                ) from exc
            namespaces[plan.rel] = namespace

        return namespaces

    def build(
        self,
        standin: Callable[[str], object],
        recorder: Callable[[str], object] | None = None,
        no_import: Callable[..., object] | None = None,
    ) -> Built:
        """Execute the compiled code in fresh namespaces; ``standin(key)`` gives a value,
        ``recorder(label)`` a recording stand-in, and ``no_import`` is the code's
        ``__import__``."""
        namespaces = self.namespaces(standin, recorder, no_import)

        def cls(where: tuple[str, str]) -> type:
            value = namespaces[where[0]][where[1]]
            assert isinstance(value, type)
            return value

        return Built(
            mixin=cls(self.mixin),
            bootstrap_queue=cls(self.bootstrap_queue),
            nixl_sender=cls(self.nixl_sender) if self.nixl_sender else None,
            mooncake_sender=cls(self.mooncake_sender) if self.mooncake_sender else None,
        )


def _build_order(modules: dict[str, _ModulePlan], order: list[str]) -> list[_ModulePlan]:
    """The plans in ``order``, each after the modules its foreign classes come from (a
    ``prefill.py`` that imports a sender class of ``common/conn.py`` runs after it)."""
    ordered: list[_ModulePlan] = []
    seen: set[str] = set()

    def visit(rel: str) -> None:
        if rel in seen or rel not in modules:
            return
        seen.add(rel)
        for origin, _ in modules[rel].foreign.values():
            visit(origin)
        ordered.append(modules[rel])

    for rel in order:
        visit(rel)
    return ordered


def _attribute_verdicts(loader: _Loader) -> dict[str, passalong.Verdict]:
    """Every attribute the loaded code reads -> may it get a Recorder (``passalong``)?"""
    code = [node for rel in loader.order for node in _loaded_nodes(loader.modules[rel])]
    uses = passalong.Uses(code)
    return {attr: uses.attribute(attr) for attr in uses.attributes_read()}


def _loaded_nodes(plan: _ModulePlan) -> list[ast.AST]:
    """The loaded methods and module-level statements of a module."""
    return [*(f for cls in plan.classes for f in _methods_of(cls)), *plan.statements]


def _loaded_methods(loader: _Loader) -> dict[str, list[str]]:
    """Each planned class -> the methods loaded from the target."""
    return {
        plan.node.name: list(plan.methods)
        for module in loader.order
        for plan in loader.modules[module].classes
    }


# -- planning --------------------------------------------------------------------------------


class _Loader:
    def __init__(self, tree: SourceTree, standin_keys: frozenset[str]) -> None:
        self.tree = tree
        self.standin_keys = standin_keys
        self.modules: dict[str, _ModulePlan] = {}
        self.order: list[str] = []  # build order
        self._parsed: dict[str, ast.Module] = {}
        self._class_index: dict[str, tuple[str, ast.ClassDef]] = {}

    # modules and classes

    def parsed(self, rel: str) -> ast.Module:
        if rel not in self._parsed:
            data = self.tree.read_bytes(rel)
            if data is None:
                raise LoadError(f"cannot load: {rel} is not in the tree")
            self._parsed[rel] = parse(data, rel, self.tree.display(rel))
        return self._parsed[rel]

    def classes(self, rel: str) -> dict[str, ast.ClassDef]:
        return {n.name: n for n in self.parsed(rel).body if isinstance(n, ast.ClassDef)}

    def class_defining(self, rel: str, method: str) -> str:
        found = find_method(self.classes(rel).values(), method)
        if found is not None:
            return found[0].name
        raise LoadError(f"cannot load: no class in {rel} defines {method}()")

    def node(self, name: str) -> ast.ClassDef:
        return self._class_index[name][1]

    def module_plan(self, rel: str) -> _ModulePlan:
        if rel not in self.modules:
            self.modules[rel] = _ModulePlan(rel, self.parsed(rel))
        return self.modules[rel]

    def plan_class(
        self,
        rel: str,
        name: str,
        entries: tuple[str, ...],
        skip: frozenset[str] = frozenset(),
    ) -> _ClassPlan:
        """Plan ``name`` and its base classes: the methods reachable from ``entries``."""
        hierarchy = self.hierarchy(rel, name)  # [(rel, ClassDef, base names)], class first
        reachable: set[str] = set()
        todo = [e for e in entries if e not in skip]
        while todo:
            method = todo.pop()
            if method in reachable:
                continue
            reachable.add(method)
            for _, node, _ in hierarchy:
                function = _class_methods(node).get(method)
                if function is not None:
                    todo += [a for a in _self_attrs(function) if a not in skip]
                for stmt in _class_rebindings(node).get(method, []):  # what it is rebound to
                    todo += [n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)]
        plans = []
        for where, node, bases in reversed(hierarchy):  # bases first: build order
            methods = [m for m in _class_methods(node) if m in reachable]
            module = self.module_plan(where)
            plan = next((p for p in module.classes if p.node.name == node.name), None)
            if plan is None:
                plan = _ClassPlan(where, node, methods, bases)
                module.classes.append(plan)
            else:
                plan.methods = sorted(set(plan.methods) | set(methods))
            self._class_index[node.name] = (where, node)
            plans.append(plan)
            if where not in self.order:
                self.order.append(where)
        return plans[-1]

    def hierarchy(self, rel: str, name: str) -> list[tuple[str, ast.ClassDef, list[str]]]:
        node = self.classes(rel).get(name)
        if node is None:
            raise LoadError(f"cannot load: {rel} has no class {name}")
        found = [(rel, node, [ast.unparse(b) for b in node.bases])]
        for base in node.bases:
            if not isinstance(base, ast.Name):
                continue
            origin = self.class_origin(rel, base.id)
            if origin is not None:
                for entry in self.hierarchy(*origin):
                    if entry[1].name not in {f[1].name for f in found}:
                        found.append(entry)
        return found

    def class_origin(self, rel: str, name: str, depth: int = 0) -> tuple[str, str] | None:
        """The module of the tree that defines class ``name`` as seen from ``rel``."""
        if name in self.classes(rel):
            return rel, name
        if depth > 4:
            return None
        for node in self.parsed(rel).body:
            if not isinstance(node, ast.ImportFrom):
                continue
            for alias in node.names:
                if (alias.asname or alias.name) != name:
                    continue
                for target in _module_files(_absolute(rel, node)):
                    if _in_package(target) and self.tree.read_bytes(target) is not None:
                        return self.class_origin(target, alias.name, depth + 1)
        return None

    # names

    def resolve(self) -> None:
        """Compile each module's plan; resolve its free names to stand-ins, statements, and
        classes of other modules (adding those modules' plans first)."""
        for rel in list(self.order):
            self._resolve_module(self.modules[rel])

    def _resolve_module(self, plan: _ModulePlan) -> None:
        imports = _import_keys(plan.module)
        assigned = _module_assignments(plan.module)
        definitions = {
            n.name for n in plan.module.body if isinstance(n, ast.ClassDef | ast.FunctionDef)
        }
        functions = {
            n.name: n
            for n in plan.module.body
            if isinstance(n, ast.FunctionDef) and n.name in LOADED_FUNCTIONS
        }
        self._rewrite_local_imports(plan)
        display = self.tree.display(plan.rel)
        loaded_classes = frozenset(cls.node.name for cls in plan.classes) | frozenset(
            name
            for name in _import_keys(plan.module)
            if (origin := self.class_origin(plan.rel, name)) is not None
            and origin[1] in self._class_index
        )
        plan.patches = _class_patches(plan.module, loaded_classes, lambda n: f"{display}:{n}")
        patched_names = {
            n.id for stmt in plan.patches for n in ast.walk(stmt) if isinstance(n, ast.Name)
        }
        # a decorator of a loaded method defined in this module runs as importing would
        decorators = {
            n.id
            for cls in plan.classes
            for method in _methods_of(cls)
            for decorator in method.decorator_list
            for n in ast.walk(decorator)
            if isinstance(n, ast.Name)
        }
        functions.update(
            (n.name, n)
            for n in plan.module.body
            if isinstance(n, ast.FunctionDef) and n.name in patched_names | decorators
        )
        while True:
            plan.code = _compile_module(plan, lambda line: f"{display}:{line}")
            stored = _stored_names(plan.code)
            for name, line in sandbox.refused_builtins(plan.code):
                if name not in stored and name not in imports and name not in assigned:
                    raise LoadError(
                        f"{display}:{line}: cannot load: {name} is a builtin the simulation's "
                        "sandbox does not give to the target's code"
                    )
            changed = False
            for name, user in sorted(_free_names(plan.code).items()):
                if name in stored or name in plan.standins or name in plan.foreign:
                    continue
                if name in plan.recorders:
                    continue
                if name in plan.unbound:
                    continue
                origin = self.class_origin(plan.rel, name)
                if origin is not None and origin[0] != plan.rel and origin[1] in self._class_index:
                    plan.foreign[name] = origin  # a class loaded from another module
                    continue
                keys = imports.get(name, [name])
                key = next((k for k in keys if k in self.standin_keys), None)
                bound = name in imports or name in assigned or name in definitions
                if key is not None and bound:
                    plan.standins[name] = key
                elif name in functions and name not in imports:
                    plan.statements.append(functions[name])
                    changed = True
                elif name in assigned and name not in imports:
                    plan.statements += [s for s in assigned[name] if s not in plan.statements]
                    changed = True
                elif bound:
                    verdict = passalong.Uses(_loaded_nodes(plan)).name(name)
                    if not verdict.passes_along:
                        where = f"{self.tree.display(plan.rel)}:{verdict.line}"
                        imported_from = _import_origin(plan.module, name)
                        came = f"imported from {imported_from}; " if imported_from else ""
                        raise LoadError(
                            f"{where}: cannot load: {name} is needed by {user} and has no "
                            f"stand-in ({came}{verdict.why})"
                        )
                    plan.recorders[name] = name
                else:  # bound nowhere: running the code raises NameError, here as in SGLang
                    plan.unbound[name] = user
            if not changed:
                return

    def _rewrite_local_imports(self, plan: _ModulePlan) -> None:
        """Replace each import inside a loaded method by assignments of stand-ins (or of
        recorders, for names the method only passes along); an imported name with neither is
        a LoadError naming the module and the line. The import itself never runs."""
        for cls in plan.classes:
            for function in _methods_of(cls):
                if not any(isinstance(n, ast.Import | ast.ImportFrom) for n in ast.walk(function)):
                    continue
                uses = passalong.Uses([function])
                for holder in ast.walk(function):
                    for field_name in ("body", "orelse", "finalbody"):
                        body = getattr(holder, field_name, None)
                        if not isinstance(body, list) or not any(
                            isinstance(s, ast.Import | ast.ImportFrom) for s in body
                        ):
                            continue
                        rewritten: list[ast.stmt] = []
                        for stmt in body:
                            if isinstance(stmt, ast.Import | ast.ImportFrom):
                                user = f"{cls.node.name}.{function.name}"
                                rewritten += self._local_import(plan, stmt, uses, user, function)
                            else:
                                rewritten.append(stmt)
                        setattr(holder, field_name, rewritten)

    def _tree_class(
        self, rel: str, stmt: ast.Import | ast.ImportFrom, local: str
    ) -> tuple[str, str] | None:
        """The loaded class a function-local ``from <module of the tree> import <Class>``
        binds, if it is one."""
        if not isinstance(stmt, ast.ImportFrom):
            return None
        name = _imported_name(stmt, local)
        if name is None:
            return None
        for target in _module_files(_absolute(rel, stmt)):
            if _in_package(target) and self.tree.read_bytes(target) is not None:
                origin = self.class_origin(target, name)
                built_before = (
                    origin is not None
                    and origin[0] in self.order
                    and rel in self.order
                    and self.order.index(origin[0]) < self.order.index(rel)
                )
                if origin is not None and built_before and origin[1] in self._class_index:
                    return origin
        return None

    def _local_import(
        self,
        plan: _ModulePlan,
        stmt: ast.Import | ast.ImportFrom,
        uses: passalong.Uses,
        user: str,
        function: ast.FunctionDef,
    ) -> list[ast.stmt]:
        module = ast.Module(body=[stmt], type_ignores=[])
        keys = _import_keys(module)
        assignments: list[ast.stmt] = []
        for local, candidates in keys.items():
            hidden = f"_pdguard_import_{stmt.lineno}_{local}"
            key = next((k for k in candidates if k in self.standin_keys), None)
            origin = self._tree_class(plan.rel, stmt, local)
            if origin is not None:  # a class of the tree the simulation loads: the same one
                plan.foreign[hidden] = origin
            elif key is not None:
                plan.standins[hidden] = key
            else:
                verdict = uses.name(local, within=function)
                if not verdict.passes_along:
                    what = _import_text(stmt)
                    raise LoadError(
                        f"{self.tree.display(plan.rel)}:{stmt.lineno}: cannot load: {user} "
                        f"imports {what}, which the simulation never imports, and {local} "
                        f"has no stand-in ({verdict.why})"
                    )
                plan.recorders[hidden] = local
            assign = ast.Assign(
                targets=[ast.Name(id=local, ctx=ast.Store())],
                value=ast.Name(id=hidden, ctx=ast.Load()),
            )
            assignments.append(ast.copy_location(assign, stmt))
        return assignments


def _imported_name(stmt: ast.ImportFrom, local: str) -> str | None:
    return next((a.name for a in stmt.names if (a.asname or a.name) == local), None)


def _compile_module(plan: _ModulePlan, where: Callable[[int], str]) -> CodeType:
    order = {id(stmt): i for i, stmt in enumerate(plan.module.body)}
    body: list[ast.stmt] = sorted(plan.statements, key=lambda s: order[id(s)])
    for cls in plan.classes:
        functions = _class_methods(cls.node)
        rebound = {id(s) for m in cls.methods for s in _class_rebindings(cls.node).get(m, [])}
        # the loaded defs and the class-body statements rebinding them, in the class's order
        loaded = {id(functions[m]) for m in cls.methods} | rebound
        members: list[ast.stmt] = [stmt for stmt in cls.node.body if id(stmt) in loaded]
        body.append(
            ast.ClassDef(
                name=cls.node.name,
                bases=[ast.Name(id=b, ctx=ast.Load()) for b in cls.bases if b.isidentifier()],
                keywords=[],
                body=members or [ast.Pass()],
                decorator_list=[],
                type_params=[],  # type: ignore[call-arg]  # 3.12+ needs it; 3.11 has none
            )
        )
    body += plan.patches
    module = ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))
    return sandbox.restricted_compile(module, plan.rel, where, _FLAGS)


def _class_rebindings(node: ast.ClassDef) -> dict[str, list[ast.stmt]]:
    """Class-body statements that bind the name of one of the class's methods again
    (``process_x = _expire``): method -> those statements (the class as Python builds it)."""
    methods = _class_methods(node)
    found: dict[str, list[ast.stmt]] = {}
    for stmt in node.body:
        targets = (
            stmt.targets
            if isinstance(stmt, ast.Assign)
            else [stmt.target]
            if isinstance(stmt, ast.AnnAssign) and stmt.value is not None
            else []
        )
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name) and name.id in methods:
                    found.setdefault(name.id, []).append(stmt)
    return found


def _patched_class(stmt: ast.stmt, classes: frozenset[str]) -> str | None:
    """The loaded class whose attribute ``stmt`` rebinds, if it does."""
    targets: list[ast.AST] = []
    if isinstance(stmt, ast.Assign):
        targets = [t for target in stmt.targets for t in ast.walk(target)]
    elif isinstance(stmt, ast.AugAssign | ast.AnnAssign):
        targets = [stmt.target]
    elif isinstance(stmt, ast.Delete):
        targets = list(stmt.targets)
    for target in targets:
        if (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id in classes
        ):
            return target.value.id
    for node in ast.walk(stmt) if isinstance(stmt, ast.Expr) else ():
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in classes
        ):
            return node.args[0].id
    return None


def _class_patches(
    module: ast.Module, classes: frozenset[str], where: Callable[[int], str]
) -> list[ast.stmt]:
    """The top-level statements of ``module`` that rebind an attribute of one of ``classes``;
    one inside a module-level ``if``/``try``/``with``/loop is a LoadError (not modelled: the
    simulation would have to decide the condition)."""
    found: list[ast.stmt] = []
    for stmt in module.body:
        if isinstance(stmt, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
            continue
        if _patched_class(stmt, classes) is not None:
            found.append(stmt)
            continue
        for inner in ast.walk(stmt):
            if isinstance(inner, ast.stmt) and inner is not stmt:
                name = _patched_class(inner, classes)
                if name is not None:
                    raise LoadError(
                        f"{where(inner.lineno)}: cannot load: module-level code rebinds an "
                        f"attribute of {name} inside a {type(stmt).__name__.lower()} block; "
                        "the simulation does not model it (unmodelled)"
                    )
    return found


def _free_names(code: CodeType, where: str = "") -> dict[str, str]:
    """Global names ``code`` reads, each with the first function that reads it."""
    qualname = getattr(code, "co_qualname", code.co_name)
    here = where if qualname in ("<module>", "<lambda>", "<listcomp>", "<genexpr>") else qualname
    here = here or "module level"
    found: dict[str, str] = {}
    stored = {i.argval for i in dis.get_instructions(code) if i.opname == "STORE_NAME"}
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            name = instruction.argval
            if name not in _BUILTINS and not (instruction.opname == "LOAD_NAME" and name in stored):
                found.setdefault(name, here)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            for name, user in _free_names(const, here).items():
                found.setdefault(name, user)
    return found


def _stored_names(code: CodeType) -> set[str]:
    """Names the module-level code binds (statements, classes)."""
    return {i.argval for i in dis.get_instructions(code) if i.opname == "STORE_NAME"}


# -- ast helpers -----------------------------------------------------------------------------


def _methods_of(plan: _ClassPlan) -> list[ast.FunctionDef]:
    functions = _class_methods(plan.node)
    return [functions[m] for m in plan.methods]


def _is_attr_of(node: ast.AST, owner: str, attr: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attr
        and isinstance(node.value, ast.Name)
        and node.value.id == owner
    )


def _self_attrs(function: ast.FunctionDef) -> set[str]:
    return {
        n.attr
        for n in ast.walk(function)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
    }


def _self_reads(functions: list[ast.FunctionDef]) -> dict[str, tuple[str, int]]:
    """``self.X`` read (not only assigned) by ``functions``: X -> (the first function, the
    line)."""
    reads: dict[str, tuple[str, int]] = {}
    for function in functions:
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Load)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                reads.setdefault(node.attr, (function.name, node.lineno))
    return reads


# A fork's own state on ``self`` (a map of stamps by rid, a list of its own), made by its own
# ``__init__`` outside what the simulation loads: known by what the loaded code does with it.
_OWN_STATE_KINDS: dict[str, frozenset[str]] = {
    "dict": frozenset({"get", "setdefault", "items", "keys", "values", "update", "popitem"}),
    "list": frozenset({"append", "extend", "insert"}),
    "set": frozenset({"add", "discard"}),
}
_OWN_STATE_NEUTRAL = frozenset({"pop", "clear", "remove", "copy"})
_OWN_STATE_WRITES = frozenset(
    {"setdefault", "update", "popitem", "append", "extend", "insert", "add", "discard", "pop"}
    | {"clear", "remove"}
)


def own_state(functions: list[ast.FunctionDef]) -> dict[str, str]:
    """``self.X`` the loaded methods keep as a container of their own, started empty by the
    fork's ``__init__`` (which the simulation does not run): X -> "dict", "list" or "set".

    Only where every use in ``functions`` is an item store or read (``self.X[k] = v``,
    ``self.X[k]``, ``del self.X[k]``), a method of exactly one kind of container (``get``,
    ``setdefault``, ... for a dict; ``append``, ``extend``, ``insert`` for a list; ``add``,
    ``discard`` for a set; ``pop``, ``clear``, ``remove``, ``copy`` for any), ``in``, ``len()``
    or a ``for`` over it, and the code writes into it at least once. Any other use (assigned
    whole, compared, passed to a call, read before any write elsewhere) leaves it a load error
    naming it."""
    uses: dict[str, list[tuple[ast.Attribute, ast.AST | None]]] = {}
    parents: dict[ast.AST, ast.AST] = {}
    for function in functions:
        for parent in ast.walk(function):
            for child in ast.iter_child_nodes(parent):
                parents[child] = parent
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                uses.setdefault(node.attr, []).append((node, parents.get(node)))
    found: dict[str, str] = {}
    for attr, seen in uses.items():
        kinds: set[str] = set()
        written = False
        for read, holder in seen:
            use = _container_use(read, holder, parents)
            if use is None:
                break
            kind, writes = use
            if kind is not None:
                kinds.add(kind)
            written = written or writes
        else:
            if written and len(kinds) == 1:
                found[attr] = kinds.pop()
    return found


def init_literals(cls: ast.ClassDef | None) -> dict[str, str]:
    """``self.X = <literal>`` of a class's own ``__init__`` (which the simulation replaces):
    X -> the literal's source (``[]``, ``{}``, ``0``, ``None``, ``set()``), evaluated afresh
    for each simulated object (``give_init_literals``). Any other value is left out."""
    init = _class_methods(cls).get("__init__") if cls is not None else None
    found: dict[str, str] = {}
    for node in ast.walk(init) if init is not None else ():
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
                and _literal(node.value) is not None
            ):
                found.setdefault(target.attr, ast.unparse(node.value))
    return found


_EMPTY_CALLS = {"list": list, "dict": dict, "set": set}


def _literal(node: ast.expr) -> str | None:
    text = ast.unparse(node)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _EMPTY_CALLS
        and not node.args
        and not node.keywords
    ):
        return text
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return text


def give_init_literals(obj: object, literals: dict[str, str]) -> None:
    """Set each of ``init_literals`` on ``obj`` (a fresh value), where the simulated object
    has no such attribute."""
    for attr, text in literals.items():
        if hasattr(obj, attr):
            continue
        empty = _EMPTY_CALLS.get(text.removesuffix("()")) if text.endswith("()") else None
        setattr(obj, attr, empty() if empty is not None else ast.literal_eval(text))


def give_own_state(obj: object, kinds: dict[str, str]) -> None:
    """Start each of ``obj``'s own containers (``own_state``) empty, where the simulated
    object has no such attribute."""
    made: dict[str, type] = {"dict": dict, "list": list, "set": set}
    for attr, kind in kinds.items():
        if not hasattr(obj, attr):
            setattr(obj, attr, made[kind]())


def _container_use(
    node: ast.Attribute, parent: ast.AST | None, parents: dict[ast.AST, ast.AST]
) -> tuple[str | None, bool] | None:
    """(the kind of container the use needs, whether it writes) for ``self.X`` used as a
    container; None for any other use."""
    if not isinstance(node.ctx, ast.Load):
        return None
    if isinstance(parent, ast.Subscript) and parent.value is node:
        return ("dict" if isinstance(parent.ctx, ast.Store) else None), not isinstance(
            parent.ctx, ast.Load
        )
    if isinstance(parent, ast.Attribute) and isinstance(parents.get(parent), ast.Call):
        call = parents[parent]
        if not isinstance(call, ast.Call) or call.func is not parent:
            return None
        method = parent.attr
        kind = next((k for k, names in _OWN_STATE_KINDS.items() if method in names), None)
        if kind is None and method not in _OWN_STATE_NEUTRAL:
            return None
        return kind, method in _OWN_STATE_WRITES
    if (
        isinstance(parent, ast.Compare)
        and node in parent.comparators
        and all(isinstance(op, ast.In | ast.NotIn) for op in parent.ops)
    ):
        return None, False
    if (
        isinstance(parent, ast.Call)
        and parent.args == [node]
        and not parent.keywords
        and isinstance(parent.func, ast.Name)
        and parent.func.id == "len"
    ):
        return None, False
    if isinstance(parent, ast.For | ast.comprehension) and parent.iter is node:
        return None, False
    return None


# stand-in keys that are modules: a from-import of a name spelt like one is another object
_MODULE_KEYS = frozenset({"time", "os", "hashlib"})


def _import_keys(module: ast.Module) -> dict[str, list[str]]:
    """Each name a module-level import binds -> the stand-in keys to try, most specific first:
    ``import time as _t`` -> ["time"]; ``from time import monotonic`` -> ["time.monotonic",
    "monotonic"]."""
    keys: dict[str, list[str]] = {}
    for node in _walk_module_level(module):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    keys[alias.asname] = [alias.name]
                else:
                    top = alias.name.split(".")[0]
                    keys[top] = [top]
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                local = alias.asname or alias.name
                prefix = [f"{node.module}.{alias.name}"] if node.module and not node.level else []
                # ``from datetime import time`` is not the time module
                bare = [] if alias.name in _MODULE_KEYS else [alias.name]
                keys[local] = [*prefix, *bare]
    return keys


def _walk_module_level(module: ast.Module) -> Iterator[ast.stmt]:
    """Module-level statements, including those inside top-level if/try blocks, but not those
    under ``if TYPE_CHECKING:`` (they bind nothing at run time)."""
    todo: list[ast.stmt] = list(module.body)
    while todo:
        node = todo.pop(0)
        yield node
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo += node.orelse
        elif isinstance(node, ast.If | ast.Try):
            todo += [*node.body, *node.orelse]
            if isinstance(node, ast.Try):
                todo += [s for h in node.handlers for s in h.body] + node.finalbody


def _module_assignments(module: ast.Module) -> dict[str, list[ast.stmt]]:
    """Names bound at module level by statements that import nothing: name -> the top-level
    statements binding it."""
    bound: dict[str, list[ast.stmt]] = {}
    for stmt in module.body:
        if isinstance(stmt, ast.Import | ast.ImportFrom | ast.ClassDef | ast.FunctionDef):
            continue
        if any(isinstance(n, ast.Import | ast.ImportFrom) for n in ast.walk(stmt)):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bound.setdefault(node.id, []).append(stmt)
    return bound


def _import_origin(module: ast.Module, name: str) -> str | None:
    """``<module> at line <n>`` of the module-level import that binds ``name``."""
    for node in _walk_module_level(module):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name.split(".")[0]) == name:
                    source = alias.name if isinstance(node, ast.Import) else _import_text(node)
                    source = source.split(" from ")[-1]
                    return f"{source} at line {node.lineno}"
    return None


def _import_text(stmt: ast.Import | ast.ImportFrom) -> str:
    """``sglang.srt.fork_only`` or ``on_inflight from sglang.srt.fork_only.hooks``."""
    if isinstance(stmt, ast.Import):
        return ", ".join(alias.name for alias in stmt.names)
    names = ", ".join(alias.name for alias in stmt.names)
    return f"{names} from {'.' * stmt.level}{stmt.module or ''}"


def _absolute(rel: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = rel.removesuffix(".py").split("/")[:-1]
    if node.level > 1:
        package = package[: -(node.level - 1)]
    return ".".join([*package, *([node.module] if node.module else [])])


def _in_package(rel: str) -> bool:
    """Is ``rel`` a file of SGLang's package (not the standard library's ``abc.py``, which a
    package-directory tree would look for beside ``sglang/``)?"""
    return rel.startswith("sglang/")


def _module_files(module: str) -> list[str]:
    path = module.replace(".", "/")
    return [f"{path}.py", f"{path}/__init__.py"]


def _module_name(rel: str) -> str:
    return rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def describe(target: Target) -> Mapping[str, object]:
    """What was loaded, for the JSON report."""
    return {
        "loaded": target.loaded,
        "files": [m.rel for m in target.modules],  # the modules the scenarios run code of
        "replaced_by_standins": list(target.replaced),
        "standins": sorted({k for m in target.modules for k in m.standins.values()}),
        "unbound_names": {m.rel: m.unbound for m in target.modules if m.unbound},
        "recorded_names": sorted({label for m in target.modules for label in m.recorders.values()}),
        "pass_along_attributes": sorted(target.pass_along),
        "module_statements": {
            m.rel: [ast.unparse(s).splitlines()[0] for s in m.statements]
            for m in target.modules
            if m.statements
        },
    }
