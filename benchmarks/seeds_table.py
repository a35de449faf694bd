"""``simulate --seeds N`` on a few releases, unpatched and patched, both halves: the seeds whose
schedule breaks a property (per side, with the properties broken) and the time per seed. The
table of docs/simulate.md ("Seeded fault schedules").

    python -m benchmarks.seeds_table                          # 0.4.9 0.5.6 0.5.14 0.5.23, 50 seeds
    python -m benchmarks.seeds_table --seeds 20 0.5.14 0.5.23

Each run is one ``pdguard simulate --seeds`` as the CLI makes it (its sandbox's child process);
the time per seed is the run's wall time over the seeds (both sides, and the shrinking of every
failure, included).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from benchmarks.simulate_all import patch, scratch_release
from pdguard.simulate import run_seeds
from pdguard.simulate.seeds import SeedResult
from pdguard.tree import open_tree

RELEASES = ("0.4.9", "0.5.6", "0.5.14", "0.5.23")


def _cell(results: list[SeedResult], side: str) -> str:
    mine = [r for r in results if r.side == side]
    if not mine:
        return "n/a"
    failed = [r for r in mine if r.violations]
    props = Counter(r.violations[0].prop for r in failed)
    named = ", ".join(f"{p} {n}" for p, n in sorted(props.items()))
    return f"{len(failed)}/{len(mine)}" + (f" ({named})" if named else "")


def _measured(root: Path, seeds: int) -> tuple[str, str, float]:
    tree = open_tree(root)
    start = time.perf_counter()
    results = run_seeds(tree, range(seeds))
    per_seed = (time.perf_counter() - start) / seeds
    return _cell(results, "prefill"), _cell(results, "decode"), per_seed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", default=list(RELEASES))
    parser.add_argument("--seeds", type=int, default=50)
    args = parser.parse_args(argv)
    print("| release | prefill seeds failed | decode seeds failed | s per seed |")
    print("|---|---|---|---|")
    for version in args.versions:
        with scratch_release(version) as root:
            prefill, decode, per_seed = _measured(root, args.seeds)
            print(f"| {version} unpatched | {prefill} | {decode} | {per_seed:.2f} |", flush=True)
            refusal = patch(root)
            if refusal:
                print(f"| {version} patched | apply refused: {refusal} | | |", flush=True)
                continue
            prefill, decode, per_seed = _measured(root, args.seeds)
            print(f"| {version} patched | {prefill} | {decode} | {per_seed:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
