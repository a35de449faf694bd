"""``pdguard simulate`` on fork-shaped code: what cannot be loaded exits 2 naming it, and what
the liveness path only passes along gets a recording stand-in so the fork runs.

The forks are made here at run time, by inserting a few hand-written lines into a fetched
release's ``prefill.py`` (in the release's own inflight function: before its poll all-reduce,
and at the top of its per-request loop); no SGLang text is committed. The toy tree
(``tests/simulate_toy.py``) covers the rest without the network.
"""

from __future__ import annotations

import ast
import json
import shutil
import sys
from pathlib import Path

import pytest

from pdguard import simulate
from pdguard.cli import main
from pdguard.commands import apply
from pdguard.sglang_names import INFLIGHT_FUNCTION
from pdguard.simulate import passalong, standins
from pdguard.simulate.prefill import scenarios, world
from pdguard.tree import PREFILL_PATH, open_tree
from pdguard.vendor_sglang import fetch_release
from tests.simulate.test_prefill import MAIN_ROWS
from tests.snippets import TOY_PREFILL

# An old shape (poll_and_all_reduce) and the newest (poll_and_all_reduce_attn_cp_tp_group).
FORK_BASES = ["0.5.2", "0.5.23"]
MIXIN = "SchedulerDisaggregationPrefillMixin"
USER = f"{MIXIN}.{INFLIGHT_FUNCTION}"


# -- making forks -------------------------------------------------------------------------------


def _inflight(text: str) -> ast.FunctionDef:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name == INFLIGHT_FUNCTION:
            return node
    raise AssertionError(f"no {INFLIGHT_FUNCTION}")


def _anchors(text: str) -> dict[str, int]:
    """Lines of the inflight function to insert before: ``polls`` (the poll all-reduce
    statement) and ``loop`` (the first statement of the per-request loop over the polls)."""
    function = _inflight(text)
    polls = next(
        stmt
        for stmt in function.body
        if isinstance(stmt, ast.Assign)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Name)
        and stmt.value.func.id.startswith("poll_and_all_reduce")
    )
    loop = next(
        stmt
        for stmt in function.body
        if isinstance(stmt, ast.For) and "poll" in ast.unparse(stmt.target)
    )
    return {"polls": polls.lineno, "loop": loop.body[0].lineno}


def _insert(text: str, at: int, block: str) -> str:
    """Insert ``block`` (dedented lines) before line ``at``, at that line's indentation."""
    lines = text.splitlines(keepends=True)
    indent = lines[at - 1][: len(lines[at - 1]) - len(lines[at - 1].lstrip())]
    added = [indent + line + "\n" if line else "\n" for line in block.splitlines()]
    return "".join([*lines[: at - 1], *added, *lines[at - 1 :]])


def _fork(
    version: str,
    root: Path,
    polls: str = "",
    loop: str = "",
    header: str = "",
    patched: bool = False,
) -> tuple[Path, dict[str, int]]:
    """A copy of ``version`` with ``polls`` inserted before the poll all-reduce, ``loop`` at
    the top of the per-request loop and ``header`` after the module's imports (``patched``:
    then pdguard's fix applied). Returns the tree and the line of each inserted block's first
    line in the fork as written (before the fix)."""
    shutil.copytree(fetch_release(version), root)
    path = root / PREFILL_PATH
    text = path.read_text()
    anchors = _anchors(text)
    lines: dict[str, int] = {}
    # Insert bottom-up so the anchors stay valid, then find the blocks' lines.
    for name, block in sorted(
        (("polls", polls), ("loop", loop)), key=lambda item: -anchors[item[0]]
    ):
        if block:
            text = _insert(text, anchors[name], block)
    if header:
        last_import = max(
            node.end_lineno or node.lineno
            for node in ast.parse(text).body
            if isinstance(node, ast.Import | ast.ImportFrom)
        )
        text = _insert(text, last_import + 1, header + "\n")
    for name, block in (("polls", polls), ("loop", loop), ("header", header)):
        if block:
            first = block.splitlines()[0].strip()
            lines[name] = next(
                i for i, line in enumerate(text.splitlines(), 1) if line.strip() == first
            )
    path.write_text(text)
    if patched:
        result = apply.plan(open_tree(root))
        assert not result.refused, result
        apply.write(result)
    return root, lines


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pdguard: error: "), err
    assert "Traceback" not in err
    return lines[0]


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


# -- (1) an import only the fork has, inside the inflight function -----------------------------

FORK_IMPORT = """\
from sglang.srt.fork_only.hooks import on_inflight
# The queue passed to a function pdguard cannot see: check reports PDG000 until a reviewer
# suppresses it, as a fork maintainer would after reading the hook.
on_inflight(self, self.disagg_prefill_inflight_queue)  # pdguard: ignore[PDG000]
"""


@pytest.mark.releases
@pytest.mark.parametrize("version", FORK_BASES)
@pytest.mark.parametrize("patched", [False, True], ids=["unpatched", "patched"])
def test_a_fork_only_import_in_the_function_exits_2_naming_the_module(
    version: str, patched: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = _fork(version, tmp_path / "fork", polls=FORK_IMPORT, patched=patched)
    prefill = root / PREFILL_PATH
    line = _line_of(prefill, "from sglang.srt.fork_only.hooks import on_inflight")
    assert main(["simulate", str(root)]) == 2
    error = _error(capsys)
    assert f"{prefill}:{line}: cannot load: {USER} imports on_inflight from " in error
    assert "sglang.srt.fork_only.hooks" in error and "on_inflight has no stand-in" in error
    assert "FAIL" not in capsys.readouterr().out
    assert not any(name.split(".")[0] == "sglang" for name in sys.modules)  # never imported


# -- (2) extra attributes the liveness path only passes along ----------------------------------

PASS_ALONG_POLLS = """\
if self.enable_fork_metrics:
    self.my_metrics.observe(len(self.disagg_prefill_inflight_queue))
with self.tracer.span("inflight-queue", size=len(self.disagg_prefill_inflight_queue)):
    fork_trace_event("inflight-queue")
from sglang.srt.fork_only.stats import record_queue_stats
record_queue_stats(self.disagg_prefill_inflight_queue)  # pdguard: ignore[PDG000]
"""
PASS_ALONG_LOOP = """\
req.logprob_processor(req, self.my_metrics)
self.my_metrics.observe(poll, rid=req.rid)
if req.fork_stats is not None:
    req.fork_stats.last_poll = poll
logger.debug(f"polled {req.rid}: {self.fork_output_processor.describe(req)}")
"""
PASS_ALONG_HEADER = "from sglang.srt.fork_only.tracing import fork_trace_event"


@pytest.mark.releases
@pytest.mark.parametrize("version", FORK_BASES)
def test_a_fork_with_pass_along_attributes_runs(
    version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kwargs = {"polls": PASS_ALONG_POLLS, "loop": PASS_ALONG_LOOP, "header": PASS_ALONG_HEADER}
    patched, _ = _fork(version, tmp_path / "patched", patched=True, **kwargs)
    rows = [f"--scenario={name}" for name in MAIN_ROWS]  # today's patch fails issue 10's paths
    assert main(["simulate", str(patched), "--format", "json", *rows]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is True
    assert {row["verdict"] for row in report["scenarios"]} <= {"pass", "n/a"}
    assert report["loaded"]["recorded_names"] == ["fork_trace_event", "record_queue_stats"]
    attributes = set(report["loaded"]["pass_along_attributes"])
    expected = {"my_metrics", "tracer", "logprob_processor", "fork_stats"}
    assert expected | {"enable_fork_metrics", "fork_output_processor"} <= attributes

    # Unpatched, the same fork runs too, and shows the bug (exit 1, not 2).
    unpatched, _ = _fork(version, tmp_path / "unpatched", **kwargs)
    assert main(["simulate", str(unpatched), "--scenario", "wedge"]) == 1
    out = capsys.readouterr().out
    assert "still waiting after 600 simulated seconds" in out


@pytest.mark.releases
def test_the_recorders_record_what_the_fork_passes_along(tmp_path: Path) -> None:
    kwargs = {"polls": PASS_ALONG_POLLS, "loop": PASS_ALONG_LOOP, "header": PASS_ALONG_HEADER}
    root, _ = _fork(FORK_BASES[-1], tmp_path / "fork", patched=True, **kwargs)
    target = simulate.load(open_tree(root))
    healthy = next(s for s in scenarios.SCENARIOS if s.name == "healthy-traffic")
    trace = world.simulate(healthy.world(2), target)
    assert trace.failure is None
    calls = {e.detail for e in trace.events_of("recorded")}
    assert {
        "self (scheduler).my_metrics.observe()",
        "self (scheduler).tracer.span()",
        "fork_trace_event()",
        "record_queue_stats()",
        "req.logprob_processor()",
        "self (scheduler).fork_output_processor.describe()",
    } <= calls
    per_request = [e for e in trace.events_of("recorded") if e.detail == "req.logprob_processor()"]
    assert per_request and all(e.rid is not None for e in per_request)


# -- (3) liveness logic that depends on a name with no stand-in --------------------------------

LIVENESS = {
    # a scheduler attribute the loop branches on: not a pass-along name
    "self-attribute": (
        "loop",
        "if self.fork_gate.hold(req):\n    undone_reqs.append(req)\n    continue\n",
        "self.fork_gate is needed by " + USER,
        "only names of loggers, metrics",
    ),
    # a telemetry name, but its value decides: compared
    "compared-stats": (
        "loop",
        "if self.fork_stats.pending(req) > 3:\n    continue\n",
        "self.fork_stats is needed by " + USER,
        "its value is compared at line",
    ),
    # a name imported at module level that computes the polls
    "imported-poll": (
        "polls",
        "fork_polls = fork_poll_all(self.disagg_prefill_inflight_queue)\n",
        "fork_poll_all is needed by " + USER,
        "imported from sglang.srt.fork_only.polling at line ",
    ),
}


@pytest.mark.releases
@pytest.mark.parametrize("version", FORK_BASES)
@pytest.mark.parametrize("case", sorted(LIVENESS))
def test_liveness_logic_on_an_unknown_name_exits_2_naming_it(
    version: str, case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where, block, names, why = LIVENESS[case]
    header = "from sglang.srt.fork_only.polling import fork_poll_all"
    root, lines = _fork(version, tmp_path / "fork", header=header, **{where: block})
    assert main(["simulate", str(root)]) == 2
    error = _error(capsys)
    # the line of the use that needs the value: the block's first line
    assert f"{root / PREFILL_PATH}:{lines[where]}: cannot load: {names}" in error
    assert "has no stand-in" in error and why in error


@pytest.mark.releases
def test_a_request_attribute_the_liveness_logic_reads_exits_2_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``req.X`` is only known when the run reads it: still exit 2, at the target's line."""
    block = "if req.fork_priority:\n    undone_reqs.append(req)\n    continue\n"
    root, lines = _fork(FORK_BASES[-1], tmp_path / "fork", loop=block)
    assert main(["simulate", str(root), "--scenario", "healthy-traffic"]) == 2
    error = _error(capsys)
    assert f"{root / PREFILL_PATH}:{lines['loop']}: cannot run in {INFLIGHT_FUNCTION}: " in error
    assert "req.fork_priority" in error and "has no stand-in" in error
    assert "(scenario healthy-traffic)" in error


# -- the toy tree: no network ------------------------------------------------------------------


def _toy(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "toy"
    (root / PREFILL_PATH).parent.mkdir(parents=True)
    (root / PREFILL_PATH).write_text(text)
    return root


TOY_LOOP = "        for req, poll in zip(self.disagg_prefill_inflight_queue, polls):\n"


def _toy_loop(block: str) -> str:
    assert TOY_LOOP in TOY_PREFILL
    indented = "".join(f"            {line}\n" for line in block.splitlines())
    return TOY_PREFILL.replace(TOY_LOOP, TOY_LOOP + indented)


def test_a_function_level_import_with_a_stand_in_runs_without_importing(tmp_path: Path) -> None:
    text = _toy_loop("import time\nfrom time import monotonic\nreq.seen_at = monotonic()")
    report = simulate.run(open_tree(_toy(tmp_path, text)), names=["healthy-traffic"])
    assert report.rows[0].verdict == "pass"


def test_pass_along_reads_of_configuration_and_batches_get_recorders(tmp_path: Path) -> None:
    """Recorders reach every strict stand-in: the scheduler's server_args, the batch."""
    head = "        for req in batch.reqs:\n            self.tree_cache.cache_unfinished_req(req)\n"
    assert head in TOY_PREFILL
    text = TOY_PREFILL.replace(
        head,
        "        if self.server_args.enable_fork_tracing:\n"
        "            self.fork_tracer.event(batch.fork_stats, result.logprob_stats)\n" + head,
    )
    report = simulate.run(open_tree(_toy(tmp_path, text)), names=["healthy-traffic"])
    assert report.rows[0].verdict == "pass"
    attributes = report.loaded["pass_along_attributes"]
    assert {"enable_fork_tracing", "fork_tracer", "fork_stats", "logprob_stats"} <= set(attributes)


def test_dunder_import_in_the_target_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _toy(tmp_path, _toy_loop('__import__("sglang.srt.fork_only")'))
    assert main(["simulate", str(root), "--scenario", "wedge"]) == 2
    error = _error(capsys)
    assert f"{root / PREFILL_PATH}:" in error
    assert '"__import__" is a name the sandbox refuses' in error  # refused before it runs


def test_a_stand_in_called_in_a_way_it_does_not_model_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fork calls a helper with an argument SGLang's own releases never pass."""
    root = _toy(tmp_path, _toy_loop("prepare_abort(req, 'fork', 1, 2, 3)"))
    assert main(["simulate", str(root), "--scenario", "healthy-traffic"]) == 2
    error = _error(capsys)
    assert "a stand-in does not take this call" in error and "prepare_abort" in error


@pytest.mark.parametrize(
    "block, says",
    [
        ("req.disagg_kv_sender.fork_only_method()", "no attribute 'fork_only_method'"),
        ("time.fork_clock()", "no attribute 'fork_clock'"),
        ("list(self.tree_cache)", "'TreeCache' object is not iterable"),
    ],
)
def test_a_stand_in_used_in_a_way_it_does_not_model_exits_2(
    block: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _toy_loop(block).replace("import logging\n", "import logging\nimport time\n")
    root = _toy(tmp_path, text)
    assert main(["simulate", str(root), "--scenario", "healthy-traffic"]) == 2
    error = _error(capsys)
    line = _line_of(root / PREFILL_PATH, block)
    assert f"{root / PREFILL_PATH}:{line}: cannot run in {INFLIGHT_FUNCTION}: " in error
    assert "a stand-in does not model this" in error and says in error


def test_an_error_of_the_target_itself_is_still_a_fail_row(tmp_path: Path) -> None:
    """Not every exception is a gap: the target's own bug stays a FAIL row (exit 1)."""
    report = simulate.run(
        open_tree(_toy(tmp_path, _toy_loop("{}['missing']"))), names=["healthy-traffic"]
    )
    assert report.rows[0].verdict == "fail" and "KeyError" in report.rows[0].observed


# -- the pass-along analysis -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, telemetry",
    [
        ("my_metrics", True),
        ("tracer", True),
        ("logprob_processor", True),
        ("fork_output_processor", True),
        ("enableForkTracing", True),
        ("time_stats", True),
        ("logger", True),
        ("disagg_kv_sender", False),
        ("disagg_prefill_inflight_queue", False),
        ("KVPoll", False),
        ("poll_and_all_reduce", False),
        ("time", False),
        ("processor", False),
        ("fork_gate", False),
    ],
)
def test_the_name_allow_list(name: str, telemetry: bool) -> None:
    assert passalong.is_telemetry_name(name) is telemetry


def _verdict(code: str, attr: str) -> passalong.Verdict:
    return passalong.Uses([ast.parse(code)]).attribute(attr)


@pytest.mark.parametrize(
    "code",
    [
        "self.stats.observe(x)",
        "self.stats.a.b(x).c()",
        "with self.tracer.span('x'):\n    work()",
        "with self.tracer.span('x') as span:\n    span.set(1)\n    work()",
        "logger.info('%s', self.stats.snapshot())",
        "logger.info(f'{self.stats.snapshot()}')",
        "if self.stats:\n    self.stats.observe(1)",
        "if self.stats is not None and not x.done:\n    logger.info('x')\nelse:\n    pass",
        "self.stats.last = 3",
    ],
)
def test_passed_along(code: str) -> None:
    assert _verdict(code, "stats" if "stats" in code else "tracer").passes_along, code


@pytest.mark.parametrize(
    "code, why",
    [
        ("if self.stats.pending(req) > 3:\n    continue", "compared at line 1"),
        ("x = self.stats.value()", "assigned at line 1"),
        ("return self.stats", "returned at line 1"),
        ("for r in self.stats.reqs:\n    pass", "iterated at line 1"),
        ("finish(req, self.stats.reason())", "passed to finish() at line 1"),
        ("if self.stats:\n    queue.append(req)", "branched on at line 1 around more"),
        ("with self.tracer.span() as s:\n    x = s.y", "bound by `with ... as`"),
        ("self.stats.n += 1", "assigned at line 1"),
    ],
)
def test_used_as_a_value(code: str, why: str) -> None:
    verdict = _verdict(code, "stats" if "stats" in code else "tracer")
    assert not verdict.passes_along and why in verdict.why, (code, verdict)


def test_the_recorder_records_calls_and_refuses_to_be_a_value() -> None:
    seen: list[tuple[str, object]] = []
    req = standins.SimReq("r1", 1)
    recorder = standins.Recorder("self.my_metrics", lambda call, r: seen.append((call, r)))
    result = recorder.observe(3, req=req).child()
    with recorder.span("x") as span:
        span.anything = 1
    assert seen == [
        ("self.my_metrics.observe()", req),
        ("self.my_metrics.observe().child()", None),
        ("self.my_metrics.span()", None),
    ]
    assert bool(result) and f"{result}" == "<recorder self.my_metrics.observe().child()>"
    for use in (lambda: recorder < 3, lambda: recorder == 3, lambda: list(recorder)):
        with pytest.raises(standins.MissingStandIn, match="used as a value"):
            use()
    strict = standins.SimReq("r2", 2)
    strict._recorders = standins.Recorders(frozenset({"logprob_processor"}))
    assert isinstance(strict.logprob_processor, standins.Recorder)
    with pytest.raises(standins.MissingStandIn, match=r"req\.fork_priority"):
        _ = strict.fork_priority


# -- a fork's own state on self, made by its own __init__ (outside what is loaded) -------------


def _functions(text: str) -> list[ast.FunctionDef]:
    return [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef)]


def test_own_state_is_a_container_the_code_only_fills_and_reads() -> None:
    from pdguard.simulate import loader

    text = """
def keep(self, req):
    self.stamps[req.rid] = 1.0
    self.order.append(req.rid)
    self.seen.add(req.rid)
def read(self, req):
    if req.rid in self.seen and len(self.order) > 0:
        return self.stamps.get(req.rid, 0.0)
    for rid in self.order:
        self.stamps.pop(rid, None)
def other(self, req):
    self.compared[req.rid] = 1
    self.passed[req.rid] = 1
    self.reassigned.append(req)
    self.reassigned = []
    self.mixed[req.rid] = 1
    self.mixed.append(req)
    if self.compared == {}:
        helper(self.passed)
    return self.read_only.get(req.rid)
"""
    found = loader.own_state(_functions(text))
    assert found == {"stamps": "dict", "order": "list", "seen": "set"}
    init = ast.parse(
        "class Q:\n    def __init__(self, a):\n        self.waiting = []\n        self.n = 0\n"
        "        self.s = set()\n        self.a = a\n        self.big = [0] * 10\n"
    ).body[0]
    assert isinstance(init, ast.ClassDef)
    literals = loader.init_literals(init)
    assert literals == {"waiting": "[]", "n": "0", "s": "set()"}

    class Obj:
        waiting = "kept"

    obj = Obj()
    loader.give_init_literals(obj, literals)
    loader.give_own_state(obj, found)
    assert (obj.waiting, obj.n, obj.s, obj.stamps, obj.order) == ("kept", 0, set(), {}, [])  # type: ignore[attr-defined]
