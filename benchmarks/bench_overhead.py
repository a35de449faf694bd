"""Time what ``verify`` adds to the analysis of its trees, in this process: the result cache
(keys, reads and writes) and the refs beyond the first of a tree (resolving and grouping
them). Each call is ``verify_git`` itself, with the analysis of a tree replaced by its report
(computed once, untimed), so that the figures are the additions alone: the whole-process
medians of ``bench_verify_refs`` cannot resolve them, as commands doing the same work differ
there by more than these from one run to the next.

The repository is ``bench_verify_refs``'s (the ``ci`` releases, ``--same`` tags on the newest
release's commit). Timed alternately, the medians of ``--runs`` (CPU time of this process):

* one tag, no cache, the baseline (the same analysis stub);
* one tag, an empty result cache (a first run: a key, a miss, one entry written; pdguard's own
  source hashed for the key, as a new process does);
* ``--same`` tags on that commit, no cache; and with an empty cache.

Each addition is also given against the CPU time of the real analysis of that tag, in this
process (median of 3 runs, each in a fresh ``Run``).

    python -m benchmarks.bench_overhead [--runs 21] [--same 300] [--repo-dir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from unittest import mock

from benchmarks.bench_verify import build_repo
from benchmarks.bench_verify_refs import add_tags
from benchmarks.timing import load_average
from pdguard import cache
from pdguard.commands import verify
from pdguard.git_tree import Resolved
from pdguard.run import Run
from pdguard.vendor_sglang import load_manifest


def _cpu(call: Callable[[], object]) -> float:
    start = time.process_time()
    call()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--same", type=int, default=300, help="tags on one commit")
    parser.add_argument("--repo-dir", type=Path, help="build the repository here and keep it")
    args = parser.parse_args()

    versions = [r.version for r in load_manifest() if r.ci]
    with tempfile.TemporaryDirectory(prefix="pdguard-bench-overhead-") as tmp:
        repo = args.repo_dir.resolve() if args.repo_dir else Path(tmp) / "sglang"
        build_repo(repo, versions)
        add_tags(repo, versions, args.same, 0)
        tag = f"v{versions[-1]}"
        same = [f"same/{n:03d}" for n in range(args.same)]

        analysis = [_cpu(lambda: verify.verify_git(str(repo), [tag], 1)) for _ in range(3)]
        (report,) = verify.verify_git(str(repo), [tag], 1)

        def analysed(
            repo_path: str,
            jobs: Sequence[tuple[str, Resolved | None]],
            processes: int | None = None,
            workers: object = None,
            run: Run | None = None,
        ) -> list[verify.RefReport]:
            return [replace(report, ref=ref, commit=r.commit if r else None) for ref, r in jobs]

        def once(refs: list[str], cached: bool) -> float:
            store = None
            if cached:
                root = Path(tmp) / "cache"
                shutil.rmtree(root, ignore_errors=True)
                cache._source_hash.cache_clear()  # a new process hashes pdguard's source once
                store = cache.ResultCache(root)
            return _cpu(lambda: verify.verify_git(str(repo), refs, 1, store=store))

        cases = [([tag], False), ([tag], True), (same, False), (same, True)]
        times: list[list[float]] = [[] for _ in cases]
        load = load_average()
        with mock.patch.object(verify, "analyse_git", analysed):
            for refs, cached in cases:
                once(refs, cached)  # warm-up
            for _ in range(args.runs):
                for n, (refs, cached) in enumerate(cases):
                    times[n].append(once(refs, cached))
        one, one_cached, many, many_cached = (statistics.median(t) * 1e3 for t in times)
        work = statistics.median(analysis) * 1e3

    print(f"{len(versions)} releases; load average before: {load}; after: {load_average()}")
    print(f"the analysis of {tag} (real, in this process): {work:.1f} ms CPU")
    print(f"medians of {args.runs} alternating runs, the analysis replaced by its report:")
    for name, value in (
        ("one tag, no cache", one),
        ("one tag, empty cache", one_cached),
        (f"{args.same} tags on its commit, no cache", many),
        (f"{args.same} tags on its commit, empty cache", many_cached),
    ):
        print(f"  {name:<40} {value:8.2f} ms CPU")
    for what, extra in (
        ("the empty cache adds to one tag", one_cached - one),
        (f"the empty cache adds to the {args.same} tags", many_cached - many),
        (f"{args.same - 1} more tags on the commit add", many - one),
    ):
        print(f"{what}: {extra:.2f} ms, {extra / work:.2%} of the analysis")


if __name__ == "__main__":
    main()
