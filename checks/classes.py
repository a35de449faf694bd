"""Methods of classes, on ``ast``: the one place a method is looked up on a class and its bases."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

C = TypeVar("C")


def methods_of(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    """The methods ``cls``'s own body defines, by name (a later definition wins, as in Python)."""
    return {node.name: node for node in cls.body if isinstance(node, ast.FunctionDef)}


def find_method(
    chain: Iterable[C],
    name: str,
    methods: Callable[[C], Mapping[str, ast.FunctionDef]] = methods_of,  # type: ignore[assignment]  # default fits only C=ClassDef
) -> tuple[C, ast.FunctionDef] | None:
    """Method ``name`` of the first class in ``chain`` that defines it, with that class.

    Give a class's MRO (the class, then its bases) to resolve a method the way Python does, or
    a module's classes to find the one that has it. ``methods`` reads a class's own methods
    (default: ``methods_of`` an ``ast.ClassDef``; an index passes its precomputed ones)."""
    for cls in chain:
        function = methods(cls).get(name)
        if function is not None:
            return cls, function
    return None
