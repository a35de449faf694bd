"""What ``check`` calls fixable is what ``pdguard apply`` fixes. The "[*] N fixable" line counts
what ``could_fix`` tells from the parsed files; it never leaves out a finding apply fixes, and
it agrees with apply's plan on every CI release. On every rule's INVALID example (made a tree:
a prefill.py with a deadline where the example has none), ``--show-fixes`` plans and counts
exactly what apply removes (none where it refuses), and ``check --fix --show-fixes`` lists what
it fixed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from pdguard import checks
from pdguard.checks.examples import PATCHED
from pdguard.checks.rule import PREFILL, Example
from pdguard.commands import apply as pipeline
from pdguard.commands.check import CheckResult, check_project, check_tree, could_fix, gone
from pdguard.tree import SourceTree, open_tree
from tests.helpers import RELEASES, run_main

EXAMPLES = [
    pytest.param(invalid.code, id=f"{rule.code}-{n}")
    for rule in checks.RULES
    for n, invalid in enumerate(rule.INVALID)
]
# The INVALID examples where apply refuses what check's line counts: the examples are the
# fewest lines that show their rule, and lack what a fix anchors on (NixlKVSender's manager,
# the receiver's check_status() read), which a release has; --show-fixes plans.
OVERCLAIMED = {"PDG004-2", "PDG004-4", "PDG006-5"}


def _tree(root: Path, code: Example) -> Path:
    files = {PREFILL: code} if isinstance(code, str) else dict(code)
    files.setdefault(PREFILL, PATCHED)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _fixed(tree: SourceTree, result: CheckResult) -> Counter[tuple[str, str]]:
    """What apply's plan removes from ``result``'s findings (nothing when it refuses)."""
    planned = pipeline.plan(tree, confirm=False)
    if planned.refused:
        return Counter()
    texts = {**result.project.texts, **{r: new.text for r, new in planned.changes.items()}}
    return gone(result.findings, check_project(tree, type(result.project)(texts)).findings)


def _line(count: int) -> str:
    return f"[*] {count} fixable with `pdguard apply` (or `pdguard check --fix`)."


@pytest.mark.parametrize("code", EXAMPLES)
def test_fixable_is_what_apply_fixes(tmp_path: Path, capsys, request, code: Example) -> None:
    root = _tree(tmp_path / "tree", code)
    tree = open_tree(root)
    result = check_tree(tree)
    fixed = _fixed(tree, result)
    could = Counter((f.path, f.code) for f in could_fix(result))
    assert not fixed - could  # never leaves out what apply fixes
    overclaimed = request.node.callspec.id in OVERCLAIMED
    assert (could != fixed) is overclaimed, (could, fixed)
    count = sum(fixed.values())
    _, out, _ = run_main(capsys, "check", str(root), "--no-cache")
    assert (_line(sum(could.values())) in out.splitlines()) is bool(could), out
    code_, out, err = run_main(capsys, "check", str(root), "--no-cache", "--show-fixes")
    assert code_ == 1, err
    lines = out.splitlines()
    assert (_line(count) in lines) is bool(count), out
    assert (f"Would fix {count} finding{'s' if count != 1 else ''}:" in lines) is bool(count)
    assert any(" would be refused: " in line for line in lines) is (not count), out
    _, out, _ = run_main(capsys, "check", str(root), "--no-cache", "--fix", "--show-fixes")
    assert (f"Fixed {count} finding" in out) is bool(count), out


def test_show_fixes_lists_by_file_and_rule(tree: Path, capsys) -> None:
    code, out, _ = run_main(capsys, "check", "tree", "--show-fixes")
    assert code == 1
    assert out.splitlines()[-5:] == [
        "Would fix 1 finding:",
        "- tree/sglang/srt/disaggregation/prefill.py:",
        "    1 x PDG001 (inflight-wait-forever) by inflight-deadline",
        "Found 1 finding.",
        _line(1),
    ]
    code, out, _ = run_main(capsys, "check", "tree", "--fix", "--show-fixes")
    assert code == 0
    assert out.splitlines() == [
        "Fixed 1 finding:",
        "- tree/sglang/srt/disaggregation/prefill.py:",
        "    1 x PDG001 (inflight-wait-forever) by inflight-deadline",
        "All checks passed! (1 fixed)",
    ]
    code, _, err = run_main(capsys, "check", "tree", "--show-fixes", "--format", "json")
    assert code == 2 and "--show-fixes" in err


@pytest.mark.releases
@pytest.mark.parametrize("info", RELEASES, ids=lambda r: r.version)
def test_fixable_line_agrees_with_apply_on_releases(info, tmp_path: Path) -> None:
    from tests.helpers import copy_release

    tree = open_tree(copy_release(info.version, tmp_path / "tree"))
    result = check_tree(tree)
    assert Counter((f.path, f.code) for f in could_fix(result)) == _fixed(tree, result)
