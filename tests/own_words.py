"""pdguard's code and tests are written in its own words: no run of lines copied from SGLang.

Test snippets must look like SGLang (the rules and fixes key on its API: ``kv_mgr``,
``conclude_state``, ``KVPoll.Failed``, ...), but are never SGLang's code. This scanner finds
*copied runs*: ``RUN`` or more consecutive significant lines of a file of this repository that
are, stripped of indentation, lines of a release's ``sglang/srt/disaggregation`` or
``sglang/srt/environ.py``. A significant line is one long enough to be more than an idiom
(``SIGNIFICANT`` characters) and not an import; blank lines and short lines neither count nor
break a run, any other line breaks it.

A run that must mirror SGLang (pdguard's generated patch reusing the release's own names, as a
maintainer would write it) is accepted only with a comment ``# own-words: <why>`` on the line
above it or on one of its lines.

``python -m tests.own_words [VERSION ...]`` prints every copied run (default: the ci releases);
``tests/project/test_own_words.py`` fails on any.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pdguard.vendor_sglang import fetch_release, load_manifest

ROOT = Path(__file__).resolve().parent.parent
RUN = 3
SIGNIFICANT = 16
# Lines every Python module may hold; never evidence of copying.
_GENERIC = frozenset({"logger = logging.getLogger(__name__)", "if TYPE_CHECKING:"})
_EXPLAINED = "# own-words:"
_SKIPPED_DIRS = frozenset({".git", ".venv", "build", "__pycache__", ".mypy_cache", ".ruff_cache"})


@dataclass(frozen=True)
class CopiedRun:
    path: str  # relative to the repository root
    first: int  # 1-based line numbers
    last: int
    lines: tuple[str, ...]

    def __str__(self) -> str:
        body = "\n".join(f"    {line}" for line in self.lines)
        return f"{self.path}:{self.first}-{self.last}: {len(self.lines)} lines as in SGLang\n{body}"


def _significant(line: str) -> bool:
    return (
        len(line) >= SIGNIFICANT
        and not line.startswith(("import ", "from ", "#"))
        and line not in _GENERIC
    )


def upstream_lines(versions: Iterable[str]) -> frozenset[str]:
    """The significant stripped lines of the releases' disaggregation package and env registry."""
    found: set[str] = set()
    for version in versions:
        srt = fetch_release(version) / "sglang" / "srt"
        for path in [*sorted((srt / "disaggregation").rglob("*.py")), srt / "environ.py"]:
            if path.is_file():
                for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                    stripped = line.strip()
                    if _significant(stripped):
                        found.add(stripped)
    return frozenset(found)


def own_files(root: Path = ROOT) -> Iterator[Path]:
    """The repository's Python files (its code, tests, benchmarks): those git tracks, so a
    ``venv/`` or a build inside the clone is never read; outside a git checkout (an sdist),
    every file but tooling caches."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--", "*.py"],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        for path in sorted(root.rglob("*.py")):
            if not _SKIPPED_DIRS.intersection(path.relative_to(root).parts):
                yield path
        return
    for name in sorted(filter(None, listed.decode("utf-8", "surrogateescape").split("\0"))):
        path = root / name
        if path.is_file():  # tracked but deleted in the working tree: nothing to read
            yield path


def copied_runs(path: Path, upstream: frozenset[str], root: Path = ROOT) -> list[CopiedRun]:
    runs: list[CopiedRun] = []
    run: list[tuple[int, str]] = []

    def flush() -> None:
        if len(run) >= RUN:
            rel = path.relative_to(root).as_posix()
            runs.append(CopiedRun(rel, run[0][0], run[-1][0], tuple(s for _, s in run)))
        run.clear()

    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not _significant(stripped):
            continue
        if stripped in upstream or stripped.strip("'\"") in upstream:
            run.append((number, stripped))
        else:
            flush()
    flush()
    return [run for run in runs if not _explained(lines, run)]


def _explained(lines: list[str], run: CopiedRun) -> bool:
    """A ``# own-words: <why>`` comment on the line above the run or on one of its lines."""
    above = max(run.first - 2, 0)
    return any(
        _EXPLAINED in line and line.split(_EXPLAINED, 1)[1].strip()
        for line in lines[above : run.last]
    )


def scan(versions: Iterable[str]) -> list[CopiedRun]:
    upstream = upstream_lines(versions)
    return [run for path in own_files() for run in copied_runs(path, upstream)]


def main(argv: list[str]) -> int:
    versions = argv or [r.version for r in load_manifest() if r.ci]
    runs = scan(versions)
    for run in runs:
        print(run)
    print(f"{len(runs)} copied runs of {RUN}+ lines ({len(versions)} releases)")
    return 1 if runs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
