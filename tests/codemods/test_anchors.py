"""codemods.anchors' own LibCST walk: the children LibCST's visit would give, in its order,
without rebuilding a node (the searches the codemods anchor on depend on that order)."""

from __future__ import annotations

import inspect

import libcst as cst
import pytest

from pdguard.codemods.anchors import _child_fields, calls_named, children, find_all, nodes
from pdguard.codemods.insertion import enclosing_statement, simple_statements
from pdguard.vendor_sglang import Release, fetch_release
from tests.helpers import RELEASES

# Every statement and expression form LibCST has (3.12 syntax included: LibCST parses it on
# any Python), written for this test.
SOURCE = '''\
"""A module of every shape."""
from __future__ import annotations
from . import sibling as kin, cousin
from ..pkg.sub import (alpha, beta as b)
from os import *
import os.path as osp, sys
type Pair[T: int, *Ts, **P] = tuple[T, T]


@decorated(1)
@other.attr
class Shelf[K](Base, metaclass=Meta):
    """Books."""
    size: int = 3
    lent, = (yield_from := [])

    @property
    def count[T](self, a, /, b: int = 2, *args: str, c, d=4, **kw) -> list[int]:
        global totals
        nonlocal_free = lambda x, *y, z=1, **w: (x if y else z)
        x = a[1:2, ::3, ...] + -b ** 2 @ c // d
        x += f"{a!r:>{b}} {c=} {{}}" "plain" r"raw"
        del x[0], kw.key
        assert a is not b, "message"
        if a < b <= c != d in kw not in kw:
            pass
        elif not a or b and c:
            return {k: v for k, v in kw.items() if k}
        else:
            raise ValueError("no") from None
        for i, (j, *rest) in enumerate(args, start=1):
            continue
        else:
            print(i, j, rest, sep="")
        while a:
            break
        with open(a) as f, open(b):
            pass
        try:
            pass
        except (KeyError, IndexError) as exc:
            print(exc)
        else:
            pass
        finally:
            pass
        try:
            pass
        except* OSError:
            pass
        match kw:
            case {"k": [1, 2, *others], **more} if others:
                pass
            case Point(x=0, y=yy) | [0, _] | (1 | 2) | -3 | 1 + 2j | None:
                pass
            case str() as text:
                pass
        return [i async for i in aiter() if await i], {*a, *b}, {**kw, "k": 1}, (i for i in a)


async def coroutine():
    async with lock:
        async for item in stream:
            await item
    nonlocal_value = yield
    value = yield from other()
    x: "Annotated" = 1 if True else 2
    return t"{value}"
'''


def _reference_find_all(node: cst.CSTNode, kind: type[cst.CSTNode]) -> list[cst.CSTNode]:
    """What ``find_all`` did with a ``CSTVisitor`` (which rebuilds every node it passes)."""
    found: list[cst.CSTNode] = []

    class Finder(cst.CSTVisitor):
        def on_visit(self, visited: cst.CSTNode) -> bool:
            if isinstance(visited, kind):
                found.append(visited)
            return True

    node.visit(Finder())
    return found


def _same(found: list[cst.CSTNode], expected: list[cst.CSTNode]) -> bool:
    return len(found) == len(expected) and all(a is b for a, b in zip(found, expected, strict=True))


def _all_nodes(module: cst.Module) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []

    class Every(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            found.append(node)
            return True

    module.visit(Every())
    return found


def test_children_are_libcsts_children_for_every_node() -> None:
    module = cst.parse_module(SOURCE)
    every = _all_nodes(module)
    kinds = {type(node) for node in every}
    assert {cst.TypeAlias, cst.TryStar, cst.MatchOr, cst.TemplatedString, cst.Lambda} <= kinds
    for node in every:
        assert _same(children(node), list(node.children)), type(node).__name__
    assert _same(list(nodes(module)), every)


def test_the_order_is_read_for_every_node_type_libcst_has() -> None:
    """No node type falls back to LibCST's visit (each would cost as much as before)."""
    kinds = [
        kind
        for kind in vars(cst).values()
        if isinstance(kind, type) and issubclass(kind, cst.CSTNode) and not inspect.isabstract(kind)
    ]
    assert len(kinds) > 100
    unread = [kind.__name__ for kind in kinds if _child_fields(kind) is None]
    assert unread == []
    # a leaf has no children; a FunctionDef's decorators come before its name (not the
    # dataclass's field order, which puts them after the body)
    assert _child_fields(cst.Newline) == ()
    order = _child_fields(cst.FunctionDef)
    assert order is not None and order.index("decorators") < order.index("name")


@pytest.mark.parametrize("kind", [cst.Call, cst.Name, cst.Attribute, cst.If, cst.For])
def test_find_all_finds_what_libcsts_visit_finds(kind: type[cst.CSTNode]) -> None:
    module = cst.parse_module(SOURCE)
    assert _same(find_all(module, kind), _reference_find_all(module, kind))


def test_searches_below_one_statement() -> None:
    module = cst.parse_module(SOURCE)
    calls = calls_named(module, lambda name: name == "print")
    assert len(calls) == 2
    holders = [enclosing_statement(module, call) for call in calls]
    assert all(type(h) is cst.SimpleStatementLine for h in holders)
    assert holders[0] in simple_statements(module, lambda line: True)
    with pytest.raises(ValueError, match="not found"):
        enclosing_statement(holders[0], module)


@pytest.mark.parametrize("info", [RELEASES[0], RELEASES[-1]], ids=lambda r: r.version)
def test_children_on_a_releases_prefill_and_decode(info: Release) -> None:
    """The order holds on real code too (read through vendor_sglang, never committed)."""
    package = fetch_release(info.version) / "sglang/srt/disaggregation"
    for name in ("prefill.py", "decode.py"):
        module = cst.parse_module((package / name).read_text(encoding="utf-8"))
        every = _all_nodes(module)
        assert _same(list(nodes(module)), every)
        for kind in (cst.Call, cst.SimpleStatementLine):
            assert _same(find_all(module, kind), _reference_find_all(module, kind))


def test_a_snippet_is_parsed_once_but_never_shared_within_one_module() -> None:
    """``parse_statements`` keeps what it parsed in the run editing the module
    (``editing(run)``, as the runner does); a module being edited never gets the same node
    twice (anchors are found by identity), another module of the run may."""
    from pdguard.codemods.insertion import editing, parse_statements
    from pdguard.run import Run

    config = cst.parse_module("x = 1\n").config_for_parsing
    run = Run()
    with editing(run):
        first = parse_statements("a = 1\nb = 2\n", config)
        again = parse_statements("a = 1\nb = 2\n", config)
    assert [s.deep_equals(t) for s, t in zip(first, again, strict=True)] == [True, True]
    assert not any(s is t for s, t in zip(first, again, strict=True))
    with editing(run):
        later = parse_statements("a = 1\nb = 2\n", config)
    assert all(s is t for s, t in zip(first, later, strict=True))
    crlf = cst.parse_module("x = 1\r\n").config_for_parsing
    assert cst.Module(body=parse_statements("a = 1\n", crlf), default_newline="\r\n").code == (
        "a = 1\r\n"
    )
