"""PDG005: a name the fix's code uses is not imported.

What it does
    In ``prefill.py`` and in every module defining a KV sender, reports a use of ``os``,
    ``time`` or of a clock function (``monotonic``, ``perf_counter``, ...) that nothing binds:
    no import at module level (imports under ``if TYPE_CHECKING:`` do not count), no local name.

Why is this bad
    The deadline and the bootstrap timeout run only when a request is late, so a missing
    ``import time`` stays hidden until the one moment the code must work, and then the
    scheduler dies with a ``NameError``.

Example
    ``now = time.monotonic()`` in ``prefill.py`` of a release that does not import ``time``
    (0.4.6 - 0.5.2, 0.5.10 - 0.5.21).
"""

from __future__ import annotations

import ast
import builtins
import re
import symtable
from collections.abc import Iterator

from .examples import PATCHED
from .inflight import CLOCK_FUNCTIONS
from .model import PREFILL, Finding, Invalid, Rule
from .project import Project

WATCHED = frozenset({"os", "time", "environ"} | CLOCK_FUNCTIONS)


def _type_checking(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


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


_CANDIDATE = re.compile(r"(?<![\w.])(" + "|".join(sorted(WATCHED)) + r")\b")


def _module_bound(tree: ast.Module) -> set[str]:
    """Names the module's own statements bind (imports, assignments, defs), looking into
    module-level ``if``/``try`` blocks but not into functions, nor under TYPE_CHECKING."""
    bound: set[str] = set()
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if _type_checking(node):
            stack.extend(node.orelse)  # type: ignore[attr-defined]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound |= _imported([node])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        else:
            for name in ("body", "orelse", "finalbody"):
                stack.extend(getattr(node, name, []) or [])
            if isinstance(node, ast.Try):
                stack.extend(stmt for handler in node.handlers for stmt in handler.body)
    return bound


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
                for child in ast.iter_child_nodes(node)
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and child.name == part
            ),
            None,
        )
        if child is None:  # a lambda or comprehension scope: report within its function
            break
        node = child
    return node


class UnboundName(Rule):
    code = "PDG005"
    name = "unbound-name"
    VALID = (
        PATCHED,
        PATCHED.replace("import time\n", "import time as time\n"),
    )
    INVALID = (
        Invalid(
            PATCHED.replace("import time\n", ""),
            [
                (14, 34, "`time` is used but not imported (NameError when this runs)"),
                (18, 15, "`time` is used but not imported (NameError when this runs)"),
            ],
        ),
        Invalid(
            PATCHED.replace(
                "import time\n",
                "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import time\n",
            ),
            [
                (18, 34, "`time` is used but not imported (NameError when this runs)"),
                (22, 15, "`time` is used but not imported (NameError when this runs)"),
            ],
        ),
    )

    def check(self, project: Project) -> Iterator[Finding]:
        modules = {PREFILL} | {info.rel for info in project.classes.classes.values()}
        for rel in sorted(modules):
            tree = project.tree(rel)
            if tree is None:
                continue
            text = project.texts[rel]
            candidates = set(_CANDIDATE.findall(text)) - _module_bound(tree)
            if not candidates:
                continue  # the usual case: every watched name the module uses is imported
            seen: set[tuple[int, int]] = set()  # a lambda's use is also its function's
            for qualname, name in _unbound_uses(project.texts[rel], rel, _type_checking_only(tree)):
                for node in ast.walk(_scope_node(tree, qualname)):
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
