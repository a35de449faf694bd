"""Time ``pdguard verify --repo R --tags 'v*'`` on a repository with one tag per pinned ci release,
per ref, against ``pdguard check`` of one extracted tree measured in the same run.

The repository is built in a temporary directory, laid out as upstream (``python/sglang/``),
one commit and tag ``v<version>`` per release with ``ci = true``.  Both commands are whole
processes (start-up included), run alternately; the figures are medians.  The goal: a ref costs
no more than one check of the same tree.

    python -m benchmarks.bench_verify [--runs 5] [--check-release 0.5.23] [--jobs N] [--profile]

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

from benchmarks.timing import wall_time
from pdguard.vendor_sglang import fetch_release, load_manifest


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def build_repo(repo: Path, versions: list[str]) -> None:
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
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    versions = [r.version for r in load_manifest() if r.ci]
    with tempfile.TemporaryDirectory(prefix="pdguard-bench-verify-") as tmp:
        repo = Path(tmp) / "sglang"
        build_repo(repo, versions)
        tree = Path(tmp) / "extracted"
        shutil.copytree(fetch_release(args.check_release), tree)

        pdguard = [sys.executable, "-m", "pdguard"]
        verify_cmd = [*pdguard, "verify", "--repo", str(repo), "--tags", "v*"]
        if args.jobs:
            verify_cmd += ["--jobs", str(args.jobs)]
        check_cmd = [*pdguard, "check", str(tree)]
        start_cmd = [*pdguard, "--version"]
        wall_time(verify_cmd), wall_time(check_cmd)  # warm the file cache
        verify_times, check_times, start_times = [], [], []
        for _ in range(args.runs):
            verify_times.append(wall_time(verify_cmd))
            check_times.append(wall_time(check_cmd))
            start_times.append(wall_time(start_cmd))

        refs = len(versions)
        verify_median = statistics.median(verify_times)
        check_median = statistics.median(check_times)
        per_ref = verify_median / refs
        print(f"{refs} refs (one tag per ci release: {', '.join(versions)})")
        print(f"CPUs: {os.cpu_count()}; verify --jobs {args.jobs or 'default (CPUs)'}")
        print(
            f"pdguard verify --tags 'v*'  median {verify_median * 1000:8.1f} ms"
            f"  ({args.runs} runs: {', '.join(f'{t:.2f}' for t in verify_times)} s)"
        )
        print(f"  per ref                   {per_ref * 1000:8.1f} ms")
        print(
            f"pdguard check {args.check_release:<11} median {check_median * 1000:8.1f} ms"
            f"  ({args.runs} runs)"
        )
        print(
            f"python -m pdguard --version median {statistics.median(start_times) * 1000:8.1f} ms"
            "  (start-up, in both figures above)"
        )
        print(f"ratio per ref / check: {per_ref / check_median:.2f}x (goal <= 1.00x)")

        if args.profile:
            tag = f"v{versions[-1]}"
            print(f"\nsteps of verify for {tag}, in this process (after one other tag):")
            _steps(repo, f"v{versions[-2]}")  # imports and lazy set-up, as in a busy worker
            steps = _steps(repo, tag)
            for name, seconds in steps:
                print(f"  {seconds * 1000:8.1f} ms  {name}")
            print(f"  {sum(s for _, s in steps) * 1000:8.1f} ms  total")
            print(_profile(repo, tag, 30))


if __name__ == "__main__":
    main()
