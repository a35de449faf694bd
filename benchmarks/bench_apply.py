"""Time ``pdguard apply --check`` on the newest pinned SGLang release against a baseline measured
in the same run: ``python -c "ast.parse"`` of the same files (every ``.py`` file pdguard reads).

Both are whole processes (start-up included), run alternately; the figures are medians.

    python -m benchmarks.bench_apply [--release 0.5.23] [--runs 9]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.timing import medians
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

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "sglang"
        shutil.copytree(fetch_release(args.release), root)
        files = sorted(str(p) for p in (root / "sglang/srt/disaggregation").rglob("*.py"))
        apply_cmd = [sys.executable, "-m", "pdguard", "apply", str(root), "--check"]
        base_cmd = [sys.executable, "-c", BASELINE, *files]
        apply_median, base_median = medians([apply_cmd, base_cmd], args.runs)
    print(f"release {args.release}: {len(files)} files under sglang/srt/disaggregation")
    print(f"pdguard apply --check     median {apply_median * 1000:8.1f} ms  ({args.runs} runs)")
    print(f"python ast.parse baseline median {base_median * 1000:8.1f} ms  ({args.runs} runs)")
    print(f"ratio {apply_median / base_median:.2f}x")


if __name__ == "__main__":
    main()
