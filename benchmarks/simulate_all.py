"""``simulate`` on every pinned release, unpatched and patched: the 62-release table of
docs/confirm.md.

    python -m benchmarks.simulate_all                       # the CI releases
    PDGUARD_ALL_RELEASES=1 python -m benchmarks.simulate_all   # all 62 (fetches the missing)
    python -m benchmarks.simulate_all 0.5.21 0.4.6          # those named
    python -m benchmarks.simulate_all --jobs 2 --json out.jsonl

Per release: whether the tree loads, the rows (passed / failed / n/a, the failed scenarios),
the exit code ``pdguard simulate`` gives (0 all pass, 1 a row fails, 2 cannot load or run) and
the seconds, first on a copy of the release as shipped, then on the same copy patched by
``pdguard apply`` (``--no-confirm``: the table measures simulate, not apply's confirmation).
A release ``apply`` refuses has no patched run. The markdown table goes to stdout, one JSON
object a release to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pdguard.commands import apply
from pdguard.errors import PdguardError
from pdguard.simulate import run as simulate
from pdguard.tree import open_tree
from pdguard.vendor_sglang import fetch_release, load_manifest

EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2


@dataclass
class Run:
    """One ``simulate`` run on one tree."""

    exit: int
    passed: int = 0
    failed: list[str] = field(default_factory=list)
    na: int = 0
    error: str = ""  # exit 2's line, or apply's refusal
    seconds: float = 0.0

    @property
    def loads(self) -> bool:
        return self.exit != EXIT_ERROR

    def cell(self) -> str:
        if not self.loads:
            return f"exit 2: {self.error[:110]}"
        text = f"{self.passed} / {len(self.failed)} / {self.na}, exit {self.exit}"
        return text + (f" ({', '.join(self.failed)})" if self.failed else "")


@dataclass
class Measured:
    version: str
    family: str
    unpatched: Run
    patched: Run | None  # None: apply refused (``refusal``)
    refusal: str = ""


def simulated(root: Path) -> Run:
    """``pdguard simulate root`` (its sandbox, its default scenarios), as a :class:`Run`."""
    start = time.perf_counter()
    try:
        report = simulate(open_tree(root))
    except PdguardError as exc:
        line = str(exc).splitlines()[0].replace(f"{root}/", "")
        return Run(EXIT_ERROR, error=line, seconds=time.perf_counter() - start)
    verdicts = [row.verdict for row in report.rows]
    failed = [row.scenario for row in report.rows if row.verdict == "fail"]
    return Run(
        EXIT_FAIL if failed else EXIT_PASS,
        passed=verdicts.count("pass"),
        failed=failed,
        na=verdicts.count("n/a"),
        seconds=time.perf_counter() - start,
    )


@contextmanager
def scratch_release(version: str) -> Iterator[Path]:
    """A writable copy of ``version``'s tree, removed afterwards."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "sglang"
        shutil.copytree(fetch_release(version), root, symlinks=True)
        yield root


def patch(root: Path) -> str:
    """``pdguard apply --no-confirm`` on ``root``: "" when written, else the refusal's line."""
    result = apply.plan(open_tree(root))
    if result.refused:
        return result.refusal().splitlines()[0].replace(f"{root}/", "")
    apply.write(result)
    return ""


def measure(version: str, family: str) -> Measured:
    """Both runs on a scratch copy of ``version``."""
    with scratch_release(version) as root:
        unpatched = simulated(root)
        refusal = patch(root)
        if refusal:
            return Measured(version, family, unpatched, None, refusal)
        return Measured(version, family, unpatched, simulated(root))


def row(measured: Measured) -> str:
    patched = (
        measured.patched.cell() if measured.patched else f"apply refused: {measured.refusal[:90]}"
    )
    seconds = measured.unpatched.seconds + (measured.patched.seconds if measured.patched else 0)
    cells = (
        measured.version,
        measured.family,
        measured.unpatched.cell(),
        patched,
        f"{seconds:.0f}",
    )
    return "| " + " | ".join(cells) + " |"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.simulate_all")
    parser.add_argument("versions", nargs="*", help="pinned versions (default: CI, or all 62)")
    parser.add_argument("--jobs", type=int, default=1, help="releases measured at once")
    parser.add_argument("--json", type=Path, help="one JSON object a release, appended here")
    args = parser.parse_args(argv)
    every = os.environ.get("PDGUARD_ALL_RELEASES") == "1"
    named = set(args.versions)
    releases = [r for r in load_manifest() if (r.version in named if named else r.ci or every)]
    print("| release | family | unpatched: pass / fail / n-a, exit | patched (apply) | s |")
    print("|---|---|---|---|---|", flush=True)
    bad = 0
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        futures = [pool.submit(measure, r.version, r.family) for r in releases]
        for future in futures:
            measured = future.result()
            print(row(measured), flush=True)
            if args.json:
                with args.json.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(asdict(measured)) + "\n")
            patched = measured.patched
            bad += not measured.unpatched.loads or (patched is not None and patched.exit != 0)
    print(f"\n{len(releases)} releases; {bad} with an exit 2 or a patched FAIL", file=sys.stderr)
    return EXIT_FAIL if bad else EXIT_PASS


if __name__ == "__main__":
    raise SystemExit(main())
