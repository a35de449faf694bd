"""The one semantics of a bounded wait (checks/models/bounded_wait.py), part by part."""

from __future__ import annotations

import ast

import pytest

from pdguard.checks.models.bounded_wait import (
    Clock,
    ClockKind,
    ComparisonKind,
    Direction,
    StartKind,
    Unanimity,
    clock_aliases,
    clock_of,
    never_runs,
    overdue_branch,
    read_test,
    start_of,
    unanimity,
)
from pdguard.checks.nodes import own_parents

_STARTS = {"t": StartKind.STAMP, "d": StartKind.DEADLINE}


def _test(text: str) -> tuple[ComparisonKind, Direction] | None:
    compare = ast.parse(text).body[0].value  # type: ignore[attr-defined]
    found = read_test(
        compare,
        lambda n: isinstance(n, ast.Name) and n.id == "now",
        lambda n: _STARTS.get(n.id) if isinstance(n, ast.Name) else None,
    )
    return None if found is None else (found.kind, found.direction)


E, D = ComparisonKind.ELAPSED, ComparisonKind.DEADLINE


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now - t > L", (E, Direction.OVERDUE)),
        ("L <= now - t", (E, Direction.OVERDUE)),
        ("t + L < now", (E, Direction.OVERDUE)),
        ("(now - t) * 1000 > L", (E, Direction.OVERDUE)),  # scaled units
        ("now - t < L", (E, Direction.TIME_LEFT)),
        ("t - now > L", (E, Direction.NEVER)),  # swapped: never true
        ("now + t > L", (E, Direction.NEVER)),
        ("now > d", (D, Direction.OVERDUE)),
        ("d - now <= 0", (D, Direction.OVERDUE)),
        ("d > now", (D, Direction.TIME_LEFT)),
        ("now - x > L", None),  # no start
        ("t > L", None),  # no clock
    ],
)
def test_the_test_of_a_wait(text: str, expected: tuple[ComparisonKind, Direction] | None) -> None:
    assert _test(text) == expected


def test_clocks_through_imports_and_helpers() -> None:
    module = ast.parse(
        "import time as _t\nfrom time import perf_counter as now\n"
        "class S:\n    def _wall(self):\n        return _t.time()\n"
    )
    aliases = clock_aliases(module)
    assert aliases == {"now": Clock("perf_counter"), "self._wall": Clock("time")}
    read = ast.parse("self._wall()").body[0].value  # type: ignore[attr-defined]
    assert clock_of(read, aliases) == Clock("time")
    assert clock_of(ast.parse("x.monotonic_ns()").body[0].value).nanoseconds  # type: ignore[attr-defined]
    assert Clock("time").kind is ClockKind.WALL
    assert not Clock("time").agrees(Clock("monotonic"))
    assert not Clock("monotonic").agrees(Clock("monotonic_ns"))
    assert Clock("monotonic").agrees(Clock("monotonic", "_t"))


def test_a_stamp_and_a_stored_deadline() -> None:
    def start(text: str) -> StartKind | None:
        found = start_of(ast.parse(text).body[0].value, clock_of)  # type: ignore[attr-defined]
        return None if found is None else found.kind

    assert start("time.monotonic()") is StartKind.STAMP
    assert start("time.monotonic() + LIMIT") is StartKind.DEADLINE
    assert start("LIMIT + time.time()") is StartKind.DEADLINE
    assert start("time.time() + time.time()") is None
    assert start("LIMIT") is None


_DEAD = """\
def f(q):
    for r in q:
        if r.a:
            continue
        {code}
"""


@pytest.mark.parametrize(
    ("code", "why"),
    [
        ("x = now > d", ""),
        ("return\n        x = now > d", "it comes after the `return` on line 5"),
        ("if False:\n            x = now > d", "it is under `False`"),
        ("try:\n            pass\n        except Exception:\n            x = now > d", "except"),
        ("g = lambda: now > d", "lambda"),
    ],
)
def test_code_that_never_runs(code: str, why: str) -> None:
    function = ast.parse(_DEAD.format(code=code)).body[0]
    compare = next(n for n in ast.walk(function) if isinstance(n, ast.Compare))
    found = never_runs(compare, own_parents(function), function)
    assert (why in found and bool(found)) if why else found == ""


def test_the_overdue_branch() -> None:
    function = ast.parse(
        "def f(q):\n    for r in q:\n        if now - r.t < L:\n            continue\n"
        "        r.sender.abort()\n"
    ).body[0]
    compare = next(n for n in ast.walk(function) if isinstance(n, ast.Compare))
    branch = overdue_branch(compare, Direction.TIME_LEFT, own_parents(function))
    assert branch is not None and [ast.unparse(s) for s in branch] == ["r.sender.abort()"]
    assert overdue_branch(compare, Direction.OVERDUE, own_parents(function)) == [
        function.body[0].body[0].body[0]  # type: ignore[attr-defined]
    ]
    assert overdue_branch(compare, Direction.NEVER, own_parents(function)) == []


def test_unanimity() -> None:
    assert unanimity(True, True, False) is Unanimity.BEFORE_REDUCE
    assert unanimity(False, True, True) is Unanimity.NEXT_REDUCE
    assert unanimity(False, True, False) is Unanimity.PER_RANK
    assert unanimity(True, False, True) is Unanimity.PER_RANK
    assert not Unanimity.PER_RANK.unanimous
