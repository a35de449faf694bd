"""PDG005: a name the fix's code uses is not imported, or is bound to something else.

What it does
    In ``prefill.py`` and in every module defining a KV sender, reports a use of ``os``,
    ``time`` or of a clock function (``monotonic``, ``perf_counter``, ...) that nothing binds:
    no import at module level (imports under ``if TYPE_CHECKING:`` do not count), no local name.
    It also reports a use as the module (``time.monotonic()``, ``os.environ``, ``monotonic()``)
    where the binding in force is not that module: ``from datetime import time`` after
    ``import time``, ``time = ...``, a local assignment that shadows the import. In the
    inflight deadline (the methods holding its checks) it reports any name nothing binds (a
    timeout reader another release defines, ``get_int_env_var`` not imported).

Why is this bad
    The deadline and the bootstrap timeout run only when a request is late, so a missing
    ``import time`` stays hidden until the one moment the code must work, and then the
    scheduler dies with a ``NameError``.

Example
    ``time`` used in ``prefill.py`` of a release that does not import it (0.4.6 - 0.5.2,
    0.5.10 - 0.5.21):

    ```python
    import logging

    from sglang.srt.disaggregation.base import KVPoll
    ...
                req.entered_at = time.monotonic()
    ```

Use instead
    ```python
    import logging
    import time

    from sglang.srt.disaggregation.base import KVPoll
    ...
                req.entered_at = time.monotonic()
    ```
"""

from __future__ import annotations

import ast
import builtins
import re
import symtable
from collections.abc import Iterator
from functools import lru_cache

from pdguard.sglang_names import ENVIRON_MODULE, ENVIRON_OBJECT, ENVIRON_PATH

from ..bindings import bindings_in_force as _bindings_in_force
from ..bindings import type_checking as _type_checking
from ..models.env_reads import registry_misses
from ..models.inflight import CLOCK_FUNCTIONS, FUNCTION
from ..nodes import children, kept, walk
from ..project import Project
from ..rule import PREFILL, Finding, Rule

WATCHED = frozenset({"os", "time", "environ"} | CLOCK_FUNCTIONS)
_MEANT = {"os": "os module", "environ": "`os.environ` mapping"} | {
    name: f"`time.{name}` function" for name in CLOCK_FUNCTIONS - {"time"}
}


def _imported(stmts: list[ast.stmt]) -> set[str]:
    return {
        (alias.asname or alias.name).split(".")[0]
        for stmt in stmts
        if isinstance(stmt, ast.Import | ast.ImportFrom)
        for alias in stmt.names
    }


def _type_checking_only(tree: ast.Module) -> set[str]:
    """Names imported only under ``if TYPE_CHECKING:`` at module level (unbound at run time)."""
    hidden = {name for node in tree.body if _type_checking(node) for name in _imported(node.body)}
    return hidden - _imported([n for n in tree.body if not _type_checking(n)])


# Cheap text tests first. Each is the search of one regular expression, written as a search
# for the watched name (a literal, found fast) and a look at what precedes it: the single
# patterns ``(?:\bas\s+|\bdef\s+|\bfor\s+|^\s*)(NAMES)\b\s*(?:[=:,(]|in\b|$)`` (re.M) and
# ``(?<![\w.])(NAMES)\b`` gave the same answers, and took 0.2 s on a large release.
_WORD = re.compile(r"\w")
# a watched name ending a word, and what follows it in a binding (``time =``, ``os,``, ...)
_BINDING_TAIL = {
    name: re.compile(re.escape(name) + r"\b\s*(?:[=:,(]|in\b|$)", re.M) for name in sorted(WATCHED)
}
_WORD_END = {name: re.compile(re.escape(name) + r"\b") for name in sorted(WATCHED)}


@lru_cache(maxsize=128)  # by text: verify's refs and re-checks meet the same files
def _rebinding(text: str) -> bool:
    """A statement that could bind a watched name: the name at the start of a line (after
    whitespace) or after ``as``, ``def`` or ``for``, followed by ``=``, ``:``, ``,``, ``(``,
    ``in`` or the end of the line."""
    for name, tail in _BINDING_TAIL.items():
        if name not in text:
            continue
        for match in tail.finditer(text):
            start = end = match.start()
            while start > 0 and text[start - 1].isspace():
                start -= 1
            if start == 0 or "\n" in text[start:end]:
                return True
            for keyword in ("as", "def", "for") if start < end else ():
                k = start - len(keyword)
                if text[k:start] == keyword and (k == 0 or not _WORD.match(text[k - 1])):
                    return True
    return False


@lru_cache(maxsize=128)
def _candidates(text: str) -> frozenset[str]:
    """The watched names the text uses, not as an attribute (``x.time``) nor inside a word."""
    found = set()
    for name, pattern in _WORD_END.items():
        if name not in text:
            continue
        for match in pattern.finditer(text):
            at = match.start()
            if at == 0 or not (text[at - 1] == "." or _WORD.match(text[at - 1])):
                found.add(name)
                break
    return frozenset(found)


def _module_bound(tree: ast.Module) -> set[str]:
    """Names the module's own statements bind (imports, assignments, defs), looking into
    module-level ``if``/``try`` blocks but not into functions, nor under TYPE_CHECKING."""
    bound: set[str] = set()
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if _type_checking(node):
            stack.extend(node.orelse)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound |= _imported([node])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound |= {n.id for t in targets for n in walk(t) if isinstance(n, ast.Name)}
        else:
            for name in ("body", "orelse", "finalbody"):
                stack.extend(getattr(node, name, []) or [])
            if isinstance(node, ast.Try):
                stack.extend(stmt for handler in node.handlers for stmt in handler.body)
    return bound


def _may_use_unbound(tree: ast.Module) -> bool:
    """Can ``_unbound_uses`` find anything? Only a watched name some ``ast.Name`` of the module
    spells (``symtable`` marks a name used only there), which no plain module-level import
    binds (those ``symtable`` sees imported, and none is under TYPE_CHECKING) and which is not
    a builtin. A walk of the module is half the cost of ``symtable``, and the text test before
    it also takes a word of a comment or a string for a use."""
    used = {n.id for n in walk(tree) if isinstance(n, ast.Name) and n.id in WATCHED}
    imported = _imported([n for n in tree.body if not _type_checking(n)])
    return bool(used - imported - set(dir(builtins)))


def _unbound_uses(text: str, rel: str, hidden: set[str]) -> Iterator[tuple[str, str]]:
    """(scope qualified name, name) for each watched name a scope uses that nothing binds.

    ``symtable`` (the compiler's own scope analysis, in C) does the work: walking every
    function of a 2,000-line module with ``ast`` costs ten times more."""
    table = symtable.symtable(text, rel, "exec")
    module_bound = {
        sym.get_name()
        for sym in table.get_symbols()
        if (sym.is_imported() or sym.is_assigned()) and sym.get_name() not in hidden
    } | set(dir(builtins))
    stack: list[tuple[symtable.SymbolTable, str]] = [(table, "")]
    while stack:
        scope, qualname = stack.pop()
        for sym in scope.get_symbols():
            name = sym.get_name()
            if name not in WATCHED or not sym.is_referenced() or name in module_bound:
                continue
            if scope is table or sym.is_global():
                yield qualname or "<module>", name
        for child in scope.get_children():
            child_name = f"{qualname}.{child.get_name()}" if qualname else child.get_name()
            stack.append((child, child_name))


def _binds_module(name: str, stmt: ast.stmt) -> bool:
    """Does ``stmt`` bind ``name`` to what pdguard's code means by it?"""
    if isinstance(stmt, ast.Import):
        return any(
            (alias.asname or alias.name.split(".")[0]) == name
            and alias.name.split(".")[0] == name
            and (alias.asname is None or "." not in alias.name)
            for alias in stmt.names
        )
    if isinstance(stmt, ast.ImportFrom) and stmt.level == 0:
        for alias in stmt.names:
            if (alias.asname or alias.name) != name:
                continue
            if stmt.module == "time" and alias.name in CLOCK_FUNCTIONS:
                return True
            if stmt.module == "os" and alias.name == "environ":
                return True
    return False


def _describe(name: str, stmt: ast.stmt) -> str:
    if isinstance(stmt, ast.ImportFrom):
        alias = next(a for a in stmt.names if (a.asname or a.name) == name)
        return f"`{'.' * stmt.level}{stmt.module or ''}.{alias.name}`"
    if isinstance(stmt, ast.Import):
        alias = next(a for a in stmt.names if (a.asname or a.name).split(".")[0] == name)
        return f"module `{alias.name}`"
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return f"the {'class' if isinstance(stmt, ast.ClassDef) else 'function'} defined there"
    return "an assignment"


def _used_as_module(node: ast.Name, parents: dict[int, ast.AST]) -> bool:
    """``time.monotonic`` / ``os.environ`` (an attribute of it), or ``monotonic()``."""
    parent = parents.get(id(node))
    if node.id in CLOCK_FUNCTIONS and node.id != "time":
        return isinstance(parent, ast.Call) and parent.func is node
    return isinstance(parent, ast.Attribute | ast.Subscript) and parent.value is node


def _shadowed_uses(tree: ast.Module, text: str, rel: str) -> Iterator[tuple[ast.Name, str]]:
    """(use, why) for each use of a watched name as its module where the binding in force
    (module-level, or a local assignment in the function) is not that module."""
    in_force = _bindings_in_force(tree.body)
    wrong = {
        name: f"`{name}` is bound to {_describe(name, stmt)} (line {stmt.lineno})"
        for name, stmt in in_force.items()
        if name in WATCHED and not _binds_module(name, stmt)
    }
    if not wrong and not _rebinding(text):
        return  # the usual case: nothing binds a watched name to anything else
    parents = {id(child): node for node in walk(tree) for child in children(node)}
    for function in walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        local = _bindings_in_force(function.body)
        for node in walk(function):
            if isinstance(node, ast.Name) and node.id in WATCHED:
                stmt = local.get(node.id)
                if (
                    stmt is not None
                    and not _binds_module(node.id, stmt)
                    and _used_as_module(node, parents)
                ):
                    yield (
                        node,
                        (
                            f"`{node.id}` is bound to {_describe(node.id, stmt)} "
                            f"(line {stmt.lineno}) in {function.name}()"
                        ),
                    )
    if not wrong:
        return
    for node in walk(tree):
        if isinstance(node, ast.Name) and node.id in wrong and _used_as_module(node, parents):
            enclosing = _enclosing_function(node, parents)
            if enclosing is not None and node.id in _bindings_in_force(enclosing.body):
                continue  # a local binding decides (reported above if wrong)
            yield node, wrong[node.id]


def _enclosing_function(
    node: ast.AST, parents: dict[int, ast.AST]
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    while id(node) in parents:
        node = parents[id(node)]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return node
    return None


def _scope_node(tree: ast.Module, qualname: str) -> ast.AST:
    if qualname == "<module>":
        return ast.Module(
            body=[n for n in tree.body if not isinstance(n, ast.FunctionDef | ast.ClassDef)],
            type_ignores=[],
        )
    node: ast.AST = tree
    for part in qualname.split("."):
        child = next(
            (
                child
                for child in children(node)
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and child.name == part
            ),
            None,
        )
        if child is None:  # a lambda or comprehension scope: report within its function
            break
        node = child
    return node


def _registry_reads(tree: ast.Module) -> list[ast.Attribute]:
    """The reads ``envs.NAME`` of ``tree``: kept on the tree, which check, each fix's proof
    and verify's re-check ask of."""
    return [
        node
        for node in walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == ENVIRON_OBJECT
        and isinstance(node.ctx, ast.Load)
    ]


class UnboundName(Rule):
    code = "PDG005"
    name = "unbound-name"

    def check(self, project: Project) -> Iterator[Finding]:
        modules = {PREFILL} | {info.rel for info in project.classes.classes.values()}
        for rel in sorted(modules):
            tree = project.tree(rel)
            if tree is None:
                continue
            text = project.texts[rel]
            for use, why in _shadowed_uses(tree, text, rel):
                yield self.finding(
                    rel,
                    use.lineno,
                    use.col_offset + 1,
                    use.id,
                    f"{why}, not the {_MEANT.get(use.id, 'time module')}: this use fails "
                    "when it runs",
                )
            candidates = _candidates(text) - _module_bound(tree)
            if not candidates or not _may_use_unbound(tree):
                continue  # the usual case: every watched name the module uses is imported
            seen: set[tuple[int, int]] = set()  # a lambda's use is also its function's
            for qualname, name in _unbound_uses(project.texts[rel], rel, _type_checking_only(tree)):
                for node in walk(_scope_node(tree, qualname)):
                    if (
                        isinstance(node, ast.Name)
                        and node.id == name
                        and (node.lineno, node.col_offset) not in seen
                    ):
                        seen.add((node.lineno, node.col_offset))
                        yield self.finding(
                            rel,
                            node.lineno,
                            node.col_offset + 1,
                            qualname,
                            f"`{name}` is used but not imported (NameError when this runs)",
                        )
        yield from self._deadline_names(project)
        yield from self._registry_names(project)

    def _registry_names(self, project: Project) -> Iterator[Finding]:
        """A read of the env registry (``envs.NAME``, ``envs`` imported from
        ``sglang.srt.environ``) whose name the tree's ``environ.py`` does not define: an entry
        removed or misspelt. The read raises ``AttributeError`` where it runs (the inflight
        deadline reads its timeout on every step, outside its helper's ``try``)."""
        environ = project.texts.get(ENVIRON_PATH)
        if environ is None:
            return
        needle = f"{ENVIRON_OBJECT}."
        for rel in sorted(project.texts):
            text = project.texts[rel]
            if rel == ENVIRON_PATH or needle not in text:
                continue
            tree = project.tree(rel)
            if tree is None or not _imports_registry(tree):
                continue
            reads = kept(tree, "_pdguard_registry_reads", _registry_reads)
            missing = registry_misses(environ, ENVIRON_OBJECT, {n.attr for n in reads})
            for node in reads:
                if missing and node.attr in missing:
                    yield self.finding(
                        rel,
                        node.lineno,
                        node.col_offset + 1,
                        f"{ENVIRON_OBJECT}.{node.attr}",
                        f"`{ENVIRON_OBJECT}.{node.attr}` is not an entry of the env registry "
                        f"in {ENVIRON_PATH} (AttributeError when this runs)",
                    )

    def _deadline_names(self, project: Project) -> Iterator[Finding]:
        """Any other name the inflight deadline reads that nothing binds: not the module (its
        imports, definitions, assignments), not the function (its parameters and locals), not
        a builtin: a reader of the timeout defined elsewhere, a registry not imported. The
        deadline runs on every call (its checks before the poll all-reduce), so the scheduler
        dies there. Read in the methods holding the checks and those calling them, and in the
        inflight function's statements that hold one; annotations are not run."""
        model, tree = project.inflight, project.tree(PREFILL)
        if model is None or tree is None:
            return
        bound = _module_bound(tree) | set(dir(builtins)) | WATCHED
        methods = {m.name: m for m in walk(tree) if isinstance(m, ast.FunctionDef)}
        regions: dict[tuple[str, int], tuple[ast.FunctionDef, list[ast.stmt]]] = {}
        for check in model.checks:
            if not check.each_step or check.method not in methods:
                continue
            method = methods[check.method]
            if method.name == FUNCTION:
                held = [
                    s for s in method.body if s.lineno <= check.line <= (s.end_lineno or s.lineno)
                ]
                regions[(method.name, check.line)] = (method, held)
            else:
                regions[(method.name, 0)] = (method, method.body)
            for caller in check.callers:  # the methods calling it run the deadline too
                if caller in methods:
                    regions[(caller, 0)] = (methods[caller], methods[caller].body)
        seen: set[tuple[int, int]] = set()
        for (name, _), (method, body) in sorted(regions.items(), key=lambda item: item[0]):
            local = _locals(method)
            for node in (n for stmt in body for n in walk(stmt)):
                if (
                    isinstance(node, ast.Name)
                    and isinstance(node.ctx, ast.Load)
                    and node.id not in bound | local
                    and (node.lineno, node.col_offset) not in seen
                ):
                    seen.add((node.lineno, node.col_offset))
                    yield self.finding(
                        PREFILL,
                        node.lineno,
                        node.col_offset + 1,
                        f"{model.class_name}.{name}",
                        f"`{node.id}` is used by the inflight deadline but nothing binds it "
                        "(NameError when this runs)",
                    )


def _locals(function: ast.FunctionDef) -> set[str]:
    """Every name ``function`` (or a comprehension, lambda or function in it) binds: its
    parameters, assignment, loop, ``with``/``except`` targets, imports, ``global`` names."""
    names: set[str] = set()
    for node in walk(function):
        if isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= _imported([node])
        elif isinstance(
            node, ast.ExceptHandler | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
        ):
            names.add(node.name or "")
        elif isinstance(node, ast.Global | ast.Nonlocal):
            names |= set(node.names)
    return names


def _imports_registry(tree: ast.Module) -> bool:
    """Does the module bind ``envs`` to the env registry (``from sglang.srt.environ import
    envs``) at module level?"""
    return any(
        isinstance(stmt, ast.ImportFrom)
        and stmt.module == ENVIRON_MODULE
        and any(
            (a.asname or a.name) == ENVIRON_OBJECT and a.name == ENVIRON_OBJECT for a in stmt.names
        )
        for stmt in tree.body
    )
