"""Time ``pdguard verify --repo R --tags 'v*'`` on a repository with one tag per pinned release,
per ref, against ``pdguard check`` of one extracted tree measured in the same run.

The repository is built in a temporary directory (or ``--repo-dir``, kept and reused), laid out
as upstream (``python/sglang/``), one commit and tag ``v<version>`` per release: the ``ci``
releases, or all 62 with ``--all`` (or ``PDGUARD_ALL_RELEASES=1``).  These commands are timed,
alternately, each a whole process (start-up included); the figures are medians:

* ``verify`` with an empty result cache (cold: a first run; refs with the same content are
  analysed once);
* ``verify --no-cache`` (every ref analysed);
* ``verify`` with a result cache filled by one earlier run (again, nothing changed);
* ``check --no-cache`` of one extracted release (the baseline).

Goals (issue 13): cold, a ref costs at most 0.25x one check (and all 62 refs at most 15 s);
again with nothing changed, all refs together cost at most 1x one check.

    python -m benchmarks.bench_verify [--all] [--runs 5] [--check-release 0.5.23] [--jobs N]
                                      [--repo-dir DIR] [--profile]

``--profile`` also times, in this process, the steps ``verify`` takes for one ref (the newest
tag) and prints the top of a cProfile of that ref.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.timing import load_average, timings
from pdguard.vendor_sglang import fetch_release, load_manifest


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def build_repo(repo: Path, versions: list[str]) -> None:
    if (repo / ".git").is_dir() and _git(repo, "tag", "--list", "v*").split() == sorted(
        f"v{v}" for v in versions
    ):
        return  # built by an earlier run (--repo-dir)
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    for key, value in {
        "user.name": "bench",
        "user.email": "bench@example.com",
        "commit.gpgsign": "false",
        "tag.gpgsign": "false",
    }.items():
        _git(repo, "config", key, value)
    for version in versions:
        package = repo / "python/sglang"
        shutil.rmtree(package, ignore_errors=True)
        shutil.copytree(fetch_release(version) / "sglang", package)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"sglang {version}")
        _git(repo, "tag", f"v{version}")


def _steps(repo: Path, tag: str) -> list[tuple[str, float]]:
    """Wall time of each step ``verify_tree`` takes for one ref, replayed in this process."""
    from pdguard import checks
    from pdguard.checks.project import Project
    from pdguard.commands.check import check_tree, load_project
    from pdguard.fixes import FIXES
    from pdguard.git_tree import open_git_tree, open_repo
    from pdguard.workspace import Workspace

    steps = []
    start = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal start
        now = time.perf_counter()
        steps.append((name, now - start))
        start = now

    tree = open_git_tree(open_repo(str(repo)), tag)
    lap("open the ref")
    check_tree(tree)
    lap("check_tree (the ref's findings)")
    base = load_project(tree).texts
    lap("load_project again (base texts)")
    for fix in FIXES:
        workspace = Workspace(tree)
        fix.plan(workspace)
        lap(f"{fix.name}: plan (apply in memory)")
        texts = {**base, **{rel: new.text for rel, new in workspace.changed().items()}}
        checks.run(Project(texts), fix.rules)
        lap(f"{fix.name}: re-check {','.join(fix.rules)} on the result")
    return steps


def _profile(repo: Path, tag: str, top: int) -> str:
    from pdguard.commands.verify import verify_tree
    from pdguard.git_tree import open_git_tree, open_repo

    tree = open_git_tree(open_repo(str(repo)), tag)
    profile = cProfile.Profile()
    profile.runcall(verify_tree, tree, tag, tree.commit.hexsha)
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--check-release", default=load_manifest()[-1].version)
    parser.add_argument("--jobs", type=int, default=None, help="verify --jobs (default: CPUs)")
    parser.add_argument(
        "--all",
        action="store_true",
        default=os.environ.get("PDGUARD_ALL_RELEASES") == "1",
        help="one tag per pinned release (62), not only the ci ones",
    )
    parser.add_argument("--repo-dir", type=Path, help="build the repository here and keep it")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    versions = [r.version for r in load_manifest() if args.all or r.ci]
    with tempfile.TemporaryDirectory(prefix="pdguard-bench-verify-") as tmp:
        repo = args.repo_dir.resolve() if args.repo_dir else Path(tmp) / "sglang"
        build_repo(repo, versions)
        tree = Path(tmp) / "extracted"
        shutil.copytree(fetch_release(args.check_release), tree)

        pdguard = [sys.executable, "-m", "pdguard"]
        verify_cmd = [*pdguard, "verify", "--repo", str(repo), "--tags", "v*"]
        if args.jobs:
            verify_cmd += ["--jobs", str(args.jobs)]
        cold_cmd = [*verify_cmd, "--no-cache"]
        check_cmd = [*pdguard, "check", str(tree), "--no-cache"]
        start_cmd = [*pdguard, "--version"]
        os.environ["PDGUARD_CACHE"] = str(Path(tmp) / "cache")  # a cache of this run's own
        os.environ.pop("PDGUARD_NO_CACHE", None)
        same = _same_output(verify_cmd, cold_cmd)  # also fills the cache
        empty = Path(tmp) / "empty-cache"
        first_cmd = ["env", f"PDGUARD_CACHE={empty}", *verify_cmd]
        load = load_average()
        first, cold, warm, check, start = timings(
            [first_cmd, cold_cmd, verify_cmd, check_cmd, start_cmd],
            args.runs,
            before=[lambda: shutil.rmtree(empty, ignore_errors=True), None, None, None, None],
        )

        refs = len(versions)
        print(f"{refs} refs (one tag per {'pinned' if args.all else 'ci'} release)")
        print(f"CPUs: {os.cpu_count()}; verify --jobs {args.jobs or 'default (CPUs)'}")
        print(f"load average before the runs: {load}; after: {load_average()}")
        print(f"verify output with the cache == without: {same}")
        print(f"medians of {args.runs} alternating runs after one warm-up each:   wall       CPU")
        for name, timing, per in (
            ("pdguard verify, empty cache (cold)", first, 1),
            ("  per ref", first, refs),
            ("pdguard verify --no-cache", cold, 1),
            ("  per ref", cold, refs),
            ("pdguard verify (cache filled)", warm, 1),
            (f"pdguard check --no-cache {args.check_release}", check, 1),
            ("python -m pdguard --version (start-up)", start, 1),
        ):
            print(
                f"  {name:<40} {timing.wall / per * 1000:9.1f} ms {timing.cpu / per * 1000:9.1f} ms"
            )
        for what, timing in (("cold (empty cache)", first), ("--no-cache", cold)):
            print(
                f"{what}: per ref / check {timing.wall / refs / check.wall:.2f}x wall, "
                f"{timing.cpu / refs / check.cpu:.2f}x CPU (goal <= 0.25x); "
                f"all refs {timing.wall:.1f} s (goal <= 15 s)"
            )
            # each run's ratio to the check of the same round: the machine's speed drifts
            paired = sorted(w / refs / c for w, c in zip(timing.walls, check.walls, strict=True))
            runs = ", ".join(f"{r:.2f}x" for r in paired)
            print(
                f"  per ref / check of each round, wall: {statistics.median(paired):.2f}x ({runs})"
            )
        print(
            f"again, nothing changed: verify / check {warm.wall / check.wall:.2f}x wall, "
            f"{warm.cpu / check.cpu:.2f}x CPU (goal <= 1x)"
        )

        if args.profile:
            tag = f"v{versions[-1]}"
            print(f"\nsteps of verify for {tag}, in this process (after one other tag):")
            _steps(repo, f"v{versions[-2]}")  # imports and lazy set-up, as in a busy worker
            steps = _steps(repo, tag)
            for name, seconds in steps:
                print(f"  {seconds * 1000:8.1f} ms  {name}")
            print(f"  {sum(s for _, s in steps) * 1000:8.1f} ms  total")
            print(_profile(repo, tag, 30))


def _same_output(cached: list[str], uncached: list[str]) -> bool:
    """Whether ``verify`` prints the same with the cache (filled by its first run) as without."""
    outputs = [
        subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
        for cmd in (cached, cached, uncached)
    ]
    return outputs[0] == outputs[1] == outputs[2]


if __name__ == "__main__":
    main()
