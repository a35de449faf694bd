"""Everything about a fix or a rule is read from its registry (``FIXES``, ``RULES``): the
command line's help, ``--select``, SARIF, and verify's map from a fix to the rules that prove it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdguard import checks
from pdguard.cli import build_parser, main
from pdguard.commands import check
from pdguard.fixes import FIXES
from tests.snippets import make_tree


def _help(*argv: str) -> str:
    parser = build_parser()
    if not argv:
        return parser.format_help()
    return parser._subparsers._group_actions[0].choices[argv[0]].format_help()  # type: ignore[union-attr, index]  # argparse's private subparser list


def test_every_rule_has_code_name_and_one_line_summary() -> None:
    assert len({r.code for r in checks.RULES}) == len(checks.RULES)
    for rule in checks.RULES:
        assert rule.code.startswith("PDG") and rule.name
        assert rule.summary and "\n" not in rule.summary
        assert rule.description


def test_check_help_lists_the_registry() -> None:
    text = _help("check")
    for rule in checks.RULES:
        assert rule.code in text and rule.name in text
        assert rule.summary.rstrip(".") in text


def test_apply_and_top_level_help_list_the_fixes() -> None:
    for text in (_help(), _help("apply")):
        for fix in FIXES:
            assert fix.name in text and fix.summary in text


def test_every_fix_is_proved_by_known_rules() -> None:
    assert len({f.name for f in FIXES}) == len(FIXES)
    proved = [code for fix in FIXES for code in fix.rules]
    assert set(proved) <= set(checks.CODES)  # every fix names known rules
    assert len(proved) == len(set(proved))  # and no rule proves two fixes
    text = _help("verify")
    for fix in FIXES:
        assert f"{fix.name}" in text and ", ".join(fix.rules) in text
        assert fix.marker == f"# pdguard: {fix.name}"


def test_select_reads_the_registry() -> None:
    assert check.select_codes(None, None) == list(checks.STATIC_CODES)
    assert check.select_codes(None, None, confirm=True) == list(checks.CODES)
    assert check.select_codes(["PDG00"], [checks.CODES[0]]) == list(checks.STATIC_CODES[1:])


def test_sarif_rules_are_the_registry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = make_tree(tmp_path / "tree")
    main(["check", str(tree), "--format", "sarif"])
    driver = json.loads(capsys.readouterr().out)["runs"][0]["tool"]["driver"]
    assert [(r["id"], r["name"], r["shortDescription"]["text"]) for r in driver["rules"]] == [
        (r.code, r.name, r.summary) for r in checks.RULES
    ]


def test_codemods_take_the_fix_names_from_the_fix_modules() -> None:
    from pdguard.codemods import inflight_deadline, sender_bootstrap_timeout
    from pdguard.fixes import inflight_deadline as inflight_fix
    from pdguard.fixes import sender_bootstrap_timeout as sender_fix

    assert inflight_deadline.FIX is inflight_fix.FIX == inflight_fix.InflightDeadline.name
    assert sender_bootstrap_timeout.FIX is sender_fix.FIX
    assert inflight_deadline.HELPER is inflight_fix.HELPER
