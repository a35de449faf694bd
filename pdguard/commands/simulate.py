"""``pdguard simulate``: run the target's own inflight-queue code against a simulated scheduler
(``pdguard/simulate/``) and show the scenarios' verdicts."""

from __future__ import annotations

import argparse
import dataclasses
import json
import textwrap
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..fixes.inflight_deadline import FIX
from ..sglang_names import INFLIGHT_FUNCTION
from .base import (
    EXIT_CHANGES,
    EXIT_OK,
    add_format,
    add_output_file,
    add_target,
    emit,
    target_tree,
)

if TYPE_CHECKING:
    from ..simulate import SimulationReport
    from ..simulate.seeds import SeedResult

NAME = "simulate"
HELP = "run the target's own inflight-queue code against a simulated scheduler"
DESCRIPTION = (
    f"Load {INFLIGHT_FUNCTION} (and the code around it) from the target's "
    "source, give it stand-ins for SGLang's runtime, and run named scenarios on N simulated "
    "ranks with a simulated clock."
)


def epilog() -> str:
    from ..simulate.lockstep import LAG_STEPS

    return f"""\
Each scenario expects the property the {FIX} fix should give (failed after its
deadline, within {LAG_STEPS} scheduler steps; every rank alike; KV and slots freed; no success
failed); on an unpatched tree the wedge rows fail and show the bug. The decode scenarios
(wherever the tree has a decode side) run the release's own DecodePreallocQueue,
DecodeTransferQueue, process_decode_queue and its Mooncake/NIXL KV receivers with a stand-in
transport.

The target's code is untrusted: only the definitions the scenarios need are compiled, by a
restricted compile (no dunder attributes, no open/exec/eval/compile/__import__), and run in a
child process with memory, CPU and wall-clock limits (docs/confirm.md).

`pdguard simulate --list` lists the scenarios and what each shows.

exit codes: 0 every scenario passes (or does not apply), or --list; 1 any fails (e.g. an
unpatched tree); 2 the target's code cannot be loaded or reaches something with no
stand-in, such as an import only a fork has (one line: the file, the line and the name),
an unknown scenario, no PATH without --list, code the sandbox refuses or a limit it reaches
(naming the line). Names a fork only passes along (its own
metrics, tracer, logprob processor) get recording stand-ins.
"""


# -- output ---------------------------------------------------------------------------------

VERDICTS = {"pass": "PASS", "fail": "FAIL", "n/a": "n/a"}


def text(report: SimulationReport, width: int = 100) -> str:
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
        if row.verdict == "fail":
            for rid, error in row.failed[:3]:
                said = textwrap.wrap(f"client error ({rid}): {error}", text_width)
                lines += [pad + said[0]] + [pad + "  " + part for part in said[1:]]
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
                    "failed_requests": [
                        {"rid": rid, "client_error": error} for rid, error in row.failed
                    ],
                }
                for row in report.rows
            ],
            "loaded": report.loaded,
        },
        indent=2,
    )


FORMATS = {"text": text, "json": as_json}


# -- the command ----------------------------------------------------------------------------


def scenario_list(fmt: str) -> str:
    """The scenarios and what each shows (``--list``)."""
    from ..simulate import DECODE_SCENARIOS, SCENARIOS

    every = [(s.name, s.expected, "") for s in SCENARIOS]
    every += [(s.name, s.expected, "[decode] ") for s in DECODE_SCENARIOS]
    if fmt == "json":
        return json.dumps([{"name": name, "expected": text} for name, text, _ in every], indent=2)
    width = max(len(name) for name, _, _ in every)
    pad = " " * (width + 2)
    return "\n".join(
        f"{name:<{width}}  "
        + "\n".join(textwrap.wrap(f"{side}{text}", 100, initial_indent=pad, subsequent_indent=pad))[
            len(pad) :
        ]
        for name, text, side in every
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_target(parser, "the SGLang tree (as for apply)")
    parser.add_argument(
        "--list", action="store_true", help="list the scenarios and what each shows; run nothing"
    )
    parser.add_argument("--ranks", type=int, default=2, help="simulated TP ranks (default 2)")
    add_format(parser, FORMATS)
    add_output_file(parser, "simulate.json")
    parser.add_argument(
        "--scenario",
        action="append",
        metavar="NAME",
        help="run only this scenario (repeat; see --list)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        metavar="N",
        help="instead of the scenarios, run the fault schedules of seeds 0..N-1 on the prefill "
        "side (decode restarts, stalls, pauses, rank skew, PP lag, optimistic requeues, memory "
        "pressure) and, wherever the tree has one, the decode side (prefill restarts, stalled "
        "transfers, unregistered and late rooms, retraction under memory pressure, rank skew, "
        f"pauses), the properties checked at every step; at most {MAX_SEEDS}",
    )
    parser.add_argument(
        "--seed",
        type=int,
        action="append",
        metavar="K",
        help="replay the fault schedule of seed K exactly (repeat)",
    )
    parser.add_argument(
        "--decode",
        action="store_true",
        default=None,
        help="run the decode scenarios (the default wherever the tree has a decode side; "
        "kept for scripts that pass it)",
    )


MAX_SEEDS = 1000


def seeds_text(target: str, results: list[SeedResult]) -> str:
    lines = []
    for result in results:
        seed = f"seed {result.seed}" + (" (decode)" if result.side == "decode" else "")
        if not result.violations:
            lines.append(f"{seed}: pass ({result.schedule})")
            continue
        lines.append(f"{seed}: FAIL ({result.schedule})")
        lines += [f"  {v.line()}" for v in result.violations]
        lines.append(f"  shrunk: {result.shrunk}")
        lines.append(f"  replay: pdguard simulate {target} --seed {result.seed}")
    seeds = {r.seed for r in results}
    failed = {r.seed for r in results if r.violations}
    lines.append(f"{len(seeds) - len(failed)} seed(s) passed, {len(failed)} failed")
    return "\n".join(lines)


def seeds_json(target: str, results: list[SeedResult]) -> str:
    return json.dumps(
        [
            {
                "seed": r.seed,
                "side": r.side,
                "schedule": r.schedule,
                "violations": [dataclasses.asdict(v) for v in r.violations],
                "shrunk": r.shrunk,
                "replay": f"pdguard simulate {target} --seed {r.seed}",
            }
            for r in results
        ],
        indent=2,
    )


def _run_seeds(args: argparse.Namespace) -> int:
    from ..simulate import check_ranks, run_seeds

    check_ranks(args.ranks)
    if args.seeds is not None and not 1 <= args.seeds <= MAX_SEEDS:
        raise UsageError(f"--seeds must be between 1 and {MAX_SEEDS}, got {args.seeds}")
    chosen = list(range(args.seeds or 0)) + [k for k in args.seed or () if k >= 0]
    if any(k < 0 for k in args.seed or ()):
        raise UsageError("--seed must be 0 or more")
    results = run_seeds(target_tree(args), chosen, ranks=args.ranks)
    render = seeds_json if args.format == "json" else seeds_text
    emit(render(args.target or ".", results), args.output_file)
    return EXIT_CHANGES if any(r.violations for r in results) else EXIT_OK


def run(args: argparse.Namespace) -> int:
    from ..simulate import ALL_NAMES, check_ranks
    from ..simulate import run as simulate

    if args.list:
        emit(scenario_list(args.format), args.output_file)
        return EXIT_OK
    if args.seeds is not None or args.seed:
        return _run_seeds(args)
    check_ranks(args.ranks)
    unknown = sorted(set(args.scenario or ()) - set(ALL_NAMES))
    if unknown:
        raise UsageError(f"unknown scenario {unknown[0]!r}; the scenarios: {', '.join(ALL_NAMES)}")
    result = simulate(target_tree(args), ranks=args.ranks, names=args.scenario, decode=args.decode)
    emit(FORMATS[args.format](result), args.output_file)
    return EXIT_OK if result.passed else EXIT_CHANGES
