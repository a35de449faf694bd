"""``apply --no-markers`` (marker-free code, recognised by what it does on later runs) and
``pdguard export`` (the patch series upstream would take)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pdguard.commands import apply as pipeline
from pdguard.fix_names import MARKER_PREFIX, unmark
from pdguard.fixes import Status
from pdguard.series import DOCS_PAGE, document
from pdguard.tree import open_tree
from tests.helpers import (
    PATCHABLE,
    copy_as_checkout,
    copy_release,
    git,
    init_repo,
    one_error_line,
    pdguard,
)
from tests.paths import ROOT

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


# -- export ---------------------------------------------------------------------------------

# A docs page of the checkout's shape (pdguard's own words): the series adds its lines here.
DOCS = """\
# Environment Variables

Variables that change how the server runs.

## General

| Environment Variable | Description | Default Value |
| --- | --- | --- |
| `SGLANG_EXAMPLE` | An example setting | `1` |

## PD Disaggregation

| Environment Variable | Description | Default Value |
| --- | --- | --- |
| `SGLANG_DISAGGREGATION_WAITING_TIMEOUT` | Seconds decode waits for its KV | `300` |
| `SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT` | Seconds prefill waits for its peer | `300` |

## Elsewhere

More words.
"""


def _checkout(version: str, root: Path) -> Path:
    """A git checkout of ``version`` shaped as upstream's: python/sglang/..., docs/."""
    init_repo(root)
    copy_as_checkout(version, root)
    (root / DOCS_PAGE).parent.mkdir(parents=True)
    (root / DOCS_PAGE).write_text(DOCS)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"sglang {version}")
    return root


# 0.4.7 has all five fixes but decode-queue-bound to apply (sender-abort and the receivers too)
@pytest.mark.parametrize("version", ["0.4.7", "0.5.14", "0.5.23"])
def test_export_series_applies_with_git_am_and_check_passes(version: str, tmp_path: Path) -> None:
    import black

    from pdguard.commands.check import check_project, load_project
    from pdguard.series import COMMITS, TEST_DIR

    checkout = _checkout(version, tmp_path / "sglang")
    out = tmp_path / "series"
    done = pdguard("export", str(checkout), "-o", str(out), "--format", "json")
    assert done.returncode == 0, done.stderr
    commits = json.loads(done.stdout)
    patches = sorted(out.glob("*.patch"))
    assert [p.name[:5] for p in patches] == [f"{n:04d}-" for n in range(1, len(patches) + 1)]
    assert len(patches) == len(commits) >= 2
    assert git(checkout, "status", "--porcelain") == ""  # export reads, never writes
    # the whole plan on the release: which fixes apply and which files each changes
    whole = pipeline.plan(open_tree(copy_release(version, tmp_path / "plain")), markers=False)
    applied = [n for n, o in whole.outcomes.items() if o.status is Status.APPLIED]
    assert [c["fix"] for c in commits] == applied  # one commit per fix, in FIXES' order
    for patch in patches:
        assert "pdguard" not in patch.read_text().lower(), patch
    git(checkout, "am", "-q", "--keep-non-patch", *map(str, patches))
    log = git(checkout, "log", "--format=%s", f"-{len(patches)}").splitlines()[::-1]
    assert log == [COMMITS[c["fix"]].subject for c in commits]
    for n, commit in enumerate(commits):
        sha = f"HEAD~{len(commits) - 1 - n}"
        touched = set(git(checkout, "show", "--format=", "--name-only", sha).splitlines())
        fix_files = {
            f"python/{rel}" for rel in whole.changes if f"python/{rel}" in set(commit["files"])
        }
        test = f"{TEST_DIR}/{COMMITS[commit['fix']].test_name}.py"
        docs = {DOCS_PAGE} if COMMITS[commit["fix"]].env is not None else set()  # reads no env
        assert touched == fix_files | {test} | docs, (commit["fix"], touched)
        assert fix_files, commit["fix"]
        body = git(checkout, "show", "-s", "--format=%b", sha)
        assert "#" in body and "Test: " in body, body  # the upstream PR it follows, its test
        code = (checkout / test).read_text()
        compile(code, test, "exec")
        assert black.format_str(code, mode=black.Mode()) == code
        assert "unittest.main()" in code
    # every fix's source files changed by the series, exactly as apply --no-markers does
    for rel, new in whole.changes.items():
        assert (checkout / "python" / rel).read_text() == new.text, rel
    docs = (checkout / DOCS_PAGE).read_text()
    assert "`SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT`" in docs
    tree = open_tree(checkout)
    assert not check_project(tree, load_project(tree)).findings
    assert pdguard("check", str(checkout)).returncode == 0
    # the tests run against the release's own code (its missing imports stubbed) and pass
    tests = sorted(str(p) for p in (checkout / TEST_DIR).glob("test_*.py"))
    assert len(tests) == len(commits)
    ran = _run_tests(checkout, tests)
    assert ran.returncode == 0, ran.stderr[-3000:]
    # each commit's test passes at that commit already (the series bisects)
    for n, commit in enumerate(commits):
        git(checkout, "checkout", "-q", f"HEAD~{len(commits) - 1 - n}", "--", "python")
        test = str(checkout / TEST_DIR / f"{COMMITS[commit['fix']].test_name}.py")
        assert _run_tests(checkout, [test]).returncode == 0, (commit["fix"], "at its commit")
    # and each fails on the release as it was: it tests the fix
    git(checkout, "checkout", "-q", f"HEAD~{len(commits)}", "--", "python")
    for test in tests:
        assert _run_tests(checkout, [test]).returncode == 1, test
    git(checkout, "checkout", "-q", "HEAD", "--", "python")


def _run_tests(checkout: Path, tests: list[str]) -> subprocess.CompletedProcess[str]:
    """The generated unit tests, run by ``tests.sglang_stubs`` in a process of their own."""
    return subprocess.run(
        [sys.executable, "-m", "tests.sglang_stubs", str(checkout), *tests],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def test_document_adds_a_row_to_the_family_table_or_a_sentence_to_an_existing_row() -> None:
    from pdguard.series import COMMITS

    inflight = COMMITS["inflight-deadline"].env
    waiting = COMMITS["decode-queue-bound"].env
    assert inflight is not None and waiting is not None
    page = document(DOCS, inflight)
    added = [line for line in page.splitlines() if line not in DOCS.splitlines()]
    assert added == [f"| `{inflight.name}` | {inflight.description} | {inflight.default} |"]
    lines = page.splitlines()
    assert lines.index(added[0]) == lines.index("## Elsewhere") - 2  # the PD table's last row
    page = document(DOCS, waiting)
    assert f"Seconds decode waits for its KV. {waiting.also} | `300` |" in page
    assert document(page, waiting) == page  # said once


def test_export_of_a_tree_that_is_no_checkout_is_one_line_exit_2(tmp_path: Path) -> None:
    root = copy_release("0.5.23", tmp_path / "sglang")
    done = pdguard("export", str(root), "-o", str(tmp_path / "out"))
    assert done.returncode == 2
    assert one_error_line(done.stderr).endswith("(python/sglang/... and docs/)")
    assert not (tmp_path / "out").exists()


def test_export_into_a_directory_holding_patches_is_one_line_exit_2(tmp_path: Path) -> None:
    checkout = _checkout("0.5.23", tmp_path / "sglang")
    out = tmp_path / "out"
    out.mkdir()
    (out / "0001-earlier.patch").write_text("an earlier series\n")
    done = pdguard("export", str(checkout), "-o", str(out))
    assert done.returncode == 2
    assert "already holds .patch files" in one_error_line(done.stderr)
    assert sorted(p.name for p in out.iterdir()) == ["0001-earlier.patch"]
