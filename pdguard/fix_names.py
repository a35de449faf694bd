"""pdguard's own vocabulary: the name of each fix (its marker says it) and the names the fixes
write into the target (a helper method, a stamp attribute, a module setting).

A leaf module, as ``sglang_names`` is for SGLang's names: the fix modules declare their identity
from it, and the codemods, which a fix runs, write the same names without importing the fix
(data flows one way: fixes -> codemods).
"""

from __future__ import annotations

import re

MARKER_PREFIX = "# pdguard: "


def marker(name: str) -> str:
    """The comment every piece of code a fix writes carries: how a second run finds it."""
    return f"{MARKER_PREFIX}{name}"


def has_marker(code: str, name: str) -> bool:
    return marker(name) in code


# A marker comment as the codemods write it: a line of its own, either the marker alone
# (``# pdguard: sender-abort``, deleted) or leading a comment (``# pdguard: sender-abort: once
# aborted, ...``, which keeps ``# Once aborted, ...``).
_MARKER_LINE = re.compile(
    rf"^(?P<indent>[ \t]*){re.escape(MARKER_PREFIX)}(?P<name>[a-z][a-z-]*)(?::[ ]?(?P<rest>.*))?"
    r"(?P<end>\r?\n|$)",
    re.MULTILINE,
)


def is_marker_line(line: str) -> bool:
    """Whether ``line`` is a marker comment of one of pdguard's fixes, as the codemods write it."""
    match = _MARKER_LINE.match(line)
    return match is not None and match["name"] in FIX_NAMES


def unmark(text: str, original: str) -> str:
    """``text`` (a fix's result) without the marker comments of the fixes whose marker
    ``original`` does not hold: the marker-free code ``apply --no-markers`` writes, which later
    runs recognise by what it does (``upstream``). A comment the marker led keeps its words,
    its first letter capitalised where the first word is a plain word (not ``poll()``)."""

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in FIX_NAMES or has_marker(original, name):
            return match[0]
        rest = match["rest"]
        if not rest:
            return ""
        first, _, tail = rest.partition(" ")
        if first.isalpha() and first.islower():
            rest = f"{first[0].upper()}{first[1:]} {tail}".rstrip()
        return f"{match['indent']}# {rest}{match['end']}"

    return _MARKER_LINE.sub(replace, text)


INFLIGHT_DEADLINE = "inflight-deadline"
SENDER_BOOTSTRAP_TIMEOUT = "sender-bootstrap-timeout"
SENDER_ABORT = "sender-abort"

# inflight-deadline writes these into prefill.py.
INFLIGHT_HELPER = "_fail_timed_out_inflight_reqs"
INFLIGHT_STAMP = "inflight_queue_entry_time"
# Where the release has no env registry entry for its timeouts (before 0.5.8): the reader.
INFLIGHT_TIMEOUT_READER = "_get_inflight_timeout"
# How inflight-deadline reads its timeout: an env registry entry (environ.py, envs.X.get()), or
# the release's get_int_env_var in that reader.
ENV_REGISTRY = "registry"
ENV_GET_INT = "get_int_env_var"

RECEIVER_WAITING_TIMEOUT = "receiver-waiting-timeout"
DECODE_QUEUE_BOUND = "decode-queue-bound"

# receiver-waiting-timeout writes this attribute into each receiver it fixes.
RECEIVER_WAITING_TIMEOUT_ATTR = "waiting_timeout"
# decode-queue-bound writes these into decode.py.
DECODE_PENDING_STAMP = "pending_since"  # on a DecodeRequest: first time it was put back
DECODE_GATE_FLAG = "retracted_waiting"  # in process_decode_queue: the retraction gate's verdict
# on the prealloc queue, called by process_decode_queue on every step before its retraction gate:
# while retracted requests wait, resolves and bounds pending_reqs and delivers the failures
DECODE_POLL_PENDING = "poll_pending_reqs"

# Every fix's name, as its marker writes it (the registry, ``fixes.FIXES``, holds one of each).
FIX_NAMES = frozenset(
    {
        INFLIGHT_DEADLINE,
        SENDER_BOOTSTRAP_TIMEOUT,
        SENDER_ABORT,
        RECEIVER_WAITING_TIMEOUT,
        DECODE_QUEUE_BOUND,
    }
)
