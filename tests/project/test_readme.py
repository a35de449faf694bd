"""The README's "Use" section and the docs pages that hold what it used to (``USE_PAGES``), run:
every ``pdguard ...`` line of their code blocks (and every ``$ pdguard ...`` example) against a
copy of a fetched release, so that the docs and the behaviour cannot drift apart.

Placeholders: ``PATH``, ``path/to/sglang`` and ``sglang-0.5.14`` are a copy of release 0.5.14
(fresh for each line, as lines write to it), ``FILE`` a file in it, ``REPO`` a git repository
of releases 0.5.14, 0.5.18 and 0.5.23 (``tests.helpers``), ``NAME`` a scenario. ``a|b|c``
runs each alternative, ``[...]`` runs the line without and then with the optional part, and
``--installed`` finds the copy on ``PYTHONPATH``. Each line must exit 0 or 1 (findings or
changes: 2 is an error, which no README line shows), and print something that parses in its
format (or write it to ``--output-file``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from pdguard.vendor_sglang import fetch_release
from tests.helpers import pdguard, release_repo
from tests.paths import ROOT

pytestmark = pytest.mark.releases

README = ROOT / "README.md"
# The pages the README's former "Use" subsections moved to (apply, check, code never seen,
# pre-commit and CI, verify and carry, simulate, LibCST codemods).
USE_PAGES = tuple(
    ROOT / "docs" / name
    for name in (
        "apply.md",
        "check.md",
        "unseen.md",
        "pre-commit.md",
        "verify.md",
        "simulate.md",
        "codemods.md",
    )
)
RELEASE = "0.5.14"
REPO_RELEASES = ("0.5.14", "0.5.18", "0.5.23")
COPY = f"sglang-{RELEASE}"
PLACEHOLDERS = {
    "path/to/sglang": COPY,
    "PATH": COPY,
    "FILE": f"{COPY}/sglang/srt/disaggregation/prefill.py",
    "NAME": "wedge",
}


def use_section() -> str:
    """The README's "Use" section, then every page of ``USE_PAGES``."""
    text = README.read_text()
    start = text.index("\n## Use\n")
    end = text.index("\n## ", start + 1)
    return "\n".join([text[start:end], *(page.read_text() for page in USE_PAGES)])


def blocks(section: str) -> list[str]:
    return re.findall(r"^```[^\n]*\n(.*?)^```", section, re.M | re.S)


def readme_lines() -> list[str]:
    """Every pdguard command line of the Use section's code blocks, comments stripped."""
    found = []
    for block in blocks(use_section()):
        for line in block.splitlines():
            line = line.removeprefix("$ ").strip()
            if line.startswith("pdguard "):
                found.append(re.split(r"\s+#", line, maxsplit=1)[0].strip())
    return found


def variants(line: str) -> list[str]:
    """``[opt]``: without, then with; ``a|b|c``: each. ``...`` (more of the same) dropped."""
    line = line.replace(" ...]", "]")
    optional = re.findall(r"\[([^\[\]]+)\]", line)
    template = re.sub(r"\[[^\[\]]+\]", "{}", line)
    lines = [template.format(*[""] * len(optional))]
    if optional:
        lines.append(template.format(*optional))
    expanded = []
    for one in lines:
        words = one.split()
        choices = [w.split("|") if "|" in w and not w.startswith("'") else [w] for w in words]
        width = max(len(c) for c in choices)
        for n in range(width):
            expanded.append(" ".join(c[min(n, len(c) - 1)] for c in choices))
    return list(dict.fromkeys(expanded))


LINES = [v for line in readme_lines() for v in variants(line)]


def test_the_use_section_has_every_command() -> None:
    commands = {shlex.split(line)[1] for line in LINES}
    assert commands >= {"apply", "check", "rule", "verify", "carry", "simulate"}
    assert len(LINES) >= 25


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return release_repo(tmp_path_factory.mktemp("readme") / "repo", REPO_RELEASES)


def _argv(line: str, repo: Path) -> list[str]:
    words = shlex.split(line)
    return [str(repo) if w == "REPO" else PLACEHOLDERS.get(w, w) for w in words[1:]]


def _check_output(argv: list[str], out: str, cwd: Path) -> None:
    if "--output-file" in argv:
        out = (cwd / argv[argv.index("--output-file") + 1]).read_text()
    assert out.strip(), argv
    fmt = argv[argv.index("--format") + 1] if "--format" in argv else "text"
    if "--diff" in argv and fmt == "text":
        assert out.startswith("--- a/"), out[:200]
    elif fmt in ("json", "sarif"):
        data = json.loads(out)
        if fmt == "sarif":
            assert data["version"] == "2.1.0" and data["runs"][0]["results"]
    elif fmt == "github":
        assert all(line.startswith("::") for line in out.splitlines()), out[:200]


@pytest.mark.parametrize("line", LINES)
def test_readme_line(line: str, repo: Path, tmp_path: Path) -> None:
    shutil.copytree(fetch_release(RELEASE), tmp_path / COPY)
    argv = _argv(line, repo)
    env = dict(os.environ)
    if "--installed" in argv:  # the copy is the sglang this Python finds
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / COPY), *sys.path])
    cwd = tmp_path
    if argv[0] == "check" and not [a for a in argv[1:] if not a.startswith("-")]:
        cwd = tmp_path / COPY  # `pdguard check` alone checks `.`
    done = pdguard(*argv, env=env, cwd=cwd)
    assert done.returncode in (0, 1), (line, done.stdout[-500:], done.stderr[-500:])
    _check_output(argv, done.stdout, cwd)


def test_readme_json_example_matches_the_output(tmp_path: Path) -> None:
    """The ``$ pdguard apply sglang-0.5.14 --format json`` example shows what apply prints."""
    [block] = [b for b in blocks(use_section()) if b.startswith("$ pdguard apply")]
    command, _, shown = block.partition("\n")
    shutil.copytree(fetch_release(RELEASE), tmp_path / COPY)
    done = pdguard(*shlex.split(command.removeprefix("$ "))[1:], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    actual, expected = json.loads(done.stdout), json.loads(shown)
    assert list(actual) == list(expected)
    for key in ("target", "sglang_version", "files_changed", "written", "fixes"):
        assert actual[key] == expected[key], key


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (line, variants(line))
        for line in (
            "pdguard simulate PATH [--ranks 2] [--format text|json]",
            "pdguard carry --repo REPO --onto v1 --branch b [--force]",
        )
    ],
)
def test_variants(line: str, expected: list[str]) -> None:
    assert variants(line) == expected
    assert all("[" not in v and "|" not in v for v in expected)
    assert len(expected) == len(set(expected))
