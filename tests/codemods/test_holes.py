"""``codemods/holes``: transforms run on the part of a module they can reach, and give the
same text as on the whole module.

The snippets are toy code of our own; the release test runs ``apply``'s plan on every CI
release with and without holes and compares every outcome and every byte."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import libcst as cst
import libcst.matchers as m
import pytest
from libcst.codemod import CodemodContext

from pdguard.codemods import runner
from pdguard.codemods.command import Command
from pdguard.codemods.holes import PREFIX, Scope, hollow
from pdguard.commands.apply import plan
from pdguard.run import Run
from pdguard.tree import open_tree
from pdguard.vendor_sglang import Release, fetch_release
from pdguard.workspace import Workspace
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


class _Reader(Command):
    """Toy codemod: records the module it was handed and what ``source`` gives for it and
    for a module it made (whose text is generated)."""

    seen: ClassVar[list[tuple[str, str, str]]] = []

    def scope(self, text: str) -> Scope:
        return Scope(mentions=frozenset({"stash"}))

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        made = tree.with_changes(header=[])
        _Reader.seen.append((tree.code, self.source(tree), self.source(made)))
        return tree


def test_source_of_a_hollowed_module_is_the_whole_text() -> None:
    """What a codemod asks of the module's text (the names it uses, for instance) is answered
    for the whole module: the runner hands it the hollowed module and, in its context, the
    whole text."""
    _Reader.seen.clear()
    run = Run()
    assert runner.transform(run, "toy.py", SOURCE, [_Reader(CodemodContext())]) == (True, SOURCE)
    ((handed, source, generated),) = _Reader.seen
    assert PREFIX in handed and "def unrelated(a):" not in handed  # it ran hollowed
    assert source == SOURCE
    assert "def unrelated(a):" in generated and PREFIX not in generated
    # outside a run (libcst.tool, a test) the text is the module's own
    module = cst.parse_module(SOURCE)
    assert _Reader(CodemodContext()).source(module) == SOURCE


class _AddLine(Command):
    """Toy codemod: ``line`` after every ``self.things.append``; with ``reads_whole``, the
    line records how many lines ``unrelated`` has, read from the whole module (``source``),
    where ``unrelated`` is a hole."""

    handed: ClassVar[list[str]] = []  # the code of each module it ran on

    def __init__(self, context: CodemodContext, reads_whole: bool) -> None:
        super().__init__(context)
        self.reads_whole = reads_whole

    def scope(self, text: str) -> Scope:
        return Scope(mentions=frozenset({"stash"}))

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        _AddLine.handed.append(tree.code)
        line = "self.seen = True"
        if self.reads_whole:
            unrelated = next(
                n
                for n in ast.parse(self.source(tree)).body
                if getattr(n, "name", "") == "unrelated"
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


class _AddLineByMatcher(Command):
    """The same edit as ``_AddLine`` written with ``libcst.matchers``: the ``stash`` method
    found by a pattern, and the line added after the statement a pattern matches in it."""

    handed: ClassVar[list[str]] = []

    def scope(self, text: str) -> Scope:
        return Scope(mentions=frozenset({"stash"}))

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        _AddLineByMatcher.handed.append(tree.code)
        appends = m.SimpleStatementLine(
            body=[
                m.Expr(
                    m.Call(
                        func=m.Attribute(
                            value=m.Attribute(value=m.Name("self"), attr=m.Name("things")),
                            attr=m.Name("append"),
                        )
                    )
                )
            ]
        )
        (stash,) = m.findall(tree, m.FunctionDef(name=m.Name("stash")))
        assert isinstance(stash, cst.FunctionDef)
        (target,) = m.findall(stash, appends)
        line = cst.parse_statement("self.seen = True")

        class Adder(m.MatcherDecoratableTransformer):
            def leave_SimpleStatementLine(
                self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
            ) -> cst.SimpleStatementLine | cst.FlattenSentinel[cst.BaseStatement]:
                if original_node is not target:
                    return updated_node
                return cst.FlattenSentinel([updated_node, line])

        return tree.visit(Adder())


@pytest.mark.parametrize("command", [_AddLine, _AddLineByMatcher])
def test_workspace_result_is_the_same_with_and_without_holes(
    tmp_path: Path, command: type[Command]
) -> None:
    """A run hollows around a codemod that says where it reaches, and the bytes are the ones
    the whole module gives; a codemod written with ``libcst.matchers`` too (no pattern of a
    definition, a call or a statement matches a hole line)."""
    package = tmp_path / "sglang/srt/disaggregation"
    package.mkdir(parents=True)
    for name in ("prefill.py", "toy.py"):
        (package / name).write_text(SOURCE)
    handed: list[str] = command.handed  # type: ignore[attr-defined]
    handed.clear()
    results = []
    for hollowing in (True, False):
        run = Run(hollow=hollowing)
        space = Workspace(open_tree(tmp_path), run=run)
        options = {"reads_whole": False} if command is _AddLine else {}
        assert space.transform(
            "sglang/srt/disaggregation/toy.py", [command(space.context(), **options)]
        )
        results.append(space.text("sglang/srt/disaggregation/toy.py"))
        assert len(run.hollow_made) == (1 if hollowing else 0)
    assert results[0] == results[1]
    assert "        self.seen = True\n" in results[0]
    assert [PREFIX in code for code in handed] == [True, False]  # the first ran hollowed


@pytest.mark.parametrize("info", RELEASES, ids=lambda r: r.version)
def test_apply_plans_the_same_bytes_with_and_without_holes(info: Release) -> None:
    """Every fix's outcome and every changed byte, on each CI release."""
    tree = open_tree(fetch_release(info.version))
    results = []
    for hollowing in (True, False):
        result = plan(tree, run=Run(hollow=hollowing))
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
    assert wide.fill_present(wide.text) == SOURCE
    assert narrow.fill_present(narrow.text) == SOURCE
    assert wide.fill_present(narrow.text) == narrow.text  # none of its holes is there


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
    tmp_path: Path, reads_whole: bool
) -> None:
    """Two versions of a file whose differences all fall in holes hollow to one text (holes
    named by content): what the codemods made of it is made once in a run and filled with
    each version's own lines, unless a codemod read the whole module (its result may depend
    on the holes: it runs again)."""
    context = CodemodContext()
    first, second = (
        hollow(SOURCE, _AddLine(context, False).scope(SOURCE), by_content=True),
        hollow(CHANGED, _AddLine(context, False).scope(CHANGED), by_content=True),
    )
    assert first is not None and second is not None and first.text == second.text
    assert hollow(SOURCE, Scope()).text != hollow(CHANGED, Scope()).text  # type: ignore[union-attr]
    _AddLine.handed.clear()
    run = Run()  # one run: verify meeting the file in two refs
    results = []
    for name, text in (("a", SOURCE), ("b", CHANGED)):
        package = tmp_path / name / "sglang/srt/disaggregation"
        package.mkdir(parents=True)
        for file in ("prefill.py", "toy.py"):
            (package / file).write_text(text)
        space = Workspace(open_tree(tmp_path / name), run=run)
        codemod = _AddLine(space.context(), reads_whole)
        assert space.transform("sglang/srt/disaggregation/toy.py", [codemod])
        results.append(space.text("sglang/srt/disaggregation/toy.py"))
    assert len(_AddLine.handed) == (2 if reads_whole else 1)
    assert "        total -= 0\n" not in results[0] and "        total -= 0\n" in results[1]
    if reads_whole:
        assert "self.unrelated_lines = 5\n" in results[0]
        assert "self.unrelated_lines = 6\n" in results[1]
    else:
        assert results[1] == CHANGED.replace(
            "        self.things.append(thing)\n",
            "        self.things.append(thing)\n        self.seen = True\n",
        )


def test_module_statements_of_versions_with_the_same_module_level_share_a_parse(
    tmp_path: Path,
) -> None:
    """Two versions with the same module-level statements parse them once in a run (the
    import helpers read nothing else); another run parses them afresh."""
    run = Run()
    spaces = []
    for name, text in (("a", SOURCE), ("b", CHANGED)):
        package = tmp_path / name / "sglang/srt/disaggregation"
        package.mkdir(parents=True)
        (package / "prefill.py").write_text(text)
        spaces.append(Workspace(open_tree(tmp_path / name), run=run))
    first, second = (s.module_statements("sglang/srt/disaggregation/prefill.py") for s in spaces)
    assert first is second and "import os" in first.code and "def unrelated" not in first.code
    again = Workspace(open_tree(tmp_path / "a"), run=Run())
    assert again.module_statements("sglang/srt/disaggregation/prefill.py") is not first
