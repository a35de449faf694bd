"""checks.project.parse_module: a new text of a path reuses the leading top-level statements of
the last one parsed for it, and gives exactly the tree a whole parse gives (positions too)."""

from __future__ import annotations

import ast
import itertools
import textwrap

import pytest

from pdguard.checks.project import (
    _CLASS_BASES,
    _CLASS_NAME,
    _at_line_start,
    _parse_after,
    base_files,
    class_lines,
    parse_module,
)
from pdguard.run import Run
from pdguard.vendor_sglang import Release, fetch_release
from tests.helpers import RELEASES

BEFORE = textwrap.dedent(
    '''\
    """A toy module."""
    import os

    LIMIT = 3


    @register(os.sep)
    class Shelf:
        size = 1

        def take(self):
            return self.size


    x = 1; y = 2
    # a comment between statements
    def later():
        return LIMIT
    '''
)


def _same_tree(text: str, after: ast.Module) -> None:
    assert ast.dump(after, include_attributes=True) == ast.dump(
        ast.parse(text), include_attributes=True
    )


def _reused(before: ast.Module, after: ast.Module) -> int:
    return sum(1 for stmt in after.body if any(stmt is old for old in before.body))


@pytest.mark.parametrize(
    ("edit", "reused"),
    [
        # a line added at the end of a class: the class goes on in the new text (a block ends
        # at the next line of code that is less indented), so it is parsed again
        (("        return self.size\n", "        return self.size\n\n    colour = 2\n"), 3),
        (("def later():\n", "def later(now=None):\n"), 4),  # x = 1; y = 2 is one line
        # the statement before a changed line is kept only if the line after it is unchanged
        (("LIMIT = 3\n", "LIMIT = 4\n"), 1),
        (('"""A toy module."""\n', '"""Another."""\n'), 0),
        (("    return LIMIT\n", "    return LIMIT + 1\n"), 6),
        (("@register(os.sep)\n", "@register(os.sep, 2)\n"), 2),
    ],
)
def test_a_new_text_reuses_what_comes_before_its_first_change(
    edit: tuple[str, str], reused: int
) -> None:
    before = ast.parse(BEFORE)
    text = BEFORE.replace(*edit)
    assert text != BEFORE
    after = _parse_after(text, (BEFORE, before))
    _same_tree(text, after)
    assert _reused(before, after) == reused


def test_parse_module_keeps_the_last_text_of_each_path() -> None:
    run = Run()
    first = parse_module(BEFORE, "pkg/toy.py", run)
    changed = BEFORE.replace("    return LIMIT\n", "    return LIMIT + 2\n")
    second = parse_module(changed, "pkg/toy.py", run)
    assert second.body[1] is first.body[1]  # ``import os``, shared
    assert second.body[-1] is not first.body[-1]  # ``later``, parsed again
    assert parse_module(changed, "pkg/toy.py", run) is second  # by text, once
    other = parse_module(BEFORE.replace("import os", "import sys"), "pkg/other.py", run)
    assert not any(stmt is old for stmt in other.body for old in first.body)  # another path
    # another run (another command) shares nothing; no run keeps nothing
    assert parse_module(changed, "pkg/toy.py", Run()) is not second
    assert parse_module(changed, "pkg/toy.py") is not parse_module(changed, "pkg/toy.py")
    with pytest.raises(SyntaxError) as raised:
        parse_module(changed.replace("def later():", "def later(:"), "pkg/toy.py", run)
    assert raised.value.filename == "pkg/toy.py" and raised.value.lineno == 17


@pytest.mark.parametrize(
    ("older", "newer"),
    list(itertools.pairwise(RELEASES))[-2:],
    ids=lambda r: r.version,
)
def test_the_previous_release_s_statements_are_reused_exactly(
    older: Release, newer: Release
) -> None:
    """A release's files parsed after the previous release's give the trees a whole parse
    gives (the files read through vendor_sglang, never committed)."""
    old_dir = fetch_release(older.version) / "sglang/srt/disaggregation"
    new_dir = fetch_release(newer.version) / "sglang/srt/disaggregation"
    reused = 0
    for name in ("prefill.py", "decode.py", "nixl/conn.py", "mooncake/conn.py"):
        if not (old_dir / name).is_file() or not (new_dir / name).is_file():
            continue
        old_text = (old_dir / name).read_text(encoding="utf-8")
        text = (new_dir / name).read_text(encoding="utf-8")
        before = ast.parse(old_text)
        after = _parse_after(text, (old_text, before))
        _same_tree(text, after)
        reused += _reused(before, after)
    assert reused > 0


_CLASS_LINES = [
    'x = "class A("\n class B(Base):\n',  # an unclosed match before a class line
    "subclass X(y)\nclass  Q\t(R,\n S)\n\tclass Z:\n",
    "class A(B): pass\nif x: class C(D): pass\n  class E (F) :\n",
    "",
    "classy = 1\nclass\nclass _1(x\n",
]


@pytest.mark.parametrize("text", _CLASS_LINES)
def test_class_lines_are_found_as_the_multiline_patterns_find_them(text: str) -> None:
    """``base_files`` finds class lines by their literal start: the same as ``re.findall``
    of the patterns anchored at a line's start (``^[ \\t]*``, multiline)."""
    import re

    for pattern in (_CLASS_NAME, _CLASS_BASES):
        anchored = re.compile(r"^[ \t]*" + pattern.pattern, re.M)
        assert _at_line_start(pattern, text) == anchored.findall(text)


def test_base_files_scan_each_text_once_in_a_run() -> None:
    """With a run, each text's class lines are scanned once and kept (``verify`` asks of the
    same files in check, each fix and the neighbouring refs); the answer is the one without."""
    chosen = {"a.py": "class Sender(Mixin):\n    pass\n"}
    pool = {
        "m.py": "class Mixin(Root):\n    pass\n",
        "r.py": "class Root:\n    pass\n",
        "x.py": "class Unrelated(object):\n    pass\n",
    }
    run = Run()
    expected = {"m.py": pool["m.py"], "r.py": pool["r.py"]}
    assert base_files(chosen, pool) == expected
    assert base_files(chosen, pool, run) == expected
    assert run.class_lines.get(pool["m.py"]) == (("Mixin",), ("Root",))
    scanned = len(run.class_lines)
    run.class_lines.put(pool["r.py"], (("Root",), ("Unrelated",)))  # what the run holds wins
    assert base_files(chosen, pool, run) == {**expected, "x.py": pool["x.py"]}
    assert len(run.class_lines) == scanned
    assert class_lines(pool["x.py"]) == (("Unrelated",), ("object",))
