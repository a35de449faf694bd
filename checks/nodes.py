"""Walks of ``ast`` trees for the models, faster than ``ast.walk`` and kept on the nodes.

The models walk the same functions many times (one question each). ``walk`` and ``own_nodes``
give the same nodes, in the same order, as ``ast.walk`` and a depth-first walk that stops at
nested functions, without a generator per node; the lists of functions (and modules) are
kept in the node's ``__dict__``, so every model, and every project that shares the parsed
tree (``project.parse_module`` gives one tree per text), walks a function once. The trees
are read-only: nothing in ``checks`` changes a node once parsed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from typing import TypeVar

__all__ = [
    "HOLDS_STATEMENTS",
    "children",
    "first_line",
    "kept",
    "own_nodes",
    "own_parents",
    "own_returns",
    "statement_walk",
    "statements",
    "walk",
]

_FUNCTION = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
_KEPT = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
# keys of the lists kept on a node (not fields: ``ast.dump`` and ``unparse`` ignore them)
_WALK = "_pdguard_walk"
_OWN = "_pdguard_own"
_OWN_PARENTS = "_pdguard_own_parents"

_T = TypeVar("_T")
_N = TypeVar("_N", bound=ast.AST)


# How each node type holds its children, read from its grammar (``ast.Name.__doc__`` is
# ``Name(identifier id, expr_context ctx)``): per field, in ``_fields`` order, whether it is a
# node, an optional node, a list of nodes, or a list that may hold None (a ``**`` in a dict, a
# keyword-only argument without default). Names, strings and constants are not nodes. A type
# whose grammar cannot be read is walked field by field, testing each value.
_NODE, _OPTIONAL, _LIST, _LIST_WITH_NONE = range(4)
_NOT_NODES = frozenset({"identifier", "string", "constant", "int"})
_WITH_NONE = frozenset({("Dict", "keys"), ("arguments", "kw_defaults")})
_GRAMMAR = re.compile(r"(\w+)\((.*)\)")
_Plan = tuple[tuple[str, int], ...]
_PLANS: dict[type[ast.AST], _Plan | None] = {}


def _plan_of(kind: type[ast.AST]) -> _Plan | None:
    if not kind._fields:
        return ()  # Load, Add, Pass, ...: no children
    doc = (kind.__doc__ or "").strip().split("\n", 1)[0]
    match = _GRAMMAR.fullmatch(doc)
    if match is None or match.group(1) != kind.__name__:
        return None
    plan = []
    for field in filter(None, (f.strip() for f in match.group(2).split(","))):
        grammar_type, _, name = field.partition(" ")
        if grammar_type.rstrip("*?") in _NOT_NODES:
            continue
        if grammar_type.endswith("*"):
            plan.append((name, _LIST_WITH_NONE if (kind.__name__, name) in _WITH_NONE else _LIST))
        else:
            plan.append((name, _OPTIONAL if grammar_type.endswith("?") else _NODE))
    names = [name for name, _ in plan]
    if names != [f for f in kind._fields if f in names]:
        return None  # not the order ``_fields`` gives: read field by field
    return tuple(plan)


def _add_children(node: ast.AST, into: list[ast.AST]) -> None:
    """``into.extend(ast.iter_child_nodes(node))``, at the speed of the node's plan."""
    kind = type(node)
    try:
        plan = _PLANS[kind]
    except KeyError:
        plan = _PLANS[kind] = _plan_of(kind)
    if plan is None:
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, ast.AST):
                into.append(value)
            elif isinstance(value, list):
                into.extend(item for item in value if isinstance(item, ast.AST))
        return
    for name, how in plan:
        value = getattr(node, name, None)
        if value is None:
            continue
        if how == _LIST:
            into.extend(value)
        elif how == _LIST_WITH_NONE:
            into.extend(item for item in value if item is not None)
        else:
            into.append(value)


def children(node: ast.AST) -> list[ast.AST]:
    """``list(ast.iter_child_nodes(node))``."""
    found: list[ast.AST] = []
    _add_children(node, found)
    return found


def _walk(node: ast.AST) -> list[ast.AST]:
    # this loop runs once for every node of every module read
    found = [node]
    index = 0
    while index < len(found):
        _add_children(found[index], found)
        index += 1
    return found


def walk(node: ast.AST) -> list[ast.AST]:
    """``list(ast.walk(node))`` (breadth-first, ``node`` first); kept on modules, classes and
    functions."""
    if not isinstance(node, _KEPT):
        return _walk(node)
    kept = vars(node)
    if _WALK not in kept:
        kept[_WALK] = _walk(node)
    found: list[ast.AST] = kept[_WALK]
    return found


# The nodes that hold statements, and statements: every ancestor of a statement is one of them.
HOLDS_STATEMENTS = (ast.mod, ast.stmt, ast.excepthandler, ast.match_case)


def first_line(stmt: ast.stmt) -> int:
    """The line a statement starts on, its decorators included."""
    return min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])


def statement_walk(node: ast.AST) -> list[ast.AST]:
    """The statements of ``walk(node)`` and the nodes that hold them (module, except handler,
    ``case``), in the same breadth-first order, without visiting an expression: since every
    ancestor of such a node is one, the order among them is the walk's."""
    found = [node]
    index = 0
    while index < len(found):
        current = found[index]
        index += 1
        for name in current._fields:
            value = getattr(current, name, None)
            if isinstance(value, list):
                found.extend(item for item in value if isinstance(item, HOLDS_STATEMENTS))
    return found


def own_nodes(func: ast.AST) -> list[ast.AST]:
    """The nodes of a function, not of the functions or lambdas nested in it (those nested
    functions themselves included), depth-first, last child first; kept on ``func``."""
    kept = vars(func)
    if _OWN not in kept:
        found: list[ast.AST] = []
        stack = children(func)
        while stack:
            node = stack.pop()
            found.append(node)
            if not isinstance(node, _FUNCTION):
                _add_children(node, stack)
        kept[_OWN] = found
    nodes: list[ast.AST] = kept[_OWN]
    return nodes


def own_parents(func: ast.AST) -> dict[ast.AST, ast.AST]:
    """The parent of each of ``func``'s own nodes (``own_nodes``); kept on ``func``."""
    kept = vars(func)
    if _OWN_PARENTS not in kept:
        parents: dict[ast.AST, ast.AST] = {child: func for child in children(func)}
        for node in own_nodes(func):
            if not isinstance(node, _FUNCTION):
                for child in children(node):
                    parents[child] = node
        kept[_OWN_PARENTS] = parents
    found: dict[ast.AST, ast.AST] = kept[_OWN_PARENTS]
    return found


def kept(node: _N, key: str, compute: Callable[[_N], _T]) -> _T:
    """``compute(node)``, kept on ``node`` under ``key`` (``_pdguard_*``): for what depends on
    the node alone."""
    store = vars(node)
    if key not in store:
        store[key] = compute(node)
    value: _T = store[key]
    return value


def own_returns(func: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.Return]:
    """The ``return`` statements of ``func``, not of the functions and classes defined in it, in
    source order; only statements are visited (a ``return`` is never inside an expression), so
    it costs a fraction of a walk."""
    for _, stmt in statements(func.body, into_definitions=False):
        if isinstance(stmt, ast.Return):
            yield stmt


def statements(
    block: list[ast.stmt], *, into_definitions: bool = True, depth: int = 1
) -> Iterator[tuple[int, ast.stmt]]:
    """Every statement of ``block`` and of the blocks in it, in source order, with its depth in
    the tree (an except handler or a ``case`` is a node between a statement and its body); the
    bodies of nested functions and classes only with ``into_definitions``. Expressions are not
    visited: a search for a kind of statement costs a fraction of a walk."""
    for stmt in block:
        yield depth, stmt
        if not into_definitions and isinstance(
            stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
        ):
            continue
        for name in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, name, None)
            if isinstance(inner, list):
                yield from statements(inner, into_definitions=into_definitions, depth=depth + 1)
        holders = [*(getattr(stmt, "handlers", None) or []), *(getattr(stmt, "cases", None) or [])]
        for holder in holders:
            yield from statements(holder.body, into_definitions=into_definitions, depth=depth + 2)
