"""Which statement's binding of a name is in force at module level (or in a function body):
the last one in source order, where an ``except`` handler does not override what its ``try``
bound and ``if TYPE_CHECKING:`` binds nothing at run time. Read by PDG005 and by the codemods
that spell ``time.monotonic`` or ``os.environ`` in a module."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TypeGuard


def type_checking(node: ast.stmt) -> TypeGuard[ast.If]:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _binds(node: ast.stmt) -> Iterator[tuple[str, ast.stmt]]:
    """(name, statement) for each name a simple module-level statement binds."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        for alias in node.names:
            yield (alias.asname or alias.name).split(".")[0], node
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield node.name, node
    elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.For | ast.With):
        if isinstance(node, ast.Assign):
            targets: list[ast.AST] = list(node.targets)
        elif isinstance(node, ast.With):
            targets = [item.optional_vars for item in node.items if item.optional_vars]
        else:
            targets = [node.target]
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    yield name.id, node


def bindings_in_force(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """The statement whose binding of each name is in force after ``body`` runs: the last one
    in source order, where an ``except`` handler does not override what its ``try`` bound (it
    runs only when that failed). ``if TYPE_CHECKING:`` bodies bind nothing at run time."""
    found: dict[str, ast.stmt] = {}
    for node in body:
        if type_checking(node):
            found.update(bindings_in_force(node.orelse))
        elif isinstance(node, ast.Try):
            tried = bindings_in_force(node.body + node.orelse)
            for handler in node.handlers:
                for name, stmt in bindings_in_force(handler.body).items():
                    tried.setdefault(name, stmt)
            found.update(tried)
            found.update(bindings_in_force(node.finalbody))
        elif isinstance(node, ast.If):
            found.update(bindings_in_force(node.body))
            found.update(bindings_in_force(node.orelse))
        else:
            found.update(dict(_binds(node)))
    return found


def imported_as(name: str, stmt: ast.stmt | None) -> tuple[str, str | None] | None:
    """What ``stmt`` binds ``name`` to, if it is an absolute import: (module, imported name or
    None for the module itself)."""
    if isinstance(stmt, ast.Import):
        for alias in stmt.names:
            if alias.asname == name:
                return alias.name, None
            if alias.asname is None and alias.name.split(".")[0] == name:
                return name, None
    if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
        for alias in stmt.names:
            if (alias.asname or alias.name) == name:
                return stmt.module, alias.name
    return None
