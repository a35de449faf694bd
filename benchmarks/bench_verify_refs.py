"""Time ``pdguard verify`` of many refs that share trees, against one ref, in the same run:
what a run does must scale with distinct trees, not with refs (issue 22).

The repository is ``bench_verify``'s (one commit per release: the ``ci`` releases, or all 62
with ``--all``), with more tags added to it:

* ``same/NNN``: ``--same`` tags (300) on the newest release's commit;
* ``r/VERSION/K``: every release tagged ``--copies`` times (5: 62 distinct trees and 248
  duplicates with ``--all``), timed against ``v*`` (each release once).

These commands are timed, alternately, each a whole process (start-up included), with
``--no-cache`` and with an empty result cache (a first run); the figures are medians:

* one tag (the newest release), the baseline;
* the ``same/*`` tags: goal about 1x one tag (one tree checked once);
* with ``--distinct``: the ``r/*`` tags against the ``v*`` tags: goal about 1x.

    python -m benchmarks.bench_verify_refs [--all] [--runs 3] [--same 300] [--copies 5]
                                           [--distinct] [--repo-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_verify import _git, build_repo
from benchmarks.timing import load_average, timings
from pdguard.vendor_sglang import load_manifest


def add_tags(repo: Path, versions: list[str], same: int, copies: int) -> None:
    """``same/NNN`` on the newest release, ``r/VERSION/K`` on every release (kept if there)."""
    wanted = [f"same/{n:03d}" for n in range(same)]
    wanted += [f"r/{v}/{k}" for v in versions for k in range(copies)]
    have = set(_git(repo, "tag", "--list").split())
    if set(wanted) <= have:
        return
    lines = [f"create refs/tags/same/{n:03d} v{versions[-1]}^{{commit}}\n" for n in range(same)]
    lines += [
        f"create refs/tags/r/{v}/{k} v{v}^{{commit}}\n" for v in versions for k in range(copies)
    ]
    import subprocess

    subprocess.run(
        ["git", "-C", str(repo), "update-ref", "--stdin"],
        input="".join(line for line, tag in zip(lines, wanted, strict=True) if tag not in have),
        text=True,
        check=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--same", type=int, default=300, help="tags on one commit")
    parser.add_argument("--copies", type=int, default=5, help="tags per release (--distinct)")
    parser.add_argument(
        "--all",
        action="store_true",
        default=os.environ.get("PDGUARD_ALL_RELEASES") == "1",
        help="one commit per pinned release (62), not only the ci ones",
    )
    parser.add_argument(
        "--distinct", action="store_true", help="also time every release tagged --copies times"
    )
    parser.add_argument("--repo-dir", type=Path, help="build the repository here and keep it")
    args = parser.parse_args()

    versions = [r.version for r in load_manifest() if args.all or r.ci]
    with tempfile.TemporaryDirectory(prefix="pdguard-bench-refs-") as tmp:
        repo = args.repo_dir.resolve() if args.repo_dir else Path(tmp) / "sglang"
        build_repo(repo, versions)
        add_tags(repo, versions, args.same, args.copies)
        pdguard = [sys.executable, "-m", "pdguard", "verify", "--repo", str(repo)]
        empty = Path(tmp) / "empty-cache"
        os.environ.pop("PDGUARD_NO_CACHE", None)
        clear = lambda: shutil.rmtree(empty, ignore_errors=True)  # noqa: E731
        cases = [
            ("one tag", ["--ref", f"v{versions[-1]}"]),
            (f"{args.same} tags on its commit", ["--tags", "same/*"]),
        ]
        if args.distinct:
            cases += [
                (f"{len(versions)} tags, one a release", ["--tags", "v*"]),
                (f"{len(versions) * args.copies} tags, {args.copies} a release", ["--tags", "r/*"]),
            ]
        commands, hooks = [], []
        for _, refs in cases:
            commands.append([*pdguard, *refs, "--no-cache"])
            commands.append(["env", f"PDGUARD_CACHE={empty}", *pdguard, *refs])
            hooks += [None, clear]
        load = load_average()
        results = timings(commands, args.runs, before=hooks)
        print(f"{len(versions)} releases; CPUs: {os.cpu_count()}")
        print(f"load average before the runs: {load}; after: {load_average()}")
        print(f"medians of {args.runs} alternating runs after one warm-up each:")
        hows = ("--no-cache", "empty cache")
        for n, (name, _) in enumerate(cases):
            for m, how in enumerate(hows):
                t, label = results[2 * n + m], f"{name}, {how}"
                print(f"  {label:<48} {t.wall * 1e3:9.0f} ms wall {t.cpu * 1e3:9.0f} ms CPU")
        pairs = [(1, 0, f"{args.same} tags on one commit / one tag")]
        if args.distinct:
            pairs.append((3, 2, f"each release {args.copies} times / once"))
        for many, few, what in pairs:
            for m, how in enumerate(hows):
                a, b = results[2 * many + m], results[2 * few + m]
                print(f"{what}, {how}: {a.wall / b.wall:.2f}x wall, {a.cpu / b.cpu:.2f}x CPU")
        for n, (name, _) in enumerate(cases):
            a, b = results[2 * n + 1], results[2 * n]
            print(
                f"empty cache / --no-cache, {name}: {a.wall / b.wall:.2f}x wall, "
                f"{a.cpu / b.cpu:.2f}x CPU (goal <= 1x)"
            )


if __name__ == "__main__":
    main()
