"""Every rule's VALID/INVALID examples (they live beside the rule, as in Fixit)."""

from __future__ import annotations

import re

import pytest

from pdguard import checks
from pdguard.checks.examples import CALL_HELPER, HELPER, STAMP_ONCE, prefill
from pdguard.checks.project import Project
from pdguard.checks.rule import PREFILL, Example, Invalid, Rule
from pdguard.docs import sections
from pdguard.fixes.base import Status
from pdguard.fixes.inflight_deadline import InflightDeadline
from pdguard.tree import open_tree
from pdguard.workspace import Workspace


def _project(example: Example) -> Project:
    return Project({PREFILL: example} if isinstance(example, str) else example)


def _cases(kind: str) -> list:  # of pytest.param(rule, example)
    return [
        pytest.param(rule, example, id=f"{rule.code}-{kind}-{n}")
        for rule in checks.RULES
        for n, example in enumerate(getattr(rule, kind))
    ]


@pytest.mark.parametrize(("rule", "example"), _cases("VALID"))
def test_valid_examples_have_no_finding(rule: Rule, example) -> None:
    assert list(rule.check(_project(example))) == []


@pytest.mark.parametrize(("rule", "example"), _cases("INVALID"))
def test_invalid_examples_are_reported(rule: Rule, example: Invalid) -> None:
    findings = list(rule.check(_project(example.code)))
    assert findings, f"{rule.code} missed:\n{example.code}"
    assert {f.code for f in findings} == {rule.code}
    # exactly the expected findings: where (line, column, file) and the whole message
    assert sorted((f.path, f.line, f.col, f.message) for f in findings) == sorted(
        (e.path, e.line, e.col, e.message) for e in example.expected
    ), f"{rule.code}:\n{example.code}"


@pytest.mark.parametrize("rule", checks.RULES, ids=lambda r: r.code)
def test_every_rule_documents_itself(rule: Rule) -> None:
    doc = type(rule).__module__
    module_doc = __import__(doc, fromlist=["_"]).__doc__
    for heading in ("What it does", "Why is this bad", "Example", "Use instead"):
        assert f"\n{heading}\n" in module_doc
    assert rule.VALID and rule.INVALID


def _snippet(rule: Rule, heading: str) -> list[str]:
    """The code block of a docstring section, as stripped lines (``...`` marks a gap)."""
    [text] = [body for name, body in sections(rule.description) if name == heading]
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)
    assert len(blocks) == 1, f"{rule.code} {heading}: one ```python block"
    return [line.strip() for line in blocks[0].splitlines() if line.strip()]


def _shows(snippet: list[str], example: Example) -> bool:
    """Whether ``snippet``'s lines appear in one file of ``example`` in order, consecutive
    (blank lines aside) except where the snippet says ``...``."""
    parts, part = [], []
    for line in snippet:
        if line == "...":
            parts.append(part)
            part = []
        else:
            part.append(line)
    parts.append(part)
    files = [example] if isinstance(example, str) else list(example.values())
    for text in files:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        at = 0
        for part in parts:
            found = next(
                (
                    i
                    for i in range(at, len(lines) - len(part) + 1)
                    if lines[i : i + len(part)] == part
                ),
                None,
            )
            if found is None:
                break
            at = found + len(part)
        else:
            return True
    return False


@pytest.mark.parametrize("rule", checks.RULES, ids=lambda r: r.code)
def test_the_docstring_example_is_a_bad_fixed_pair(rule: Rule) -> None:
    """The docstring's Example is code of an INVALID example (reported), and its "Use
    instead" code of a VALID one (not reported), so the rule page shows tested code."""
    bad, good = _snippet(rule, "Example"), _snippet(rule, "Use instead")
    assert bad != good
    assert any(_shows(bad, example.code) for example in rule.INVALID), rule.code
    assert any(_shows(good, example) for example in rule.VALID), rule.code


def test_apply_reports_a_hand_written_deadline_as_upstream(tmp_path) -> None:
    disagg = tmp_path / "sglang" / "srt" / "disaggregation"
    disagg.mkdir(parents=True)
    (disagg / "prefill.py").write_text(prefill(stamp=STAMP_ONCE, helper=HELPER, before=CALL_HELPER))
    outcome = InflightDeadline().plan(Workspace(open_tree(tmp_path)))
    assert outcome.status is Status.UPSTREAM, outcome.note
    assert "entered_at" in outcome.note
