"""Verdicts on code pdguard has never seen: fork shapes, hand-written fixes, hostile input
(``tests/corpus.py``), and the targets and comments a user gets wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdguard.errors import TargetError
from pdguard.tree import open_tree
from tests.corpus import CASES, Case
from tests.snippets import make_tree


def test_a_target_holding_two_sglang_trees_is_ambiguous(tmp_path: Path) -> None:
    make_tree(tmp_path)
    make_tree(tmp_path / "python")
    with pytest.raises(TargetError) as info:
        open_tree(tmp_path)
    message = str(info.value)
    assert "two SGLang trees" in message
    assert str(tmp_path / "sglang") in message
    assert str(tmp_path / "python" / "sglang") in message


def _pdg005(prefill_text: str) -> list[tuple[int, str]]:
    from pdguard.checks import Project, run
    from tests.corpus import _BASE, BASE_CONN, PREFILL

    found = run(Project({PREFILL: prefill_text, BASE_CONN: _BASE}), ["PDG005"])
    return [(f.line, f.message) for f in found]


@pytest.mark.parametrize(
    ("imports", "replace", "expected"),
    [
        # the binding in force is datetime.time: time.monotonic() raises AttributeError
        ("import time\nfrom datetime import time", None, "`time` is bound to `datetime.time`"),
        ("import time as t\ntime = None", None, "`time` is bound to an assignment"),
        # a local assignment shadows the module in one function only
        (
            "import time",
            ("now = time.monotonic()", "time = 5\n        now = time.monotonic()"),
            "`time` is bound to an assignment (line 21) in _expire_inflight()",
        ),
    ],
)
def test_pdg005_reports_a_shadowed_binding(
    imports: str, replace: tuple[str, str] | None, expected: str
) -> None:
    from tests.corpus import prefill

    text = prefill(imports=imports)
    if replace:
        text = text.replace(*replace)
    found = _pdg005(text)
    assert found, "the shadowed use was not reported"
    assert all(expected in message for _, message in found), found


@pytest.mark.parametrize(
    "imports",
    [
        "from datetime import time\nimport time",  # import time is the binding in force
        "import time\ntry:\n    import time\nexcept ImportError:\n    time = None",
        "import time\nfrom datetime import time as dtime",
        "from time import monotonic\nimport time",
    ],
)
def test_pdg005_accepts_the_right_binding(imports: str) -> None:
    from tests.corpus import prefill

    assert _pdg005(prefill(imports=imports)) == []


KNOWN = ("PDG001", "PDG004")


@pytest.mark.parametrize(
    ("comment", "codes"),
    [
        ("# pdguard: ignore", None),
        ("# pdguard: ignore[PDG004]", {"PDG004"}),
        ("# pdguard: ignore[PDG001, PDG004]", {"PDG001", "PDG004"}),
        ("#pdguard:ignore[pdg004]", {"PDG004"}),
        ("# pdguard: ignore[PDG004]  # decode has its own timeout", {"PDG004"}),
    ],
)
def test_exact_suppressions(comment: str, codes: set[str] | None) -> None:
    from pdguard.suppressions import parse

    found = parse(f"x = 1  {comment}\n", KNOWN)
    assert found.warnings == []
    assert found.by_line == {1: None if codes is None else frozenset(codes)}


@pytest.mark.parametrize(
    ("comment", "why"),
    [
        ("# pdguard: ignore[PDG001", "malformed"),
        ("# pdguard: ignore(PDG001)", "malformed"),
        ("# pdguard: ignore=PDG001", "malformed"),
        ("# pdguard: ignore: PDG001", "malformed"),
        ("# pdguard: ignored", "malformed"),
        ("# pdguard: ignore [PDG001]", "malformed"),
        ("# pdguard: ignore[PDG04]", "unknown rule code PDG04"),
        ("# pdguard: ignore[PDG999]", "unknown rule code PDG999"),
        ("# pdguard: ignore[PDG001, PDG999]", "unknown rule code PDG999"),
    ],
)
def test_a_typo_never_widens_a_suppression(comment: str, why: str) -> None:
    from pdguard.suppressions import parse

    found = parse(f"x = 1\ny = 2  {comment}\n", KNOWN)
    assert not found.suppresses(2, "PDG001")
    assert not found.suppresses(2, "PDG004")
    [warning] = found.warnings
    assert (warning.line, warning.col) == (2, 8)
    assert why in warning.message


def test_markers_and_strings_are_not_suppressions() -> None:
    from pdguard.suppressions import parse

    text = 'x = 1  # pdguard: inflight-deadline\ns = "# pdguard: ignore"\n'
    found = parse(text, KNOWN)
    assert (found.by_line, found.warnings) == ({}, [])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_corpus_verdict(case: Case) -> None:
    """A correct tree gets no finding; an unsafe one gets at least the hazard's codes."""
    from tests.corpus import verdicts

    got = verdicts(case)
    if case.correct:
        assert got == set(), f"false positive on {case.name}: {case.why}"
    else:
        assert case.expect <= got, f"false negative on {case.name}: {case.why}"
