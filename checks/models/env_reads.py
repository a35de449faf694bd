"""How a release reads an environment variable: the first ``x = <call reading it>`` in its
files, as source text, with where the call's root name is imported from. The sender fix copies
a release's reader of the bootstrap timeout, the receiver fix its reader of the waiting
timeout, so that pdguard's code reads them as the release does."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from functools import lru_cache

from ..nodes import statement_walk, walk
from ..segments import source_segment

__all__ = ["env_reader", "reads_env", "registry_misses", "registry_names"]


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


def registry_misses(text: str, instance: str, names: set[str]) -> set[str] | None:
    """Which of ``names`` the env registry module ``text`` does not define on ``instance``
    (see ``registry_names``); None where its shape is not known. A name assigned at the start
    of a line in the registry class's own body is found by a plain text search (the usual
    case: no parse of the registry); only the others are looked up in full."""
    made = text.find(f"\n{instance} = ")
    header = -1
    if made >= 0:
        cls = text[made + len(instance) + 4 :].split("(", 1)[0].strip()
        header = text.find(f"\nclass {cls}")
    if header >= 0:
        end = re.compile(r"^[^\s#]", re.M).search(text, text.find("\n", header + 1) + 1)
        body = text[header : end.start() if end else len(text)]
        names = {n for n in names if f"\n    {n} =" not in body and f"\n    {n}:" not in body}
    if not names:
        return set()
    known = registry_names(text, instance)
    return None if known is None else names - known


_INSTANCE = re.compile(r"^(\w+)\s*=\s*(\w+)\(\s*\)", re.M)  # envs = Envs()
_FIELD = re.compile(r"^([ \t]+)([A-Za-z_]\w*)\s*(?::[^=\n]*)?=", re.M)


@lru_cache(maxsize=64)  # by text: verify's refs meet the same registry again and again
def registry_names(text: str, instance: str) -> frozenset[str] | None:
    """The names the env registry module ``text`` (``environ.py``) defines on ``instance``
    (``envs = Envs()``): the class-body assignments of its class (``NAME = EnvInt(300)``) and
    of the module's classes it derives from. None where the tree's registry is not that shape
    (no such instance, a class with ``__getattr__``): then nothing is known about it. Read as
    text, at the class body's own indentation: the registry is large and read on every
    check, and only its names matter."""
    classes = _class_bodies(text)
    made = [m.group(2) for m in _INSTANCE.finditer(text) if m.group(1) == instance]
    if len(made) != 1 or made[0] not in classes:
        return None
    names: set[str] = set()
    todo, seen = [made[0]], set()
    while todo:
        name = todo.pop()
        if name in seen or name not in classes:
            continue
        seen.add(name)
        bases, body = classes[name]
        if "__getattr__" in body or "__getattribute__" in body:
            return None
        indent = None
        for field in _FIELD.finditer(body):
            indent = indent or field.group(1)
            if field.group(1) == indent:
                names.add(field.group(2))
        todo += bases
    return frozenset(names)


def _class_bodies(text: str) -> dict[str, tuple[list[str], str]]:
    """Top-level classes of ``text``: name -> (the names of its bases, its body's text)."""
    found: dict[str, tuple[list[str], str]] = {}
    starts = [m.start() for m in re.finditer(r"^class[ \t]", text, re.M)]
    for start in starts:
        header_end = text.find("\n", start) + 1 or len(text)
        header = text[start:header_end]
        name, _, rest = header[len("class") :].strip().partition("(")
        name = name.rstrip(":").strip()
        bases = [b.strip().rsplit(".", 1)[-1] for b in rest.partition(")")[0].split(",")]
        # the body ends at the next line that starts with neither blank, space nor comment
        end = re.compile(r"^[^\s#]", re.M).search(text, header_end)
        body = text[header_end : end.start() if end else len(text)]
        found.setdefault(name, ([b for b in bases if b.isidentifier()], body))
    return found
