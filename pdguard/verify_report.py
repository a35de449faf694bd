"""How ``verify`` results are shown: a table, JSON, GitHub annotations."""

from __future__ import annotations

import json
from collections.abc import Sequence

from .pipeline import FIXES
from .verifying import RefReport


def table(reports: Sequence[RefReport]) -> str:
    names = [fix.name for fix in FIXES]
    header = ["REF", "COMMIT", "VERSION", *names, "FINDINGS"]
    rows = [
        [
            r.ref,
            (r.commit or "-")[:12],
            r.sglang_version or "-",
            *(r.fixes.get(n, "-") for n in names),
            str(len(r.findings)),
        ]
        for r in reports
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    for r in reports:
        for name, note in r.notes.items():
            if r.fixes.get(name) not in ("carried", "upstream"):
                lines.append(f"{r.ref}: {name}: {note}")
    return "\n".join(lines)


def as_json(reports: Sequence[RefReport]) -> str:
    return json.dumps([r.as_json() for r in reports], indent=2)


def github(reports: Sequence[RefReport]) -> str:
    lines = []
    for r in reports:
        for name, status in r.fixes.items():
            if status in ("applicable", "drifted"):
                level = "error" if status == "drifted" else "warning"
                note = r.notes.get(name, "").replace("%", "%25").replace("\n", "%0A")
                lines.append(f"::{level} title=pdguard verify {r.ref}::{name} {status}: {note}")
    return "\n".join(lines)


FORMATS = {"table": table, "json": as_json, "github": github}
