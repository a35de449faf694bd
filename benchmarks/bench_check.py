"""Time ``pdguard check`` on the whole ``sglang`` package of the newest pinned release against a
baseline measured in the same run: ``python -c "ast.parse"`` of only the files the rules need
(what ``load_project`` keeps: ``prefill.py`` and the files that pass the rules' prefilter).

Both are whole processes (interpreter start-up included), run alternately after one warm-up
each; the figures are medians of wall and of CPU time.  ``check`` runs with ``--no-cache``
(the analysis itself); ``check`` with its result cache filled by an earlier run (a tree whose
files did not change) is timed too.  Goal (issue 13): check within 2x of the baseline.

    python -m benchmarks.bench_check [--release 0.5.23] [--runs 9] [--profile]

``--profile`` also runs ``pdguard check`` once in-process under cProfile (imports included) and
prints the top functions by cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
from pathlib import Path

from benchmarks.timing import load_average, timings
from pdguard.vendor_sglang import fetch_release, load_manifest

BASELINE = "import ast,sys; [ast.parse(open(f,'rb').read()) for f in sys.argv[1:]]"


def needed_files(root: Path) -> list[str]:
    """The files ``pdguard check`` parses: those ``load_project`` keeps (prefill.py, and the
    disaggregation and scheduler files that pass the rules' text prefilter)."""
    from pdguard.commands.check import load_project
    from pdguard.tree import open_tree

    return [str(root / rel) for rel in sorted(load_project(open_tree(root)).texts)]


def _profile(root: Path, top: int) -> str:
    """cProfile of one in-process ``pdguard check ROOT`` run, imports included."""
    for name in [m for m in sys.modules if m.split(".")[0] in ("pdguard", "libcst")]:
        del sys.modules[name]
    profiler = cProfile.Profile()
    profiler.enable()
    from pdguard.cli import main

    with open(os.devnull, "w") as devnull:
        stdout, sys.stdout = sys.stdout, devnull
        try:
            main(["check", str(root)])
        finally:
            sys.stdout = stdout
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", default=load_manifest()[-1].version)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of check")
    args = parser.parse_args()

    root = fetch_release(args.release, full=True)  # the whole sglang/ package, cached
    package_files = sum(1 for _ in (root / "sglang").rglob("*.py"))
    files = needed_files(root)
    check_cmd = [sys.executable, "-m", "pdguard", "check", str(root), "--no-cache"]
    cached_cmd = check_cmd[:-1]
    base_cmd = [sys.executable, "-c", BASELINE, *files]
    with tempfile.TemporaryDirectory(prefix="pdguard-bench-check-") as tmp:
        os.environ["PDGUARD_CACHE"] = tmp  # a result cache of this run's own
        os.environ.pop("PDGUARD_NO_CACHE", None)
        load = load_average()
        check, cached, base = timings([check_cmd, cached_cmd, base_cmd], args.runs)
    print(f"release {args.release}: whole sglang package, {package_files} .py files")
    print(f"load average before the runs: {load}; after: {load_average()}")
    print(f"medians of {args.runs} alternating runs after one warm-up each:   wall       CPU")
    for name, timing in (
        ("pdguard check ROOT --no-cache", check),
        ("pdguard check ROOT (cache filled)", cached),
        (f"python ast.parse of {len(files)} files", base),
    ):
        print(f"  {name:<40} {timing.wall * 1000:9.1f} ms {timing.cpu * 1000:9.1f} ms")
    print(
        f"ratio check / ast.parse: {check.wall / base.wall:.2f}x wall, "
        f"{check.cpu / base.cpu:.2f}x CPU (goal: within 2x); "
        f"cache filled: {cached.wall / base.wall:.2f}x wall"
    )
    if args.profile:
        print(_profile(root, top=40))


if __name__ == "__main__":
    main()
