"""``InflightDeadline`` on hand-written, SGLang-shaped snippets: before/after, anchors, and the
behaviour of the code it writes."""

from __future__ import annotations

import logging
import os
import textwrap
import types

import libcst as cst
import pytest
from libcst.codemod import CodemodContext, CodemodTest

from pdguard.codemods.anchors import AnchorError
from pdguard.codemods.inflight_deadline import InflightDeadline

PREFILL = '''\
"""A toy scheduler that hands finished prefills to a queue and polls them out of it."""

from __future__ import annotations

import logging

from toy_pd.transport import KVPoll, poll_and_all_reduce

logger = logging.getLogger(__name__)


class ToyPrefillScheduler:
    def hand_over(self, batch) -> None:
        for item in batch.reqs:
            self.disagg_prefill_inflight_queue.append(item)

    def process_disagg_prefill_inflight_queue(self) -> list:
        waiting = self.disagg_prefill_inflight_queue
        if not waiting:
            return []
        verdicts = poll_and_all_reduce(
            [item.disagg_kv_sender for item in waiting], self.rank_group
        )
        still_waiting, finished = [], []
        for item, verdict in zip(waiting, verdicts):
            if verdict == KVPoll.Failed:
                item.ended_with_error = True
            if verdict in (KVPoll.Failed, KVPoll.Success):
                finished.append(item)
            else:
                still_waiting.append(item)
        self.disagg_prefill_inflight_queue = still_waiting
        return finished
'''

# What the codemod adds to PREFILL, and where: the expected output is PREFILL with these
# blocks, so the toy module is written once and the test still compares whole modules.
ADDED_IMPORTS = """\
import os
import time
from functools import lru_cache
"""
ADDED_SGLANG_IMPORT = """\

from sglang.srt.utils import get_int_env_var
"""
ADDED_READER = '''
# pdguard: inflight-deadline
_INFLIGHT_TIMEOUT_ENV = "SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT"


@lru_cache(maxsize=1)
def _get_inflight_timeout() -> int:
    """Seconds a request may wait in the prefill inflight queue for its KV transfer
    before it is failed; 0 (or less) turns the deadline off. Read at first use."""
    timeout = get_int_env_var(_INFLIGHT_TIMEOUT_ENV, None)
    if timeout is None:  # unset, or not a whole number of seconds
        if os.environ.get(_INFLIGHT_TIMEOUT_ENV, "").strip():
            logger.warning(
                f"{_INFLIGHT_TIMEOUT_ENV}={os.environ[_INFLIGHT_TIMEOUT_ENV]!r} is not "
                "a whole number of seconds; using the default, 300"
            )
        timeout = 300
    return timeout
'''
ADDED_STAMP = """\
            # pdguard: inflight-deadline: the deadline counts the KV transfer only;
            # a request that leaves the queue and comes back starts a fresh one.
            item.inflight_queue_entry_time = time.monotonic()
"""
ADDED_HELPER = '''\
    # pdguard: inflight-deadline
    def _fail_timed_out_inflight_reqs(self) -> None:
        """Fail the requests whose KV transfer outlived the inflight deadline.

        Runs before the poll all-reduce: the sender reports Failed from now on, so the
        reduced poll is Failed on every rank and the Failed branch cleans the request up.
        """
        timeout = _get_inflight_timeout()
        if timeout <= 0:
            return
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            entry_time = getattr(req, "inflight_queue_entry_time", None)
            if entry_time is None or now - entry_time < timeout:
                continue
            reason = (
                f"Request {req.bootstrap_room} timed out after {now - entry_time:.1f}s "
                f"in the prefill inflight queue waiting for its KV transfer "
                f"(deadline {timeout}s, SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT)"
            )
            logger.warning(f"Prefill inflight request {req.rid=}: {reason}")
            sender = req.disagg_kv_sender
            try:
                sender.abort()
            except Exception:
                # best effort: this rank must still reach the poll all-reduce
                logger.exception(f"Failed to abort the sender of {req.rid=}")

'''
ADDED_CALL = """\
        # pdguard: inflight-deadline: fail overdue requests before the poll
        # all-reduce, so that every rank sees them Failed in the same step.
        self._fail_timed_out_inflight_reqs()
"""


def _with(text: str, *insertions: tuple[str, str, str]) -> str:
    """``text`` with each (block, "before"/"after", anchor) inserted at its anchor, which must
    be in ``text`` once."""
    for block, where, anchor in insertions:
        assert text.count(anchor) == 1, anchor
        text = text.replace(anchor, block + anchor if where == "before" else anchor + block)
    return text


EXPECTED = _with(
    PREFILL,
    (ADDED_IMPORTS, "after", "import logging\n"),
    (ADDED_SGLANG_IMPORT, "after", "from toy_pd.transport import KVPoll, poll_and_all_reduce\n"),
    (ADDED_READER, "after", "logger = logging.getLogger(__name__)\n"),
    (ADDED_STAMP, "before", "            self.disagg_prefill_inflight_queue.append(item)\n"),
    (ADDED_HELPER, "before", "    def process_disagg_prefill_inflight_queue(self) -> list:\n"),
    (ADDED_CALL, "before", "        verdicts = poll_and_all_reduce(\n"),
)

# --replace, where some sender never pops its failure record: the abort block only.
REPLACED_ABORT = """\
            try:
                sender.abort()
                # the failure reason the client gets: replace the record abort() made (only
                # that one: a sender that never pops its record would leak a new one)
                kv_mgr = getattr(sender, "kv_mgr", None)
                if req.bootstrap_room in getattr(kv_mgr, "failure_records", ()):
                    kv_mgr.record_failure(req.bootstrap_room, reason)
            except Exception:
"""
EXPECTED_REPLACE = EXPECTED.replace(
    "            try:\n                sender.abort()\n            except Exception:\n",
    REPLACED_ABORT,
)


class TestInflightDeadline(CodemodTest):
    TRANSFORM = InflightDeadline

    def test_before_after(self) -> None:
        self.assertCodemod(PREFILL, EXPECTED, convention="get_int_env_var")

    def test_before_after_replace(self) -> None:
        assert EXPECTED_REPLACE != EXPECTED
        self.assertCodemod(PREFILL, EXPECTED_REPLACE, convention="get_int_env_var", replace=True)

    def test_never_sets_poll_on_a_sender(self) -> None:
        for options in ({}, {"record": True}, {"replace": True}, {"parked": True}):
            out = _patch(PREFILL, **options)
            assert "sender.abort()" in out and ".poll =" not in out

    def test_reuses_existing_time_and_os_imports(self) -> None:
        src = PREFILL.replace(
            "import logging\n", "import logging\nimport time as _t\nfrom os import environ\n"
        )
        out = _patch(src, convention="get_int_env_var")
        assert "_t.monotonic()" in out and "environ.get(_INFLIGHT_TIMEOUT_ENV" in out
        assert "\nimport time\n" not in out and "\nimport os\n" not in out

    def test_self_annotation_follows_the_target(self) -> None:
        src = PREFILL.replace(
            "def process_disagg_prefill_inflight_queue(self)",
            "def process_disagg_prefill_inflight_queue(self: ToyPrefillScheduler)",
        )
        helper = "def _fail_timed_out_inflight_reqs(self: ToyPrefillScheduler) -> None:"
        assert helper in _patch(src)

    def test_anchors_on_the_function_not_the_first_poll_call(self) -> None:
        # Another poll_and_all_reduce() earlier in the file must not be touched.
        src = PREFILL.replace(
            "class ToyPrefillScheduler:\n",
            "class ToyHandshakeQueue:\n"
            "    def drain_ready(self):\n"
            "        return poll_and_all_reduce(self.pending, self.cpu_group)\n"
            "\n\nclass ToyPrefillScheduler:\n",
        )
        out = _patch(src)
        pop = out.index("def drain_ready")
        assert (
            "_fail_timed_out_inflight_reqs()"
            not in out[pop : out.index("class ToyPrefillScheduler")]
        )
        call = out.index("self._fail_timed_out_inflight_reqs()")
        assert call > out.index("def process_disagg_prefill_inflight_queue")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "def process_disagg_prefill_inflight_queue",
            "def process_inflight",
            "no method process_disagg_prefill_inflight_queue()",
        ),
        ("logger = logging.getLogger(__name__)", "log = 1", "logger"),
        ("self.disagg_prefill_inflight_queue.append(item)", "pass", "append"),
        (
            "        still_waiting, finished = [], []\n",
            "        still_waiting, finished = [], []\n        poll_and_all_reduce([], None)\n",
            "2 poll_and_all_reduce",
        ),
    ],
)
def test_anchor_errors(old: str, new: str, message: str) -> None:
    with pytest.raises(AnchorError, match=message):
        _patch(PREFILL.replace(old, new))


def _patch(src: str, **kwargs: str | bool) -> str:
    return InflightDeadline(CodemodContext(), **kwargs).transform_module(cst.parse_module(src)).code


# -- behaviour of the written code, with stand-ins for SGLang --------------------------------


class _Sender:
    """A sender wedged in WaitingForInput (decode restarted) whose poll() reports Failed once
    aborted, as every sender does once pdguard's sender-abort has run."""

    def __init__(self) -> None:
        self.aborted = 0

    def poll(self) -> int:
        return 0 if self.aborted else 2  # Failed once aborted, else WaitingForInput

    def abort(self) -> None:
        self.aborted += 1


class _Manager:
    def __init__(self) -> None:
        self.failure_records: dict[int, str] = {}

    def record_failure(self, room: int, reason: str) -> None:
        self.failure_records[room] = reason


class _AbortableSender:
    """A sender whose poll() reports Failed once aborted, as Mooncake's and NIXL 0.5.12+'s."""

    def __init__(self, raises: bool = False) -> None:
        self.kv_mgr = _Manager()
        self.conclude_state: int | None = None
        self.raises = raises

    def poll(self) -> int:
        return self.conclude_state if self.conclude_state is not None else 2

    def abort(self) -> None:
        if self.raises:
            raise RuntimeError("abort failed on this rank")
        self.kv_mgr.record_failure(7, "Aborted by AbortReq.")
        self.conclude_state = 0


class _SilentAbortSender(_AbortableSender):
    """A sender whose abort() records nothing, though its manager keeps failure records."""

    def abort(self) -> None:
        self.conclude_state = 0


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def _load(
    monkeypatch: pytest.MonkeyPatch, env: str | None, source: str = PREFILL, **options: str | bool
) -> tuple[types.ModuleType, _Clock]:
    """Execute the patched snippet (``source``) as a module, with stand-ins for SGLang and the
    clock."""
    if env is None:
        monkeypatch.delenv("SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT", env)
    options = {"convention": "get_int_env_var", **options}
    code = _patch(source, **options)
    for line in (
        "from toy_pd.transport import KVPoll, poll_and_all_reduce\n",
        "from sglang.srt.utils import get_int_env_var\n",
        "from sglang.srt.environ import envs\n",
    ):
        code = code.replace(line, "")
    clock = _Clock()
    module = types.ModuleType("prefill_under_test")
    kvpoll = types.SimpleNamespace(
        Failed=0, Bootstrapping=1, WaitingForInput=2, Transferring=3, Success=4
    )
    module.__dict__.update(
        KVPoll=kvpoll,
        # MIN all-reduce over a single rank: just the local polls.
        poll_and_all_reduce=lambda senders, group: [s.poll() for s in senders],
        get_int_env_var=_int_setting,
        envs=types.SimpleNamespace(
            SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT=types.SimpleNamespace(
                get=lambda: int(os.environ.get("SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT", "300"))
            )
        ),
    )
    exec(compile(code, "prefill_under_test", "exec"), module.__dict__)
    module.time = types.SimpleNamespace(monotonic=clock.monotonic)  # type: ignore[attr-defined]  # a module built at run time
    return module, clock


def _int_setting(name: str, fallback: int | None = 0) -> int | None:
    """What SGLang's ``get_int_env_var`` promises: the fallback for an unset, blank or
    non-integer value, else the integer."""
    raw = os.environ.get(name, "")
    if not raw.strip():
        return fallback
    try:
        return int(raw)
    except ValueError:
        return fallback


def _scheduler(module: types.ModuleType) -> object:
    scheduler = module.ToyPrefillScheduler()
    scheduler.disagg_prefill_inflight_queue = []
    scheduler.rank_group = None
    return scheduler


def _req(rid: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(rid=rid, bootstrap_room=7, disagg_kv_sender=_Sender())


def test_written_code_fails_a_wedged_request_at_the_deadline(monkeypatch) -> None:
    module, clock = _load(monkeypatch, env=None)
    scheduler = _scheduler(module)
    req = _req("wedged")
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 299.0
    assert scheduler.process_disagg_prefill_inflight_queue() == []
    assert scheduler.disagg_prefill_inflight_queue == [req]
    clock.now += 2.0
    assert scheduler.process_disagg_prefill_inflight_queue() == [req]
    assert req.ended_with_error and req.disagg_kv_sender.aborted == 1
    assert req.disagg_kv_sender.poll() == 0  # its class's poll(), also for later polls
    assert "poll" not in vars(req.disagg_kv_sender)
    assert scheduler.disagg_prefill_inflight_queue == []


def test_a_request_that_comes_back_starts_a_fresh_deadline(monkeypatch) -> None:
    """Optimistic prefill takes a request out of the queue and back: its wait and its second
    prefill do not count against the deadline."""
    module, clock = _load(monkeypatch, env="60")
    scheduler = _scheduler(module)
    req = _req("requeued")
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 40.0
    scheduler.disagg_prefill_inflight_queue = []  # out (optimistic_release_and_requeue) ...
    clock.now += 100.0
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))  # ... back
    clock.now += 30.0  # 170 s since the first entry, 30 s since it came back
    assert scheduler.process_disagg_prefill_inflight_queue() == []
    clock.now += 31.0
    assert scheduler.process_disagg_prefill_inflight_queue() == [req]


def test_honoured_abort_fails_without_touching_poll_and_says_why(monkeypatch, caplog) -> None:
    module, clock = _load(monkeypatch, env="60", record=True)
    scheduler = _scheduler(module)
    req = _req("wedged")
    req.disagg_kv_sender = sender = _AbortableSender()
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 61.0
    with caplog.at_level(logging.WARNING):
        assert scheduler.process_disagg_prefill_inflight_queue() == [req]
    assert "poll" not in vars(sender)  # the class's own poll(), not one set on the instance
    reason = sender.kv_mgr.failure_records[7]
    assert reason.startswith("Request 7 timed out after 61.0s in the prefill inflight queue")
    assert "deadline 60s, SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT" in reason
    assert reason in caplog.text


def test_replace_says_why_in_the_record_abort_made(monkeypatch, caplog) -> None:
    """--replace: the record abort() made now says why, and it stays the room's only one."""
    module, clock = _load(monkeypatch, env="60", replace=True)
    scheduler = _scheduler(module)
    req = _req("wedged")
    req.disagg_kv_sender = sender = _AbortableSender()
    sender.kv_mgr.failure_records[8] = "another room's failure"
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 61.0
    with caplog.at_level(logging.WARNING):
        assert scheduler.process_disagg_prefill_inflight_queue() == [req]
    assert sorted(sender.kv_mgr.failure_records) == [7, 8]
    reason = sender.kv_mgr.failure_records[7]
    assert reason.startswith("Request 7 timed out after 61.0s in the prefill inflight queue")
    assert reason in caplog.text
    assert sender.kv_mgr.failure_records[8] == "another room's failure"


def test_replace_creates_no_record(monkeypatch) -> None:
    """--replace: where abort() recorded nothing, no record is made (no sender may pop it)."""
    module, clock = _load(monkeypatch, env="60", replace=True)
    scheduler = _scheduler(module)
    req = _req("wedged")
    req.disagg_kv_sender = sender = _SilentAbortSender()
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 61.0
    assert scheduler.process_disagg_prefill_inflight_queue() == [req]
    assert req.ended_with_error and sender.kv_mgr.failure_records == {}


def test_replace_without_failure_records_only_aborts(monkeypatch) -> None:
    """--replace on a sender whose manager keeps no records (no kv_mgr at all here)."""
    module, clock = _load(monkeypatch, env="60", replace=True)
    scheduler = _scheduler(module)
    req = _req("wedged")
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 61.0
    assert scheduler.process_disagg_prefill_inflight_queue() == [req]
    assert req.disagg_kv_sender.aborted == 1 and not hasattr(req.disagg_kv_sender, "kv_mgr")


def test_parked_time_is_not_counted(monkeypatch) -> None:
    """0.5.16+: a request parked in the queue (prefill done, bootstrap not) is bounded by the
    bootstrap timeout; its inflight deadline starts when it is unparked."""
    module, clock = _load(monkeypatch, env="60", parked=True)
    scheduler = _scheduler(module)
    req = _req("parked")
    req.pending_bootstrap = True
    req.disagg_kv_sender = _AbortableSender()
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 250.0
    assert scheduler.process_disagg_prefill_inflight_queue() == []
    req.pending_bootstrap = False  # bootstrap done: unparked
    clock.now += 59.0
    assert scheduler.process_disagg_prefill_inflight_queue() == []
    clock.now += 2.0
    assert scheduler.process_disagg_prefill_inflight_queue() == [req]


def test_pp_leaves_a_request_every_stage_agreed_on_to_its_poll() -> None:
    """PP (0.5.10+): the helper takes rids_to_check, and a request every stage already agreed
    has ended its transfer is not failed by this stage's deadline."""
    src = PREFILL.replace(
        "def process_disagg_prefill_inflight_queue(self) -> list:",
        "def process_disagg_prefill_inflight_queue(\n"
        "        self: ToyPrefillScheduler, rids_to_check: list[str] | None = None\n"
        "    ) -> list:",
    )
    out = _patch(src)
    assert (
        "    def _fail_timed_out_inflight_reqs(\n"
        "        self: ToyPrefillScheduler, rids_to_check: list[str] | None = None\n"
        "    ) -> None:\n"
    ) in out
    assert "self._fail_timed_out_inflight_reqs(rids_to_check)" in out
    assert "if rids_to_check is not None and req.rid in rids_to_check:\n" in out
    # after the deadline check: only an overdue request is polled
    guard = textwrap.indent(
        "if rids_to_check is not None:\n"
        "    # PP: this stage already polls the transfer as ended, so the stages'\n"
        "    # consensus ends it, alike on all; failing it here would end it otherwise.\n"
        "    if req.disagg_kv_sender.poll() in (KVPoll.Success, KVPoll.Failed):\n"
        "        continue\n",
        " " * 12,
    )
    assert out.index(guard) > out.index("now - entry_time <")


def test_pp_a_stage_fails_only_a_transfer_it_still_polls_as_unfinished(monkeypatch) -> None:
    """PP: the stages' consensus (rids_to_check) reaches a stage rounds after it polled a
    transfer as ended. Meanwhile an overdue request it polls Success for is left to the
    consensus (failing it would end it with an error here, with success on the other stages);
    one it still polls unfinished is failed."""
    source = PREFILL.replace(
        "def process_disagg_prefill_inflight_queue(self) -> list:",
        "def process_disagg_prefill_inflight_queue(self, rids_to_check=None) -> list:",
    )
    module, clock = _load(monkeypatch, env="60", source=source)
    scheduler = _scheduler(module)
    transferred, wedged = _req("transferred"), _req("wedged")
    transferred.disagg_kv_sender = _AbortableSender()
    transferred.disagg_kv_sender.conclude_state = 4  # this stage polls Success
    wedged.disagg_kv_sender = _AbortableSender()
    scheduler.hand_over(types.SimpleNamespace(reqs=[transferred, wedged]))
    clock.now += 61.0
    # both overdue; the consensus naming "transferred" has not reached this stage yet
    assert scheduler.process_disagg_prefill_inflight_queue([]) == [transferred, wedged]
    assert transferred.disagg_kv_sender.conclude_state == 4
    assert not hasattr(transferred, "ended_with_error")
    assert wedged.disagg_kv_sender.conclude_state == 0 and wedged.ended_with_error


def test_an_abort_that_raises_is_logged_and_the_step_goes_on(monkeypatch, caplog) -> None:
    module, clock = _load(monkeypatch, env="60")
    scheduler = _scheduler(module)
    req = _req("unlucky")
    req.disagg_kv_sender = _AbortableSender(raises=True)
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 61.0
    with caplog.at_level(logging.ERROR):
        # this rank still reaches the poll all-reduce; its peers fail the request there
        assert scheduler.process_disagg_prefill_inflight_queue() == []
    assert "Failed to abort the sender of req.rid='unlucky'" in caplog.text


@pytest.mark.parametrize("env", ["0", "-1"])
def test_zero_turns_the_deadline_off(monkeypatch, env: str) -> None:
    module, clock = _load(monkeypatch, env=env)
    scheduler = _scheduler(module)
    req = _req("patient")
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 1e6
    assert scheduler.process_disagg_prefill_inflight_queue() == []
    assert req.disagg_kv_sender.aborted == 0


@pytest.mark.parametrize("env", ["five minutes", "nan", "inf", "-inf", "1.5"])
def test_invalid_value_warns_at_first_use_and_uses_the_default(
    monkeypatch, caplog, env: str
) -> None:
    with caplog.at_level(logging.WARNING):
        module, clock = _load(monkeypatch, env=env)
    assert caplog.text == ""  # nothing at import
    scheduler = _scheduler(module)
    req = _req("wedged")
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 299.0
    with caplog.at_level(logging.WARNING):
        assert scheduler.process_disagg_prefill_inflight_queue() == []
        assert (
            f"SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT={env!r} is not a whole number" in caplog.text
        )
        assert "using the default, 300" in caplog.text
        clock.now += 2.0
        assert scheduler.process_disagg_prefill_inflight_queue() == [req]
    assert "deadline 300s, SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT" in caplog.text
    # read once: the warning is not repeated every step
    assert caplog.text.count("is not a whole number") == 1


def test_registry_convention_reads_the_entry_at_each_use(monkeypatch) -> None:
    """0.5.8+: ``envs.SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT.get()`` in the helper, no
    module-level setting, and a value changed later (``envs.X.override()``) is seen."""
    out = _patch(PREFILL, convention="registry")
    assert "from sglang.srt.environ import envs\n" in out
    assert "        timeout = envs.SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT.get()\n" in out
    assert "_INFLIGHT_TIMEOUT_ENV" not in out and "get_int_env_var" not in out
    assert "\nimport os\n" not in out
    module, clock = _load(monkeypatch, env="600", convention="registry")
    scheduler = _scheduler(module)
    req = _req("wedged")
    req.disagg_kv_sender = _AbortableSender()
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 61.0
    assert scheduler.process_disagg_prefill_inflight_queue() == []
    monkeypatch.setenv("SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT", "60")
    assert scheduler.process_disagg_prefill_inflight_queue() == [req]


def test_registry_convention_reuses_an_envs_import_under_another_name() -> None:
    src = PREFILL.replace(
        "import logging\n", "import logging\n\nfrom sglang.srt.environ import envs as senv\n"
    )
    out = _patch(src, convention="registry")
    assert "timeout = senv.SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT.get()" in out
    assert "import envs\n" not in out


def test_registry_convention_refuses_an_envs_that_is_not_sglangs() -> None:
    src = PREFILL.replace("import logging\n", "import logging\n\nfrom mylib import envs\n")
    with pytest.raises(AnchorError, match="`envs` is bound to something else"):
        _patch(src, convention="registry")


def test_expected_snippet_is_what_black_would_write() -> None:
    import black

    assert black.format_str(EXPECTED, mode=black.Mode()) == EXPECTED
    assert black.format_str(EXPECTED_REPLACE, mode=black.Mode()) == EXPECTED_REPLACE
    assert textwrap.dedent(EXPECTED) == EXPECTED
