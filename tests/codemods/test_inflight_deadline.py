"""``InflightDeadline`` on hand-written, SGLang-shaped snippets: before/after, anchors, and the
behaviour of the code it writes."""

from __future__ import annotations

import logging
import os
import string
import textwrap
import types
from typing import Any

import libcst as cst
import pytest
from libcst.codemod import CodemodContext, CodemodTest

from pdguard.checks.models.inflight import PARKED
from pdguard.codemods.anchors import AnchorError
from pdguard.codemods.inflight_deadline import InflightDeadline
from pdguard.codemods.inflight_timeout import UTILS_MODULE
from pdguard.sglang_names import (
    ENVIRON_MODULE,
    INFLIGHT_TIMEOUT_ENV,
    PP_CONSENSUS_PARAM,
    REQ_SENDER,
)
from pdguard.sglang_names import INFLIGHT_FUNCTION as FUNCTION
from pdguard.sglang_names import INFLIGHT_QUEUE as QUEUE
from pdguard.sglang_names import POLL_ALL_REDUCE_PREFIX as POLL

# SGLang's names, from their one home: the snippets below are written with ``${name}``
# placeholders, so the toy code is ours and the names stay the ones pdguard anchors on.
ENV, SENDER = INFLIGHT_TIMEOUT_ENV, REQ_SENDER
_NAMES = {
    "function": FUNCTION,
    "queue": QUEUE,
    "poll": POLL,
    "sender": SENDER,
    "env": ENV,
    "utils": UTILS_MODULE,
    "environ": ENVIRON_MODULE,
    "consensus": PP_CONSENSUS_PARAM,
    "parked": PARKED,
}


def S(text: str) -> str:
    """``text`` with SGLang's names put in for its placeholders."""
    return string.Template(text).substitute(_NAMES)


def _run(scheduler: object, *args: object) -> object:
    """The scheduler's inflight function, called."""
    return getattr(scheduler, FUNCTION)(*args)


PREFILL = S('''\
"""A toy scheduler that hands finished prefills to a queue and polls them out of it."""

from __future__ import annotations

import logging

from toy_pd.transport import KVPoll, ${poll}

logger = logging.getLogger(__name__)


class ToyPrefillScheduler:
    def hand_over(self, batch) -> None:
        for item in batch.reqs:
            self.${queue}.append(item)

    def ${function}(self) -> list:
        waiting = self.${queue}
        if not waiting:
            return []
        verdicts = ${poll}(
            [item.${sender} for item in waiting], self.rank_group
        )
        still_waiting, finished = [], []
        for item, verdict in zip(waiting, verdicts):
            if verdict == KVPoll.Failed:
                item.ended_with_error = True
            if verdict in (KVPoll.Failed, KVPoll.Success):
                finished.append(item)
            else:
                still_waiting.append(item)
        self.${queue} = still_waiting
        return finished
''')

# What the codemod adds to PREFILL, and where: the expected output is PREFILL with these
# blocks, so the toy module is written once and the test still compares whole modules.
ADDED_IMPORTS = """\
import time
"""
ADDED_UTILS_IMPORT = S("""\

from ${utils} import get_int_env_var
""")
ADDED_STAMP = """\
            # pdguard: inflight-deadline: the deadline counts the KV transfer only;
            # a request that leaves the queue and comes back starts a fresh one.
            item.inflight_queue_entry_time = time.monotonic()
"""
ADDED_HELPER = S('''\
    # pdguard: inflight-deadline
    def _fail_timed_out_inflight_reqs(self) -> None:
        """Fail the requests whose KV transfer outlived the inflight deadline.

        Runs before the poll all-reduce: the sender reports Failed from now on, so
        the reduced poll is Failed on every rank and the Failed branch cleans up.
        """
        timeout = get_int_env_var("${env}", 300)
        if timeout <= 0:
            return
        now = time.monotonic()
        for req in self.${queue}:
            entry_time = getattr(req, "inflight_queue_entry_time", None)
            if entry_time is None or now - entry_time < timeout:
                continue
            if req.${sender}.poll() in (KVPoll.Success, KVPoll.Failed):
                # This rank already polls the transfer as ended (the queue went
                # unpolled for a while: a stall, a pause): the reduced poll ends it.
                continue
            # Failed once: the sender's poll() reports it from now on.
            req.inflight_queue_entry_time = None
            logger.warning_once(
                "Some requests timed out in the prefill inflight queue waiting "
                "for their KV transfer to decode. If slower transfers are "
                "acceptable, relax the timeout: "
                "'export ${env}=600' (10 minutes)."
            )
            reason = (
                f"Request {req.bootstrap_room} timed out after {now - entry_time:.1f}s "
                f"in the prefill inflight queue waiting for its KV transfer "
                f"(${env}={timeout})"
            )
            logger.warning(f"Prefill inflight request {req.rid=}: {reason}")
            sender = req.${sender}
            try:
                sender.abort()
            except Exception:
                # best effort: this rank must still reach the poll all-reduce
                logger.exception(f"Failed to abort the sender of {req.rid=}")

''')
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
    (ADDED_UTILS_IMPORT, "after", S("from toy_pd.transport import KVPoll, ${poll}\n")),
    (ADDED_STAMP, "before", S("            self.${queue}.append(item)\n")),
    (ADDED_HELPER, "before", S("    def ${function}(self) -> list:\n")),
    (ADDED_CALL, "before", S("        verdicts = ${poll}(\n")),
)

# --replace, where some sender never pops its failure record: the abort block only.
REPLACED_ABORT = """\
            try:
                sender.abort()
                # the reason the client gets: replace the record abort() made (only
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


# --conclude (0.5.20+): senders of the class given are failed through their manager's
# conclude_failure() (it records the reason, so it is not logged per request), others aborted.
CONCLUDE_CLASS = "toy_pd.conn:ToyCommonSender"
CONCLUDED_FAIL = S("""\
            sender = req.${sender}
            try:
                if isinstance(sender, ToyCommonSender):
                    # records the reason (a root cause recorded first is kept), marks
                    # the room Failed and tells decode
                    sender.kv_mgr.conclude_failure(
                        bootstrap_room=req.bootstrap_room, failure_reason=reason
                    )
                else:
                    sender.abort()
            except Exception:
                # best effort: this rank must still reach the poll all-reduce
                logger.exception(f"Failed to fail the sender of {req.rid=}")
""")
# the end of ADDED_HELPER: the per-request log line and the abort block
_ABORT_FAIL = ADDED_HELPER[ADDED_HELPER.index("            logger.warning(f") :].rstrip() + "\n"
EXPECTED_CONCLUDE = _with(
    EXPECTED.replace(_ABORT_FAIL, CONCLUDED_FAIL),
    ("from toy_pd.conn import ToyCommonSender\n", "before", S("from toy_pd.transport import")),
)


class TestInflightDeadline(CodemodTest):
    TRANSFORM = InflightDeadline

    def test_before_after(self) -> None:
        self.assertCodemod(PREFILL, EXPECTED, convention="get_int_env_var")

    def test_before_after_replace(self) -> None:
        assert EXPECTED_REPLACE != EXPECTED
        self.assertCodemod(PREFILL, EXPECTED_REPLACE, convention="get_int_env_var", replace=True)

    def test_before_after_conclude(self) -> None:
        assert _ABORT_FAIL in EXPECTED and CONCLUDED_FAIL not in EXPECTED
        self.assertCodemod(
            PREFILL, EXPECTED_CONCLUDE, convention="get_int_env_var", conclude=CONCLUDE_CLASS
        )

    def test_conclude_reuses_the_class_already_imported(self) -> None:
        src = PREFILL.replace(
            "import logging\n", "import logging\n\nfrom toy_pd.conn import ToyCommonSender\n"
        )
        out = _patch(src, conclude=CONCLUDE_CLASS)
        assert out.count("import ToyCommonSender") == 1
        assert "isinstance(sender, ToyCommonSender)" in out

    def test_never_sets_poll_on_a_sender(self) -> None:
        for options in ({}, {"record": True}, {"replace": True}, {"parked": True}):
            out = _patch(PREFILL, **options)
            assert "sender.abort()" in out and ".poll =" not in out

    def test_reuses_existing_time_import(self) -> None:
        src = PREFILL.replace("import logging\n", "import logging\nimport time as _t\n")
        out = _patch(src, convention="get_int_env_var")
        assert "_t.monotonic()" in out
        assert "\nimport time\n" not in out

    def test_self_annotation_follows_the_target(self) -> None:
        src = PREFILL.replace(
            S("def ${function}(self)"),
            S("def ${function}(self: ToyPrefillScheduler)"),
        )
        helper = "def _fail_timed_out_inflight_reqs(self: ToyPrefillScheduler) -> None:"
        assert helper in _patch(src)

    def test_anchors_on_the_function_not_the_first_poll_call(self) -> None:
        # Another all-reduced poll earlier in the file must not be touched.
        src = PREFILL.replace(
            "class ToyPrefillScheduler:\n",
            S(
                "class ToyHandshakeQueue:\n"
                "    def drain_ready(self):\n"
                "        return ${poll}(self.pending, self.cpu_group)\n"
                "\n\nclass ToyPrefillScheduler:\n"
            ),
        )
        out = _patch(src)
        pop = out.index("def drain_ready")
        assert (
            "_fail_timed_out_inflight_reqs()"
            not in out[pop : out.index("class ToyPrefillScheduler")]
        )
        call = out.index("self._fail_timed_out_inflight_reqs()")
        assert call > out.index(S("def ${function}"))


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            S("def ${function}"),
            "def process_inflight",
            S("no method ${function}()"),
        ),
        ("logger = logging.getLogger(__name__)", "log = 1", "logger"),
        (S("self.${queue}.append(item)"), "pass", "append"),
        (
            "        still_waiting, finished = [], []\n",
            S("        still_waiting, finished = [], []\n        ${poll}([], None)\n"),
            S("2 ${poll}"),
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
        self.state = 2  # WaitingForInput; Bootstrapping is 1

    def poll(self) -> int:
        return self.conclude_state if self.conclude_state is not None else self.state

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
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, env)
    options = {"convention": "get_int_env_var", **options}
    code = _patch(source, **options)
    for line in (
        S("from toy_pd.transport import KVPoll, ${poll}\n"),
        S("from ${utils} import get_int_env_var\n"),
        S("from ${environ} import envs\n"),
        "from toy_pd.conn import ToyCommonSender\n",  # --conclude: stood in by the test
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
        **{POLL: lambda senders, group: [s.poll() for s in senders]},
        get_int_env_var=_int_setting,
        envs=types.SimpleNamespace(
            **{ENV: types.SimpleNamespace(get=lambda: int(os.environ.get(ENV, "300")))}
        ),
    )
    # SGLang's loggers have warning_once (transformers adds it to logging.Logger)
    monkeypatch.setattr(logging.Logger, "warning_once", logging.Logger.warning, raising=False)
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
    setattr(scheduler, QUEUE, [])
    scheduler.rank_group = None
    return scheduler


def _req(rid: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(rid=rid, bootstrap_room=7, **{SENDER: _Sender()})


def test_written_code_fails_a_wedged_request_at_the_deadline(monkeypatch) -> None:
    module, clock = _load(monkeypatch, env=None)
    scheduler = _scheduler(module)
    req = _req("wedged")
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 299.0
    assert _run(scheduler) == []
    assert getattr(scheduler, QUEUE) == [req]
    clock.now += 2.0
    assert _run(scheduler) == [req]
    assert req.ended_with_error and getattr(req, SENDER).aborted == 1
    assert getattr(req, SENDER).poll() == 0  # its class's poll(), also for later polls
    assert "poll" not in vars(getattr(req, SENDER))
    assert getattr(scheduler, QUEUE) == []


def test_a_request_that_comes_back_starts_a_fresh_deadline(monkeypatch) -> None:
    """Optimistic prefill takes a request out of the queue and back: its wait and its second
    prefill do not count against the deadline."""
    module, clock = _load(monkeypatch, env="60")
    scheduler = _scheduler(module)
    req = _req("requeued")
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 40.0
    setattr(scheduler, QUEUE, [])  # out (optimistic_release_and_requeue) ...
    clock.now += 100.0
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))  # ... back
    clock.now += 30.0  # 170 s since the first entry, 30 s since it came back
    assert _run(scheduler) == []
    clock.now += 31.0
    assert _run(scheduler) == [req]


def test_honoured_abort_fails_without_touching_poll_and_says_why(monkeypatch, caplog) -> None:
    module, clock = _load(monkeypatch, env="60", record=True)
    scheduler = _scheduler(module)
    req = _req("wedged")
    sender = _AbortableSender()
    setattr(req, SENDER, sender)
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 61.0
    with caplog.at_level(logging.WARNING):
        assert _run(scheduler) == [req]
    assert "poll" not in vars(sender)  # the class's own poll(), not one set on the instance
    reason = sender.kv_mgr.failure_records[7]
    assert reason.startswith("Request 7 timed out after 61.0s in the prefill inflight queue")
    assert S("(${env}=60)") in reason
    # recorded, the reason reaches the release's Failed branch (its failure_exception()),
    # which logs it; the deadline itself logs only its hint, once
    assert reason not in caplog.text
    assert caplog.text.count(S("'export ${env}=600'")) == 1


class _ConcludingManager(_Manager):
    """0.5.20+'s ``conclude_failure``: keep the first reason, mark the room Failed, tell
    decode."""

    def __init__(self) -> None:
        super().__init__()
        self.request_status: dict[int, int] = {}
        self.told_decode: list[int] = []

    def conclude_failure(self, *, bootstrap_room: int, failure_reason: str) -> int:
        self.failure_records.setdefault(bootstrap_room, failure_reason)
        self.request_status[bootstrap_room] = 0
        self.told_decode.append(bootstrap_room)
        return 0


class _CommonSender(_AbortableSender):
    """A sender whose poll() reports its room's status (as 0.5.20+'s CommonKVSender)."""

    def __init__(self) -> None:
        super().__init__()
        self.kv_mgr = _ConcludingManager()

    def poll(self) -> int:
        return self.kv_mgr.request_status.get(7, 2)

    def abort(self) -> None:
        raise AssertionError("a concluding sender is failed through its manager")


def _load_concluding(monkeypatch: pytest.MonkeyPatch) -> tuple[types.ModuleType, _Clock]:
    module, clock = _load(monkeypatch, env="60", conclude=CONCLUDE_CLASS)
    module.ToyCommonSender = _CommonSender  # type: ignore[attr-defined]  # the import, stood in
    return module, clock


def test_conclude_tells_decode_and_keeps_the_first_root_cause(monkeypatch, caplog) -> None:
    module, clock = _load_concluding(monkeypatch)
    scheduler = _scheduler(module)
    req = types.SimpleNamespace(rid="wedged", bootstrap_room=7, **{SENDER: _CommonSender()})
    manager = getattr(req, SENDER).kv_mgr
    manager.failure_records[7] = "decode went away (recorded first)"
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 61.0
    with caplog.at_level(logging.WARNING):
        assert _run(scheduler) == [req]
    assert req.ended_with_error
    assert manager.told_decode == [7]
    # the first root cause is kept; conclude_failure records the reason, none logged per request
    assert manager.failure_records == {7: "decode went away (recorded first)"}
    assert not [r for r in caplog.records if "Prefill inflight request" in r.getMessage()]


def test_conclude_records_the_timeout_where_nothing_was_recorded(monkeypatch) -> None:
    module, clock = _load_concluding(monkeypatch)
    scheduler = _scheduler(module)
    req = types.SimpleNamespace(rid="wedged", bootstrap_room=7, **{SENDER: _CommonSender()})
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 61.0
    assert _run(scheduler) == [req]
    assert "timed out after 61.0s" in getattr(req, SENDER).kv_mgr.failure_records[7]


def test_conclude_aborts_a_sender_of_another_class(monkeypatch) -> None:
    module, clock = _load_concluding(monkeypatch)
    scheduler = _scheduler(module)
    req = _req("fake")  # not a ToyCommonSender: its poll() reads no room status
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 61.0
    assert _run(scheduler) == [req]
    assert getattr(req, SENDER).aborted == 1


def test_replace_says_why_in_the_record_abort_made(monkeypatch, caplog) -> None:
    """--replace: the record abort() made now says why, and it stays the room's only one."""
    module, clock = _load(monkeypatch, env="60", replace=True)
    scheduler = _scheduler(module)
    req = _req("wedged")
    sender = _AbortableSender()
    setattr(req, SENDER, sender)
    sender.kv_mgr.failure_records[8] = "another room's failure"
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 61.0
    with caplog.at_level(logging.WARNING):
        assert _run(scheduler) == [req]
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
    sender = _SilentAbortSender()
    setattr(req, SENDER, sender)
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 61.0
    assert _run(scheduler) == [req]
    assert req.ended_with_error and sender.kv_mgr.failure_records == {}


def test_replace_without_failure_records_only_aborts(monkeypatch) -> None:
    """--replace on a sender whose manager keeps no records (no kv_mgr at all here)."""
    module, clock = _load(monkeypatch, env="60", replace=True)
    scheduler = _scheduler(module)
    req = _req("wedged")
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 61.0
    assert _run(scheduler) == [req]
    assert getattr(req, SENDER).aborted == 1 and not hasattr(getattr(req, SENDER), "kv_mgr")


def _parked(monkeypatch) -> tuple[Any, Any, Any, _AbortableSender]:
    """A patched toy whose queue holds one parked request, its sender still bootstrapping:
    the clock, the scheduler, the request and its sender."""
    module, clock = _load(monkeypatch, env="60", parked=True)
    scheduler = _scheduler(module)
    req = _req("parked")
    setattr(req, PARKED, True)
    sender = _AbortableSender()
    sender.state = 1  # Bootstrapping
    setattr(req, SENDER, sender)
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    return clock, scheduler, req, sender


def test_parked_time_is_not_counted(monkeypatch) -> None:
    """0.5.16+: a request parked in the queue (prefill done, bootstrap not) is bounded by the
    bootstrap timeout while its sender bootstraps; its inflight deadline starts when the
    bootstrap ends."""
    clock, scheduler, req, sender = _parked(monkeypatch)
    clock.now += 250.0
    assert _run(scheduler) == []
    sender.state = 2  # bootstrap done
    setattr(req, PARKED, False)  # unparked
    clock.now += 59.0
    assert _run(scheduler) == []
    clock.now += 2.0
    assert _run(scheduler) == [req]


def test_a_parked_request_that_bootstrapped_is_counted(monkeypatch) -> None:
    """A parked request whose sender has bootstrapped but that nobody unparks (a PP stage
    looks only at the requests the stages agreed have ended, 0.5.16+) is no longer bounded by
    the bootstrap timeout: its deadline runs from the end of its bootstrap."""
    clock, scheduler, _, sender = _parked(monkeypatch)
    clock.now += 30.0
    assert _run(scheduler) == []
    sender.state = 2  # bootstrapped, still parked
    clock.now += 59.0
    _run(scheduler)
    assert sender.conclude_state is None
    clock.now += 2.0
    _run(scheduler)
    assert sender.conclude_state == 0  # failed: its poll reports Failed from now on


def test_pp_leaves_a_request_every_stage_agreed_on_to_its_poll() -> None:
    """PP (0.5.10+): the helper takes the stages' consensus, and a request every stage
    already agreed has ended its transfer is not failed by this stage's deadline."""
    src = PREFILL.replace(
        S("def ${function}(self) -> list:"),
        S(
            "def ${function}(\n"
            "        self: ToyPrefillScheduler, ${consensus}: list[str] | None = None\n"
            "    ) -> list:"
        ),
    )
    out = _patch(src)
    assert (
        S(
            "    def _fail_timed_out_inflight_reqs(\n"
            "        self: ToyPrefillScheduler, ${consensus}: list[str] | None = None\n"
            "    ) -> None:\n"
        )
    ) in out
    assert S("self._fail_timed_out_inflight_reqs(${consensus})") in out
    assert S("if ${consensus} is not None and req.rid in ${consensus}:\n") in out
    # after the deadline check, on every path: only an overdue request is polled
    guard = textwrap.indent(
        S(
            "if req.${sender}.poll() in (KVPoll.Success, KVPoll.Failed):\n"
            "    # This rank already polls the transfer as ended (the queue went\n"
            "    # unpolled for a while: a stall, a pause): the reduced poll ends it.\n"
            "    continue\n"
        ),
        " " * 12,
    )
    assert out.index(guard) > out.index("now - entry_time <")


def test_pp_a_stage_fails_only_a_transfer_it_still_polls_as_unfinished(monkeypatch) -> None:
    """PP: the stages' consensus reaches a stage rounds after it polled a
    transfer as ended. Meanwhile an overdue request it polls Success for is left to the
    consensus (failing it would end it with an error here, with success on the other stages);
    one it still polls unfinished is failed."""
    source = PREFILL.replace(
        S("def ${function}(self) -> list:"),
        S("def ${function}(self, ${consensus}=None) -> list:"),
    )
    module, clock = _load(monkeypatch, env="60", source=source)
    scheduler = _scheduler(module)
    transferred, wedged = _req("transferred"), _req("wedged")
    setattr(transferred, SENDER, _AbortableSender())
    getattr(transferred, SENDER).conclude_state = 4  # this stage polls Success
    setattr(wedged, SENDER, _AbortableSender())
    scheduler.hand_over(types.SimpleNamespace(reqs=[transferred, wedged]))
    clock.now += 61.0
    # both overdue; the consensus naming "transferred" has not reached this stage yet
    assert _run(scheduler, []) == [transferred, wedged]
    assert getattr(transferred, SENDER).conclude_state == 4
    assert not hasattr(transferred, "ended_with_error")
    assert getattr(wedged, SENDER).conclude_state == 0 and wedged.ended_with_error


def test_an_abort_that_raises_is_logged_and_the_step_goes_on(monkeypatch, caplog) -> None:
    module, clock = _load(monkeypatch, env="60")
    scheduler = _scheduler(module)
    req = _req("unlucky")
    setattr(req, SENDER, _AbortableSender(raises=True))
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 61.0
    with caplog.at_level(logging.ERROR):
        # this rank still reaches the poll all-reduce; its peers fail the request there
        assert _run(scheduler) == []
    assert "Failed to abort the sender of req.rid='unlucky'" in caplog.text


@pytest.mark.parametrize("env", ["0", "-1"])
def test_zero_turns_the_deadline_off(monkeypatch, env: str) -> None:
    module, clock = _load(monkeypatch, env=env)
    scheduler = _scheduler(module)
    req = _req("patient")
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 1e6
    assert _run(scheduler) == []
    assert getattr(req, SENDER).aborted == 0


@pytest.mark.parametrize("env", ["five minutes", "nan", "inf", "-inf", "1.5"])
def test_a_value_that_is_not_a_whole_number_gives_the_default(
    monkeypatch, caplog, env: str
) -> None:
    """get_int_env_var, as the release reads its sibling timeouts: the default, 300 s."""
    module, clock = _load(monkeypatch, env=env)
    scheduler = _scheduler(module)
    req = _req("wedged")
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 299.0
    assert _run(scheduler) == []
    clock.now += 2.0
    with caplog.at_level(logging.WARNING):
        assert _run(scheduler) == [req]
    assert S("(${env}=300)") in caplog.text


def test_registry_convention_reads_the_entry_at_each_use(monkeypatch) -> None:
    """0.5.8+: ``envs.<the inflight timeout>.get()`` in the helper, no
    module-level setting, and a value changed later (``envs.X.override()``) is seen."""
    out = _patch(PREFILL, convention="registry")
    assert S("from ${environ} import envs\n") in out
    assert S("        timeout = envs.${env}.get()\n") in out
    assert "_INFLIGHT_TIMEOUT_ENV" not in out and "get_int_env_var" not in out
    assert "\nimport os\n" not in out
    module, clock = _load(monkeypatch, env="600", convention="registry")
    scheduler = _scheduler(module)
    req = _req("wedged")
    setattr(req, SENDER, _AbortableSender())
    scheduler.hand_over(types.SimpleNamespace(reqs=[req]))
    clock.now += 61.0
    assert _run(scheduler) == []
    monkeypatch.setenv(ENV, "60")
    assert _run(scheduler) == [req]


def test_registry_convention_reuses_an_envs_import_under_another_name() -> None:
    src = PREFILL.replace(
        "import logging\n", S("import logging\n\nfrom ${environ} import envs as senv\n")
    )
    out = _patch(src, convention="registry")
    assert S("timeout = senv.${env}.get()") in out
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


def test_a_transfer_that_ended_while_the_queue_went_unpolled_is_not_failed(monkeypatch) -> None:
    """No PP: the queue was not polled for longer than the deadline (a scheduler stall,
    0.5.12+'s in-place pause_generation) while a transfer completed. The sweep leaves a request
    this rank polls Success to the reduced poll; only the still unfinished one is failed, and
    only once (its stamp is cleared, so a later step neither fails nor logs it again)."""
    module, clock = _load(monkeypatch, env="60")
    scheduler = _scheduler(module)
    transferred, wedged = _req("transferred"), _req("wedged")
    setattr(transferred, SENDER, _AbortableSender())
    setattr(wedged, SENDER, _AbortableSender())
    scheduler.hand_over(types.SimpleNamespace(reqs=[transferred, wedged]))
    getattr(transferred, SENDER).conclude_state = 4  # its transfer ended during the stall
    clock.now += 400.0
    assert _run(scheduler) == [transferred, wedged]
    assert getattr(transferred, SENDER).conclude_state == 4
    assert not hasattr(transferred, "ended_with_error")
    assert getattr(wedged, SENDER).conclude_state == 0 and wedged.ended_with_error
    assert wedged.inflight_queue_entry_time is None


def test_no_pp_loop_no_pp_code() -> None:
    """0.4.8 - 0.5.1: the inflight function takes the consensus, but no PP prefill loop passes
    it: the helper neither takes nor reads it."""
    src = PREFILL.replace(
        S("def ${function}(self) -> list:"),
        S("def ${function}(self, ${consensus}=None) -> list:"),
    )
    out = _patch(src, pp=False)
    assert "    def _fail_timed_out_inflight_reqs(self) -> None:\n" in out
    assert "self._fail_timed_out_inflight_reqs()\n" in out
    assert out.count(S("${consensus}")) == src.count(S("${consensus}"))
