"""One verdict: ``check``, ``apply``'s re-check and ``verify``'s re-check decide a tree through
``commands.check.check_project`` (the same rules, the same suppressions)."""

from __future__ import annotations

from pathlib import Path

from pdguard.checks.project import Project
from pdguard.commands import verify
from pdguard.commands.check import check_project
from pdguard.fixes import FIXES
from pdguard.tree import open_tree
from tests.corpus import _BASE, BASE_CONN, PREFILL, prefill

_KEEP = "                kept.append(req)\n"


def _tree(root: Path, text: str) -> Project:
    files = {PREFILL: text, BASE_CONN: _BASE}
    for rel, body in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)
    (root / "sglang" / "version.py").write_text('__version__ = "0.0.1-fork"\n')
    return Project(files)


def _verdicts(root: Path, text: str) -> tuple[list[str], str]:
    """(what check reports, what verify's re-check calls the inflight fix)."""
    project = _tree(root, text)
    tree = open_tree(root)
    found = [f.code for f in check_project(tree, project).findings]
    fix = next(f for f in FIXES if f.name == "inflight-deadline")
    report = verify.RefReport("HEAD", None, None, fixes={fix.name: "carried"})
    verify._recheck(tree, project, [fix], report)
    return found, report.fixes[fix.name]


def test_verify_and_check_agree_on_a_suppressed_finding(tmp_path: Path) -> None:
    unbounded = prefill(expire=False, before="")
    found, status = _verdicts(tmp_path / "a", unbounded)
    assert "PDG001" in found and status == "drifted"
    # the same tree with the finding suppressed where it is reported: clean for both
    suppressed = unbounded.replace(_KEEP, _KEEP.rstrip("\n") + "  # pdguard: ignore[PDG001]\n")
    found, status = _verdicts(tmp_path / "b", suppressed)
    assert found == [] and status == "carried"
