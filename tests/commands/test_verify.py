"""``pdguard verify`` and ``pdguard carry`` on a real git repository built from real releases.

The repository is laid out as upstream SGLang (``python/sglang/``): one commit and one annotated
tag ``v<version>`` per release of ``tests.helpers.RELEASES`` (the ``ci = true`` ones, one
per shape family; all 62 with ``PDGUARD_ALL_RELEASES=1``), plus the refs a fork has:

* ``fork``: the fix carried onto v0.4.7 (``pdguard carry``);
* ``fork-merged``: a merge of v0.5.14 into ``fork`` whose tree is v0.5.14's (the fix lost);
* ``fork-reapplied``: the fix carried again onto ``fork-merged``;
* ``fork-apply``: v0.5.14 patched by ``pdguard apply`` on a checkout and committed;
* ``moved``: v0.5.23 with ``prefill.py`` moved away; ``renamed``: with
  ``process_disagg_prefill_inflight_queue`` renamed;
* ``docs``: an orphan branch with no SGLang tree;
* ``main`` (checked out, at the newest tag) with a dirty working tree: an unstaged
  modification, a staged change, untracked files and a stash entry, which neither command
  may touch.
"""

from __future__ import annotations

import itertools
import json
import os
import pty
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

import pytest

from pdguard import __version__
from pdguard.cli import main
from pdguard.commands import verify as verifying
from pdguard.commands.check import check_tree
from pdguard.fixes import FIXES as FIX_UNITS
from pdguard.tree import open_tree
from pdguard.vendor_sglang import UnknownReleaseError, fetch_release, get_release
from tests.fixes.test_decode_fixes import decode_expected
from tests.helpers import (
    APPLY_STATUSES,
    FIXES,
    RELEASES,
    commit_releases,
    git,
    init_repo,
    pdguard,
)

pytestmark = pytest.mark.releases

# Every fix verify reports on: the prefill pair (FIXES), then the decode fixes (issue 11), whose
# statuses follow the decode families (tests.fixes.test_decode_fixes.decode_expected).
ALL_FIXES = tuple(fix.name for fix in FIX_UNITS)
DECODE_FIXES = ALL_FIXES[len(FIXES) :]
STATUSES = {"carried", "upstream", "applicable", "drifted", "not-applicable"}
FINDING_KEYS = {"code", "path", "line", "col", "symbol", "message"}
# The prefill rules, which the fixes verify and carry are about. The decode rules (PDG006,
# PDG007) still report a carried ref's unpatched decode code.
PREFILL_CODES = ("PDG001", "PDG002", "PDG003", "PDG004", "PDG005", "PDG008")


def _prefill_findings(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["code"] in PREFILL_CODES]


PREFILL = "python/sglang/srt/disaggregation/prefill.py"
DECODE = "python/sglang/srt/disaggregation/decode.py"
ENVIRON = "python/sglang/srt/environ.py"
INFLIGHT = "process_disagg_prefill_inflight_queue"

# What an unpatched release is, per shape family (docs/releases.md): what apply
# would do, in verify's words (F1, 0.4.6 - 0.4.6.post4: the Failed branch raises: drifted).
VERIFY_STATUS = {"refused": "drifted", "applied": "applicable", "upstream": "upstream"}
EXPECTED = {
    family: tuple(VERIFY_STATUS[status] for status in statuses)
    for family, statuses in APPLY_STATUSES.items()
}
TAGS = {f"v{r.version}": r for r in RELEASES}
for needed in ("0.4.6", "0.4.7", "0.5.14", "0.5.17", "0.5.18", "0.5.23"):
    assert f"v{needed}" in TAGS, f"{needed} must stay a ci release for these tests"
NEWEST = f"v{RELEASES[-1].version}"

# Refs (besides the tags) and what verify must say of them.
FORK_REFS = {  # sender-abort, inflight-deadline, sender-bootstrap-timeout
    "fork": ("carried", "carried", "carried"),
    "fork-merged": ("upstream", "applicable", "applicable"),
    "fork-reapplied": ("upstream", "carried", "carried"),  # 0.5.14's senders honour abort()
    "fork-apply": ("upstream", "carried", "carried"),
    "moved": ("upstream", "drifted", "upstream"),
    "renamed": ("upstream", "drifted", "upstream"),
    "main": ("upstream", "applicable", "upstream"),  # HEAD's commit, not the patched tree
}


def snapshot(repo: Path) -> dict[str, object]:
    """Everything verify and carry must leave alone (read without refreshing the index)."""
    files = {
        p.relative_to(repo).as_posix(): p.read_bytes()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }
    return {
        "index": (repo / ".git/index").read_bytes(),
        "HEAD file": (repo / ".git/HEAD").read_bytes(),
        "status": git(repo, "--no-optional-locks", "status", "--porcelain=v2", "--branch", "-uall"),
        "HEAD": git(repo, "rev-parse", "HEAD"),
        "stash": git(repo, "stash", "list", "--format=%H %gs"),
        "files": files,
    }


@dataclass
class Upstream:
    path: Path
    dirty: dict[str, object]  # the snapshot taken once the working tree was made dirty

    def sha(self, ref: str) -> str:
        return git(self.path, "rev-parse", f"{ref}^{{commit}}")


def _release_commits(repo: Path) -> None:
    commit_releases(repo, [release.version for release in RELEASES])


def _fork_refs(repo: Path) -> None:
    assert main(["carry", "--repo", str(repo), "--onto", "v0.4.7", "--branch", "fork"]) == 0
    merged = git(
        repo,
        "commit-tree",
        "v0.5.14^{tree}",
        "-p",
        "fork",
        "-p",
        "v0.5.14^{commit}",
        "-m",
        "Merge tag 'v0.5.14' into fork (their tree: the fix is lost)",
    )
    git(repo, "branch", "fork-merged", merged)
    assert (
        main(["carry", "--repo", str(repo), "--onto", "fork-merged", "--branch", "fork-reapplied"])
        == 0
    )

    git(repo, "checkout", "-q", "-b", "fork-apply", "v0.5.14")
    assert main(["apply", str(repo)]) == 0
    git(repo, "commit", "-q", "-am", "pdguard apply on a checkout")

    git(repo, "checkout", "-q", "-b", "moved", NEWEST)
    git(repo, "mv", PREFILL, PREFILL.replace("prefill.py", "prefill_scheduler.py"))
    git(repo, "commit", "-q", "-m", "move prefill.py")

    git(repo, "checkout", "-q", "-b", "renamed", NEWEST)
    prefill = repo / PREFILL
    prefill.write_text(prefill.read_text().replace(INFLIGHT, "process_prefill_inflight"))
    git(repo, "commit", "-q", "-am", "rename the inflight queue's poll")

    blob = subprocess.run(
        ["git", "-C", str(repo), "hash-object", "-w", "--stdin"],
        input="docs only\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    tree = subprocess.run(
        ["git", "-C", str(repo), "mktree"],
        input=f"100644 blob {blob}\tREADME.md\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    git(repo, "branch", "docs", git(repo, "commit-tree", tree, "-m", "docs"))
    git(repo, "checkout", "-q", "main")


def _make_dirty(repo: Path) -> None:
    version = repo / "python/sglang/version.py"
    version.write_bytes(version.read_bytes() + b"# stashed edit\n")
    git(repo, "stash", "push", "-q", "-m", "wip")
    assert main(["apply", str(repo)]) == 0  # the fixed prefill.py, unstaged
    utils = repo / "python/sglang/srt/disaggregation/utils.py"
    utils.write_bytes(utils.read_bytes() + b"# staged edit\n")
    git(repo, "add", str(utils))
    (repo / "notes.txt").write_text("untracked\n")
    (repo / "python/sglang/srt/disaggregation/scratch.py").write_text("x = 1\n")


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Upstream:
    repo = init_repo(tmp_path_factory.mktemp("verify") / "sglang")
    _release_commits(repo)
    _fork_refs(repo)
    _make_dirty(repo)
    status = git(repo, "status", "--porcelain=v2", "-uall")
    assert re.search(r"^1 \.M .* python/sglang/srt/disaggregation/prefill\.py$", status, re.M)
    assert re.search(r"^1 M\. .* python/sglang/srt/disaggregation/utils\.py$", status, re.M)
    assert "? notes.txt" in status
    assert git(repo, "stash", "list")
    return Upstream(repo, snapshot(repo))


@dataclass
class Verified:
    proc: subprocess.CompletedProcess[str]
    reports: dict[str, dict]
    order: list[str]
    before: dict[str, object]
    after: dict[str, object]


@pytest.fixture(scope="session")
def verified(upstream: Upstream) -> Verified:
    """One ``pdguard verify`` over every tag and every fork ref (worker processes)."""
    before = snapshot(upstream.path)
    refs = [arg for ref in FORK_REFS for arg in ("--ref", ref)]
    proc = pdguard(
        "verify", "--repo", str(upstream.path), "--tags", "v*", *refs, "--format", "json"
    )
    after = snapshot(upstream.path)
    data = json.loads(proc.stdout) if proc.stdout.startswith("[") else []
    return Verified(proc, {r["ref"]: r for r in data}, [r["ref"] for r in data], before, after)


# --- verify ----------------------------------------------------------------------------------


def test_verify_leaves_a_dirty_repository_untouched(upstream: Upstream, verified: Verified):
    assert verified.proc.returncode == 1, verified.proc.stderr
    assert verified.after == verified.before == upstream.dirty


def test_verify_json_shape(upstream: Upstream, verified: Verified) -> None:
    data = json.loads(verified.proc.stdout)
    assert isinstance(data, list)
    assert verified.order == list(FORK_REFS) + sorted(TAGS)  # --ref order, then tags sorted
    for report in data:
        assert set(report) == {
            "ref",
            "commit",
            "sglang_version",
            "fixes",
            "notes",
            "findings",
            "error",
            "wheel",  # --pypi's wheel; None for a git ref
        }
        assert report["wheel"] is None
        assert report["error"] is None
        assert report["commit"] == upstream.sha(report["ref"])
        assert tuple(report["fixes"]) == ALL_FIXES  # the decode fixes too (issue 11)
        assert set(report["fixes"].values()) <= STATUSES
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in report["notes"].items())
        for finding in report["findings"]:
            assert set(finding) == FINDING_KEYS
            assert re.fullmatch(r"PDG\d{3}", finding["code"])
            # relative to the repository root, as the files are in a checkout
            assert finding["path"].startswith("python/sglang/srt/disaggregation/")
            assert isinstance(finding["line"], int) and finding["line"] > 0


def test_verify_tags_per_family(verified: Verified) -> None:
    for tag, release in TAGS.items():
        report = verified.reports[tag]
        assert report["sglang_version"] == release.version
        statuses = tuple(report["fixes"][f] for f in FIXES)
        assert statuses == EXPECTED[release.family], (tag, report["notes"])
        # The decode fixes (issue 11), by decode range.
        decode = {f: VERIFY_STATUS[s] for f, s in decode_expected(release.version).items()}
        assert {f: report["fixes"][f] for f in DECODE_FIXES} == decode, (tag, report["notes"])
        assert report["findings"], f"{tag}: an unpatched release has findings"
        if release.family == "F1":
            note = report["notes"]["inflight-deadline"]
            assert "raises" in note and "prefill.py" in note and INFLIGHT in note


def test_verify_fork_refs(verified: Verified) -> None:
    for ref, expected in FORK_REFS.items():
        report = verified.reports[ref]
        assert tuple(report["fixes"][f] for f in FIXES) == expected, (ref, report["notes"])
        if "drifted" not in expected and "applicable" not in expected:
            assert _prefill_findings(report) == [], ref
    assert verified.reports["fork-merged"]["sglang_version"] == "0.5.14"
    moved = verified.reports["moved"]["notes"]["inflight-deadline"]
    assert PREFILL in moved and "missing" in moved and "moved:" not in moved
    renamed = verified.reports["renamed"]["notes"]["inflight-deadline"]
    assert INFLIGHT in renamed and "prefill.py" in renamed


def test_verify_findings_are_those_of_check(verified: Verified) -> None:
    """Every tag (the worker processes share parsed files and transforms between neighbouring
    refs: none of it may leak into another ref's findings)."""
    for version in (release.version for release in RELEASES):
        result = check_tree(open_tree(fetch_release(version)))
        expected = [
            {k: getattr(f, k) for k in ("code", "path", "line", "col", "symbol", "message")}
            | {"path": f"python/{f.path}"}
            for f in result.findings
        ]
        assert verified.reports[f"v{version}"]["findings"] == expected


def test_verify_in_one_process_equals_verify_in_workers(
    upstream: Upstream, verified: Verified, capsys
) -> None:
    """``--jobs 1`` verifies every ref in one process, one after another, so each ref finds the
    files, trees and transforms of every earlier one kept (``Workspace.transform``,
    ``parse_module``); the workers see other neighbours. The reports must not differ."""
    refs = [arg for ref in FORK_REFS for arg in ("--ref", ref)]
    repo = str(upstream.path)
    code = main(
        ["verify", "--repo", repo, "--tags", "v*", *refs, "--jobs", "1", "--format", "json"]
    )
    assert code == verified.proc.returncode
    assert json.loads(capsys.readouterr().out) == json.loads(verified.proc.stdout)


def test_verify_exit_codes_and_formats(upstream: Upstream, capsys) -> None:
    repo = str(upstream.path)
    good = ["--ref", "fork", "--ref", "fork-reapplied"]
    assert main(["verify", "--repo", repo, *good, "--jobs", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["REF", "COMMIT", "VERSION", *ALL_FIXES, "FINDINGS"]
    # Issue 11: carry now also carries the receiver timeout onto 0.4.7 (its PDG006 findings on
    # Mooncake and NIXL are gone: FINDINGS 0), and 0.4.7 has no decode queue to bound.
    assert out[1].split() == [
        "fork",
        upstream.sha("fork")[:12],
        "0.4.7",
        "carried",
        "carried",
        "carried",
        "carried",
        "upstream",
        "0",
    ]
    assert len(out) == 3  # notes only for statuses that need a word

    assert main(["verify", "--repo", repo, "--tags", "v0.4.6", "--format", "github"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(
        "::warning title=pdguard verify v0.4.6::sender-bootstrap-timeout applicable: "
    )
    assert out[1].startswith("::warning title=pdguard verify v0.4.6::sender-abort applicable: ")
    assert out[2].startswith("::error title=pdguard verify v0.4.6::inflight-deadline drifted: ")
    assert "raises" in out[2]
    # Issue 11: the receiver timeout is refused on 0.4.6 too (a decode Failed poll raises).
    assert len(out) == 4
    assert out[3].startswith(
        "::error title=pdguard verify v0.4.6::receiver-waiting-timeout drifted: "
    )


def _on_a_terminal(argv: list[str]) -> tuple[int, bytes, str]:
    """``pdguard ARGV`` with stderr a terminal and stdout a pipe: (exit code, what the terminal
    got, stdout)."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pdguard", *argv], stdout=subprocess.PIPE, stderr=follower
        )
        out, _ = proc.communicate()
        os.close(follower)
        follower = -1
        written = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the terminal's other end is closed
                break
            if not chunk:
                break
            written += chunk
    finally:
        if follower != -1:
            os.close(follower)
        os.close(leader)
    return proc.returncode, written, out.decode()


def test_verify_progress_bar_whenever_stderr_is_a_terminal(upstream: Upstream) -> None:
    refs = ["--repo", str(upstream.path), "--ref", "v0.4.6", "--ref", "moved"]
    code, written, out = _on_a_terminal(["verify", *refs])
    assert code == 1
    assert b"verify [" in written and b"2/2" in written  # stdout is a pipe: still drawn
    assert out.startswith("REF")  # the table, on stdout
    code, written, _ = _on_a_terminal(["verify", *refs, "-q"])
    assert code == 1 and b"verify [" not in written
    # with stderr not a terminal (the `verified` run and pdguard() below): nothing on stderr
    quiet = pdguard("verify", "--repo", str(upstream.path), "--ref", "fork")
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_verify_pypi_agrees_with_the_tag(verified: Verified, capsys) -> None:
    version = "0.5.18"
    assert main(["verify", "--pypi", version, "--format", "json"]) == 1
    [report] = json.loads(capsys.readouterr().out)
    tag = verified.reports[f"v{version}"]
    assert report["ref"] == version and report["commit"] is None
    assert report["wheel"]["checked_against"] == "pin"  # the wheel verified, recorded
    assert report["wheel"]["sha256"] == get_release(version).sha256
    assert report["fixes"] == tag["fixes"]
    # a wheel's paths are relative to its root (sglang/...), a tag's to the repository's
    assert [f | {"path": f"python/{f['path']}"} for f in report["findings"]] == tag["findings"]


# --- errors ------------------------------------------------------------------------------------


ERRORS = {
    "verify-no-tag": (["verify", "--tags", "release-*"], "no tag matches 'release-*'"),
    "verify-not-a-repo": (["verify", "--ref", "fork", "--repo", "{tmp}"], "not a git repo"),
    "carry-unknown-ref": (["carry", "--onto", "nope", "--branch", "x"], "nope: unknown ref"),
    "carry-no-tree": (["carry", "--onto", "docs", "--branch", "x"], "docs: no SGLang tree"),
    "carry-not-a-repo": (
        ["carry", "--onto", "v0.4.7", "--branch", "x", "--repo", "{tmp}"],
        "not a git repo",
    ),
    "carry-refused": (["carry", "--onto", "v0.4.6", "--branch", "x"], "inflight-deadline refused"),
    **{
        f"carry-bad-branch-{name}": (
            ["carry", "--onto", "v0.4.7", f"--branch={name}"],
            "not a valid branch name",
        )
        for name in (
            "a..b",
            "HEAD",
            "@",
            "@{-1}",
            "refs/heads/x",
            "a b",
            "a~1",
            "a^b",
            "a:b",
            "a?b",
            "a*b",
            "a[b",
            "a\\b",
            "x.lock",
            "-x",
            "a/",
            ".a",
            "a//b",
        )
    },
}


@pytest.mark.parametrize(("args", "expected"), ERRORS.values(), ids=ERRORS)
def test_errors_exit_2_with_one_line(upstream: Upstream, tmp_path: Path, args, expected) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--repo" not in args:
        args += ["--repo", str(upstream.path)]
    before = snapshot(upstream.path)
    branches = git(upstream.path, "branch", "--list")
    proc = pdguard(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert line.startswith("pdguard: error: ") and expected in line, line
    assert snapshot(upstream.path) == before
    assert git(upstream.path, "branch", "--list") == branches


# --- carry -------------------------------------------------------------------------------------


def _exported(repo: Path, ref: str, dest: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", ref, "python"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def test_carry_commits_the_fixed_tree(upstream: Upstream, tmp_path: Path, capsys) -> None:
    repo = upstream.path
    before = snapshot(repo)
    args = ["carry", "--repo", str(repo), "--onto", "v0.5.18", "--branch", "carry-0.5.18"]
    assert main(args) == 0
    new = upstream.sha("carry-0.5.18")
    assert capsys.readouterr().out.startswith(f"carry-0.5.18 -> {new[:12]} (on v0.5.18)")
    assert snapshot(repo) == before  # HEAD, branch, index, working tree, stash
    assert git(repo, "rev-parse", f"{new}^@") == upstream.sha("v0.5.18")  # one parent
    # Issue 11: decode-queue-bound patches decode.py too; the inflight timeout's registry
    # entry (0.5.8+) is in environ.py.
    assert git(repo, "diff", "--name-only", "v0.5.18", new).split() == [DECODE, PREFILL, ENVIRON]
    message = git(repo, "log", "-1", "--format=%B", new)
    assert "onto v0.5.18" in message and f"pdguard {__version__}" in message
    assert "inflight-deadline: applied" in message
    assert "sender-bootstrap-timeout: upstream" in message
    assert git(repo, "log", "-1", "--format=%an <%ae>", new) == (
        "Test Maintainer <maintainer@example.com>"
    )

    tree = _exported(repo, new, tmp_path / "export")
    assert main(["check", str(tree), "--select", ",".join(PREFILL_CODES)]) == 0
    capsys.readouterr()
    assert main(["verify", "--repo", str(repo), "--ref", "carry-0.5.18", "--format", "json"]) == 0
    [report] = json.loads(capsys.readouterr().out)
    assert report["fixes"] == {
        "sender-abort": "upstream",
        "inflight-deadline": "carried",
        "sender-bootstrap-timeout": "upstream",
        "receiver-waiting-timeout": "upstream",  # issue 11
        "decode-queue-bound": "carried",  # issue 11
    }
    assert _prefill_findings(report) == []


def test_carry_equals_apply_on_a_checkout(upstream: Upstream) -> None:
    repo = upstream.path
    assert (
        main(["carry", "--repo", str(repo), "--onto", "v0.5.14", "--branch", "carry-0.5.14"]) == 0
    )
    assert git(repo, "rev-parse", "carry-0.5.14^{tree}") == git(
        repo, "rev-parse", "fork-apply^{tree}"
    )
    # the fork's carry touched both senders' files and prefill.py, and kept file modes
    changed = git(repo, "diff", "--name-only", "v0.4.7", "fork").splitlines()
    assert PREFILL in changed and "python/sglang/srt/disaggregation/nixl/conn.py" in changed
    assert git(repo, "diff", "--summary", "v0.4.7", "fork") == ""


def test_carry_refuses_an_existing_branch_unless_forced(upstream: Upstream) -> None:
    repo = upstream.path
    git(repo, "branch", "taken", NEWEST)
    proc = pdguard("carry", "--repo", str(repo), "--onto", "v0.5.14", "--branch", "taken")
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line == "pdguard: error: branch taken exists (use --force to move it)"
    assert upstream.sha("taken") == upstream.sha(NEWEST)

    before = snapshot(repo)
    args = ["--repo", str(repo), "--onto", "v0.5.14", "--branch", "taken", "--force"]
    assert main(["carry", *args]) == 0
    assert git(repo, "rev-parse", "taken^@") == upstream.sha("v0.5.14")
    assert snapshot(repo) == before


def test_carry_never_moves_the_checked_out_branch(upstream: Upstream) -> None:
    repo = upstream.path
    before = snapshot(repo)
    head = upstream.sha("main")
    proc = pdguard("carry", "--repo", str(repo), "--onto", "v0.5.14", "--branch", "main", "--force")
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.startswith("pdguard: error: branch main is checked out")
    assert upstream.sha("main") == head
    assert snapshot(repo) == before


@pytest.mark.parametrize("onto", ["fork", "fork-reapplied", "fork-apply"])
def test_carry_onto_a_carried_ref_makes_no_commit(upstream: Upstream, onto: str, capsys) -> None:
    repo = upstream.path
    objects = git(repo, "rev-list", "--all", "--objects")
    before = snapshot(repo)
    assert main(["carry", "--repo", str(repo), "--onto", onto, "--branch", f"again-{onto}"]) == 0
    assert capsys.readouterr().out.strip() == f"{onto} already carries every fix: no commit"
    assert git(repo, "branch", "--list", f"again-{onto}") == ""
    assert git(repo, "rev-list", "--all", "--objects") == objects
    assert snapshot(repo) == before


def _no_identity_env(home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GIT_AUTHOR_", "GIT_COMMITTER_")) and k != "EMAIL"
    }
    home.mkdir()
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), GIT_CONFIG_NOSYSTEM="1")
    return env


def test_carry_without_a_git_identity(upstream: Upstream, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(clone)], check=True)
    env = _no_identity_env(tmp_path / "home")
    with pytest.raises(subprocess.CalledProcessError):  # git itself knows nobody here
        git(clone, "config", "--get", "user.name", env=env)

    proc = pdguard("carry", "--repo", str(clone), "--onto", "v0.4.7", "--branch", "f", env=env)
    assert proc.returncode == 0, proc.stderr
    assert git(clone, "log", "-1", "--format=%an <%ae>|%cn <%ce>", "f") == (
        "pdguard <pdguard@localhost>|pdguard <pdguard@localhost>"
    )
    assert git(clone, "rev-parse", "f^@") == git(clone, "rev-parse", "v0.4.7^{commit}")

    # a name but no e-mail (git cannot guess one on most CI machines): only the e-mail is filled
    git(clone, "config", "user.name", "Fork Bot")
    proc = pdguard("carry", "--repo", str(clone), "--onto", "v0.5.18", "--branch", "g", env=env)
    assert proc.returncode == 0, proc.stderr
    assert git(clone, "log", "-1", "--format=%an <%ae>", "g") == "Fork Bot <pdguard@localhost>"


def test_carry_reports_a_failing_git_in_one_line(upstream: Upstream) -> None:
    env = {**os.environ, "GIT_COMMITTER_NAME": "<>"}  # git refuses such a name
    before = snapshot(upstream.path)
    proc = pdguard(
        "carry", "--repo", str(upstream.path), "--onto", "v0.5.18", "--branch", "no-name", env=env
    )
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.startswith("pdguard: error: git commit-tree failed: fatal: "), line
    assert git(upstream.path, "branch", "--list", "no-name") == ""
    assert snapshot(upstream.path) == before


def test_carry_accepts_a_valid_slashed_branch_name(upstream: Upstream) -> None:
    proc = pdguard(
        "carry", "--repo", str(upstream.path), "--onto", "v0.5.17", "--branch", "pdguard/v0.5.17"
    )
    assert proc.returncode == 0, proc.stderr
    assert git(upstream.path, "rev-parse", "--verify", "refs/heads/pdguard/v0.5.17")
    git(upstream.path, "branch", "-D", "pdguard/v0.5.17")


# --- verify: a ref that errors is a row; the others are still reported ----------------------


def _broken_refs(repo: Path) -> dict[str, str]:
    """In ``repo``: a tag that points at a tree, and a commit whose prefill.py blob is missing
    (as in a shallow or partial clone). Returns ref -> the expected reason."""
    if not git(repo, "tag", "--list", "tree-tag"):
        git(repo, "tag", "tree-tag", "v0.4.7^{tree}")
    return {
        "tree-tag": "tree-tag: points at a tree, not a commit",
        "docs": "docs: no SGLang tree at that ref",
        "no-such-ref": "no-such-ref: unknown ref",
    }


@pytest.mark.parametrize("fmt", ["text", "json", "github"])
def test_verify_reports_errored_refs_as_rows(upstream: Upstream, fmt: str) -> None:
    broken = _broken_refs(upstream.path)
    refs = ["fork", *broken]
    proc = pdguard(
        "verify",
        "--repo",
        str(upstream.path),
        *(a for r in refs for a in ("--ref", r)),
        "--format",
        fmt,
    )
    assert proc.returncode == 2
    errors = proc.stderr.splitlines()
    assert len(errors) == len(broken)
    for line, why in zip(errors, broken.values(), strict=True):
        assert line.startswith("pdguard: error: ") and why in line, line
    if fmt == "json":
        reports = {r["ref"]: r for r in json.loads(proc.stdout)}
        assert list(reports) == refs
        assert reports["fork"]["error"] is None
        fork = reports["fork"]["fixes"]
        assert {fork[name] for name in FIXES} == {"carried"}  # the prefill fixes it carries
        assert set(fork.values()) <= {"carried", "upstream"}  # the decode ones: per family
        for ref, why in broken.items():
            assert why in reports[ref]["error"]
            assert set(reports[ref]["fixes"].values()) == {"error"}
    elif fmt == "text":
        rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()[1:5]}
        assert rows["fork"][3:5] == ["carried", "carried"]
        for ref in broken:
            assert rows[ref][3:5] == ["error", "error"]
            assert any(line.startswith(f"{ref}: error: ") for line in proc.stdout.splitlines())
    else:
        for ref in broken:
            assert f"::error title=pdguard verify {ref}::error: " in proc.stdout


def test_verify_missing_git_objects_are_an_error_row(upstream: Upstream, tmp_path: Path) -> None:
    clone = tmp_path / "partial"
    subprocess.run(
        ["git", "clone", "-q", "--no-local", "--no-checkout", str(upstream.path), str(clone)],
        check=True,
    )
    blob = git(clone, "rev-parse", f"v0.4.7:{PREFILL}")
    git(clone, "repack", "-a", "-d", "-q")
    # drop that one blob: rewrite the pack without it
    objects = git(clone, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    keep = "\n".join(o for o in objects.splitlines() if o != blob) + "\n"
    pack_dir = clone / ".git/objects/pack"
    old = list(pack_dir.iterdir())
    subprocess.run(
        ["git", "-C", str(clone), "pack-objects", "-q", str(pack_dir / "pack")],
        input=keep,
        text=True,
        check=True,
        capture_output=True,
    )
    for path in old:
        path.unlink()
    proc = pdguard(
        "verify", "--repo", str(clone), "--ref", "v0.4.7", "--ref", "v0.5.14", "--format", "json"
    )
    assert proc.returncode == 2, proc.stderr
    reports = {r["ref"]: r for r in json.loads(proc.stdout)}
    assert "missing" in reports["v0.4.7"]["error"] and blob[:12] in reports["v0.4.7"]["error"]
    assert reports["v0.5.14"]["error"] is None
    [line] = proc.stderr.splitlines()
    assert line.startswith("pdguard: error: v0.4.7:") and "missing" in line


def test_verify_exit_zero_and_output_file(upstream: Upstream, tmp_path: Path) -> None:
    out = tmp_path / "verify.json"
    args = ["verify", "--repo", str(upstream.path), "--ref", "v0.4.7"]
    proc = pdguard(*args, "--format", "json", "--output-file", str(out), "--exit-zero")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert json.loads(out.read_text())[0]["fixes"]["inflight-deadline"] == "applicable"
    assert pdguard(*args, "--ref", "docs", "--exit-zero").returncode == 2  # errors stay 2


def test_verify_malformed_isort_settings_is_an_error(upstream: Upstream, tmp_path: Path) -> None:
    repo = tmp_path / "bad-settings"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(repo)], check=True)
    git(repo, "checkout", "-q", "-b", "bad", "v0.5.14")
    (repo / "python/pyproject.toml").write_text("[tool.isort\nprofile = 'black'\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "bad toml")
    proc = pdguard("verify", "--repo", str(repo), "--ref", "bad", "--ref", "v0.5.14")
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert "bad:python/pyproject.toml: cannot read its isort settings" in line, line


def _stamped(tag: str, run: object = None) -> verifying.RefReport:
    """A stand-in worker (``run``: the lane's ``Run``): which process took ``tag``, and when."""
    import time

    time.sleep(0.02)  # long enough for both workers to take refs
    return verifying.RefReport(tag, str(os.getpid()), str(time.monotonic_ns()))


def test_two_workers_drain_the_refs_from_both_ends_until_they_meet() -> None:
    """Each worker meets neighbouring releases one after another (one from the newest, one
    from the oldest), every ref is done once, and the reports come back in job order."""
    tags = [f"v0.{minor}.{patch}" for minor in (4, 5) for patch in range(12)]
    shuffled = tags[5:] + tags[:5]
    reports = verifying.run_parallel(_stamped, [(tag,) for tag in shuffled], 2)
    assert [r.ref for r in reports] == shuffled
    by_process: dict[str | None, list[verifying.RefReport]] = {}
    for report in sorted(reports, key=lambda r: int(r.sglang_version or 0)):
        by_process.setdefault(report.commit, []).append(report)
    assert len(by_process) == 2
    runs = sorted(([tags.index(r.ref) for r in taken] for taken in by_process.values()), key=len)
    for run in runs:  # consecutive releases, from one end
        assert run[0] in (0, len(tags) - 1)
        assert all(abs(b - a) == 1 for a, b in itertools.pairwise(run))
    assert sorted(runs[0] + runs[1]) == list(range(len(tags)))


def test_segments_give_each_pair_of_workers_a_stretch() -> None:
    assert verifying._segments(62, 2) == [(0, 61, True)]
    assert verifying._segments(62, 3) == [(0, 40, True), (41, 61, False)]
    assert verifying._segments(10, 4) == [(0, 4, True), (5, 9, True)]
    assert verifying._segments(3, 3) == [(0, 1, True), (2, 2, False)]


@pytest.mark.releases
def test_verify_pypi_any_published_release(capsys) -> None:
    """A version releases.toml does not pin: its wheel's sha256 is checked against the index's
    and recorded (text and JSON)."""
    version = "0.4.5.post3"
    with pytest.raises(UnknownReleaseError):
        get_release(version)
    code = main(["verify", "--pypi", version, "--format", "json"])
    [report] = json.loads(capsys.readouterr().out)
    assert code in (0, 1, 2)  # 2: pdguard cannot read this release (the report says why)
    assert report["ref"] == version
    wheel = report["wheel"]
    assert wheel["checked_against"] == "index" and re.fullmatch("[0-9a-f]{64}", wheel["sha256"])
    assert wheel["file"].startswith(f"sglang-{version}-") and wheel["file"].endswith(".whl")
    main(["verify", "--pypi", version])
    out = capsys.readouterr().out
    assert f"{version}: {wheel['file']} sha256 {wheel['sha256']} (the index)" in out
