"""Hand-written, SGLang-shaped ``prefill.py`` snippets that tests build variants from.

``prefill()`` fills the holes of one skeleton, so each test shows only what it is about. The
rules' own VALID/INVALID examples are literal code in each rule's class (as Fixit's), not
built from here.
"""

from __future__ import annotations

_SKELETON = """\
import logging
{imports}
from sglang.srt.disaggregation.base import KVPoll
from sglang.srt.disaggregation.utils import poll_and_all_reduce

logger = logging.getLogger(__name__)
TIMEOUT = 300.0


class SchedulerDisaggregationPrefillMixin:
    def process_batch_result_disagg_prefill(self, batch):
        for req in batch.reqs:
{stamp}            self.disagg_prefill_inflight_queue.append(req)
{helper}
    def process_disagg_prefill_inflight_queue(self):
        if not self.disagg_prefill_inflight_queue:
            return []
{before}        senders = [r.disagg_kv_sender for r in self.disagg_prefill_inflight_queue]
        states = poll_and_all_reduce(senders, self.tp_cpu_group)
        finished = []
        waiting = []
        # each rank takes the branch the reduced state picks
        for req, state in zip(self.disagg_prefill_inflight_queue, states):
{after}            if state in (KVPoll.WaitingForInput, KVPoll.Transferring):
{keep}                waiting.append(req)
            elif state in (KVPoll.Success, KVPoll.Failed):
                finished.append(req)
        self.disagg_prefill_inflight_queue = waiting
        return finished
"""

# The stamp where requests enter the inflight queue: at every entry, so that a request that
# left the queue and comes back starts a fresh deadline.
STAMP_AT_ENTRY = """\
            # a fresh deadline at every entry
            req.entered_at = time.monotonic()
"""
# The stamp kept from a request's first entry: right only where no request leaves the queue
# and comes back.
STAMP_ONCE = """\
            if getattr(req, "entered_at", None) is None:
                req.entered_at = time.monotonic()
"""

# A method that sends a request back to an earlier queue (optimistic prefill's requeue), from
# where it enters the inflight queue again.
SEND_BACK = """
    def release_and_requeue(self, req):
        req.reset_for_retract()
        self.waiting_queue.insert(0, req)
"""

# A helper that fails overdue senders, and its call before the poll all-reduce.
HELPER = """
    def _expire_inflight(self):
        now = time.monotonic()
        for req in self.disagg_prefill_inflight_queue:
            if now - req.entered_at > TIMEOUT:
                req.disagg_kv_sender.abort()
"""
# Pipeline parallelism: the inflight function takes the stages' consensus (a ``str.replace`` on
# what ``prefill()`` gives).
PP_SIGNATURE = (
    "def process_disagg_prefill_inflight_queue(self):",
    "def process_disagg_prefill_inflight_queue(self, rids_to_check=None):",
)
CALL_HELPER = """\
        self._expire_inflight()
"""

# The same deadline, inline, with other names (read on the stamp's clock: a time.time() now
# against a time.monotonic() stamp never expires).
INLINE_DEADLINE = """\
        deadline_now = time.monotonic()
        for pending in self.disagg_prefill_inflight_queue:
            waited = deadline_now - pending.entered_at
            if waited >= TIMEOUT:
                sender = pending.disagg_kv_sender
                sender.abort()
"""


def prefill(
    *,
    imports: str = "import time\n",
    stamp: str = "",
    helper: str = "",
    before: str = "",
    after: str = "",
    keep: str = "",
) -> str:
    return _SKELETON.format(
        imports=imports, stamp=stamp, helper=helper, before=before, after=after, keep=keep
    )


PATCHED = prefill(stamp=STAMP_ONCE, helper=HELPER, before=CALL_HELPER)
