"""Finding the places a codemod anchors on: functions, calls and statements, by name and shape,
never by line number or by the first textual match."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
import libcst.matchers as m

from pdguard.fix_names import MARKER_PREFIX, has_marker, marker

__all__ = [
    "MARKER_PREFIX",
    "AnchorError",
    "calls_named",
    "find_method",
    "has_marker",
    "is_self_attr_call",
    "marker",
]


class AnchorError(Exception):
    """The code does not have the shape a transform anchors on."""


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
    for match in m.findall(node, m.Call()):
        call = cst.ensure_type(match, cst.Call)  # what m.Call() finds
        func = call.func
        name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
        if isinstance(name, str) and predicate(name):
            found.append(call)
    return found


def is_self_attr_call(expr: cst.BaseExpression, attr: str, method: str) -> bool:
    """``self.<attr>.<method>(...)``"""
    return m.matches(
        expr,
        m.Call(
            func=m.Attribute(
                value=m.Attribute(value=m.Name("self"), attr=m.Name(attr)), attr=m.Name(method)
            )
        ),
    )
