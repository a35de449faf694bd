"""How ``check`` findings are shown: ruff-like text, JSON, SARIF 2.1.0, GitHub annotations."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from urllib.parse import quote

from pdguard import checks

from . import __version__
from .checking import CheckResult

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
HELP_URI = "https://github.com/pdguard/pdguard#rules"


def _rows(results: Sequence[CheckResult]):  # type: ignore[no-untyped-def]
    for result in results:
        for finding in result.findings:
            yield result.display_path(finding), finding


def text(results: Sequence[CheckResult]) -> str:
    lines = [f"{path}:{f.line}:{f.col}: {f.code} {f.message}" for path, f in _rows(results)]
    count = len(lines)
    suppressed = sum(r.suppressed for r in results)
    tail = f" ({suppressed} suppressed)" if suppressed else ""
    lines.append(
        f"Found {count} finding{'s' if count != 1 else ''}{tail}."
        if count
        else f"All checks passed!{tail}"
    )
    return "\n".join(lines)


def as_json(results: Sequence[CheckResult]) -> str:
    findings = [
        {
            "code": f.code,
            "path": path,
            "line": f.line,
            "col": f.col,
            "symbol": f.symbol,
            "message": f.message,
        }
        for path, f in _rows(results)
    ]
    return json.dumps({"findings": findings}, indent=2)


def _rule_doc(rule: checks.Rule) -> tuple[str, str]:
    doc = sys.modules[type(rule).__module__].__doc__ or ""
    title, _, body = doc.partition("\n")
    return title.split(":", 1)[-1].strip(), body.strip()


def _uri(path: str) -> str:
    """A relative URI reference for a display path: forward slashes, percent-encoded (a space
    or a `#` in a directory name must not end up raw in a SARIF `uri`)."""
    return quote(path.replace(os.sep, "/"))


def sarif(results: Sequence[CheckResult]) -> str:
    rules = []
    for rule in checks.RULES:
        title, body = _rule_doc(rule)
        rules.append(
            {
                "id": rule.code,
                "name": rule.name,
                "shortDescription": {"text": title},
                "fullDescription": {"text": body},
                "help": {"text": body},
                "helpUri": f"{HELP_URI}-{rule.code.lower()}",
                "defaultConfiguration": {"level": "error"},
            }
        )
    index = {rule.code: n for n, rule in enumerate(checks.RULES)}
    sarif_results = [
        {
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": "error",
            "message": {"text": f.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": _uri(path)},
                        "region": {"startLine": f.line, "startColumn": f.col},
                    },
                    "logicalLocations": [{"fullyQualifiedName": f.symbol, "kind": "function"}],
                }
            ],
        }
        for path, f in _rows(results)
    ]
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "pdguard",
                        "version": __version__,
                        "informationUri": HELP_URI.split("#")[0],
                        "rules": rules,
                    }
                },
                "results": sarif_results,
            }
        ],
    }
    return json.dumps(log, indent=2)


def _escape(value: str, *, prop: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return value.replace(":", "%3A").replace(",", "%2C") if prop else value


def github(results: Sequence[CheckResult]) -> str:
    return "\n".join(
        f"::error file={_escape(path, prop=True)},line={f.line},col={f.col},"
        f"title={_escape(f.code, prop=True)}::{_escape(f'{f.code} {f.message}')}"
        for path, f in _rows(results)
    )


FORMATS = {"text": text, "json": as_json, "sarif": sarif, "github": github}
