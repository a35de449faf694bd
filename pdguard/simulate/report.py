"""``pdguard simulate`` output: a table, or JSON."""

from __future__ import annotations

import json
import textwrap

from . import SimulationReport

VERDICTS = {"pass": "PASS", "fail": "FAIL", "n/a": "n/a"}


def table(report: SimulationReport, width: int = 100) -> str:
    version = f"sglang {report.sglang_version}" if report.sglang_version else "sglang"
    lines = [f"pdguard simulate: {report.target} ({version}), {report.ranks} rank(s)", ""]
    name_width = max([len("scenario"), *(len(r.scenario) for r in report.rows)])
    text_width = max(40, width - name_width - 20)
    header = f"{'scenario':<{name_width}}  {'verdict':<7}  {'sim s':>7}  expected / observed"
    lines += [header, "-" * len(header)]
    for row in report.rows:
        lead = f"{row.scenario:<{name_width}}  {VERDICTS[row.verdict]:<7}  {row.seconds:>7.2f}  "
        pad = " " * len(lead)
        expected = textwrap.wrap(f"expected: {row.expected}", text_width) or [""]
        observed = textwrap.wrap(f"observed: {row.observed}", text_width) or [""]
        lines.append(lead + expected[0])
        lines += [pad + "  " + part for part in expected[1:]]
        lines += [pad + observed[0]] + [pad + "  " + part for part in observed[1:]]
    failed = sum(row.verdict == "fail" for row in report.rows)
    lines += ["", f"{len(report.rows) - failed} passed, {failed} failed"]
    return "\n".join(lines)


def as_json(report: SimulationReport) -> str:
    return json.dumps(
        {
            "target": report.target,
            "sglang_version": report.sglang_version,
            "ranks": report.ranks,
            "passed": report.passed,
            "scenarios": [
                {
                    "name": row.scenario,
                    "expected": row.expected,
                    "verdict": row.verdict,
                    "observed": row.observed,
                    "simulated_seconds": row.seconds,
                }
                for row in report.rows
            ],
            "loaded": report.loaded,
        },
        indent=2,
    )


FORMATS = {"table": table, "json": as_json}
