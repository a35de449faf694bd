"""Time one pdguard command line under several checkouts of pdguard, alternately, in one run:
a change against its base (``git worktree add --detach /tmp/base main``, with its own venv)
measured on the same machine state, the figures medians of wall and CPU time.

    python -m benchmarks.bench_checkouts --python /tmp/base/.venv/bin/python \\
        --python .venv/bin/python [--runs 5] -- apply /tmp/copy --check --no-confirm

Each ``--python`` is the interpreter of a checkout's venv (an editable install); the first is
the baseline each other one is compared with. Everything after ``--`` is pdguard's command
line, the same for every checkout (paths are not copied: a command that writes must not be
timed here). ``PDGUARD_CACHE`` is passed through: give a command that fills a cache its own
(or ``--no-cache``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from benchmarks.timing import load_average, timings


def main() -> None:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", required=True, help="a checkout's python")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv[:split])
    command = argv[split + 1 :]
    if len(args.python) < 2 or not command:
        parser.error("two --python or more, and a pdguard command line after --")

    for python in args.python:
        head = subprocess.run(
            [python, "-P", "-c", "import pdguard.checks as c; print(c.__file__)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        print(f"{python}: pdguard.checks from {head}")
    load = load_average()
    # -P: not the current directory first on sys.path (a checkout's root would shadow the
    # installed pdguard of every other checkout)
    results = timings(
        [[python, "-P", "-m", "pdguard", *command] for python in args.python], args.runs
    )
    print(f"pdguard {' '.join(command)}")
    print(f"load average before the runs: {load}; after: {load_average()}")
    print(f"medians of {args.runs} alternating runs after one warm-up each:   wall       CPU")
    base = results[0]
    for python, timing in zip(args.python, results, strict=True):
        print(
            f"  {python:<40} {timing.wall * 1000:9.1f} ms {timing.cpu * 1000:9.1f} ms"
            f"  ({timing.wall / base.wall:.2f}x wall, {timing.cpu / base.cpu:.2f}x CPU)"
        )
        print(f"    CPU of each run: {', '.join(f'{c * 1000:.0f}' for c in timing.cpus)} ms")


if __name__ == "__main__":
    main()
