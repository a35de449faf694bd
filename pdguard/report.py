"""How an ``apply`` result is shown: text for people, JSON for programs."""

from __future__ import annotations

import json

from .pipeline import ApplyResult


def apply_json(result: ApplyResult, *, written: bool) -> str:
    payload = {
        "target": result.tree.label,
        "sglang_version": result.sglang_version,
        "files_changed": sorted(result.changes),
        "written": written,
        "fixes": {name: outcome.status.value for name, outcome in result.outcomes.items()},
        "notes": {name: outcome.note for name, outcome in result.outcomes.items() if outcome.note},
    }
    return json.dumps(payload, indent=2)


def apply_text(result: ApplyResult, *, written: bool) -> str:
    version = result.sglang_version or "version unknown"
    lines = [f"{result.tree.label} (sglang {version})"]
    width = max(len(name) for name in result.outcomes)
    for name, outcome in result.outcomes.items():
        status = outcome.status.value
        if status == "applied" and not written:
            status = "would apply"
        note = f"  {outcome.note}" if outcome.note else ""
        lines.append(f"  {name:<{width}}  {status}{note}")
    if result.changes:
        verb = "changed" if written else "would change"
        lines.append(f"{len(result.changes)} file(s) {verb}: " + ", ".join(sorted(result.changes)))
    elif not result.refused:
        lines.append("nothing to change")
    return "\n".join(lines)
