"""Time ``pdguard apply`` on the newest pinned SGLang release against baselines measured in the
same run:

* ``pdguard apply`` (it writes: the tree is restored, untimed, before each run) and
  ``pdguard apply --check`` on the unpatched release, against ``python -c "ast.parse"`` of the
  same files (every ``.py`` file under ``sglang/srt/disaggregation``). Goal: at most 3x.
* ``pdguard apply --check`` on a tree that already carries every fix (the pre-commit case),
  against ``pdguard check --no-cache`` of that tree. Goal: at most 1.2x.

Every command is a whole process (start-up included), run alternately after one warm-up; the
figures are medians of wall and of CPU time.

    python -m benchmarks.bench_apply [--release 0.5.23] [--runs 9]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.timing import load_average, timings
from pdguard.vendor_sglang import fetch_release, load_manifest

BASELINE = """
import ast, sys
for path in sys.argv[1:]:
    with open(path, "rb") as handle:
        ast.parse(handle.read())
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", default=load_manifest()[-1].version)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()

    pdguard = [sys.executable, "-m", "pdguard"]
    with tempfile.TemporaryDirectory() as tmp:
        pristine = Path(tmp) / "pristine"
        shutil.copytree(fetch_release(args.release), pristine)
        unpatched, written, patched = (Path(tmp) / n for n in ("unpatched", "written", "patched"))
        for copy in (unpatched, patched):
            shutil.copytree(pristine, copy)
        subprocess.run([*pdguard, "apply", str(patched)], check=True, capture_output=True)

        def restore() -> None:
            shutil.rmtree(written, ignore_errors=True)
            shutil.copytree(pristine, written)

        files = sorted(str(p) for p in (unpatched / "sglang/srt/disaggregation").rglob("*.py"))
        commands = {
            "pdguard apply (unpatched, writes)": ([*pdguard, "apply", str(written)], restore),
            "pdguard apply --check (unpatched)": (
                [*pdguard, "apply", str(unpatched), "--check"],
                None,
            ),
            f"python ast.parse of {len(files)} files": (
                [sys.executable, "-c", BASELINE, *files],
                None,
            ),
            "pdguard apply --check (fixed tree)": (
                [*pdguard, "apply", str(patched), "--check"],
                None,
            ),
            "pdguard check --no-cache (fixed tree)": (
                [*pdguard, "check", str(patched), "--no-cache"],
                None,
            ),
        }
        load = load_average()
        results = timings(
            [cmd for cmd, _ in commands.values()],
            args.runs,
            before=[hook for _, hook in commands.values()],
        )
    apply_, apply_check, base, fixed_check, check = results
    print(f"release {args.release}: {len(files)} files under sglang/srt/disaggregation")
    print(f"load average before the runs: {load}; after: {load_average()}")
    print(f"medians of {args.runs} alternating runs after one warm-up each:   wall       CPU")
    for name, timing in zip(commands, results, strict=True):
        print(f"  {name:<40} {timing.wall * 1000:9.1f} ms {timing.cpu * 1000:9.1f} ms")
    for what, num, den, goal in (
        ("apply / ast.parse", apply_, base, "at most 3x"),
        ("apply --check / ast.parse", apply_check, base, "was 5.5x"),
        ("apply --check (fixed) / check (fixed)", fixed_check, check, "at most 1.2x"),
    ):
        print(
            f"{what}: {num.wall / den.wall:.2f}x wall, {num.cpu / den.cpu:.2f}x CPU (goal: {goal})"
        )


if __name__ == "__main__":
    main()
