"""Hand-written inflight deadlines in styles pdguard had not seen: each test pins a verdict that
was wrong (a broken fix passed, a sound one was reported) and holds by meaning.

The module is written here in pdguard's own words; only the names the model keys on are
SGLang's (the queue, the sender, the poll all-reduce's prefix, ``rids_to_check``).
"""

from __future__ import annotations

import pytest

from pdguard import checks
from pdguard.checks import Project
from pdguard.sglang_names import PREFILL_PATH
from tests.snippets import TOY_PP_PREFILL

STAMP = "            req.handed_over_at = time.monotonic()\n"
CALL = "        self._expire(rids_to_check)\n"
# Under PP, a transfer this stage already polls as ended is left to the stages' consensus.
SPARE = """\
            if agreed is not None and req.disagg_kv_sender.poll() in (
                KVPoll.Success,
                KVPoll.Failed,
            ):
                continue
"""


def expire(loop: str = "for req in self.disagg_prefill_inflight_queue:", body: str = "") -> str:
    """A deadline helper: ``loop`` over the requests, ``body`` after the sparing guard and
    before the clock test (at the loop body's indentation)."""
    return (
        "\n    def _expire(self, agreed=None):\n"
        "        now = time.monotonic()\n"
        f"        {loop}\n" + SPARE + body + "            if now - req.handed_over_at > LIMIT_S:\n"
        "                req.disagg_kv_sender.abort()\n"
    )


def findings(
    helper: str,
    stamp: str = STAMP,
    call: str = CALL,
    codes: tuple[str, ...] = ("PDG000", "PDG001", "PDG002", "PDG003"),
) -> list[tuple[str, str]]:
    text = TOY_PP_PREFILL.format(stamp=stamp, helper=helper, call=call)
    project = Project({PREFILL_PATH: text})
    return [(f.code, f.message) for f in checks.run(project, list(codes))]


@pytest.mark.parametrize(
    ("loop", "shown"),
    [
        ("for req in self.disagg_prefill_inflight_queue[1:]:", "[1:]"),
        ("for req in self.disagg_prefill_inflight_queue[:-1]:", "[:-1]"),
    ],
    ids=["slice-from-one", "slice-to-last"],
)
def test_a_deadline_that_skips_part_of_the_queue_is_no_deadline(loop: str, shown: str) -> None:
    """A request the loop never reaches waits for ever: PDG001 at the keep site, naming what
    the loop goes over (it passed before)."""
    found = findings(expire(loop))
    assert [code for code, _ in found] == ["PDG001"]
    assert "the deadline skips requests of the queue" in found[0][1]
    assert shown in found[0][1]


def test_an_index_loop_one_short_is_no_deadline() -> None:
    helper = (
        "\n    def _expire(self, agreed=None):\n"
        "        now = time.monotonic()\n"
        "        for i in range(len(self.disagg_prefill_inflight_queue) - 1):\n"
        "            req = self.disagg_prefill_inflight_queue[i]\n"
        + SPARE
        + "            if now - req.handed_over_at > LIMIT_S:\n"
        "                req.disagg_kv_sender.abort()\n"
    )
    found = findings(helper)
    assert [code for code, _ in found] == ["PDG001"]
    assert "skips requests of the queue" in found[0][1]


@pytest.mark.parametrize(
    ("helper", "test"),
    [
        (
            expire().replace(
                "                req.disagg_kv_sender.abort()\n",
                "                if self.tp_rank == 0:\n"
                "                    req.disagg_kv_sender.abort()\n",
            ),
            "self.tp_rank == 0",
        ),
        (
            expire(body="            if self.attn_tp_rank != 0:\n                break\n"),
            "self.attn_tp_rank != 0",
        ),
    ],
    ids=["abort-under-rank-test", "loop-left-on-other-ranks"],
)
def test_a_failure_on_some_ranks_only_is_flagged(helper: str, test: str) -> None:
    """Ranks then act differently on the same request: PDG002 names the rank test, and PDG001
    does not count it as the deadline (both passed before)."""
    found = findings(helper)
    assert [code for code, _ in found] == ["PDG002", "PDG001"]
    assert f"fails the request's sender only where `{test}`" in found[0][1]
    assert "only on the ranks where" in found[1][1]


def test_a_deadline_in_a_while_loop_is_said_to_be_unmodelled() -> None:
    """pdguard cannot tell which requests a ``while`` loop reaches: PDG000 says so (it passed
    before)."""
    helper = (
        "\n    def _expire(self, agreed=None):\n"
        "        now = time.monotonic()\n"
        "        i = 0\n"
        "        while i < len(self.disagg_prefill_inflight_queue):\n"
        "            req = self.disagg_prefill_inflight_queue[i]\n"
        "            i += 1\n" + SPARE + "            if now - req.handed_over_at > LIMIT_S:\n"
        "                req.disagg_kv_sender.abort()\n"
    )
    found = findings(helper)
    assert "PDG000" in [code for code, _ in found]
    unmodelled = next(message for code, message in found if code == "PDG000")
    assert "a while loop" in unmodelled and "cannot tell" in unmodelled


def test_a_pp_skip_through_another_name_is_a_skip() -> None:
    """``agreed = rids_to_check`` then ``if agreed is not None: return``: the deadline never
    runs under PP (PDG001's PP message; it passed before)."""
    helper = expire().replace(
        "        now = time.monotonic()\n",
        "        given = agreed\n        if given is not None:\n            return\n"
        "        now = time.monotonic()\n",
    )
    found = findings(helper)
    assert [code for code, _ in found] == ["PDG001"]
    assert "skipped when rids_to_check is given" in found[0][1]


def test_a_helper_never_given_the_consensus_spares_nothing() -> None:
    """``self._expire()`` leaves ``agreed`` None, so its PP guard never runs: under PP it can
    fail a transfer this stage polls as ended (PDG002; it passed before)."""
    found = findings(expire(), call="        self._expire()\n")
    assert [code for code, _ in found] == ["PDG002"]
    assert "already polls as transferred" in found[0][1]


def test_a_comprehension_that_keeps_only_unended_transfers_spares_them() -> None:
    """The overdue list keeps a request only while its sender's poll is not ended: the
    second loop's abort spares ended transfers under PP (PDG002 reported it before)."""
    helper = """
    def _expire(self, agreed=None):
        now = time.monotonic()
        overdue = [
            req
            for req in self.disagg_prefill_inflight_queue
            if now - req.handed_over_at > LIMIT_S
            and (agreed is None or req.disagg_kv_sender.poll() not in (KVPoll.Success,))
        ]
        for req in overdue:
            req.disagg_kv_sender.abort()
"""
    assert findings(helper) == []


def test_ended_states_held_by_a_name_are_ended_states() -> None:
    """``ended = (KVPoll.Success, KVPoll.Failed)`` then ``poll() in ended``: the guard spares
    ended transfers as the literal does (PDG002 reported it before)."""
    helper = expire().replace(
        "        now = time.monotonic()\n",
        "        now = time.monotonic()\n        ended = (KVPoll.Success, KVPoll.Failed)\n",
    )
    helper = helper.replace(
        SPARE.split("poll() ")[1].split(":\n")[0] + ":",
        "in ended:",
    )
    assert "in ended:" in helper
    assert findings(helper) == []


# Stamps written in other styles: each is a stamp where the request enters the queue.
NOTE_HELPER = """
    def _note(self, r, at):
        r.handed_over_at = at
"""
CLOCK_METHOD = """
    def _clock(self):
        return time.monotonic()
"""


@pytest.mark.parametrize(
    ("stamp", "extra", "clock"),
    [
        ("            self._note(at=time.monotonic(), r=req)\n", NOTE_HELPER, ""),
        ("            self._note(req, time.monotonic())\n", NOTE_HELPER, ""),
        ("            req.handed_over_at = self._clock()\n", CLOCK_METHOD, "self._clock()"),
    ],
    ids=["helper-keywords-clock-argument", "helper-positional-clock-argument", "clock-method"],
)
def test_a_stamp_written_another_way_is_a_stamp(stamp: str, extra: str, clock: str) -> None:
    """A helper given the request and the clock reading (by keyword or position) stamps the
    request; a method that only returns a clock reading reads the clock, at the stamp and in
    the deadline (PDG001 reported these as unstamped or as no deadline before)."""
    helper = expire() + extra
    if clock:
        helper = helper.replace("now = time.monotonic()", f"now = {clock}")
    assert findings(helper, stamp=stamp) == []


def test_a_stamp_on_an_object_the_request_holds_is_a_stamp() -> None:
    """``req.timing.handed_over_at = time.monotonic()`` read as ``req.timing.handed_over_at``:
    a stamp at entry (PDG001 said unstamped, PDG003 'set before the request entered' before);
    rewritten while the request waits, it restarts the deadline (PDG003)."""
    stamp = STAMP.replace("req.handed_over_at", "req.timing.handed_over_at")
    helper = expire().replace("req.handed_over_at", "req.timing.handed_over_at")
    assert findings(helper, stamp=stamp) == []
    renewed = CALL + "        for req in self.disagg_prefill_inflight_queue:\n"
    renewed += "            req.timing.handed_over_at = time.monotonic()\n"
    found = findings(helper, stamp=stamp, call=renewed)
    assert [code for code, _ in found] == ["PDG003"]
    assert "is rewritten while the request waits" in found[0][1]


def test_a_deadline_skipped_only_on_an_empty_queue_runs_on_every_call() -> None:
    """An empty queue has no request to fail: a deadline behind ``if <the queue is not
    empty>:`` runs whenever one waits (PDG001 said 'not on every call' before). Any other
    guard still makes it conditional."""
    for guard in (
        "if self.disagg_prefill_inflight_queue:",
        "if len(self.disagg_prefill_inflight_queue) > 0:",
        "if len(self.disagg_prefill_inflight_queue) >= 1:",
    ):
        assert findings(expire(), call=f"        {guard}\n    {CALL}") == [], guard
    guard = "if self.disagg_prefill_inflight_queue[1:]:"
    found = findings(expire(), call=f"        {guard}\n    {CALL}")
    assert [code for code, _ in found] == ["PDG001"]
    assert "does not run before the poll all-reduce on every call" in found[0][1]


def test_requests_collected_then_failed_in_a_second_loop_are_failed() -> None:
    """The deadline loop collects overdue requests; a second loop over them aborts their
    senders (sparing ended transfers under PP): the deadline fails the sender (PDG002 'does
    not fail the request's sender' and PDG001 before)."""
    helper = """
    def _expire(self, agreed=None):
        now = time.monotonic()
        late = []
        for req in self.disagg_prefill_inflight_queue:
            if now - req.handed_over_at > LIMIT_S:
                late.append(req)
        for req in late:
            if agreed is not None and req.disagg_kv_sender.poll() == KVPoll.Success:
                continue
            req.disagg_kv_sender.abort()
"""
    assert findings(helper) == []
    # collected and never failed: still no deadline
    found = findings(helper.replace("req.disagg_kv_sender.abort()", "self.record(req)"))
    assert [code for code, _ in found] == ["PDG002", "PDG001"]
    assert "does not fail the request's sender" in found[0][1]


def test_a_name_the_deadline_reads_that_nothing_binds_is_reported() -> None:
    """A timeout reader the module never defines or imports: the deadline raises NameError on
    every call (check passed it before; simulate fails every scenario). Names the module,
    the method or builtins bind are not reported, nor annotations."""
    helper = expire().replace(
        "        now = time.monotonic()\n",
        "        limit = read_inflight_limit()\n        now = time.monotonic()\n",
    )
    found = findings(helper, codes=("PDG005",))
    assert found == [
        (
            "PDG005",
            "`read_inflight_limit` is used by the inflight deadline but nothing binds it "
            "(NameError when this runs)",
        )
    ]
    defined = helper.replace(
        "    def _expire(self, agreed=None):", "    def _expire(self: Toy, agreed=None):"
    )
    defined += "\n    def read_inflight_limit_unused(self):\n        return LIMIT_S\n"
    bound = findings(
        defined.replace("read_inflight_limit()", "len(KVPoll.__name__)"), codes=("PDG005",)
    )
    assert bound == []


def test_a_predicate_helper_given_the_clock_is_a_deadline_failed_where_it_is_called() -> None:
    """``if self._late(req, now):`` with ``def _late(self, r, t): return t - r.handed_over_at
    > LIMIT_S``: the comparison reads the clock through its parameter, and the loop that calls
    it aborts the sender (PDG001 'nothing fails a request' before). A call site that only
    logs is no deadline."""
    helper = expire().replace(
        "if now - req.handed_over_at > LIMIT_S:", "if self._late(req, now):"
    ) + ("\n    def _late(self, r, t):\n        return t - r.handed_over_at > LIMIT_S\n")
    assert findings(helper) == []
    logged = helper.replace("req.disagg_kv_sender.abort()", "self.note(req)")
    found = findings(logged)
    assert [code for code, _ in found] == ["PDG002", "PDG001"]
    assert "does not fail the request's sender" in found[0][1]


def test_an_unbound_name_in_the_method_calling_the_deadline_predicate_is_reported() -> None:
    """The comparison is in ``_late``; the loop that calls it reads a limit through a name
    nothing binds: the deadline dies there on every call (PDG005; it passed before)."""
    helper = expire().replace(
        "if now - req.handed_over_at > LIMIT_S:", "if self._late(req, now):"
    ).replace(
        "        now = time.monotonic()\n",
        "        now = time.monotonic()\n        settings.refresh()\n",
    ) + ("\n    def _late(self, r, t):\n        return t - r.handed_over_at > LIMIT_S\n")
    found = findings(helper, codes=("PDG005",))
    assert [code for code, _ in found] == ["PDG005"]
    assert "`settings` is used by the inflight deadline but nothing binds it" in found[0][1]


def test_a_deadline_on_an_attribute_never_stamped_at_entry_says_so() -> None:
    """The entry stamps a metric (``req.timing.queued_at``); the deadline reads
    ``handed_over_at``, which only it sets, at the first look: the finding names the
    attribute the deadline measures, not 'does not fail the sender'."""
    stamp = "            req.timing.queued_at = time.perf_counter()\n"
    lazy = "            if getattr(req, 'handed_over_at', None) is None:\n"
    lazy += "                req.handed_over_at = now\n                continue\n"
    found = findings(expire(body=lazy), stamp=stamp)
    assert [code for code, _ in found] == ["PDG001"]
    assert found[0][1].endswith(
        "the deadline measures `handed_over_at`, not stamped where requests enter "
        "disagg_prefill_inflight_queue"
    )


def test_a_failure_helper_that_acts_on_some_ranks_only_is_flagged() -> None:
    """``self._fail(req)`` whose abort is behind ``if self.tp_rank == 0:`` (PDG002 and PDG001;
    it passed before)."""
    helper = expire().replace("req.disagg_kv_sender.abort()", "self._fail(req)") + (
        "\n    def _fail(self, r):\n"
        "        if self.tp_rank == 0:\n"
        "            r.disagg_kv_sender.abort()\n"
    )
    found = findings(helper)
    assert [code for code, _ in found] == ["PDG002", "PDG001"]
    assert "only where `self.tp_rank == 0`" in found[0][1]


def test_a_loop_over_positions_that_passes_over_one_is_no_deadline() -> None:
    """``for i, req in enumerate(queue): if i == 0: continue``: the head of the queue is never
    checked (PDG001; it passed before)."""
    loop = "for i, req in enumerate(self.disagg_prefill_inflight_queue):"
    found = findings(expire(loop, body="            if i == 0:\n                continue\n"))
    assert [code for code, _ in found] == ["PDG001"]
    assert found[0][1].endswith(
        "the deadline skips requests of the queue: it loops over "
        "`enumerate(self.disagg_prefill_inflight_queue)` behind `i == 0`"
    )
