"""Time ``pdguard check`` on the whole ``sglang`` package of the newest pinned release against a
baseline measured in the same run: ``python -c "ast.parse"`` of only the files the rules need
(``prefill.py`` and the disaggregation files that ``checks.project.wanted`` keeps).

Both are whole processes (interpreter start-up included), run alternately after one warm-up
each; the figures are medians.  Goal: check within 3x of the baseline.

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
from pathlib import Path

from benchmarks.timing import medians
from pdguard.vendor_sglang import fetch_release, load_manifest

BASELINE = "import ast,sys; [ast.parse(open(f,'rb').read()) for f in sys.argv[1:]]"
PREFILL = "sglang/srt/disaggregation/prefill.py"


def needed_files(root: Path) -> list[str]:
    """The files ``pdguard check`` parses: prefill.py and the disaggregation files that pass
    ``checks.project.wanted`` (the text prefilter)."""
    from pdguard.checks.project import DISAGGREGATION_DIR, wanted

    found = []
    for path in sorted((root / DISAGGREGATION_DIR).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == PREFILL or wanted(rel, path.read_text(encoding="utf-8", errors="replace")):
            found.append(str(path))
    return found


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
    check_cmd = [sys.executable, "-m", "pdguard", "check", str(root)]
    base_cmd = [sys.executable, "-c", BASELINE, *files]
    check_median, base_median = medians([check_cmd, base_cmd], args.runs)
    print(f"release {args.release}: whole sglang package, {package_files} .py files")
    print(
        f"pdguard check ROOT             median {check_median * 1000:8.1f} ms  ({args.runs} runs)"
    )
    print(
        f"python ast.parse of {len(files):3d} files  median {base_median * 1000:8.1f} ms"
        f"  ({args.runs} runs)"
    )
    print(f"ratio {check_median / base_median:.2f}x (goal: within 3x)")
    if args.profile:
        print(_profile(root, top=40))


if __name__ == "__main__":
    main()
