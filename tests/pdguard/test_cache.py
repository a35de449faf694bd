"""pdguard's result cache (``pdguard.cache``): ``check`` of a directory tree and ``verify`` of
git refs, on the hand-written trees of tests/snippets.py.

A hit is seen by the analysis not running: ``check_tree`` (check) or ``analyse_git`` (verify)
is replaced by a spy that counts its calls and then does the real work.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import pdguard
from pdguard import cache
from pdguard.cli import main
from pdguard.commands import check as checking
from pdguard.commands import verify as verifying
from pdguard.sglang_names import POP_PREALLOCATED, READ_DIRS, READ_FILES, VERSION_PATHS
from pdguard.tree import open_tree
from pdguard.vendor_sglang import fetch_release
from tests.helpers import RELEASES
from tests.snippets import PREFILL_REL, make_tree


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache on (conftest turns it off for every other test), in a directory of its own."""
    monkeypatch.delenv(cache.NO_CACHE_ENV, raising=False)
    monkeypatch.setenv("PDGUARD_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "results"


@pytest.fixture
def analysed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The trees and refs actually analysed (not served from the cache), in order."""
    calls: list[str] = []
    real_check, real_analyse = checking.check_tree, verifying.analyse_git

    def check_tree(tree, codes=checking.checks.CODES, run=None):  # type: ignore[no-untyped-def]  # a stand-in with check_tree's signature
        calls.append(f"check {tree.label}")
        return real_check(tree, codes, run)

    def analyse_git(repo_path, jobs, processes=None, workers=None, run=None):  # type: ignore[no-untyped-def]  # a stand-in with analyse_git's signature
        calls.extend(f"verify {ref}" for ref, _ in jobs)
        return real_analyse(repo_path, jobs, processes=1, run=run)

    monkeypatch.setattr(checking, "check_tree", check_tree)
    monkeypatch.setattr(verifying, "analyse_git", analyse_git)
    return calls


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert not err
    return code, out


def entries(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.rglob("*.json")) if cache_dir.exists() else []


# -- check ----------------------------------------------------------------------------------


def test_check_hit_gives_the_same_report(tmp_path, cache_dir, analysed, capsys) -> None:
    tree = make_tree(tmp_path / "tree")
    first = run(capsys, "check", tree, "--format", "json")
    assert analysed == [f"check {tree}"] and len(entries(cache_dir)) == 1
    for fmt in ("json", "text", "sarif", "github"):
        again = run(capsys, "check", tree, "--format", fmt)
        assert again == run(capsys, "check", tree, "--format", fmt, "--no-cache")
        if fmt == "json":
            assert again == first
    assert first[0] == 1 and "PDG001" in first[1]
    assert analysed.count(f"check {tree}") == 1 + 4  # only the --no-cache runs analysed


def test_check_miss_on_changed_content(tmp_path, cache_dir, analysed, capsys) -> None:
    tree = make_tree(tmp_path / "tree")
    run(capsys, "check", tree)
    prefill = tree / PREFILL_REL
    prefill.write_text(prefill.read_text() + "\n# a comment\n")
    run(capsys, "check", tree)
    (tree / "sglang/srt/disaggregation/nixl").mkdir()
    (tree / "sglang/srt/disaggregation/nixl/conn.py").write_text("class NixlKVSender: ...\n")
    run(capsys, "check", tree)
    assert len(analysed) == 3 and len(entries(cache_dir)) == 3


def test_check_key_holds_the_selected_rules(tmp_path, cache_dir, analysed, capsys) -> None:
    tree = make_tree(tmp_path / "tree")
    everything = run(capsys, "check", tree)
    selected = run(capsys, "check", tree, "--select", "PDG004")
    assert len(analysed) == 2
    assert selected == (0, "All checks passed!\n") != everything
    assert run(capsys, "check", tree, "--select", "PDG004") == selected
    assert len(analysed) == 2


def test_a_new_pdguard_version_misses(tmp_path, cache_dir, analysed, capsys, monkeypatch):
    tree = make_tree(tmp_path / "tree")
    before = run(capsys, "check", tree)
    monkeypatch.setattr(pdguard, "__version__", pdguard.__version__ + ".post1")
    assert run(capsys, "check", tree) == before
    assert len(analysed) == 2 and len(entries(cache_dir)) == 2


def test_edited_pdguard_source_misses(tmp_path, cache_dir, monkeypatch) -> None:
    store = cache.ResultCache()
    key = store.key("check", ["x"])
    monkeypatch.setattr(cache, "_source_hash", lambda: "an edited checkout")
    assert store.key("check", ["x"]) != key


def test_no_cache_neither_reads_nor_writes(tmp_path, cache_dir, analysed, capsys) -> None:
    tree = make_tree(tmp_path / "tree")
    run(capsys, "check", tree, "--no-cache")
    assert entries(cache_dir) == []
    run(capsys, "check", tree)
    run(capsys, "check", tree, "--no-cache")
    assert len(analysed) == 3


def test_environment_turns_it_off(tmp_path, cache_dir, analysed, capsys, monkeypatch) -> None:
    monkeypatch.setenv(cache.NO_CACHE_ENV, "1")
    tree = make_tree(tmp_path / "tree")
    run(capsys, "check", tree)
    run(capsys, "check", tree)
    assert len(analysed) == 2 and entries(cache_dir) == []


@pytest.mark.parametrize(
    "content",
    [b"", b"{not json", b"\xff\xfe\x00", b"[]", b'{"key": "another", "value": {}}', None],
    ids=["empty", "not-json", "not-utf8", "not-an-object", "other-key", "wrong-shape"],
)
def test_a_corrupt_entry_is_ignored(tmp_path, cache_dir, analysed, capsys, content) -> None:
    tree = make_tree(tmp_path / "tree")
    expected = run(capsys, "check", tree)
    (entry,) = entries(cache_dir)
    if content is None:  # the right key, a value of the wrong shape
        content = f'{{"key": "{entry.stem}", "value": {{"findings": [[1, 2]]}}}}'.encode()
    entry.write_bytes(content)
    assert run(capsys, "check", tree) == expected
    assert len(analysed) == 2
    assert run(capsys, "check", tree) == expected  # the entry was rewritten
    assert len(analysed) == 2


def test_an_unwritable_cache_is_skipped(tmp_path, monkeypatch, analysed, capsys) -> None:
    monkeypatch.delenv(cache.NO_CACHE_ENV, raising=False)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("PDGUARD_CACHE", str(blocker))
    tree = make_tree(tmp_path / "tree")
    assert run(capsys, "check", tree) == run(capsys, "check", tree, "--no-cache")


def test_writes_are_atomic(tmp_path, cache_dir, monkeypatch) -> None:
    """An entry appears whole, by rename; a failed write leaves neither it nor a temp file."""
    store = cache.ResultCache()
    store.put("ab" * 32, {"x": 1})
    assert store.get("ab" * 32) == {"x": 1}

    def no_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(cache.os, "replace", no_replace)
    store.put("cd" * 32, {"x": 2})
    assert store.get("cd" * 32) is None
    assert sorted(p.name for p in cache_dir.rglob("*")) == ["ab", "ab" * 32 + ".json", "cd"]


# -- verify ---------------------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def repo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """Two tags: ``unpatched`` (the snippets tree under python/) and ``patched`` (after
    ``pdguard apply``), and ``same``: another commit with ``unpatched``'s tree."""
    repo = tmp_path / "repo"
    make_tree(repo / "python")
    git(repo, "init", "-q", "-b", "main")
    for key, value in {"user.name": "t", "user.email": "t@example.com"}.items():
        git(repo, "config", key, value)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "unpatched")
    git(repo, "tag", "unpatched")
    git(repo, "commit", "-q", "--allow-empty", "-m", "same tree")
    git(repo, "tag", "same")
    assert main(["apply", str(repo / "python")]) == 0
    capsys.readouterr()
    git(repo, "commit", "-q", "-am", "patched")
    git(repo, "tag", "patched")
    return repo


def test_verify_hit_gives_the_same_report(repo, cache_dir, analysed, capsys) -> None:
    args = ("verify", "--repo", repo, "--tags", "*", "--format", "json")
    first = run(capsys, *args)
    assert analysed == ["verify patched", "verify same"]  # `unpatched` is `same`'s tree
    assert run(capsys, *args) == first == run(capsys, *args, "--no-cache")
    # the second run analysed nothing, --no-cache each tree once (`same` is `unpatched`'s)
    assert len(analysed) == 2 + 2
    assert '"applicable"' in first[1] and '"carried"' in first[1]


def test_verify_forks_its_workers_at_the_first_miss_only(
    repo, cache_dir, analysed, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers start (and import LibCST) as soon as one ref must be analysed, while the
    other refs' keys are read; a run served wholly from the cache forks none."""
    warmed: list[int] = []
    monkeypatch.setattr(verifying.Workers, "warm", lambda self: warmed.append(len(analysed)))
    args = ("verify", "--repo", repo, "--tags", "*", "--format", "json")
    run(capsys, *args)
    assert warmed == [0]  # once, before any ref was analysed
    run(capsys, *args)
    assert warmed == [0] and len(analysed) == 2


def test_verify_shares_entries_by_content(repo, cache_dir, analysed, capsys) -> None:
    """``same`` has ``unpatched``'s tree: once one is analysed, the other is a hit."""
    run(capsys, "verify", "--repo", repo, "--ref", "unpatched")
    _, out = run(capsys, "verify", "--repo", repo, "--ref", "same", "--format", "json")
    assert analysed == ["verify unpatched"]
    assert '"ref": "same"' in out and git(repo, "rev-parse", "same").strip() in out


def test_verify_miss_on_a_changed_file(repo, cache_dir, analysed, capsys) -> None:
    run(capsys, "verify", "--repo", repo, "--ref", "unpatched")
    (repo / "python" / PREFILL_REL).write_text("# changed\n", encoding="utf-8")
    git(repo, "commit", "-q", "-am", "changed")
    git(repo, "tag", "changed")
    run(capsys, "verify", "--repo", repo, "--ref", "changed")
    (repo / "python/.isort.cfg").write_text("[settings]\nprofile=black\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "isort settings")
    git(repo, "tag", "isort")
    run(capsys, "verify", "--repo", repo, "--ref", "isort")
    assert analysed == ["verify unpatched", "verify changed", "verify isort"]


def test_verify_notes_name_their_own_ref(repo, cache_dir, analysed, capsys) -> None:
    """A note that names a file names it at the ref asked for, not the one stored."""
    (repo / "python" / PREFILL_REL).write_text("x = 1\n", encoding="utf-8")
    git(repo, "commit", "-q", "-am", "no inflight queue")
    git(repo, "tag", "broken")
    git(repo, "tag", "broken-too")
    _, first = run(capsys, "verify", "--repo", repo, "--ref", "broken", "--format", "json")
    _, second = run(capsys, "verify", "--repo", repo, "--ref", "broken-too", "--format", "json")
    assert analysed == ["verify broken"]
    # notes name files by their path in the repository (verify reports repo-root paths)
    assert "python/sglang/srt/disaggregation/prefill.py: " in first
    assert second == first.replace('"broken', '"broken-too')


def test_verify_computes_one_ref_per_content(repo, cache_dir, analysed, capsys) -> None:
    """In one run, refs with the same content are analysed once: ``same`` is ``unpatched``'s
    tree, and its report is the one ``--no-cache`` gives (its own ref and commit)."""
    args = ("verify", "--repo", repo, "--ref", "unpatched", "--ref", "same", "--format", "json")
    shared = run(capsys, *args)
    assert analysed == ["verify unpatched"]
    assert shared == run(capsys, *args, "--no-cache")


def test_verify_a_version_bump_alone_is_analysed_once(repo, cache_dir, analysed, capsys):
    """A release whose version file alone changed (a post release) shares its analysis, and
    reports its own version."""
    git(repo, "checkout", "-q", "unpatched")
    (repo / "python/sglang/version.py").write_text('__version__ = "0.0.1.post1"\n')
    git(repo, "commit", "-q", "-am", "post release")
    git(repo, "tag", "post")
    args = ("verify", "--repo", repo, "--ref", "unpatched", "--ref", "post", "--format", "json")
    shared = run(capsys, *args)
    assert analysed == ["verify unpatched"]
    assert shared == run(capsys, *args, "--no-cache")
    assert '"sglang_version": "0.0.1.post1"' in shared[1]


def test_verify_miss_on_a_changed_env_registry(repo, cache_dir, analysed, capsys) -> None:
    """``environ.py`` is outside the disaggregation directory, but the inflight fix reads it:
    once the release keeps its timeouts in an env registry, the fix must have its entry there.
    A ref that adds such a registry to ``patched`` is analysed again, and drifts."""
    run(capsys, "verify", "--repo", repo, "--ref", "patched")
    git(repo, "checkout", "-q", "patched")
    environ = repo / "python/sglang/srt/environ.py"
    environ.write_text(
        "class Settings:\n    SGLANG_DISAGGREGATION_WAITING_TIMEOUT = IntSetting(300)\n",
        encoding="utf-8",
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "an env registry")
    git(repo, "tag", "registry")
    args = ("verify", "--repo", repo, "--ref", "patched", "--ref", "registry", "--format", "json")
    code, out = run(capsys, *args)
    assert analysed == ["verify patched", "verify registry"]
    reports = {r["ref"]: r["fixes"]["inflight-deadline"] for r in json.loads(out)}
    assert reports == {"patched": "carried", "registry": "drifted"}
    assert (code, out) == run(capsys, *args, "--no-cache")


def test_verify_reads_only_what_its_key_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file ``verify`` reads of a release is in its cache key: below one of
    ``READ_DIRS`` (their tree ids), one of ``READ_FILES``, or the version file (read again on
    a hit)."""
    release = RELEASES[-1]
    tree = open_tree(fetch_release(release.version))
    read: list[str] = []
    real = type(tree).read_bytes

    def read_bytes(self, rel: str) -> bytes | None:  # type: ignore[no-untyped-def]  # a spy with read_bytes' signature
        read.append(rel)
        return real(self, rel)

    monkeypatch.setattr(type(tree), "read_bytes", read_bytes)
    report = verifying.verify_tree(tree, release.version, None)
    assert report.fixes["inflight-deadline"] == "applicable"  # every fix read what it needs
    outside = {rel for rel in read if not rel.startswith(tuple(f"{d}/" for d in READ_DIRS))}
    assert outside, "the fixes read the env registry"
    assert outside <= {*READ_FILES, *VERSION_PATHS}


def test_verify_miss_on_a_changed_scheduler_module(repo, cache_dir, analysed, capsys) -> None:
    """The rules read the scheduler modules that pop a decode queue themselves (a PP mixin,
    in ``sglang/srt/managers``): a ref that changes one is analysed again."""
    git(repo, "checkout", "-q", "unpatched")
    mixin = repo / "python/sglang/srt/managers/pipelined_decode.py"
    mixin.parent.mkdir(parents=True)
    for n, body in enumerate(("pass", "return None")):
        mixin.write_text(
            f"class PipelinedDecode:\n    def step(self):\n        # {POP_PREALLOCATED}\n"
            f"        {body}\n",
            encoding="utf-8",
        )
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"mixin {n}")
        git(repo, "tag", f"mixin-{n}")
    args = ("verify", "--repo", repo, "--ref", "mixin-0", "--ref", "mixin-1")
    run(capsys, *args)
    assert analysed == ["verify mixin-0", "verify mixin-1"]
