"""Timing whole commands the same way in every benchmark: alternately, after a warm-up run, and
reporting medians (so a baseline and the command under test see the same machine state).

Each run is measured twice: wall time, and CPU time (user + system of the process and every
process it waited for, e.g. ``verify``'s workers). On a machine that other jobs share, CPU time
moves much less between runs than wall time; both are reported.

Commands run with Python's bytecode cache on (``PYTHONDONTWRITEBYTECODE`` is dropped from their
environment), as an installed pdguard runs: otherwise every run would compile pdguard's modules
again, which the warm-up run is there to avoid.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(cmd: Sequence[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of ``cmd``, start-up included (output discarded)."""
    cpu = _children_cpu()
    start = time.perf_counter()
    subprocess.run(
        cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env()
    )
    return time.perf_counter() - start, _children_cpu() - cpu


def wall_time(cmd: Sequence[str]) -> float:
    """Seconds one run of ``cmd`` takes, start-up included (output discarded)."""
    return run_once(cmd)[0]


@dataclass
class Timing:
    walls: list[float]
    cpus: list[float]

    @property
    def wall(self) -> float:
        return statistics.median(self.walls)

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpus)


def timings(
    commands: Sequence[Sequence[str]],
    runs: int,
    before: Sequence[Callable[[], None] | None] | None = None,
) -> list[Timing]:
    """Wall and CPU times of each command over ``runs`` alternating runs, after one warm-up;
    ``before[i]``, when given, runs (untimed) before each run of command ``i``."""
    hooks = list(before) if before is not None else [None] * len(commands)
    for cmd, hook in zip(commands, hooks, strict=True):
        if hook is not None:
            hook()
        run_once(cmd)  # warm the file and bytecode caches
    results = [Timing([], []) for _ in commands]
    for _ in range(runs):
        for cmd, hook, result in zip(commands, hooks, results, strict=True):
            if hook is not None:
                hook()
            wall, cpu = run_once(cmd)
            result.walls.append(wall)
            result.cpus.append(cpu)
    return results


def medians(commands: Sequence[Sequence[str]], runs: int) -> list[float]:
    """Median wall time of each command over ``runs`` alternating runs, after one warm-up."""
    return [t.wall for t in timings(commands, runs)]


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, to say how busy the machine was."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"
