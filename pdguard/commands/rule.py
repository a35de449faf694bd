"""``pdguard rule``: a rule's documentation (as ``ruff rule``): what it does, why it is bad, an
example, and how pdguard fixes it (the fixes whose ``rules`` name the code, from ``FIXES``)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..fixes import FIXES
from .base import EXIT_OK, add_format

if TYPE_CHECKING:
    from pdguard.checks import Rule

NAME = "rule"
HELP = "print a rule's documentation (--all: every rule), as `ruff rule`"
DESCRIPTION = "Print what a rule checks, why it matters, an example, and how pdguard fixes it."


def epilog() -> str:
    from pdguard import checks

    return f"""\
rules: {", ".join(checks.CODES)}

exit codes: 0 printed; 2 error (an unknown rule code, neither CODE nor --all).
"""


def fixed_by(code: str) -> list[dict[str, str]]:
    """The fixes that remove rule ``code``'s findings by writing their code (``Fix.fixes``);
    a fix it only proves refuses while such a finding stands."""
    return [{"name": fix.name, "summary": fix.summary} for fix in FIXES if code in fix.fixes]


def no_fix(code: str) -> str:
    """What to do about a finding of a rule no fix removes."""
    proven = [f"`{fix.name}`" for fix in FIXES if code in fix.rules]
    refuses = (
        f" `pdguard apply` refuses {' and '.join(proven)} while such a finding stands (it "
        "writes its code only where there is none to judge)."
        if proven
        else ""
    )
    return f"No automatic fix: change the code by hand, then run `pdguard check` again.{refuses}"


def _how_fixed(code: str) -> str:
    fixes = fixed_by(code)
    if not fixes:
        return no_fix(code)
    return "\n".join(
        f"`pdguard apply` runs the `{fix['name']}` fix: {fix['summary']}" for fix in fixes
    )


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line.strip() else "" for line in text.splitlines())


def text(rules: Sequence[Rule]) -> str:
    parts = []
    for rule in rules:
        parts.append(
            f"# {rule.name} ({rule.code})\n\n{rule.summary[:1].upper()}{rule.summary[1:]}\n\n"
            f"{rule.description}\n\n"
            f"How pdguard fixes it\n{_indent(_how_fixed(rule.code))}"
        )
    return "\n\n".join(parts)


def as_json(rules: Sequence[Rule]) -> str:
    return json.dumps(
        [
            {
                "code": rule.code,
                "name": rule.name,
                "summary": rule.summary,
                "explanation": rule.description,
                "fixes": fixed_by(rule.code),
            }
            for rule in rules
        ],
        indent=2,
    )


FORMATS = {"text": text, "json": as_json}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("code", nargs="?", metavar="CODE", help="a rule code, e.g. PDG001")
    which.add_argument("--all", action="store_true", help="every rule, in code order")
    add_format(parser, FORMATS)


def run(args: argparse.Namespace) -> int:
    from pdguard import checks

    if args.all:
        rules = list(checks.RULES)
    else:
        code = args.code.strip().upper()
        rules = [rule for rule in checks.RULES if rule.code == code]
        if not rules:
            raise UsageError(f"unknown rule code {args.code!r} (known: {', '.join(checks.CODES)})")
    print(FORMATS[args.format](rules))
    return EXIT_OK
