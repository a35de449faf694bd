"""What the target's own tools say about the lines pdguard wrote (black, isort, ruff)."""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from pathlib import Path

import black
import isort

SGLANG_ISORT = isort.Config(profile="black", known_first_party=frozenset({"sglang"}))


def added_lines(old: str, new: str) -> set[int]:
    """1-based numbers of the lines of ``new`` that are not in ``old``."""
    matcher = difflib.SequenceMatcher(a=old.splitlines(), b=new.splitlines(), autojunk=False)
    return {
        j + 1
        for tag, _, _, j1, j2 in matcher.get_opcodes()
        if tag in ("replace", "insert")
        for j in range(j1, j2)
    }


def touched_lines(text: str, formatted: str) -> set[int]:
    """Lines of ``text`` a formatter changed, removed, or inserted lines next to."""
    matcher = difflib.SequenceMatcher(a=text.splitlines(), b=formatted.splitlines(), autojunk=False)
    touched: set[int] = set()
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            touched.update(range(i1 + 1, i2 + 1))
        elif tag == "insert":
            touched.update({i1, i1 + 1})
    return touched


def black_complaints(old: str, new: str) -> list[str]:
    """Lines pdguard added that black would change."""
    formatted = black.format_str(new, mode=black.Mode())
    lines = new.splitlines()
    return [lines[n - 1] for n in sorted(touched_lines(new, formatted) & added_lines(old, new))]


def isort_complaints(old: str, new: str, config: isort.Config = SGLANG_ISORT) -> list[str]:
    """Lines pdguard added that isort (target settings) would move or change."""
    sorted_text = isort.code(new, config=config)
    lines = new.splitlines()
    return [lines[n - 1] for n in sorted(touched_lines(new, sorted_text) & added_lines(old, new))]


def ruff_findings(path: Path, select: str = "F401,F811,F821") -> list[tuple[str, str]]:
    """(code, message) of ruff's findings on one file, line numbers left out."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--isolated",
            "--select",
            select,
            "--output-format",
            "json",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return sorted((f["code"], f["message"]) for f in json.loads(proc.stdout or "[]"))
