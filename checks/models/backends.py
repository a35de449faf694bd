"""Which KV backend classes a tree can run: only live code counts.

A tree picks its transfer backend's classes in one registration function, ``get_kv_class``
(``disaggregation/utils.py``). A backend class that nothing in the tree names, outside its
own body and outside the bases of classes that are dead themselves (not the registration, not
a module, not a function, not a live subclass), is never instantiated: it is dead code. Its
defects are not the deployment's; they block no fix, and the reports say which classes were
left alone as dead.

Only where the tree has a registration function are classes judged dead: without one, what
picks a backend is not known, and every class counts. Names are looked for in the modules of
the class index (the files that name a sender, a receiver or a manager: a module naming a
backend class by its name is one of them).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from pdguard.sglang_names import GET_KV_CLASS

from ..nodes import walk

__all__ = ["dead_classes"]


def dead_classes(
    modules: Iterable[ast.Module], candidates: Iterable[str], bases: dict[str, list[str]]
) -> frozenset[str]:
    """The ``candidates`` (backend class names) that nothing live names, in ``modules``;
    ``bases`` maps each class of the index to its base names. Empty where no module defines
    the registration function."""
    modules = list(modules)
    if not any(
        isinstance(node, ast.FunctionDef) and node.name == GET_KV_CLASS
        for tree in modules
        for node in tree.body
    ):
        return frozenset()
    wanted = bases.keys()
    named_by: dict[str, set[str | None]] = {}  # class -> the classes naming it (None: no class)
    for tree in modules:
        for top in tree.body:
            owner, named = _named(top)
            for name in named & wanted:
                named_by.setdefault(name, set()).add(owner)
    live: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name in bases:
            if name in live:
                continue
            if any(owner is None or owner in live for owner in named_by.get(name, ())):
                live.add(name)
                changed = True
    return frozenset(set(candidates) - live)


_NAMED = "_pdguard_named"  # kept on a module's statement, which nothing changes once parsed


def _named(top: ast.stmt) -> tuple[str | None, frozenset[str]]:
    """The class ``top`` defines (None: no class) and the names it reads outside that name
    (an import reads none), kept on the statement: the trees of consecutive refs share most
    statements (``checks.project.parse_module``), and each ref asks of several indexes."""
    kept = vars(top)
    found: tuple[str | None, frozenset[str]] | None = kept.get(_NAMED)
    if found is None:
        owner = top.name if isinstance(top, ast.ClassDef) else None
        names: set[str] = set()
        if not isinstance(top, ast.Import | ast.ImportFrom):
            for node in walk(top):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    names.add(node.id)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                    names.add(node.attr)
        if owner is not None:
            names.discard(owner)
        found = kept[_NAMED] = (owner, frozenset(names))
    return found
