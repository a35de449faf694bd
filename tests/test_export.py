"""``apply --no-markers`` (marker-free code, recognised by what it does on later runs) and
``pdguard export`` (the patch series upstream would take)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdguard.commands import apply as pipeline
from pdguard.fix_names import MARKER_PREFIX, unmark
from pdguard.fixes import Status
from pdguard.tree import open_tree
from tests.helpers import PATCHABLE, copy_release, git, init_repo, pdguard

# -- unmark ---------------------------------------------------------------------------------


def test_unmark_drops_a_lone_marker_and_keeps_the_words_a_marker_led() -> None:
    new = (
        "x = 1\n"
        "    # pdguard: sender-abort\n"
        "    def abort(self):\n"
        "        # pdguard: sender-abort: once aborted, the transfer is over.\n"
        "        # pdguard: sender-abort: poll() reports Failed from now on.\n"
        "        pass\n"
    )
    assert unmark(new, "x = 1\n") == (
        "x = 1\n"
        "    def abort(self):\n"
        "        # Once aborted, the transfer is over.\n"
        "        # poll() reports Failed from now on.\n"
        "        pass\n"
    )


def test_unmark_keeps_the_markers_of_a_fix_the_original_carries_and_unknown_names() -> None:
    original = "# pdguard: inflight-deadline\nx = 1\n"
    new = original + "# pdguard: sender-abort: set by abort().\n# pdguard: ignore[PDG001]\n"
    assert unmark(new, original) == original + "# Set by abort().\n# pdguard: ignore[PDG001]\n"


# -- apply --no-markers on the releases -----------------------------------------------------


def _statuses(result: pipeline.ApplyResult) -> dict[str, Status]:
    return {name: outcome.status for name, outcome in result.outcomes.items()}


@pytest.mark.parametrize("info", PATCHABLE, ids=lambda r: r.version)
def test_no_markers_is_recognised_by_meaning_on_the_next_run(info, tmp_path: Path) -> None:
    from pdguard.commands.check import check_project, load_project

    root = copy_release(info.version, tmp_path / "sglang")
    original = {p: p.read_text() for p in root.rglob("*.py")}
    first = pipeline.plan(open_tree(root), markers=False)
    assert not first.refused, first.refusal()
    assert Status.APPLIED in _statuses(first).values()
    pipeline.write(first)
    changed = {p: p.read_text() for p in root.rglob("*.py") if p.read_text() != original[p]}
    assert changed
    for path, text in changed.items():
        added = set(text.splitlines()) - set(original[path].splitlines())
        assert not [line for line in added if MARKER_PREFIX.strip() in line], path
    again = pipeline.plan(open_tree(root), markers=False)
    assert not again.changes
    for name, status in _statuses(again).items():
        if _statuses(first)[name] is Status.APPLIED:
            assert status is Status.UPSTREAM, (name, again.outcomes[name])
    tree = open_tree(root)
    assert not check_project(tree, load_project(tree)).findings
    # with markers, the same tree is still upstream: nothing is re-applied
    assert not pipeline.plan(open_tree(root)).changes


def test_apply_no_markers_command_line(tmp_path: Path) -> None:
    root = init_repo(copy_release("0.5.23", tmp_path / "sglang"))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "release")
    assert pdguard("apply", str(root), "--no-markers").returncode == 0
    diff = git(root, "diff")
    assert diff and "pdguard" not in diff
    second = pdguard("apply", str(root), "--no-markers")
    assert second.returncode == 0 and "nothing to change" in second.stdout, second.stdout
    assert "applied" not in second.stdout
    assert pdguard("check", str(root)).returncode == 0
