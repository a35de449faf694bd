"""``pdguard simulate``: run the target's own inflight-queue code against a simulated scheduler.

Two halves with the same roles, ``prefill/`` and ``decode/``: each loads the release's own code
from its source with ``ast`` (``loader``), gives it stand-ins for everything SGLang's runtime
would give it (``standins``), runs it on N simulated ranks in lock step (``world``) through
named scenarios (``scenarios``), each stating the property the fixes should give. The prefill
half runs ``process_disagg_prefill_inflight_queue`` and the methods around it (the
inflight-queue append, the bootstrap queue, optimistic prefill's requeue, the release's own
Mooncake and NIXL senders); the decode half runs the decode queues and KV receivers.

Shared by both: the loading machinery (``loader``), the common stand-ins (``standins``), the
lock-step engine (``lockstep``), the request script (``spec``), pass-along recorders
(``passalong``), the sandbox (``sandbox``), seeded fault schedules (``seeds``) and
``check --confirm`` (``confirm``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import LoadError, SimulationGap, UsageError
from ..sglang_names import DECODE_PATH, PREFILL_PATH
from ..tree import SourceTree
from . import loader, prefill, sandbox
from . import seeds as seeds_module
from .decode import loader as decode_loader
from .decode import scenarios as decode_scenarios
from .decode import world as decode_world
from .decode.scenarios import DECODE_NAMES, DECODE_SCENARIOS
from .prefill import world
from .prefill.scenarios import NAMES, SCENARIOS
from .spec import Outcome

# every scenario, prefill then decode; the decode ones run when named (or ``decode=True``)
ALL_NAMES = (*NAMES, *DECODE_NAMES)
# the most simulated ranks: each is a thread running the target's code (SGLang's largest TP
# group on one node is 8; 64 leaves room for TP x CP)
MAX_RANKS = 64

__all__ = [
    "ALL_NAMES",
    "DECODE_NAMES",
    "DECODE_SCENARIOS",
    "NAMES",
    "SCENARIOS",
    "LoadError",
    "Row",
    "SimulationGap",
    "SimulationReport",
    "client_errors",
    "load",
    "run",
]


@dataclass(frozen=True)
class Row:
    scenario: str
    expected: str
    verdict: str  # pass, fail, n/a
    observed: str
    seconds: float
    # each request failed to its client: (rid, the error text the client receives, from
    # rank 0, which answers the client)
    failed: tuple[tuple[str, str], ...] = ()


@dataclass
class SimulationReport:
    target: str
    sglang_version: str | None
    ranks: int
    rows: list[Row] = field(default_factory=list)
    loaded: dict[str, object] = field(default_factory=dict)
    # side ("prefill", "decode") -> why its half could not load or run (``keep_going`` only:
    # the other half's rows are still there)
    cannot_run: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(row.verdict != "fail" for row in self.rows)


def load(tree: SourceTree) -> loader.Target:
    """The target's code, compiled for the simulation; LoadError says why it cannot be."""
    return prefill.load(tree)


def client_errors(trace: world.Trace | decode_world.DecodeTrace) -> tuple[tuple[str, str], ...]:
    """(rid, error text) of every request rank 0 answered with an error, first answer only."""
    found: dict[str, str] = {}
    for event in trace.events_of("client_error"):
        if event.rank == 0 and event.rid is not None:
            found.setdefault(event.rid, event.detail)
    return tuple(found.items())


def check_ranks(ranks: int) -> None:
    """``--ranks`` within 1 - MAX_RANKS, else a UsageError."""
    if not 1 <= ranks <= MAX_RANKS:
        raise UsageError(f"--ranks must be between 1 and {MAX_RANKS}, got {ranks}")


def has_decode_side(tree: SourceTree) -> bool:
    """Does the tree have SGLang's decode side (``decode.py`` with its queues)?"""
    return tree.read_bytes(DECODE_PATH) is not None


def has_prefill_side(tree: SourceTree) -> bool:
    """Does the tree have SGLang's prefill side (``prefill.py`` with its inflight queue)?"""
    return tree.read_bytes(PREFILL_PATH) is not None


def run(
    tree: SourceTree,
    ranks: int = 2,
    names: Sequence[str] | None = None,
    decode: bool | None = None,
    limits: sandbox.Limits = sandbox.LIMITS,
    keep_going: bool = False,
) -> SimulationReport:
    """Run the scenarios (those named, or every one that applies: the prefill ones wherever
    the tree has a prefill side, the decode ones wherever it has a decode side; ``decode``
    forces them on or off) on ``tree``, in a child process under ``limits`` (``sandbox``).
    Raises LoadError when the target's code cannot be loaded, SimulationGap when it reaches
    something with no stand-in, or a limit of the sandbox; with ``keep_going``, a half that
    cannot load or run is recorded in ``cannot_run`` and the other half still runs (a limit of
    the sandbox still ends the whole run)."""
    check_ranks(ranks)
    return sandbox.run_in_child(
        run_unguarded, tree, ranks, names, decode, keep_going, limits=limits
    )


def run_seeds(
    tree: SourceTree, seeds: Sequence[int], ranks: int = 2, limits: sandbox.Limits = sandbox.LIMITS
) -> list[seeds_module.SeedResult]:
    """``simulate --seeds``: each seed's fault schedules run on ``tree``'s prefill code and,
    wherever the tree has a decode side, on its decode code, in the sandbox's child process."""
    check_ranks(ranks)
    return sandbox.run_in_child(_run_seeds, tree, list(seeds), ranks, limits=limits)


def _run_seeds(tree: SourceTree, seeds: list[int], ranks: int) -> list[seeds_module.SeedResult]:
    decoded = decode_loader.load(tree) if has_decode_side(tree) else None
    # the prefill schedules where the tree has a prefill side (or no decode side either: then
    # loading says why it cannot run)
    target = load(tree) if has_prefill_side(tree) or decoded is None else None
    return seeds_module.run_seeds(target, seeds, ranks, decoded)


def run_unguarded(
    tree: SourceTree,
    ranks: int = 2,
    names: Sequence[str] | None = None,
    decode: bool | None = None,
    keep_going: bool = False,
) -> SimulationReport:
    """``run`` in this process: the restricted compile and builtins still apply, the child
    process's limits do not (for the sandbox's own child).

    Each half runs where the tree has its side: the prefill scenarios where it has
    ``prefill.py`` (or one is named: then a tree without it cannot load), the decode ones
    where it has ``decode.py`` (``decode`` forces them on or off)."""
    check_ranks(ranks)
    if decode is None:
        decode = has_decode_side(tree)
    wanted_decode = [
        s for s in DECODE_SCENARIOS if (decode and not names) or (names and s.name in names)
    ]
    if names:
        wanted_prefill = any(n in NAMES for n in names)
    else:
        wanted_prefill = has_prefill_side(tree) or not wanted_decode
    report = SimulationReport(tree.label, tree.sglang_version(), ranks)
    if wanted_prefill:
        try:
            target = load(tree)
            report.target, report.sglang_version = target.label, target.version
            report.loaded = dict(loader.describe(target))
            _run_prefill(report, target, ranks, names)
        except (LoadError, SimulationGap) as exc:
            if not keep_going or not wanted_decode:
                raise
            report.cannot_run["prefill"] = str(exc)
    if wanted_decode:
        prefill_ran = "prefill" not in report.cannot_run
        try:
            decoded = decode_loader.load(tree)
            described = dict(decode_loader.describe(decoded))
            if wanted_prefill and prefill_ran:
                report.loaded["decode"] = described
            else:
                report.target, report.sglang_version = decoded.label, decoded.version
                report.loaded = described
            _run_decode(report, tree, decoded, wanted_decode, ranks, prefill_ran)
        except (LoadError, SimulationGap) as exc:
            if not keep_going or not (wanted_prefill and prefill_ran):
                raise
            report.cannot_run["decode"] = str(exc)
    return report


def _run_decode(
    report: SimulationReport,
    tree: SourceTree,
    target: decode_loader.DecodeTarget,
    chosen: Sequence[decode_scenarios.DecodeScenario],
    ranks: int,
    prefill_ran: bool = True,
) -> None:
    for scenario in chosen:
        why_not = scenario.applies(target)
        if why_not is None and scenario.prefill is not None and not has_prefill_side(tree):
            why_not = "no prefill side in this tree (no prefill.py): nothing to pair"
        elif why_not is None and scenario.prefill is not None and not prefill_ran:
            why_not = "the prefill side cannot run here: nothing to pair"
        if why_not is not None:
            report.rows.append(Row(scenario.name, scenario.expected, "n/a", why_not, 0.0))
            continue
        trace = decode_world.simulate(scenario.world(target, ranks), target)
        try:
            outcome = scenario.judge(trace)
            if scenario.prefill is not None:
                half = scenario.prefill(tree, ranks)
                verdict = "pass" if half.verdict == outcome.verdict == "pass" else "fail"
                outcome = Outcome(
                    verdict,
                    f"prefill: {half.observed}; decode: {outcome.observed}",
                    max(half.seconds, outcome.seconds),
                )
        except SimulationGap as exc:
            raise SimulationGap(f"{exc} (scenario {scenario.name})") from exc
        report.rows.append(_row(scenario.name, scenario.expected, outcome, trace))


def _row(
    name: str,
    expected: str,
    outcome: Outcome,
    trace: world.Trace | decode_world.DecodeTrace,
) -> Row:
    return Row(
        name, expected, outcome.verdict, outcome.observed, outcome.seconds, client_errors(trace)
    )


def _run_prefill(
    report: SimulationReport, target: loader.Target, ranks: int, names: Sequence[str] | None
) -> None:
    for scenario in SCENARIOS:
        if names and scenario.name not in names:
            continue
        why_not = scenario.applies(target)
        if why_not is not None:
            report.rows.append(Row(scenario.name, scenario.expected, "n/a", why_not, 0.0))
            continue
        config = scenario.world(ranks)
        if scenario.fit is not None:
            config = scenario.fit(target, config)
        trace = world.simulate(config, target)
        if trace.failure is not None and trace.failure.gap is not None:
            raise SimulationGap(f"{trace.failure.gap} (scenario {scenario.name})")
        try:
            outcome = scenario.judge(trace)
        except SimulationGap as exc:
            raise SimulationGap(f"{exc} (scenario {scenario.name})") from exc
        report.rows.append(_row(scenario.name, scenario.expected, outcome, trace))
