"""``pdguard simulate``'s decode scenarios: the release's own decode queues and KV receivers,
run on unpatched and patched (``pdguard apply``) copies of representative releases.

The expectations are sglang-decode-releases.md's: no waiting timeout in Mooncake up to 0.4.9
and NIXL up to 0.5.5.post3 (``prefill-gone`` wedges there), the retraction gate in every
release from 0.4.7.post1 (``retracted-under-pressure`` wedges), no release tells the decode
that its prefill failed a request (``prefill-deadline-pair`` needs both halves of the patch).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pdguard import simulate
from pdguard.errors import LoadError, SimulationGap
from pdguard.simulate.decode import loader as decode_loader
from pdguard.simulate.decode import standins as decode_standins
from pdguard.simulate.standins import MissingStandIn
from pdguard.tree import open_tree
from pdguard.vendor_sglang import fetch_release
from tests.helpers import copy_release, patched_copy

DECODE = list(simulate.DECODE_NAMES)
# release -> the decode rows that fail unpatched (the wedge), per the reference
WEDGED = {
    "0.4.9": {"prefill-gone", "prefill-deadline-pair", "retracted-under-pressure"},
    "0.4.9.post1": {"prefill-gone", "prefill-deadline-pair", "retracted-under-pressure"},
    "0.5.5": {"prefill-gone", "prefill-deadline-pair", "retracted-under-pressure"},
    "0.5.6": {"prefill-deadline-pair", "retracted-under-pressure"},
    "0.5.10": {"prefill-deadline-pair", "pending-unresolved", "retracted-under-pressure"},
    "0.5.17": {"prefill-deadline-pair", "pending-unresolved", "retracted-under-pressure"},
    "0.5.23": {"prefill-deadline-pair", "pending-unresolved", "retracted-under-pressure"},
}
PENDS = {"0.5.10", "0.5.17", "0.5.23"}  # releases with pending_reqs (0.5.10+)


def _verdicts(report: simulate.SimulationReport) -> dict[str, str]:
    return {row.scenario: row.verdict for row in report.rows}


def _row(report: simulate.SimulationReport, name: str) -> simulate.Row:
    return next(row for row in report.rows if row.scenario == name)


@pytest.fixture(scope="module")
def patched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("decode-patched")
    return {v: patched_copy(v, root / v) for v in WEDGED}


@pytest.mark.parametrize("version", sorted(WEDGED))
def test_unpatched_release_shows_the_decode_wedge(version: str) -> None:
    report = simulate.run(open_tree(fetch_release(version)), names=DECODE)
    verdicts = _verdicts(report)
    assert {name for name, v in verdicts.items() if v == "fail"} == WEDGED[version]
    assert verdicts["decode-backpressure"] == "pass"
    if version in PENDS:
        pending = _row(report, "pending-unresolved").observed
        assert "still pending after 600 simulated seconds" in pending
    else:
        assert verdicts["pending-unresolved"] == "n/a"  # no pending_reqs before 0.5.10
    if "prefill-gone" in WEDGED[version]:
        row = _row(report, "prefill-gone")
        assert "still waiting after 600 simulated seconds (in the transfer queue" in row.observed
        assert "metadata slots are held" in row.observed
    gate = _row(report, "retracted-under-pressure")
    assert "still waiting after 600 simulated seconds (in the transfer queue" in gate.observed


def test_unpatched_nixl_alone_wedges_on_0_4_9_post1() -> None:
    """Mooncake has the waiting timeout from 0.4.9.post1; NIXL only from 0.5.6."""
    report = simulate.run(open_tree(fetch_release("0.4.9.post1")), names=["prefill-gone"])
    observed = _row(report, "prefill-gone").observed
    mooncake, nixl = observed.split("; gone-nixl: ")
    assert "gone-mooncake: failed at 300 s" in mooncake
    assert nixl.startswith("still waiting after 600 simulated seconds")


@pytest.mark.parametrize("version", sorted(WEDGED))
def test_patched_release_passes_every_decode_scenario(
    version: str, patched: dict[str, Path]
) -> None:
    report = simulate.run(open_tree(patched[version]), names=DECODE)
    assert report.passed
    assert _verdicts(report) == {
        "prefill-gone": "pass",
        "prefill-deadline-pair": "pass",
        "decode-backpressure": "pass",
        "pending-unresolved": "pass" if version in PENDS else "n/a",
        "retracted-under-pressure": "pass",
    }
    gone = _row(report, "prefill-gone")
    assert "gone-mooncake: failed at 300 s" in gone.observed
    assert "gone-nixl: failed at 300 s" in gone.observed
    assert "request-pool and metadata slots free" in gone.observed
    pair = _row(report, "prefill-deadline-pair").observed
    assert pair.startswith("prefill: failed at 301.25 s")
    assert all(rid for rid, error in _row(report, "prefill-gone").failed if error)


def test_release_with_a_list_of_metadata_tensors_runs_and_wedges() -> None:
    """0.4.6 - 0.4.6.post4 have no MetadataBuffers class: the decode queues read the output id
    as ``metadata_buffers[0][idx][0]`` and ``req.transferred_output_id``. It used to exit 2
    ("'MetadataBuffers' object is not subscriptable"); now it runs, and shows the wedge the
    static rules report (no inflight deadline, no decode waiting timeout)."""
    report = simulate.run(open_tree(fetch_release("0.4.6")))
    verdicts = _verdicts(report)
    assert verdicts["decode-backpressure"] == "pass"  # the output id was read, then completed
    assert "completed by 603 s" in _row(report, "decode-backpressure").observed
    failed = {name for name, v in verdicts.items() if v == "fail"}
    assert failed == {
        "wedge",
        "skewed-ranks",
        "deadline-120s",
        "prefill-gone",
        "prefill-deadline-pair",
    }
    assert verdicts["healthy-traffic"] == verdicts["success-at-deadline"] == "pass"
    buffers = decode_standins.MetadataBuffers(("output_ids", "bootstrap_room"))
    with pytest.raises(MissingStandIn, match=r"metadata_buffers\[0\]"):
        buffers[0]  # a release with get_buf is never indexed as a list


def test_release_without_retraction_reports_n_a(tmp_path: Path) -> None:
    report = simulate.run(
        open_tree(fetch_release("0.4.7")), names=["retracted-under-pressure", "prefill-gone"]
    )
    row = _row(report, "retracted-under-pressure")
    assert row.verdict == "n/a"
    assert "no retraction in this release" in row.observed
    assert _row(report, "prefill-gone").verdict == "fail"  # Mooncake 0.4.7: no timeout


def test_a_path_the_world_cannot_run_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A receiver that reaches something with no stand-in (here: a fork whose NIXL receiver
    asks its KV manager for a table of its own) is a gap, never a verdict."""
    root = copy_release("0.5.6", tmp_path / "fork")
    conn = root / "sglang/srt/disaggregation/nixl/conn.py"
    text = conn.read_text()
    # after the last statement of NixlKVReceiver.__init__ (found with ast, never spelled out)
    init = next(
        f
        for c in ast.parse(text).body
        if isinstance(c, ast.ClassDef) and c.name == "NixlKVReceiver"
        for f in c.body
        if isinstance(f, ast.FunctionDef) and f.name == "__init__"
    )
    lines = text.splitlines(keepends=True)
    end = init.body[-1].end_lineno
    assert end is not None
    lines.insert(end, "        self.fork_peers = self.kv_mgr.fork_peer_list\n")
    conn.write_text("".join(lines))
    with pytest.raises(SimulationGap) as raised:
        simulate.run(open_tree(root), names=["prefill-gone"])
    message = str(raised.value)
    assert "sglang/srt/disaggregation/nixl/conn.py:" in message
    assert "kv_mgr.fork_peer_list" in message and "(scenario prefill-gone)" in message
    from pdguard.cli import main

    assert main(["simulate", str(root), "--scenario", "prefill-gone"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "kv_mgr.fork_peer_list" in err


def test_decode_scenarios_run_only_when_asked() -> None:
    tree = open_tree(fetch_release("0.4.9"))
    report = simulate.run(tree, names=["wedge"])
    assert [row.scenario for row in report.rows] == ["wedge"]
    both = simulate.run(tree, names=["wedge", "prefill-gone"])
    assert [row.scenario for row in both.rows] == ["wedge", "prefill-gone"]
    assert "decode" in both.loaded


def test_the_release_code_is_loaded_not_modelled() -> None:
    target = decode_loader.load(open_tree(fetch_release("0.4.9")))
    assert set(target.receivers) == {"mooncake", "nixl"}
    assert "poll" in target.code.loaded["MooncakeKVReceiver"]
    assert "pop_transferred" in target.code.loaded["DecodeTransferQueue"]
    assert "process_decode_queue" in target.code.loaded[target.mixin]
    assert "_pre_alloc" not in target.code.loaded["DecodePreallocQueue"]
    assert "DecodePreallocQueue._pre_alloc" in target.replaced


def test_cli_lists_the_decode_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    from pdguard.cli import main

    assert main(["simulate", "--list"]) == 0
    listed = capsys.readouterr().out
    for name in DECODE:
        assert name in listed
    assert "[decode]" in listed


def test_cli_json_report_and_exit_codes(
    patched: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from pdguard.cli import main

    unpatched = str(fetch_release("0.4.9"))
    assert main(["simulate", unpatched, "--scenario", "prefill-gone", "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in data["scenarios"]] == ["prefill-gone"]
    assert data["scenarios"][0]["verdict"] == "fail"
    assert data["scenarios"][0]["failed_requests"] == []  # nobody was told
    assert "MooncakeKVReceiver" in data["loaded"]["loaded"]
    assert "DecodePreallocQueue._pre_alloc" in data["loaded"]["replaced_by_standins"]
    fixed = str(patched["0.4.9"])
    assert (
        main(["simulate", fixed, "--decode", "--scenario", "prefill-gone", "--format", "json"]) == 0
    )
    row = json.loads(capsys.readouterr().out)["scenarios"][0]
    assert row["verdict"] == "pass"
    errors = {f["rid"]: f["client_error"] for f in row["failed_requests"]}
    assert set(errors) == {"gone-mooncake", "gone-nixl"}
    assert "waiting for its KV cache" in errors["gone-mooncake"]  # the patch's own reason


# -- decode-only trees: the decode half runs on its own ------------------------------------------


def _decode_only(version: str, root: Path, *, receivers: bool = True) -> Path:
    """A copy of ``version`` without ``prefill.py`` (a decode fork's tree); without its
    Mooncake and NIXL backends too unless ``receivers``."""
    tree = copy_release(version, root)
    disaggregation = tree / "sglang/srt/disaggregation"
    (disaggregation / "prefill.py").unlink()
    if not receivers:
        for backend in ("mooncake", "nixl"):
            for path in sorted((disaggregation / backend).rglob("*.py")):
                path.unlink()
    return tree


def test_a_decode_only_tree_runs_its_decode_scenarios(tmp_path: Path) -> None:
    """No prefill.py: the decode half loads and runs alone (it used to exit 2, "prefill.py is
    not in the tree"); the pair with the prefill's deadline is n/a, the rest as the release."""
    tree = open_tree(_decode_only("0.5.10", tmp_path / "decode-only"))
    report = simulate.run(tree)
    verdicts = _verdicts(report)
    assert set(verdicts) == set(DECODE)  # no prefill scenario
    assert verdicts["prefill-deadline-pair"] == "n/a"
    assert "no prefill.py" in _row(report, "prefill-deadline-pair").observed
    wedged = WEDGED["0.5.10"] - {"prefill-deadline-pair"}
    assert {name for name, v in verdicts.items() if v == "fail"} == wedged
    assert report.sglang_version == "0.5.10"


def test_a_decode_only_tree_without_receivers_gets_a_scripted_one(tmp_path: Path) -> None:
    """No receiver class in the tree: a scripted receiver (Failed once its indices have waited
    the waiting timeout, as after receiver-waiting-timeout) carries the requests, and the
    tree's own queues are judged: the release's retraction gate still wedges."""
    tree = open_tree(_decode_only("0.4.9.post1", tmp_path / "bare", receivers=False))
    report = simulate.run(tree)
    verdicts = _verdicts(report)
    assert verdicts["prefill-gone"] == "pass", _row(report, "prefill-gone").observed
    assert "gone-scripted: failed at 300 s" in _row(report, "prefill-gone").observed
    assert verdicts["decode-backpressure"] == "pass"
    assert verdicts["retracted-under-pressure"] == "fail"


def test_confirm_runs_the_decode_side_where_the_prefill_side_cannot_load(tmp_path: Path) -> None:
    """An unloadable prefill.py no longer hides the decode side from check --confirm: the
    decode rows are there, the prefill side's reason is kept (one line)."""
    from pdguard.simulate import confirm

    root = copy_release("0.5.10", tmp_path / "half")
    prefill = root / "sglang/srt/disaggregation/prefill.py"
    prefill.write_text(
        prefill.read_text() + "\n\nclass SchedulerDisaggregationPrefillMixin:\n    pass\n"
    )
    with pytest.raises(LoadError):
        simulate.run(open_tree(root))  # simulate itself: exit 2, one line
    found = confirm.confirm(open_tree(root))
    assert found.report is not None and found.why_not is not None
    assert found.why_not.startswith("the prefill side: ") and "\n" not in found.why_not
    rows = {row.scenario: row.verdict for row in found.report.rows}
    assert set(rows) == set(DECODE)
    assert rows["pending-unresolved"] == "fail"
    assert rows["prefill-deadline-pair"] == "n/a"


_PARKED = """
class DecodePreallocQueue:
    def __init__(self):
        self.queue = []
        self.retracted_queue = []
        self.awaiting_rank = []
        self.seen = {}

    def _admit(self):
        ranks = CommonKVReceiver.query_prefill_dp_ranks(addr, rooms)
"""


def test_a_forks_own_pending_list_is_where_it_asks_query_dp_ranks() -> None:
    """A fork that parks requests in a list of its own while /query_dp_ranks has not answered
    (no _resolve_pending_reqs) gets the pending-unresolved scenario on that list; a release
    (its pending_reqs) and a queue that never asks do not."""
    module = ast.parse(_PARKED)
    cls = module.body[0]
    assert isinstance(cls, ast.ClassDef)
    literals = {"queue": "[]", "retracted_queue": "[]", "awaiting_rank": "[]", "seen": "{}"}
    assert decode_loader.parked_lists(cls, literals) == ("awaiting_rank",)
    release = ast.parse(_PARKED.replace("def _admit", "def _resolve_pending_reqs")).body[0]
    assert isinstance(release, ast.ClassDef)
    assert decode_loader.parked_lists(release, literals) == ()
    asks_nothing = ast.parse(_PARKED.replace("query_prefill_dp_ranks", "lookup")).body[0]
    assert isinstance(asks_nothing, ast.ClassDef)
    assert decode_loader.parked_lists(asks_nothing, literals) == ()
