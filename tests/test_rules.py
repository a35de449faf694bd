"""Every rule's VALID/INVALID examples (they live beside the rule, as in Fixit)."""

from __future__ import annotations

import pytest

from pdguard import checks
from pdguard.checks.examples import CALL_HELPER, HELPER, STAMP_ONCE, prefill
from pdguard.checks.model import PREFILL, Example, Invalid, Rule
from pdguard.checks.project import Project
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
    for heading in ("What it does", "Why is this bad", "Example"):
        assert heading in module_doc
    assert rule.VALID and rule.INVALID


def test_apply_reports_a_hand_written_deadline_as_upstream(tmp_path) -> None:
    disagg = tmp_path / "sglang" / "srt" / "disaggregation"
    disagg.mkdir(parents=True)
    (disagg / "prefill.py").write_text(prefill(stamp=STAMP_ONCE, helper=HELPER, before=CALL_HELPER))
    outcome = InflightDeadline().plan(Workspace(open_tree(tmp_path)))
    assert outcome.status is Status.UPSTREAM, outcome.note
    assert "entered_at" in outcome.note
