"""Finding the places a codemod anchors on: functions, calls and statements, by name and shape,
never by line number or by the first textual match."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Iterator
from functools import cache
from typing import TypeGuard, TypeVar

import libcst as cst

from pdguard.fix_names import MARKER_PREFIX, has_marker, marker

__all__ = [
    "COMPOUND",
    "HOLDERS",
    "MARKER_PREFIX",
    "AnchorError",
    "calls_named",
    "children",
    "find_all",
    "find_method",
    "has_marker",
    "is_attribute",
    "is_method_call",
    "is_name",
    "is_self_attr",
    "is_self_attr_call",
    "marker",
    "nodes",
    "sole",
]


_NodeT = TypeVar("_NodeT", bound=cst.CSTNode)
_SmallT = TypeVar("_SmallT", bound=cst.BaseSmallStatement)


class AnchorError(Exception):
    """The code does not have the shape a transform anchors on."""


# Compound statements and the nodes that hold statements, by concrete type: an isinstance test
# against LibCST's abstract bases (``cst.BaseExpression``) costs about 0.1 s of ABC subclass
# checks in a fresh process.
COMPOUND = frozenset(
    {
        cst.FunctionDef,
        cst.ClassDef,
        cst.If,
        cst.For,
        cst.While,
        cst.With,
        cst.Try,
        cst.TryStar,
        cst.Match,
    }
)
HOLDERS = COMPOUND | {
    cst.Module,
    cst.IndentedBlock,
    cst.Else,
    cst.ExceptHandler,
    cst.ExceptStarHandler,
    cst.Finally,
    cst.MatchCase,
}


_STATEMENTS = (cst.SimpleStatementLine, cst.IndentedBlock, *COMPOUND, *HOLDERS)


# LibCST's own walk (``node.visit``, ``node.children``) builds every node it passes again, through
# ``_visit_and_replace_children``, even for a visitor that changes nothing: it was a tenth of
# ``verify``'s time. pdguard's searches read the fields instead, in the order that method visits
# them (the source order), which it takes from the method's own code.
# ``visit_required(self, "body", ...)``: a field and where LibCST visits it
_VISITED_FIELD = re.compile(r'\bvisit_\w+\(\s*self,\s*"(\w+)"')


@cache
def _child_fields(kind: type[cst.CSTNode]) -> tuple[str, ...] | None:
    """The fields of ``kind`` that LibCST visits, in its order; None when that cannot be read
    from its code (``children`` then asks LibCST)."""
    try:
        source = inspect.getsource(kind._visit_and_replace_children)
    except (OSError, TypeError):
        return None
    fields = {f.name for f in dataclasses.fields(kind)}
    order = tuple(dict.fromkeys(_VISITED_FIELD.findall(source)))
    if not order:  # a leaf (``return self``) visits nothing
        return () if "visit" not in source.split(")", 1)[1] else None
    return order if set(order) <= fields else None


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """``node.children`` (its child nodes in source order), without rebuilding ``node``."""
    fields = _child_fields(type(node))
    if fields is None:
        return list(node.children)
    found: list[cst.CSTNode] = []
    for name in fields:
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            found.append(value)
        elif isinstance(value, list | tuple):
            found.extend(item for item in value if isinstance(item, cst.CSTNode))
    return found


def nodes(
    root: cst.CSTNode, descend: Callable[[cst.CSTNode], bool] | None = None
) -> Iterator[cst.CSTNode]:
    """``root`` and the nodes below it in the order a ``CSTVisitor`` visits them (depth-first,
    source order); the children of a node for which ``descend`` is false are skipped."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        if descend is None or descend(node):
            stack.extend(reversed(children(node)))


def _holds_statements(node: cst.CSTNode) -> bool:
    return type(node) in HOLDERS


def find_all(node: cst.CSTNode, kind: type[_NodeT]) -> list[_NodeT]:
    """``node`` and the nodes below it that are ``kind``s, in source order (what
    ``libcst.matchers.findall(node, m.<Kind>())`` finds, without importing the matchers)."""
    # a statement is never inside an expression or a simple statement line
    descend = _holds_statements if issubclass(kind, _STATEMENTS) else None
    return [found for found in nodes(node, descend) if isinstance(found, kind)]


def find_method(
    module: cst.Module, name: str, class_name: str | None = None
) -> tuple[cst.ClassDef, cst.FunctionDef]:
    """The (only) top-level class method called ``name``."""
    hits = [
        (cls, fn)
        for cls in module.body
        if isinstance(cls, cst.ClassDef) and (class_name is None or cls.name.value == class_name)
        for fn in cls.body.body
        if isinstance(fn, cst.FunctionDef) and fn.name.value == name
    ]
    if not hits:
        where = f"class {class_name}" if class_name else "any top-level class"
        raise AnchorError(f"no method {name}() in {where}")
    if len(hits) > 1:
        raise AnchorError(f"{len(hits)} methods called {name}(); cannot tell which to patch")
    return hits[0]


def calls_named(node: cst.CSTNode, predicate: Callable[[str], bool]) -> list[cst.Call]:
    """Calls below ``node`` whose callee's last name satisfies ``predicate``."""
    found = []
    for call in find_all(node, cst.Call):
        func = call.func
        name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
        if isinstance(name, str) and predicate(name):
            found.append(call)
    return found


def is_self_attr_call(expr: cst.BaseExpression, attr: str, method: str) -> bool:
    """``self.<attr>.<method>(...)``"""
    if not (isinstance(expr, cst.Call) and is_attribute(expr.func, method)):
        return False
    inner = expr.func.value
    return is_attribute(inner, attr) and is_name(inner.value, "self")


def is_name(node: cst.CSTNode | None, name: str | None = None) -> TypeGuard[cst.Name]:
    """A ``Name`` (called ``name``, if given)."""
    return isinstance(node, cst.Name) and (name is None or node.value == name)


def is_attribute(node: cst.CSTNode | None, attr: str | None = None) -> TypeGuard[cst.Attribute]:
    """An attribute read ``<anything>.<attr>`` (any attribute if ``attr`` is None)."""
    return isinstance(node, cst.Attribute) and (attr is None or node.attr.value == attr)


def is_self_attr(node: cst.CSTNode | None, attr: str) -> TypeGuard[cst.Attribute]:
    """``self.<attr>``"""
    return is_attribute(node, attr) and is_name(node.value, "self")


def is_method_call(node: cst.CSTNode | None, method: str) -> TypeGuard[cst.Call]:
    """``<anything>.<method>(...)``"""
    return isinstance(node, cst.Call) and is_attribute(node.func, method)


def sole(stmt: cst.CSTNode, kind: type[_SmallT]) -> _SmallT | None:
    """The small statement of ``stmt`` when ``stmt`` is a line holding exactly one, a ``kind``."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, kind):
            return small
    return None


def is_docstring(stmt: cst.CSTNode) -> bool:
    """A line holding only a string: a docstring where it comes first."""
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )
