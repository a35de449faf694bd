"""How a release reads an environment variable: the first ``x = <call reading it>`` in its
files, as source text, with where the call's root name is imported from. The sender fix copies
a release's reader of the bootstrap timeout, the receiver fix its reader of the waiting
timeout, so that pdguard's code reads them as the release does."""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping

from .nodes import statement_walk, walk
from .segments import source_segment

__all__ = ["env_reader", "reads_env"]


def env_reader(
    texts: Mapping[str, str], tree_of: Callable[[str], ast.Module | None], env: str
) -> tuple[str, str, str | None] | None:
    """(the reading call's source, the module its root name is imported from, the imported
    name or None) for the first assignment, by path then position, whose value is a call that
    names ``env`` (a string constant or an attribute); files that do not hold ``env`` are not
    read."""
    for rel in sorted(texts):
        if env not in texts[rel]:
            continue
        tree = tree_of(rel)
        if tree is None:
            continue
        for node in statement_walk(tree):  # an assignment is a statement
            if not (isinstance(node, ast.Assign) and reads_env(node.value, env)):
                continue
            root = _root(node.value)
            origin = _import_origin(tree, root) if root is not None else None
            source = source_segment(texts[rel], node.value)
            if origin is not None and source is not None:
                return source, origin[0], origin[1]
    return None


def reads_env(expr: ast.expr, env: str) -> bool:
    """Is ``expr`` a call that names ``env`` (a string constant or an attribute)?"""
    return isinstance(expr, ast.Call) and any(
        (isinstance(node, ast.Constant) and node.value == env)
        or (isinstance(node, ast.Attribute) and node.attr == env)
        for node in walk(expr)
    )


def _root(expr: ast.expr) -> str | None:
    """The name an attribute and call chain starts from (``envs`` in ``envs.X.get()``)."""
    while isinstance(expr, ast.Call | ast.Attribute):
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _import_origin(tree: ast.Module, local: str) -> tuple[str, str | None] | None:
    """Where the module imports ``local`` from (no alias, not relative): (module, name or
    None)."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.asname is None and alias.name == local:
                    return node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname is None and alias.name == local:
                    return alias.name, None
    return None
