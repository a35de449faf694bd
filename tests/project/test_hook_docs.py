"""The shipped hook definitions and workflow say what the code does: the apply hook names every
fix (and the rules that prove it), the workflow has a timeout and pins nothing that does not
exist."""

from __future__ import annotations

import re

import yaml

from pdguard.fixes import FIXES
from tests.paths import ROOT


def test_the_apply_hook_names_every_fix_and_its_rules() -> None:
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    description = " ".join(hooks["pdguard-apply"]["description"].split())
    for fix in FIXES:
        assert fix.name in description, fix.name
        # the findings it removes, in parentheses after its name (as check's fixable line)
        assert f"{fix.name} ({', '.join(fix.fixes)}" in description, fix.name
    assert f"pdguard's {['', 'one', 'two', 'three', 'four', 'five'][len(FIXES)]} fixes" in (
        description
    )


def test_the_workflow_has_a_timeout_and_pins_no_tag() -> None:
    text = (ROOT / "examples" / "upstream-bump.yml").read_text()
    workflow = yaml.safe_load(text)
    for job in workflow["jobs"].values():
        assert 0 < job["timeout-minutes"] <= 60
    pdguard = workflow["env"]["PDGUARD"]
    assert "@" not in pdguard.removeprefix("git+https://")  # unpinned, or a commit sha
    assert not re.search(r"pdguard@v\d", text)  # no tag of pdguard: it publishes none


def test_the_pre_commit_page_says_when_the_hooks_fire_and_the_workflow_timeout() -> None:
    """docs/pre-commit.md names every directory and file of the hooks' ``files`` pattern, and
    the workflow's timeout as the example sets it."""
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    page = " ".join((ROOT / "docs" / "pre-commit.md").read_text().split())
    for hook in hooks:
        for part in ("disaggregation", "managers", "environ"):
            assert part in hook["files"], (hook["id"], part)
    for named in (
        "`sglang/srt/disaggregation/`",
        "`sglang/srt/managers/`",
        "sglang/srt/environ.py",
    ):
        assert named in page, named
    workflow = yaml.safe_load((ROOT / "examples" / "upstream-bump.yml").read_text())
    (job,) = workflow["jobs"].values()
    assert f"timeout-minutes: {job['timeout-minutes']}" in page
