"""``codemods/holes``: transforms run on the part of a module they can reach, and give the
same text as on the whole module.

The snippets are toy code of our own; the release test runs ``apply``'s plan on every CI
release with and without holes and compares every outcome and every byte."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable
from pathlib import Path

import libcst as cst
import pytest

import pdguard.codemods.holes as holes_module
import pdguard.workspace as workspace_module
from pdguard.codemods.command import Transform, parse, source_of
from pdguard.codemods.holes import PREFIX, Scope, hollow
from pdguard.commands.apply import plan
from pdguard.tree import open_tree
from pdguard.vendor_sglang import Release, fetch_release
from tests.helpers import RELEASES

SOURCE = textwrap.dedent(
    '''\
    """A toy module."""

    import os

    LIMIT = 3


    def unrelated(a):
        total = 0
        for item in a:
            total += item
        return total


    class Keeper:
        """Holds things."""

        size = 1
        colour = "red"
        shape = "round"
        weight = 2

        def stash(self, thing):
            self.things.append(thing)
            return len(self.things)

        def count(self):
            n = 0
            for _ in self.things:
                n += 1
            return n


    class Other:
        def first(self):
            return 1

        def second(self):
            return 2
    '''
)


def _holes(text: str) -> int:
    return text.count(PREFIX)


def test_runs_that_mention_no_anchor_become_holes_and_fill_restores_them() -> None:
    hollowed = hollow(SOURCE, Scope(mentions=frozenset({"stash"})))
    assert hollowed is not None
    # `unrelated` and `Other` (module level), and in Keeper its docstring with the four
    # attributes, and `count`
    assert _holes(hollowed.text) == 4
    assert "def stash(self, thing):" in hollowed.text
    assert "import os" in hollowed.text and "LIMIT = 3" in hollowed.text
    assert "def unrelated" not in hollowed.text and "def count" not in hollowed.text
    assert hollowed.fill(hollowed.text) == SOURCE
    # the hollowed module parses, and LibCST gives its text back
    assert cst.parse_module(hollowed.text).code == hollowed.text


def test_a_class_named_in_scope_is_kept_whole() -> None:
    hollowed = hollow(SOURCE, Scope(classes=frozenset({"Keeper"})))
    assert hollowed is not None
    assert "def count(self):" in hollowed.text and 'colour = "red"' in hollowed.text
    assert "def unrelated" not in hollowed.text and "class Other" not in hollowed.text


def test_a_statement_on_a_line_in_scope_is_kept() -> None:
    line = SOURCE.splitlines().index("            n += 1") + 1
    hollowed = hollow(SOURCE, Scope(lines=frozenset({line})))
    assert hollowed is not None
    assert "def count(self):" in hollowed.text and "def stash" not in hollowed.text


def test_an_empty_scope_keeps_module_level_statements_only() -> None:
    hollowed = hollow(SOURCE, Scope())
    assert hollowed is not None
    assert _holes(hollowed.text) == 1
    assert hollowed.text.startswith('"""A toy module."""\n\nimport os\n\nLIMIT = 3\n')


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda text, hole: text.replace(hole, "pass"), id="removed"),
        pytest.param(lambda text, hole: text.replace(hole, f"{hole}\n{hole}"), id="repeated"),
        pytest.param(lambda text, hole: text.replace(f"\n{hole}", f"\n    {hole}"), id="indented"),
        pytest.param(lambda text, hole: text.replace(hole, f"x = 1; {hole}"), id="not alone"),
    ],
)
def test_fill_refuses_a_hole_a_transform_moved(edit: Callable[[str, str], str]) -> None:
    hollowed = hollow(SOURCE, Scope())
    assert hollowed is not None
    (hole,) = hollowed.holes
    assert hollowed.fill(edit(hollowed.text, hole)) is None


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(SOURCE.replace("\n", "\r"), id="bare CR line endings"),
        pytest.param(SOURCE + f"{PREFIX}0__ = 1\n", id="a name that looks like a hole"),
        pytest.param("def f(:\n", id="does not parse"),
    ],
)
def test_texts_that_are_not_hollowed(text: str) -> None:
    assert hollow(text, Scope()) is None


def test_crlf_and_statements_sharing_a_line() -> None:
    shared = "class Shared: x = (\r\n    1,\r\n    2,\r\n)\r\n"
    text = f"import os\r\n\r\n{shared}\r\ndef f():\r\n    a = 1\r\n    b = 2\r\n    return a\r\n"
    hollowed = hollow(text, Scope(mentions=frozenset({"Shared"})))
    assert hollowed is not None
    # the class body starts on the class's line: it is not a run of its own lines
    assert shared in hollowed.text
    assert hollowed.text.endswith("_0__\r\n") and "def f" not in hollowed.text
    assert hollowed.fill(hollowed.text) == text


def test_source_of_a_hollowed_module_is_the_whole_text() -> None:
    """What a transform asks of the module's text (the names it uses, for instance) is
    answered for the whole module."""
    hollowed = hollow(SOURCE, Scope(mentions=frozenset({"stash"})))
    assert hollowed is not None
    module = parse(hollowed.text)
    assert source_of(module) == SOURCE
    renamed = module.with_changes(header=[])  # another module: its text is generated
    assert "def unrelated(a):" in source_of(renamed)


class _AddLine(Transform):
    """Toy transform: ``line`` after every ``self.things.append``; with ``reads_whole``, the
    line records how many lines ``unrelated`` has, read from the whole module (``source_of``),
    where ``unrelated`` is a hole."""

    def __init__(self, reads_whole: bool) -> None:
        self.reads_whole = reads_whole

    def scope(self, text: str) -> Scope:
        return Scope(mentions=frozenset({"stash"}))

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        line = "self.seen = True"
        if self.reads_whole:
            unrelated = next(
                n for n in ast.parse(source_of(tree)).body if getattr(n, "name", "") == "unrelated"
            )
            assert unrelated.end_lineno is not None
            line = f"self.unrelated_lines = {unrelated.end_lineno - unrelated.lineno + 1}"

        class Adder(cst.CSTTransformer):
            def leave_SimpleStatementLine(
                self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
            ) -> cst.SimpleStatementLine | cst.FlattenSentinel[cst.BaseStatement]:
                if "self.things.append" not in cst.Module(body=[original_node]).code:
                    return updated_node
                return cst.FlattenSentinel([updated_node, cst.parse_statement(line)])

        return tree.visit(Adder())


def test_workspace_result_is_the_same_with_and_without_holes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "sglang/srt/disaggregation"
    package.mkdir(parents=True)
    for name in ("prefill.py", "toy.py", "other.py"):
        (package / name).write_text(SOURCE)
    made: list[object] = []

    def spy(text: str, scope: Scope, **options: bool) -> object:
        made.append(hollow(text, scope, **options))
        return made[-1]

    monkeypatch.setattr(holes_module, "hollow", spy)
    results = []
    for hollow_flag, name in ((True, "toy.py"), (False, "other.py")):
        rel = f"sglang/srt/disaggregation/{name}"
        monkeypatch.setattr(workspace_module, "HOLLOW", hollow_flag)
        space = workspace_module.Workspace(open_tree(tmp_path))
        assert space.transform(rel, [_AddLine(reads_whole=False)])
        results.append(space.text(rel))
    assert results[0] == results[1]
    assert "        self.seen = True\n" in results[0]
    assert len(made) == 1 and made[0] is not None  # the first ran on the hollowed module


@pytest.mark.parametrize("info", RELEASES, ids=lambda r: r.version)
def test_apply_plans_the_same_bytes_with_and_without_holes(
    info: Release, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every fix's outcome and every changed byte, on each CI release."""
    tree = open_tree(fetch_release(info.version))
    results = []
    for hollow_flag in (True, False):
        monkeypatch.setattr(workspace_module, "HOLLOW", hollow_flag)
        result = plan(tree)
        results.append(
            (
                {name: (o.status, o.note, o.where) for name, o in result.outcomes.items()},
                {rel: new.text for rel, new in result.changes.items()},
            )
        )
    assert results[0] == results[1]


FUNCTIONS = textwrap.dedent(
    """\
    def target(queue):
        first = 1
        second = 2
        third = 3
        fourth = 4
        return queue


    def caller(queue):
        setup = []
        setup.append(1)
        setup.append(2)
        setup.append(3)
        for item in queue:
            ready = item
            checked = ready
            more = checked
            done = more
            target(queue)
        return setup
    """
)


def test_scope_functions_keeps_those_whole_and_hollows_inside_the_others() -> None:
    """With ``functions``, a reached function not named there is hollowed inside, into the
    blocks of its compound statements; one named there stays whole."""
    scope = Scope(mentions=frozenset({"target"}), functions=frozenset({"target"}))
    hollowed = hollow(FUNCTIONS, scope)
    assert hollowed is not None
    assert "    fourth = 4\n" in hollowed.text  # target: whole
    assert "setup.append" not in hollowed.text  # caller's first run
    assert "    for item in queue:\n" in hollowed.text  # holds a mention: kept, hollowed inside
    assert "        target(queue)\n" in hollowed.text and "checked" not in hollowed.text
    assert hollowed.fill(hollowed.text) == FUNCTIONS
    # without ``functions`` every reached function is whole: nothing to hollow here
    assert hollow(FUNCTIONS, Scope(mentions=frozenset({"target"}))) is None


def test_scopes_combine_to_reach_everything_either_reaches() -> None:
    keep_whole = Scope(mentions=frozenset({"a"}))
    only_b = Scope(mentions=frozenset({"b"}), lines=frozenset({3}), functions=frozenset({"b"}))
    combined = only_b | Scope(classes=frozenset({"C"}), functions=frozenset({"d"}))
    assert combined == Scope(
        mentions=frozenset({"b"}),
        classes=frozenset({"C"}),
        lines=frozenset({3}),
        functions=frozenset({"b", "d"}),
    )
    # a scope that keeps every reached function whole wins
    assert (keep_whole | only_b).functions is None


def test_two_hollowings_of_one_text_never_share_a_hole() -> None:
    """A module hollowed for one scope still reads as the whole text after the same text was
    hollowed for another (their holes stand for different runs)."""
    wide = hollow(SOURCE, Scope())
    narrow = hollow(SOURCE, Scope(mentions=frozenset({"stash"})))
    assert wide is not None and narrow is not None
    assert not set(wide.holes) & set(narrow.holes)
    assert source_of(parse(wide.text)) == SOURCE
    assert source_of(parse(narrow.text)) == SOURCE


def test_members_keep_a_class_s_named_methods_and_hollow_the_rest_of_it() -> None:
    hollowed = hollow(SOURCE, Scope(members=frozenset({("Keeper", "count")})))
    assert hollowed is not None
    assert "class Keeper:\n" in hollowed.text and "        for _ in self.things:\n" in hollowed.text
    assert "def stash" not in hollowed.text and 'colour = "red"' not in hollowed.text
    assert "class Other" not in hollowed.text  # not reached
    # the members of another class: Keeper is not reached at all
    other = hollow(SOURCE, Scope(members=frozenset({("Other", "first")})))
    assert other is not None
    assert "def first(self):" in other.text and "def count" not in other.text


# SOURCE with another ``unrelated`` (inside a hole of the scope above): one line longer
CHANGED = SOURCE.replace("        total += item\n", "        total += item\n        total -= 0\n")


@pytest.mark.parametrize("reads_whole", [False, True])
def test_versions_differing_only_in_holes_share_a_run_unless_the_transform_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads_whole: bool
) -> None:
    """Two versions of a file whose differences all fall in holes hollow to one text (holes
    named by content): what the transforms made of it is made once and filled with each
    version's own lines, unless a transform read the whole module (its result may depend on
    the holes: it runs again)."""
    first, second = (
        hollow(SOURCE, _AddLine(False).scope(SOURCE), by_content=True),
        hollow(CHANGED, _AddLine(False).scope(CHANGED), by_content=True),
    )
    assert first is not None and second is not None and first.text == second.text
    assert hollow(SOURCE, Scope()).text != hollow(CHANGED, Scope()).text  # type: ignore[union-attr]
    runs: list[str] = []
    real_run = workspace_module._run

    def spy(module: cst.Module, transforms: object) -> tuple[bool, str]:
        runs.append(module.code)
        return real_run(module, transforms)  # type: ignore[arg-type]

    monkeypatch.setattr(workspace_module, "_run", spy)
    monkeypatch.setattr(workspace_module, "_HOLLOW_MADE", type(workspace_module._HOLLOW_MADE)())
    results = []
    for name, text in (("a", SOURCE), ("b", CHANGED)):
        package = tmp_path / name / "sglang/srt/disaggregation"
        package.mkdir(parents=True)
        for file in ("prefill.py", "toy.py"):
            (package / file).write_text(text)
        space = workspace_module.Workspace(open_tree(tmp_path / name))
        assert space.transform("sglang/srt/disaggregation/toy.py", [_AddLine(reads_whole)])
        results.append(space.text("sglang/srt/disaggregation/toy.py"))
    assert len(runs) == (2 if reads_whole else 1)
    assert "        total -= 0\n" not in results[0] and "        total -= 0\n" in results[1]
    if reads_whole:
        assert "self.unrelated_lines = 5\n" in results[0]
        assert "self.unrelated_lines = 6\n" in results[1]
    else:
        assert results[1] == CHANGED.replace(
            "        self.things.append(thing)\n",
            "        self.things.append(thing)\n        self.seen = True\n",
        )


def test_module_statements_share_a_parse_but_each_reads_as_its_own_text(
    tmp_path: Path,
) -> None:
    """Two versions with the same module-level statements parse them once; what each module
    handed out reads as (``source_of``) is its own version's whole text."""
    spaces = []
    for name, text in (("a", SOURCE), ("b", CHANGED)):
        package = tmp_path / name / "sglang/srt/disaggregation"
        package.mkdir(parents=True)
        (package / "prefill.py").write_text(text)
        spaces.append(workspace_module.Workspace(open_tree(tmp_path / name)))
    first, second = (s.module_statements("sglang/srt/disaggregation/prefill.py") for s in spaces)
    assert first is not second and first.body[0] is second.body[0]  # one parse, two modules
    assert source_of(first) == SOURCE and source_of(second) == CHANGED
