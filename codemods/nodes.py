"""Typed tests and searches on LibCST nodes, for codemods that find their anchors by shape.

Plain ``isinstance`` checks instead of ``libcst.matchers``: mypy narrows what they return (no
``# type: ignore`` at the use), and nothing loads the matchers module.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import libcst as cst

_NodeT = TypeVar("_NodeT", bound=cst.CSTNode)
_SmallT = TypeVar("_SmallT", bound=cst.BaseSmallStatement)


class _FindAll(cst.CSTVisitor, Generic[_NodeT]):
    def __init__(self, kind: type[_NodeT]) -> None:
        super().__init__()
        self.kind = kind
        self.found: list[_NodeT] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, self.kind):
            self.found.append(node)
        return True


def find_all(node: cst.CSTNode, kind: type[_NodeT]) -> list[_NodeT]:
    """Every ``kind`` node in ``node`` (``node`` included), in source order: what
    ``libcst.matchers.findall(node, m.Kind())`` finds."""
    finder = _FindAll(kind)
    node.visit(finder)
    return finder.found


def sole(stmt: cst.CSTNode, kind: type[_SmallT]) -> _SmallT | None:
    """The small statement of ``stmt`` when ``stmt`` is a line holding exactly one, a ``kind``."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, kind):
            return small
    return None


def is_name(node: cst.CSTNode, value: str) -> bool:
    """``<value>``"""
    return isinstance(node, cst.Name) and node.value == value


def is_self_attr(node: cst.CSTNode, attr: str) -> bool:
    """``self.<attr>``"""
    return (
        isinstance(node, cst.Attribute) and is_name(node.value, "self") and node.attr.value == attr
    )


def is_method_call(node: cst.CSTNode, method: str) -> bool:
    """``<anything>.<method>(...)``"""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == method
    )
