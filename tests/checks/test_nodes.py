"""checks.nodes: the kept walks give exactly what ``ast`` would, in the same order (the models'
first-match questions depend on it)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest

from pdguard.checks.nodes import kept, own_nodes, own_parents, own_returns, statement_walk, walk
from pdguard.vendor_sglang import Release, fetch_release
from tests.helpers import RELEASES

SOURCE = '''
import itertools

LIMIT = 3


class Shelf:
    """Books waiting for a reader."""

    def __init__(self, books):
        self.books = list(books)
        self.lent = {}

    def lend(self, reader, *, urgent=False):
        picked = [b for b in self.books if b.free and (lambda x: x.size)(b) < LIMIT]
        for book in picked:
            try:
                self.lent[book.key] = reader
            except KeyError as exc:
                raise ValueError(f"{book.key}: {exc}") from exc
            else:
                book.free = False
            finally:
                reader.count += 1

        def later(extra=lambda: 0):
            async def inner():
                await reader.notify(picked)
            return inner, extra
        while picked and not urgent:
            picked.pop()
        match reader.kind:
            case "guest" if urgent:
                return later
            case {"name": name}:
                return name
        return {k: v for k, v in itertools.pairwise(self.books)}
'''


def _functions(tree: ast.AST) -> list[ast.AST]:
    kinds = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    return [n for n in ast.walk(tree) if isinstance(n, kinds)]


def _reference_own(func: ast.AST) -> Iterator[ast.AST]:
    """The depth-first walk the decode model used before nodes.own_nodes."""
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))


def _same(found: list[ast.AST], expected: list[ast.AST]) -> bool:
    return len(found) == len(expected) and all(a is b for a, b in zip(found, expected, strict=True))


def test_walk_is_ast_walk_for_every_node() -> None:
    tree = ast.parse(SOURCE)
    for node in ast.walk(tree):
        assert _same(walk(node), list(ast.walk(node))), ast.dump(node)[:80]


def test_statement_walk_is_walk_filtered_to_statements_and_their_holders() -> None:
    tree = ast.parse(SOURCE)
    holders = ast.mod | ast.stmt | ast.excepthandler | ast.match_case
    for node in ast.walk(tree):
        if isinstance(node, holders):
            expected = [n for n in ast.walk(node) if isinstance(n, holders)]
            assert _same(statement_walk(node), expected), ast.dump(node)[:80]
    kinds = {type(n) for n in statement_walk(tree)}
    assert {ast.ExceptHandler, ast.match_case, ast.AsyncFunctionDef, ast.While} <= kinds
    assert not kinds & {ast.Name, ast.Call, ast.Lambda}


def test_own_nodes_stop_at_nested_functions_in_the_reference_order() -> None:
    tree = ast.parse(SOURCE)
    functions = _functions(tree)
    assert len(functions) == 6  # two methods, a def and an async def nested, two lambdas
    for func in functions:
        assert _same(own_nodes(func), list(_reference_own(func)))
    lend = next(f for f in functions if getattr(f, "name", "") == "lend")
    nested = [n for n in own_nodes(lend) if isinstance(n, ast.FunctionDef | ast.Lambda)]
    assert {type(n).__name__ for n in nested} == {"FunctionDef", "Lambda"}
    inner_await = [n for n in ast.walk(lend) if isinstance(n, ast.Await)]
    assert inner_await and not any(n is inner_await[0] for n in own_nodes(lend))


def test_own_parents_are_the_parents_of_own_nodes() -> None:
    tree = ast.parse(SOURCE)
    singletons = ast.expr_context | ast.operator | ast.boolop | ast.cmpop | ast.unaryop
    for func in _functions(tree):
        parents = own_parents(func)
        for child in ast.iter_child_nodes(func):
            assert parents[child] is func
        for node in own_nodes(func):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                assert not any(c in parents for c in ast.iter_child_nodes(node))
                continue
            for child in ast.iter_child_nodes(node):
                if not isinstance(child, singletons):  # shared by the parser
                    assert parents[child] is node


def test_lists_are_kept_on_functions_and_modules_only() -> None:
    tree = ast.parse(SOURCE)
    assert walk(tree) is walk(tree)
    func = _functions(tree)[0]
    assert own_nodes(func) is own_nodes(func)
    statement = tree.body[-1]
    assert isinstance(statement, ast.ClassDef)
    assert walk(statement) is walk(statement)
    assign = tree.body[1]
    assert walk(assign) is not walk(assign)  # a statement's walk is not kept


@pytest.mark.parametrize("key", ["_pdguard_test_a", "_pdguard_test_b"])
def test_kept_computes_once_per_node_and_key(key: str) -> None:
    tree = ast.parse(SOURCE)
    calls: list[ast.AST] = []

    def count(node: ast.Module) -> int:
        calls.append(node)
        return len(node.body)

    assert kept(tree, key, count) == kept(tree, key, count) == 3
    assert calls == [tree]
    assert key not in ast.dump(tree) and ast.unparse(tree) == ast.unparse(ast.parse(SOURCE))


def test_own_returns_are_the_functions_returns_in_source_order() -> None:
    """``own_returns`` gives what a walk filtered to ``ast.Return`` gives, minus the returns of
    nested functions (``later``, ``inner``, the lambdas have none), in source order."""
    tree = ast.parse(SOURCE)
    for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        nested = {
            id(r)
            for inner in ast.walk(func)
            if inner is not func and isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef)
            for r in ast.walk(inner)
            if isinstance(r, ast.Return)
        }
        expected = sorted(
            (r for r in ast.walk(func) if isinstance(r, ast.Return) and id(r) not in nested),
            key=lambda r: (r.lineno, r.col_offset),
        )
        assert list(own_returns(func)) == expected
    lend = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "lend")
    assert [r.lineno for r in own_returns(lend)] == [34, 36, 37]


def test_every_node_type_has_its_children_read_from_its_grammar() -> None:
    """Each node type's children are read by a plan made from its grammar (``Name(identifier
    id, expr_context ctx)``), not field by field: a Python whose docstrings change would be
    slower, not wrong, but the plans are what makes walks fast."""
    from pdguard.checks.nodes import _plan_of

    kinds = [k for k in vars(ast).values() if isinstance(k, type) and issubclass(k, ast.AST)]
    used = {type(n) for n in ast.walk(ast.parse(SOURCE))}
    for kind in used:
        assert _plan_of(kind) is not None, kind.__name__
    assert _plan_of(ast.Dict) == (("keys", 3), ("values", 2))  # a ``**`` key is None
    assert _plan_of(ast.Name) == (("ctx", 0),)
    assert sum(_plan_of(k) is None for k in kinds if k.__doc__ and "(" in k.__doc__) <= 4


@pytest.mark.parametrize("info", [RELEASES[0], RELEASES[-1]], ids=lambda r: r.version)
def test_walks_on_a_release_are_ast_walks(info: Release) -> None:
    package = fetch_release(info.version) / "sglang/srt/disaggregation"
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert _same(walk(tree), list(ast.walk(tree))), path.name
        for func in _functions(tree)[:40]:
            assert _same(own_nodes(func), list(_reference_own(func))), path.name
