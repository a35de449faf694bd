"""The release run table of docs/confirm.md: for each release, whether ``simulate`` loads and
runs it (every scenario that applies, decode included), unpatched and patched by ``apply``, and
what ``check --confirm`` says of the patched tree.

    python benchmarks/confirm_table.py            # the CI releases
    PDGUARD_ALL_RELEASES=1 python benchmarks/confirm_table.py   # all 62 (fetches the missing)
    python benchmarks/confirm_table.py 0.5.21 0.5.20    # those named

One row a release: version, unpatched (passed/failed, or "exit 2: <why>"), patched (the same),
check --confirm on the patched tree (findings by code), seconds.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from pathlib import Path

from benchmarks.simulate_all import patch, scratch_release
from pdguard import checks
from pdguard.commands.check import check_tree
from pdguard.errors import PdguardError
from pdguard.simulate import run as simulate
from pdguard.tree import open_tree
from pdguard.vendor_sglang.manifest import load_manifest


def _simulated(root: Path) -> str:
    try:
        report = simulate(open_tree(root))
    except PdguardError as exc:
        return f"exit 2: {str(exc)[:150]}"
    failed = [r.scenario for r in report.rows if r.verdict == "fail"]
    passed = sum(r.verdict == "pass" for r in report.rows)
    return f"{passed} pass, {len(failed)} fail" + (f" ({', '.join(failed)})" if failed else "")


def main() -> int:
    wanted = os.environ.get("PDGUARD_ALL_RELEASES") == "1"
    named = set(sys.argv[1:])  # or the versions named on the command line
    releases = [r for r in load_manifest() if (r.version in named if named else r.ci or wanted)]
    print("| release | unpatched | patched | check --confirm (patched) | s |")
    print("|---|---|---|---|---|")
    for release in releases:
        start = time.perf_counter()
        with scratch_release(release.version) as root:
            unpatched = _simulated(root)
            refusal = patch(root)
            if refusal:
                patched, confirmed = f"apply refused: {refusal[:100]}", "-"
            else:
                patched = _simulated(root)
                codes = [*checks.STATIC_CODES, checks.CONFIRM_CODE]
                found = Counter(f.code for f in check_tree(open_tree(root), codes).findings)
                confirmed = ", ".join(f"{c} x{n}" for c, n in sorted(found.items())) or "pass"
        seconds = time.perf_counter() - start
        print(f"| {release.version} | {unpatched} | {patched} | {confirmed} | {seconds:.0f} |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
