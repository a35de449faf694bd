"""Time ``pdguard apply --check`` on the newest pinned SGLang release against a baseline measured
in the same run: ``python -c "ast.parse"`` of the same files (every ``.py`` file pdguard reads).

Both are whole processes (start-up included), run alternately; the figures are medians.

    python benchmarks/bench_apply.py [--release 0.5.23] [--runs 9]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vendor_sglang import fetch_release, load_manifest

BASELINE = """
import ast, sys
for path in sys.argv[1:]:
    with open(path, "rb") as handle:
        ast.parse(handle.read())
"""


def _time(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", default=load_manifest()[-1].version)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "sglang"
        shutil.copytree(fetch_release(args.release), root)
        files = sorted(str(p) for p in (root / "sglang/srt/disaggregation").rglob("*.py"))
        apply_cmd = [sys.executable, "-m", "pdguard", "apply", str(root), "--check"]
        base_cmd = [sys.executable, "-c", BASELINE, *files]
        _time(apply_cmd), _time(base_cmd)  # warm the file cache
        apply_times, base_times = [], []
        for _ in range(args.runs):
            apply_times.append(_time(apply_cmd))
            base_times.append(_time(base_cmd))
    apply_median = statistics.median(apply_times)
    base_median = statistics.median(base_times)
    print(f"release {args.release}: {len(files)} files under sglang/srt/disaggregation")
    print(f"pdguard apply --check     median {apply_median * 1000:8.1f} ms  ({args.runs} runs)")
    print(f"python ast.parse baseline median {base_median * 1000:8.1f} ms  ({args.runs} runs)")
    print(f"ratio {apply_median / base_median:.2f}x")


if __name__ == "__main__":
    main()
