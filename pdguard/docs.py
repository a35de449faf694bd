"""Documentation generated from the registries: ``docs/rules.md`` from ``checks.RULES``.

Each rule gets one anchor, ``#pdg001``, which SARIF's ``helpUri`` points to (``rule_url``), and
its module docstring's sections ("What it does", "Why is this bad", "Example", "Use instead"),
then the fixes that make it pass (``FIXES``). ``python -m pdguard.docs`` writes the page;
``python -m pdguard.docs --check`` exits 1 when the page on disk differs from the registry.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pdguard import HOMEPAGE

if TYPE_CHECKING:
    from pdguard.checks import Rule

RULES_PAGE = Path("docs") / "rules.md"
RULES_URL = f"{HOMEPAGE}/blob/main/{RULES_PAGE.as_posix()}"
ROOT = Path(__file__).resolve().parent.parent


def rule_anchor(code: str) -> str:
    """The anchor of a rule on the rules page: ``PDG001`` -> ``pdg001``."""
    return code.lower()


def rule_url(code: str) -> str:
    """Where a rule's documentation is: SARIF's ``helpUri``."""
    return f"{RULES_URL}#{rule_anchor(code)}"


def sections(description: str) -> list[tuple[str, str]]:
    """A rule docstring's body as (heading, text): a heading is a line at column 0, its text
    the indented lines below it, dedented."""
    found: list[tuple[str, list[str]]] = []
    for line in description.splitlines():
        if line and not line[0].isspace():
            found.append((line.strip(), []))
        elif found:
            found[-1][1].append(line)
    return [(heading, textwrap.dedent("\n".join(body)).strip()) for heading, body in found]


def _fixes(code: str) -> str:
    from pdguard.commands.rule import fixed_by, no_fix

    fixes = fixed_by(code)
    if not fixes:
        return no_fix(code)
    return "\n".join(f"- `{fix['name']}`: {fix['summary']}" for fix in fixes)


def _rule(rule: Rule) -> str:
    parts = [
        f'<a id="{rule_anchor(rule.code)}"></a>',
        f"## {rule.code} {rule.name}",
        f"{rule.summary[:1].upper()}{rule.summary[1:]}",
    ]
    for heading, text in sections(rule.description):
        parts += [f"### {heading}", text]
    parts += ["### How pdguard fixes it", _fixes(rule.code)]
    return "\n\n".join(parts)


def rules_markdown(rules: Sequence[Rule] | None = None) -> str:
    """The whole rules page."""
    if rules is None:
        from pdguard import checks

        rules = checks.RULES
    index = "\n".join(
        f"| [{rule.code}](#{rule_anchor(rule.code)}) | `{rule.name}` | {rule.summary} |"
        for rule in rules
    )
    head = (
        "# Rules\n\n"
        "<!-- Generated from pdguard.checks.RULES by `python -m pdguard.docs`; edit the rule "
        "modules' docstrings, not this file. -->\n\n"
        "Each rule is one module in `checks/rules/`; its docstring is the text below, and its "
        "literal `VALID`/`INVALID` examples are run by `tests/checks/rules/test_examples.py`. "
        "`pdguard rule CODE` prints the same text. Suppress a finding with "
        "`# pdguard: ignore[CODE]` on its line.\n\n"
        f"| code | name | summary |\n|---|---|---|\n{index}"
    )
    return "\n\n".join([head, *(_rule(rule) for rule in rules)]) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pdguard.docs", description="Write docs/rules.md from the rule registry."
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the page is out of date"
    )
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="the repository root (default: this checkout)"
    )
    args = parser.parse_args(argv)
    page = args.root / RULES_PAGE
    text = rules_markdown()
    if args.check:
        current = page.read_text() if page.is_file() else ""
        if current != text:
            print(f"{page}: out of date; run `python -m pdguard.docs`", file=sys.stderr)
            return 1
        return 0
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)
    print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
