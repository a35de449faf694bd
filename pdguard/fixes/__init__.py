"""pdguard's fixes: one module each (its name, marker, summary, the rules that prove it, its
``plan``), with its codemod in ``codemods/``. ``FIXES`` is the one registry: ``apply``, ``verify``,
``carry`` and the command line's help all read it.

Adding a fix: its codemod in ``codemods/``, its module here (a ``Fix`` subclass), and one line
in ``FIXES``.
"""

from __future__ import annotations

from .base import Fix, Outcome, Status
from .decode_queue_bound import DecodeQueueBoundFix
from .inflight_deadline import InflightDeadline
from .receiver_waiting_timeout import ReceiverWaitingTimeoutFix
from .sender_abort import SenderAbortFix
from .sender_bootstrap_timeout import SenderBootstrapTimeoutFix

FIXES: tuple[Fix, ...] = (
    # The fixes that change sender classes first, so that each refusal names the line it
    # read on disk; then inflight-deadline, which fails senders with abort() and needs every
    # sender's poll() to honour it (sender-abort).
    SenderBootstrapTimeoutFix(),
    SenderAbortFix(),
    InflightDeadline(),
    ReceiverWaitingTimeoutFix(),
    DecodeQueueBoundFix(),
)

__all__ = ["FIXES", "Fix", "Outcome", "Status"]
