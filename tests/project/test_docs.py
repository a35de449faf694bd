"""The docs in step with the code: the generated rules page equals what the registry gives now,
SARIF's ``helpUri`` of every rule names an anchor that page has, and every ``pdguard ...``
command line in the README and in ``docs/`` names a command and options the CLI parser has."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path

import pytest

from pdguard import checks
from pdguard.cli import build_parser
from pdguard.commands import check
from pdguard.docs import RULES_PAGE, main, rule_anchor, rules_markdown, sections
from tests.paths import ROOT

PAGES = [
    page
    for page in [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        *sorted((ROOT / "docs").glob("*.md")),
    ]
    if page.is_file()
]


def test_the_rules_page_is_generated_from_the_registry() -> None:
    page = (ROOT / RULES_PAGE).read_text()
    assert page == rules_markdown(), "docs/rules.md is stale: run `python -m pdguard.docs`"
    assert main(["--check", "--root", str(ROOT)]) == 0


def test_a_stale_rules_page_is_caught(tmp_path: Path) -> None:
    (tmp_path / RULES_PAGE).parent.mkdir()
    (tmp_path / RULES_PAGE).write_text(rules_markdown().replace("PDG001", "PDG101", 1))
    assert main(["--check", "--root", str(tmp_path)]) == 1
    assert main(["--root", str(tmp_path)]) == 0
    assert main(["--check", "--root", str(tmp_path)]) == 0


def test_every_rule_has_one_anchor_and_its_sections() -> None:
    page = (ROOT / RULES_PAGE).read_text()
    anchors = re.findall(r'<a id="([^"]+)"></a>', page)
    assert anchors == [rule_anchor(rule.code) for rule in checks.RULES]
    for rule in checks.RULES:
        headings = [heading for heading, _ in sections(rule.description)]
        assert headings == ["What it does", "Why is this bad", "Example", "Use instead"], rule.code
        assert all(text for _, text in sections(rule.description)), rule.code


def test_sarif_help_uri_points_at_the_rules_page_anchors() -> None:
    page = (ROOT / RULES_PAGE).read_text()
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', page))
    driver = json.loads(check.sarif([]))["runs"][0]["tool"]["driver"]
    uris = {rule["id"]: rule["helpUri"] for rule in driver["rules"]}
    assert set(uris) == set(checks.CODES)
    for code, uri in uris.items():
        address, _, anchor = uri.partition("#")
        assert address.endswith("/" + RULES_PAGE.as_posix()), uri
        assert anchor == code.lower() and anchor in anchors, uri


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _command_lines() -> list[tuple[str, str]]:
    """(page, line) for every ``pdguard ...`` line of a code block, comments stripped."""
    found = []
    for page in PAGES:
        for block in re.findall(r"^```[^\n]*\n(.*?)^```", page.read_text(), re.M | re.S):
            for line in block.splitlines():
                line = line.removeprefix("$ ").strip()
                if line.startswith("pdguard "):
                    line = re.split(r"\s+#", line, maxsplit=1)[0]
                    found.append((page.relative_to(ROOT).as_posix(), line))
    return found


def test_the_docs_show_command_lines() -> None:
    pages = {page for page, _ in _command_lines()}
    assert "README.md" in pages and len(_command_lines()) >= 30


@pytest.mark.parametrize(("page", "line"), _command_lines())
def test_documented_options_exist_in_the_parser(page: str, line: str) -> None:
    words = shlex.split(line.replace("[", " ").replace("]", " ").replace(" ...", " "))
    commands = _subcommands()
    assert words[1] in commands, f"{page}: {line}: no command {words[1]!r}"
    sub = commands[words[1]]
    options = {o: a for a in sub._actions for o in a.option_strings}
    for n, word in enumerate(words[2:], 2):
        if not word.startswith("-"):
            continue
        name = word.split("=", 1)[0]
        assert name in options, f"{page}: {line}: `pdguard {words[1]}` has no option {name}"
        action = options[name]
        if action.choices is not None and n + 1 < len(words):
            for value in words[n + 1].split("|"):
                assert value in action.choices, f"{page}: {line}: {name} {value}"
