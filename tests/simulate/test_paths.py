"""``pdguard simulate`` on the runtime paths of issue 10, with the release's own code.

Every request's sender is the release's own ``MooncakeKVSender`` (its ``__init__``, ``poll``,
``abort``, ``failure_exception`` and the ``CommonKVSender`` base), on a stand-in manager whose
transport is scripted. The scenarios ``success-at-deadline``, ``decode-memory-wait``,
``optimistic-requeue``, ``parked-bootstrap`` and ``pp-stages`` state the property the patch must
give. pdguard's patch is being changed (issue 10), so these tests assert the mechanics: n/a where
the release has no such path, the path ran the release's own function, and a deadline written by
hand (an edit of the fetched release at test time; no SGLang source is kept) passes when it is
right and fails when it is wrong.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pytest

from pdguard import simulate
from pdguard.cli import main
from pdguard.errors import SimulationGap
from pdguard.sglang_names import INFLIGHT_FUNCTION, POLL_ALL_REDUCE_PREFIX
from pdguard.simulate import DECODE_SCENARIOS, SCENARIOS
from pdguard.tree import open_tree
from pdguard.vendor_sglang import fetch_release
from tests.helpers import PP_CONSENSUS, RELEASES, patched_copy
from tests.mutants import MUTANT, mutate_tree

PREFILL = "sglang/srt/disaggregation/prefill.py"
MOONCAKE = "sglang/srt/disaggregation/mooncake/conn.py"
NEW = ("success-at-deadline", "decode-memory-wait", "optimistic-requeue", "parked-bootstrap")
PATHS = (*NEW, "pp-stages")
MIXIN = "SchedulerDisaggregationPrefillMixin"
# Families with the path (docs/releases.md).
OPTIMISTIC = {"F8", "F9", "F10", "F11", "F12"}  # optimistic_release_and_requeue, 0.5.13+
PARKED = {"F9", "F10", "F11", "F12"}  # parked pending_bootstrap requests, 0.5.16+
PREFILL_COMPLETE = {"F11", "F12"}  # mark_prefill_complete, 0.5.22+


def _copy(version: str, dest: Path) -> Path:
    shutil.copytree(fetch_release(version), dest)
    return dest


def _hand_deadline(
    root: Path, *, fresh: bool = True, parked_counted: bool = False, local_drop: bool = False
) -> Path:
    """Write an inflight deadline by hand into the release at ``root``: a stamp at the append
    (``fresh``: every entry; else only the first), failing overdue requests before the poll
    all-reduce with ``req.disagg_kv_sender.abort()`` (or, ``local_drop``, dropping them from
    this rank's queue: wrong), parked requests not counted unless ``parked_counted``."""
    path = root / PREFILL
    text = path.read_text()
    text = text.replace("import logging\n", "import logging\nimport os\nimport time\n", 1)
    append = re.search(r"\n( +)self\.disagg_prefill_inflight_queue\.append\(req\)", text)
    assert append is not None
    pad = append.group(1)
    stamp = "req.hand_entered_at = time.monotonic()"
    if not fresh:
        stamp = f"if not hasattr(req, 'hand_entered_at'):\n{pad}    {stamp}"
    text = text[: append.start()] + f"\n{pad}{stamp}" + text[append.start() :]
    start = text.index(f"def {INFLIGHT_FUNCTION}")
    at = text.index("        done_reqs = []\n", start)
    act = (
        "self.disagg_prefill_inflight_queue.remove(req)\n"
        "                prepare_abort(req, 'timed out', status_code=HTTPStatus.GATEWAY_TIMEOUT)\n"
        "                self.stream_output([req], False)"
        if local_drop
        else "req.disagg_kv_sender.abort()"
    )
    parked = (
        ""
        if parked_counted
        else "            if getattr(req, 'pending_bootstrap', False):\n"
        "                req.hand_entered_at = time.monotonic()  # parked: not counted\n"
        "                continue\n"
    )
    deadline = (
        "        limit = float(os.environ.get('SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT', '300'))\n"
        "        for req in list(self.disagg_prefill_inflight_queue):\n"
        f"{parked}"
        "            if time.monotonic() - req.hand_entered_at > limit:\n"
        f"                {act}\n"
    )
    path.write_text(text[:at] + deadline + text[at:])
    return root


def _rows(report: simulate.SimulationReport) -> dict[str, simulate.Row]:
    return {row.scenario: row for row in report.rows}


# -- the release's own sender ------------------------------------------------------------------


@pytest.mark.releases
def test_a_hand_written_abort_deadline_passes_with_the_releases_own_sender(
    tmp_path: Path,
) -> None:
    """0.5.14's abort() makes its own poll() return Failed: a deadline that only calls abort()
    fails the wedged request (a scripted sender whose abort() only recorded the call showed it
    "still waiting after 600 simulated seconds")."""
    root = _hand_deadline(_copy("0.5.14", tmp_path / "hand"))
    report = simulate.run(open_tree(root), names=["wedge", "healthy-traffic"])
    rows = _rows(report)
    assert rows["wedge"].verdict == "pass", rows["wedge"].observed
    assert rows["healthy-traffic"].verdict == "pass"
    loaded = report.loaded["loaded"]
    assert {"__init__", "poll", "abort"} <= set(loaded["MooncakeKVSender"])  # type: ignore[index]  # the report's JSON is typed object
    assert "abort" in loaded["CommonKVSender"]  # type: ignore[index]  # the report's JSON is typed object
    # the client's error is the release's Failed branch with the release's failure record
    ((rid, error),) = rows["wedge"].failed
    assert rid == "wedged"
    assert error.startswith("Prefill transfer failed for request rank=0 req.rid='wedged'")
    assert "KVTransferError(bootstrap_room=1000): Aborted by AbortReq." in error


@pytest.mark.releases
def test_the_json_report_gives_each_failed_requests_client_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _hand_deadline(_copy("0.5.23", tmp_path / "hand"))
    assert main(["simulate", str(root), "--format", "json", "--scenario", "wedge"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["scenarios"]
    (failed,) = row["failed_requests"]
    assert failed["rid"] == "wedged"
    assert "Prefill transfer failed" in failed["client_error"]
    assert main(["simulate", str(root), "--format", "json", "--scenario", "long-prefill"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["scenarios"]
    assert row["failed_requests"] == []


@pytest.mark.releases
@pytest.mark.parametrize("version", ["0.5.5", "0.5.12"])
def test_the_client_is_told_the_request_timed_out(
    version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where some sender never pops its failure record (NIXL), pdguard's patch replaces the
    record Mooncake's own abort() made: the client's error says why, not "Aborted by AbortReq."."""
    root = patched_copy(version, tmp_path / "sglang")
    assert main(["simulate", str(root), "--format", "json", "--scenario", "wedge"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["scenarios"]
    (failed,) = row["failed_requests"]
    error = failed["client_error"]
    assert "KVTransferError(bootstrap_room=1000): Request 1000 timed out after 300" in error
    assert "in the prefill inflight queue" in error and "Aborted by AbortReq." not in error


def test_the_bootstrap_timeout_default_is_the_releases_own() -> None:
    assert simulate.load(open_tree(fetch_release("0.4.7"))).bootstrap_timeout_default == 30
    assert simulate.load(open_tree(fetch_release("0.5.23"))).bootstrap_timeout_default == 300


# -- the paths: n/a where a release has none, the release's own function where it has one ------


@pytest.mark.releases
@pytest.mark.parametrize("release", RELEASES, ids=lambda r: r.version)
def test_each_path_runs_the_releases_own_code_or_is_na(release) -> None:
    report = simulate.run(open_tree(fetch_release(release.version)), names=list(PATHS))
    rows = _rows(report)
    pp = rows.pop("pp-stages")
    # Unpatched there is no deadline: nothing on these paths fails; requests complete (but
    # pp-stages' wedged request, below).
    assert {r.verdict for r in rows.values()} <= {"pass", "n/a"}, {
        n: r.observed for n, r in rows.items()
    }
    assert rows["success-at-deadline"].verdict == "pass"
    assert "success on every rank" in rows["success-at-deadline"].observed
    assert rows["decode-memory-wait"].verdict == "pass"
    optimistic = rows["optimistic-requeue"]
    if release.family in OPTIMISTIC:
        assert "left through the release's optimistic_release_and_requeue" in optimistic.observed
        assert "optimistic_release_and_requeue" in report.loaded["loaded"][MIXIN]  # type: ignore[index]  # the report's JSON is typed object
    else:
        assert optimistic.verdict == "n/a"
        assert "no optimistic prefill" in optimistic.observed
    parked = rows["parked-bootstrap"]
    if release.family in PARKED:
        assert "parked in the inflight queue from 1 s" in parked.observed
        assert ("mark_prefill_complete() ran" in parked.observed) == (
            release.family in PREFILL_COMPLETE
        )
    else:
        assert parked.verdict == "n/a"
    if release.family in PP_CONSENSUS:
        # the release's own consensus ends the transferred requests on both stages, one round
        # apart; with no deadline the wedged one waits for ever
        assert pp.verdict == "fail"
        assert pp.observed.startswith("pp-wedged not ended on every stage"), pp.observed
        assert "pp-agreed (stage 0: success at 301.25 s, stage 1: success at 301.5 s)" in (
            pp.observed
        )
    else:
        assert pp.verdict == "n/a"
        assert "rids_to_check" in pp.observed


@pytest.mark.releases
def test_a_path_that_cannot_be_run_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fork that never calls optimistic_release_and_requeue has the function but not the
    path: the scenario cannot run it."""
    root = _copy("0.5.22", tmp_path / "fork")
    path = root / PREFILL
    text = path.read_text()
    calls = "self.optimistic_release_and_requeue(req)"
    body = text.index("def optimistic_release_and_requeue")
    path.write_text(text[:body].replace(calls, "pass") + text[body:])
    with pytest.raises(SimulationGap, match="optimistic_release_and_requeue"):
        simulate.run(open_tree(root), names=["optimistic-requeue"])
    assert main(["simulate", str(root), "--scenario", "optimistic-requeue"]) == 2
    err = capsys.readouterr().err
    assert "cannot be run" in err and "optimistic-requeue" in err


# -- hand-written deadlines: right ones pass, wrong ones fail ---------------------------------


@pytest.mark.releases
@pytest.mark.parametrize("version", ["0.5.22", "0.5.23"])
def test_a_fresh_stamp_that_does_not_count_parked_time_passes(version: str, tmp_path: Path) -> None:
    root = _hand_deadline(_copy(version, tmp_path / "hand"))
    report = simulate.run(open_tree(root), names=[*NEW, "wedge"])
    assert {r.scenario: r.verdict for r in report.rows} == dict.fromkeys([*NEW, "wedge"], "pass")


@pytest.mark.releases
def test_a_first_stamp_kept_across_a_requeue_fails_optimistic_requeue(tmp_path: Path) -> None:
    root = _hand_deadline(_copy("0.5.22", tmp_path / "hand"), fresh=False)
    row = _rows(simulate.run(open_tree(root), names=["optimistic-requeue"]))["optimistic-requeue"]
    assert row.verdict == "fail"
    assert "1 failed, first at 81" in row.observed
    ((rid, error),) = row.failed
    assert rid == "optimistic" and "Aborted by AbortReq." in error


@pytest.mark.releases
@pytest.mark.parametrize("version", ["0.5.17", "0.5.22"])
def test_a_deadline_counting_parked_time_fails_parked_bootstrap(
    version: str, tmp_path: Path
) -> None:
    root = _hand_deadline(_copy(version, tmp_path / "hand"), parked_counted=True)
    row = _rows(simulate.run(open_tree(root), names=["parked-bootstrap"]))["parked-bootstrap"]
    assert row.verdict == "fail"
    assert "1 failed, first at 61.25 s" in row.observed


@pytest.mark.releases
def test_a_30s_bootstrap_timeout_fails_decode_memory_wait_and_120s_passes(tmp_path: Path) -> None:
    """0.4.7's Mooncake sender, its bootstrap clock started at construction (as upstream does
    from 0.4.8.post1): with the release's 30 s default the 90 s wait for decode memory fails;
    with upstream's 120 s it completes."""
    root = _copy("0.4.7", tmp_path / "hand")
    path = root / MOONCAKE
    text = path.read_text()
    text = text.replace(
        "        self.conclude_state = None\n        self.init_time = None\n",
        "        self.conclude_state = None\n        self.init_time = time.time()\n",
        1,
    )
    text = text.replace("        self.init_time = time.time()\n\n    def send", "\n    def send", 1)
    path.write_text(text)
    row = _rows(simulate.run(open_tree(root), names=["decode-memory-wait"]))["decode-memory-wait"]
    assert row.verdict == "fail" and "first at 30.25 s" in row.observed
    assert "timed out after 30.2s in KVPoll.Bootstrapping" in row.failed[0][1]
    path.write_text(
        text.replace(
            '"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 30',
            '"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 120',
        )
    )
    row = _rows(simulate.run(open_tree(root), names=["decode-memory-wait"]))["decode-memory-wait"]
    assert row.verdict == "pass", row.observed


@pytest.mark.releases
def test_a_per_rank_drop_at_the_deadline_is_caught(tmp_path: Path) -> None:
    root = _hand_deadline(_copy("0.5.14", tmp_path / "hand"), local_drop=True)
    rows = _rows(simulate.run(open_tree(root), names=["success-at-deadline"]))
    assert rows["success-at-deadline"].verdict == "fail"


PP_RELEASES = ("0.5.10", "0.5.14", "0.5.17", "0.5.22", "0.5.23")
PP_MIXIN = "sglang/srt/managers/scheduler_pp_mixin.py"


def _calls(node: ast.AST) -> list[ast.Call]:
    """The calls under ``node``, in the order of the source."""
    found = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


@pytest.mark.releases
@pytest.mark.parametrize("version", PP_RELEASES)
def test_the_pp_round_follows_the_releases_pp_mixin(version: str) -> None:
    """``world.Rank._pp_round`` models SGLang's PP prefill loop, which lives outside the
    disaggregation package and is not loaded: what it relies on, read from the release's own
    mixin (its whole package, fetched at test time)."""
    module = ast.parse((fetch_release(version, full=True) / PP_MIXIN).read_text())
    methods = {n.name: n for n in ast.walk(module) if isinstance(n, ast.FunctionDef)}
    loop = methods["event_loop_pp_disagg_prefill"]
    order = [ast.unparse(c.func) for c in _calls(loop)]
    # each round: this stage's own report first, then what it sends on, then its inflight
    # function on what the previous stage sent it
    transferred = order.index("self._pp_pd_get_prefill_transferred_ids")
    send = order.index("self._pp_pd_send_consensus_release_ids")
    inflight = order.index("self.process_disagg_prefill_inflight_queue")
    assert transferred < send < inflight
    (call,) = [c for c in _calls(loop) if ast.unparse(c.func).endswith("inflight_queue")]
    assert ast.unparse(call.args[0]) == "next_release_rids"
    received = {
        ast.unparse(n.value)
        for n in ast.walk(loop)
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "next_release_rids"
    }
    assert received == {"None", "self._pp_recv_pyobj_from_prev_stage()"}
    # a stage reports the requests its TP-reduced poll says Success or Failed, intersected
    # with what the stages before it reported
    report = methods["_pp_pd_get_prefill_transferred_ids"]
    polled = [c for c in _calls(report) if ast.unparse(c.func) == "self.get_rids"]
    assert polled and all(
        {a.attr for a in ast.walk(c) if isinstance(a, ast.Attribute)} >= {"Success", "Failed"}
        for c in polled
    )
    assert any(
        isinstance(n, ast.BinOp)
        and isinstance(n.op, ast.BitAnd)
        and all(isinstance(side, ast.Call) for side in (n.left, n.right))
        for n in ast.walk(report)
    )
    assert any(POLL_ALL_REDUCE_PREFIX in ast.unparse(c.func) for c in _calls(methods["get_rids"]))
    # the last stage sends its report (what every stage reported) to the first; the others
    # pass on what they received
    release = methods["_pp_pd_send_consensus_release_ids"]
    last = next(n for n in ast.walk(release) if isinstance(n, ast.If))
    assert ast.unparse(last.test).endswith("is_last_rank")
    assert any(
        isinstance(n, ast.Assign) and ast.unparse(n.value) == "transferred_rids"
        for n in ast.walk(last)
    )


@pytest.mark.releases
@pytest.mark.parametrize("version", PP_RELEASES)
def test_pp_stages_agree_on_patched_releases_and_not_on_a_deadline_each_stage_decides(
    tmp_path: Path, version: str
) -> None:
    """pdguard's patch: every stage ends each request alike, the wedged one with an error that
    travelled through the consensus. pdguard's without its skip of what the stage already
    polls as ended (the consensus skip alone) aborts on the second stage a request it polled
    Success for while the consensus was on its way to it: stage 0 answers success, stage 1 an
    error. A deadline each stage decides alone (written by hand) fails it on both."""
    patched = patched_copy(version, tmp_path / "patched")
    row = _rows(simulate.run(open_tree(patched), names=["pp-stages"]))["pp-stages"]
    assert row.verdict == "pass", row.observed
    assert row.observed == (
        "every stage ends each request alike: "
        "pp-agreed (stage 0: success at 301.25 s, stage 1: success at 301.5 s); "
        "pp-at-deadline (stage 0: success at 301.5 s, stage 1: success at 301.75 s); "
        "pp-wedged (stage 0: error at 301.75 s, stage 1: error at 302 s)"
    )
    mutant = patched_copy(version, tmp_path / "mutant")
    mutate_tree(mutant, MUTANT["deadline ignores the PP stage's own poll"])
    row = _rows(simulate.run(open_tree(mutant), names=["pp-stages"]))["pp-stages"]
    prefill = (patched / "sglang/srt/disaggregation/prefill.py").read_text()
    if "conclude_failure(" in prefill:
        # 0.5.20+: conclude_failure() marks the room, but a sender that already concluded
        # Success answers its conclude_state: even without the skip no success is failed
        assert row.verdict == "pass", row.observed
    else:
        assert row.verdict == "fail"
    assert row.verdict == "pass" or row.observed.startswith(
        "stages disagree on pp-agreed: "
        "pp-agreed (stage 0: success at 301.25 s, stage 1: error at 301.5 s)"
    ), row.observed
    # each stage fails it at its own deadline, the first too: alike, but a request the stages
    # agreed had transferred before any deadline passed ends with an error
    hand = _hand_deadline(_copy(version, tmp_path / "hand"))
    row = _rows(simulate.run(open_tree(hand), names=["pp-stages"]))["pp-stages"]
    assert row.verdict == "fail"
    assert row.observed.startswith(
        "pp-agreed failed although the stages agreed at 301 s, before its deadline (301.1 s), "
        "that it had transferred: pp-agreed (stage 0: error at 301.25 s, stage 1: error at "
        "301.5 s)"
    ), row.observed


# -- --list ------------------------------------------------------------------------------------


def test_list_names_every_scenario_with_what_it_shows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--list"]) == 0
    out = capsys.readouterr().out
    names = [line.split()[0] for line in out.splitlines() if line and not line[0].isspace()]
    assert names == [scenario.name for scenario in (*SCENARIOS, *DECODE_SCENARIOS)]
    for name in PATHS:
        assert name in out
    words = " ".join(out.split())
    assert "fresh deadline" in words and "parked time is not counted" in words
    assert main(["simulate"]) == 2
