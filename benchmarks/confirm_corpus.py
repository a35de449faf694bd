"""The corpus table of docs/confirm.md: ``check --confirm`` on every case of the hand-written
corpus (prefill, decode) and on hostile code, against each case's ground truth
(``tests/simulate/confirm_corpus.py``).

    python -m benchmarks.confirm_corpus            # every case
    python -m benchmarks.confirm_corpus prefill    # one corpus (prefill, decode, hostile)

Prints the per-case table (static verdict, simulation verdict or why it cannot run, merged
verdict, ground truth), the FP/FN counts of each witness alone and merged, the cases the
simulation cannot run, and the wall time (median and total).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from tests.simulate.confirm_corpus import cases, measure, table


def main(argv: list[str]) -> int:
    chosen = [c for c in cases() if not argv or c.corpus in argv or c.name in argv]
    start = time.perf_counter()
    measured = [measure(case) for case in chosen]
    total = time.perf_counter() - start
    print(table(measured))
    seconds = [m.seconds for m in measured]
    load = os.getloadavg()[0]
    print(
        f"\n{len(measured)} cases in {total:.0f} s (median {statistics.median(seconds):.1f} s a "
        f"case, slowest {max(seconds):.0f} s); load average {load:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
