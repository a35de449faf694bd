"""``check --confirm`` measured on the hand-written corpus (prefill: ``tests/corpus.py``, decode:
``tests/corpus_decode.py``) and on hostile code, against each case's written ground truth.

Per case: the static verdict (the rules' codes), the simulation's (its failing scenarios, all
passing, or why it cannot run), the merged verdict (what ``check --confirm`` reports: the static
findings and PDG009 where the two witnesses disagree) and the ground truth. A verdict *says
unsafe* when it reports anything (a failing scenario, for the simulation). A false positive
says unsafe on a correct tree; a false negative says nothing on an unsafe one.

The ground truth is the corpus's own (``expect``: the hazard's codes, none for a correct tree),
plus one run-time property the static corpus was not written to judge and the brief requires
(never a failed success): ``STALL_FAILS`` below, decided by reading each tree. Every count is
given against both.

``python -m benchmarks.confirm_corpus`` prints the table; ``tests/simulate/test_confirm_corpus.py``
checks it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pdguard.checks import CONFIRM_CODE, STATIC_CODES
from pdguard.commands.check import check_tree
from pdguard.simulate import confirm
from pdguard.simulate.confirm import TextTree
from tests import corpus, corpus_decode

# Correct by the corpus's ground truth, but the sweep aborts an overdue request by time alone,
# before the poll: a transfer that completed while the inflight queue went unpolled past the
# deadline (a scheduler stall, an in-place pause) is failed at the first step after it. Read
# from each tree: its ``_expire_inflight`` runs before the poll and never asks the sender
# whether it already ended (``failed-at-end-of-step`` sweeps after the queue is rebuilt from the
# requests this step's poll kept: it has no such path).
STALL_FAILS = frozenset(
    {
        "stamp-before-append",
        "stamp-after-append",
        "stamp-in-helper",
        "extend-stamped",
        "failed-or-abort",
        "failed-in-tuple",
        "perf-counter-alias",
        "or-poll-sender",
        "stamp-by-rid",
        "deadline-stored-at-entry",
        "time-left-continue",
        "deadline-time-left",
        "fail-method-that-aborts",
        "deadline-stored-on-wall-clock",
    }
)
STALL_WHY = "fails a transfer that completed while the queue went unpolled past the deadline"

# hostile code in a tree that waits for ever (the corpus's no-deadline case): the simulation
# must refuse it (the static verdict stands), never run it outside the sandbox
ESCAPED = "/tmp/pdguard-confirm-escaped"
_HOSTILE_ANCHOR = "        kept, ended = [], []\n"
HOSTILE_LINES: Mapping[str, str] = {
    "hostile-subclasses": "().__class__.__base__.__subclasses__()",
    "hostile-getattr-dunder": "getattr((), '__cl' + 'ass__')",
    "hostile-format-field": "'{0.__class__}'.format(())",
    "hostile-frame-globals": "(x for x in ()).gi_frame.f_globals",
    "hostile-open": f"open({ESCAPED!r}, 'w').write('x')",
    "hostile-import-os": f"__import__('os').system('touch {ESCAPED}')",
    "hostile-exec": f"exec(\"open('{ESCAPED}', 'w')\")",
    "hostile-memory": "x = bytearray(64 << 30)",
}


@dataclass(frozen=True)
class Case:
    corpus: str  # "prefill", "decode", "hostile"
    name: str
    files: dict[str, str]
    truth: str  # "correct", or "unsafe: why"
    liveness_unsafe: bool  # by the corpus's own ground truth (``expect``)

    @property
    def unsafe(self) -> bool:
        return self.truth != "correct"


@dataclass(frozen=True)
class Measured:
    case: Case
    static: tuple[str, ...]  # the static rules' codes
    simulation: str  # "pass (n rows)", "fail: scenarios", "cannot run: why"
    failing: tuple[str, ...]  # the failing scenarios (empty: none, or it could not run)
    ran: bool
    merged: tuple[str, ...]  # every code check --confirm reports
    seconds: float
    still_waiting: tuple[str, ...] = ()  # scenarios that show a request still waiting

    @property
    def static_says_unsafe(self) -> bool:
        return bool(self.static)

    @property
    def simulation_says_unsafe(self) -> bool | None:
        return bool(self.failing) if self.ran else None

    @property
    def merged_says_unsafe(self) -> bool:
        return bool(self.merged)

    @property
    def all_checks_passed(self) -> bool:
        """What ``check --confirm`` prints for this case: "All checks passed!" (no finding)."""
        return not self.merged


def _prefill_truth(case: corpus.Case) -> str:
    if case.expect:
        return f"unsafe: {', '.join(sorted(case.expect))}"
    return f"unsafe: {STALL_WHY}" if case.name in STALL_FAILS else "correct"


def _hostile_files() -> Iterable[Case]:
    base = next(c for c in corpus.CASES if c.name == "no-deadline")
    for name, line in HOSTILE_LINES.items():
        text = base.files[corpus.PREFILL]
        assert _HOSTILE_ANCHOR in text
        files = {
            **base.files,
            corpus.PREFILL: text.replace(_HOSTILE_ANCHOR, f"        {line}\n" + _HOSTILE_ANCHOR, 1),
        }
        yield Case("hostile", name, files, "unsafe: PDG001 (no deadline), hostile line", True)


def cases() -> list[Case]:
    """Every case of the three corpora, with its ground truth."""
    found = [
        Case("prefill", c.name, dict(c.files), _prefill_truth(c), bool(c.expect))
        for c in corpus.CASES
    ]
    found += [
        Case(
            "decode",
            c.name,
            dict(c.files),
            "correct" if c.correct else f"unsafe: {', '.join(sorted(c.expect))}",
            not c.correct,
        )
        for c in corpus_decode.CASES
    ]
    return found + list(_hostile_files())


def measure(case: Case) -> Measured:
    """``check --confirm`` on ``case``'s files, as a tree of texts."""
    start = time.perf_counter()
    result = check_tree(TextTree(dict(case.files), name=case.name), [*STATIC_CODES, CONFIRM_CODE])
    confirmation = confirm.confirmation_of(result.project, result.project.texts)
    codes = sorted({f.code for f in result.findings})
    static = tuple(c for c in codes if c != CONFIRM_CODE)
    waiting: tuple[str, ...] = ()
    if confirmation.report is None:
        simulation, failing, ran = f"cannot run: {confirmation.why_not}", (), False
    else:
        rows = confirmation.report.rows
        waiting = tuple(r.scenario for r in rows if "still waiting" in r.observed)
        failing = tuple(r.scenario for r in rows if r.verdict == "fail")
        passed = sum(r.verdict == "pass" for r in rows)
        simulation = f"fail: {', '.join(failing)}" if failing else f"pass ({passed} rows)"
        ran = True
    seconds = time.perf_counter() - start
    return Measured(case, static, simulation, failing, ran, tuple(codes), seconds, waiting)


@dataclass(frozen=True)
class Counts:
    cases: int
    unsafe: int
    fp: int
    fn: int
    cannot_run: int = 0


def count(measured: list[Measured], witness: str, liveness: bool = False) -> Counts:
    """FP/FN of ``witness`` ("static", "simulation", "merged") against the ground truth (the
    corpus's own with ``liveness``); the simulation's counts only where it ran."""
    fp = fn = cannot = 0
    unsafe = 0
    for m in measured:
        truth = m.case.liveness_unsafe if liveness else m.case.unsafe
        unsafe += truth
        says = {
            "static": m.static_says_unsafe,
            "simulation": m.simulation_says_unsafe,
            "merged": m.merged_says_unsafe,
        }[witness]
        if says is None:
            cannot += 1
        elif says and not truth:
            fp += 1
        elif truth and not says:
            fn += 1
    return Counts(len(measured), unsafe, fp, fn, cannot)


def table(measured: list[Measured]) -> str:
    """The per-case table (markdown) and the counts."""
    lines = [
        "| corpus | case | ground truth | static | simulation | merged (check --confirm) |",
        "|---|---|---|---|---|---|",
    ]
    for m in measured:
        merged = ", ".join(m.merged) or "All checks passed!"
        sim = m.simulation if len(m.simulation) <= 110 else m.simulation[:107] + "..."
        lines.append(
            f"| {m.case.corpus} | {m.case.name} | {m.case.truth} | {', '.join(m.static) or '-'} "
            f"| {sim.replace('|', '/')} | {merged} |"
        )
    lines += ["", "| corpus | ground truth | witness | cases | unsafe | FP | FN | cannot run |"]
    lines.append("|---|---|---|---|---|---|---|---|")
    for name in ("prefill", "decode", "hostile", "all"):
        rows = [m for m in measured if name in ("all", m.case.corpus)]
        for liveness in (False, True):
            for witness in ("static", "simulation", "merged"):
                c = count(rows, witness, liveness)
                truth = "corpus (liveness)" if liveness else "run time"
                lines.append(
                    f"| {name} | {truth} | {witness} | {c.cases} | {c.unsafe} | {c.fp} | "
                    f"{c.fn} | {c.cannot_run if witness == 'simulation' else '-'} |"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table([measure(case) for case in cases()]))
