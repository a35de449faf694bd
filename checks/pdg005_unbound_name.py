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
from collections.abc import Iterator

from .examples import PATCHED
from .inflight import CLOCK_FUNCTIONS
from .model import PREFILL, Finding, Rule
from .project import Project

WATCHED = frozenset({"os", "time", "environ"} | CLOCK_FUNCTIONS)


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _bound_by(stmts: list[ast.stmt]) -> set[str]:
    """Names bound by statements (module level, or a function's body when ``nested``)."""
    names: set[str] = set()
    stack = list(stmts)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            continue  # their bodies are their own scopes
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        stack.extend(ast.iter_child_nodes(node))
    return names


class UnboundName(Rule):
    code = "PDG005"
    name = "unbound-name"
    VALID = (
        PATCHED,
        PATCHED.replace("import time\n", "import time as time\n"),
    )
    INVALID = (
        PATCHED.replace("import time\n", ""),
        PATCHED.replace(
            "import time\n",
            "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import time\n",
        ),
    )

    def check(self, project: Project) -> Iterator[Finding]:
        modules = {PREFILL} | {info.rel for info in project.classes.classes.values()}
        for rel in sorted(modules):
            tree = project.tree(rel)
            if tree is not None:
                yield from self._check_module(rel, tree)

    def _check_module(self, rel: str, tree: ast.Module) -> Iterator[Finding]:
        module_names = _bound_by(tree.body) | set(dir(builtins))
        for nodes, local, qualname in _scopes(tree):
            for node in (n for top in nodes for n in ast.walk(top)):
                if (
                    isinstance(node, ast.Name)
                    and isinstance(node.ctx, ast.Load)
                    and node.id in WATCHED
                    and node.id not in local
                    and node.id not in module_names
                ):
                    yield self.finding(
                        rel,
                        node.lineno,
                        node.col_offset + 1,
                        qualname,
                        f"`{node.id}` is used but not imported (NameError when this runs)",
                    )


def _scopes(tree: ast.Module) -> Iterator[tuple[list[ast.AST], set[str], str]]:
    """(nodes, names bound locally, qualified name) for the module's own statements and for
    every function and method."""
    yield (
        [n for n in tree.body if not isinstance(n, ast.FunctionDef | ast.ClassDef)],
        set(),
        "<module>",
    )
    for node in tree.body:
        functions = [(node, node.name)] if isinstance(node, ast.FunctionDef) else []
        if isinstance(node, ast.ClassDef):
            functions = [
                (item, f"{node.name}.{item.name}")
                for item in node.body
                if isinstance(item, ast.FunctionDef)
            ]
        for function, qualname in functions:
            yield [function], _bound_by([*function.body, function.args]), qualname  # type: ignore[list-item]
