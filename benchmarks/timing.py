"""Timing whole commands the same way in every benchmark: alternately, after a warm-up run, and
reporting medians (so a baseline and the command under test see the same machine state)."""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Sequence


def wall_time(cmd: Sequence[str]) -> float:
    """Seconds one run of ``cmd`` takes, start-up included (output discarded)."""
    start = time.perf_counter()
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def medians(commands: Sequence[Sequence[str]], runs: int) -> list[float]:
    """Median wall time of each command over ``runs`` alternating runs, after one warm-up."""
    for cmd in commands:
        wall_time(cmd)  # warm the file and bytecode caches
    times: list[list[float]] = [[] for _ in commands]
    for _ in range(runs):
        for cmd, samples in zip(commands, times, strict=True):
            samples.append(wall_time(cmd))
    return [statistics.median(samples) for samples in times]
