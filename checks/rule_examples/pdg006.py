"""PDG006's examples, literal code as Fixit's: each VALID tree must give no finding of the
rule, each ``Invalid`` exactly its findings (tests/checks/rules/test_examples.py). A string is
prefill.py; a dict maps relative paths to sources.

Looked up by ``Rule.VALID``/``Rule.INVALID`` (``pdguard.checks.rule``), by the rule's code."""

from __future__ import annotations

from pdguard.checks.rule import Invalid
from pdguard.sglang_names import BASE_CONN_PATH, DISAGGREGATION_DIR, NIXL_CONN_PATH

_BASE = """\
from abc import ABC, abstractmethod


class KVPoll:
    Failed, Bootstrapping, WaitingForInput, Transferring, Success = range(5)


class BaseKVReceiver(ABC):
    @abstractmethod
    def init(self, kv_indices, aux_index=None): ...

    @abstractmethod
    def poll(self): ...
"""

_FAKE = """\
from sglang.srt.disaggregation.base.conn import BaseKVReceiver, KVPoll


class FakeKVReceiver(BaseKVReceiver):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room=None):
        self.indices_given = False

    def init(self, kv_indices, aux_index=None):
        self.indices_given = True

    def poll(self):
        if not self.indices_given:
            return KVPoll.WaitingForInput
        return KVPoll.Success
"""

# 0.4.8.post1 - 0.5.2 NIXL: no clock, no Failed path.
_NO_FAILED = """\
from sglang.srt.disaggregation.base.conn import BaseKVReceiver, KVPoll


class NixlKVReceiver(BaseKVReceiver):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room=None):
        self.kv_mgr = mgr
        self.indices_out = False

    def init(self, kv_indices, aux_index=None):
        self.indices_out = True

    def poll(self):
        if self.indices_out and self.kv_mgr.check_transfer_done():
            return KVPoll.Success
        return KVPoll.WaitingForInput
"""

VALID = (
    # stamped when the indices are sent, failed once the timeout passed
    {
        BASE_CONN_PATH: _BASE,
        NIXL_CONN_PATH: """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVReceiver, KVPoll


class NixlKVReceiver(BaseKVReceiver):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room=None):
        self.conclude_state = None
        self.kv_mgr.update_status(self.room, KVPoll.WaitingForInput)

    def init(self, kv_indices, aux_index=None):
        self.kv_mgr.send(self.room, kv_indices)
        self.init_time = time.time()

    def poll(self):
        if self.conclude_state is not None:  # Success or Failed, kept
            return self.conclude_state
        current = self.kv_mgr.check_status(self.room)
        if current in (KVPoll.Success, KVPoll.Failed):
            self.conclude_state = current
        elif current == KVPoll.WaitingForInput and self.init_time is not None:
            if time.time() - self.init_time > TIMEOUT:
                self.conclude_state = KVPoll.Failed
                return KVPoll.Failed
        return current
""",
    },
    # the same check in a helper, with other names and a monotonic clock
    {
        BASE_CONN_PATH: _BASE,
        NIXL_CONN_PATH: """\
import time
""",
    },
    # always terminal once init() ran
    {
        BASE_CONN_PATH: _BASE,
        f"{DISAGGREGATION_DIR}/fake/conn.py": _FAKE,
    },
)

INVALID = (
    # no waiting timeout
    Invalid(
        {
            BASE_CONN_PATH: _BASE,
            NIXL_CONN_PATH: """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVReceiver, KVPoll


class NixlKVReceiver(BaseKVReceiver):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room=None):
        self.kv_mgr.update_status(self.room, KVPoll.WaitingForInput)

    def init(self, kv_indices, aux_index=None):
        self.init_time = time.time()

    def poll(self):
        current = self.kv_mgr.check_status(self.room)
        return current
""",
        },
        [
            (
                13,
                5,
                (
                    "NixlKVReceiver can wait forever after its KV indices were sent to the "
                    "prefill: poll() can return WaitingForInput with no waiting timeout "
                    "that can fire"
                ),
                NIXL_CONN_PATH,
            ),
        ],
    ),
    # init_time stays None: the check never fires
    Invalid(
        {
            BASE_CONN_PATH: _BASE,
            NIXL_CONN_PATH: """\
from sglang.srt.disaggregation.base.conn import BaseKVReceiver, KVPoll


class NixlKVReceiver(BaseKVReceiver):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room=None):
        self.kv_mgr.update_status(self.room, KVPoll.WaitingForInput)

    def init(self, kv_indices, aux_index=None):
        self.kv_mgr.send(self.room, kv_indices)

    def poll(self):
        current = self.kv_mgr.check_status(self.room)
        return current
""",
        },
        [
            (
                11,
                5,
                (
                    "NixlKVReceiver can wait forever after its KV indices were sent to the "
                    "prefill: poll() can return WaitingForInput with no waiting timeout "
                    "that can fire"
                ),
                NIXL_CONN_PATH,
            ),
        ],
    ),
    # expired, but nothing fails
    Invalid(
        {
            BASE_CONN_PATH: _BASE,
            NIXL_CONN_PATH: """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVReceiver, KVPoll


class NixlKVReceiver(BaseKVReceiver):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room=None):
        self.kv_mgr.update_status(self.room, KVPoll.WaitingForInput)

    def init(self, kv_indices, aux_index=None):
        self.init_time = time.time()

    def poll(self):
        current = self.kv_mgr.check_status(self.room)
        if current in (KVPoll.Success, KVPoll.Failed):
            if time.time() - self.init_time > TIMEOUT:
                pass
        return current
""",
        },
        [
            (
                13,
                5,
                (
                    "NixlKVReceiver can wait forever after its KV indices were sent to the "
                    "prefill: poll() can return WaitingForInput with no waiting timeout "
                    "that can fire"
                ),
                NIXL_CONN_PATH,
            ),
        ],
    ),
    # a helper whose test is inverted: it fails nothing once expired
    Invalid(
        {
            BASE_CONN_PATH: _BASE,
            NIXL_CONN_PATH: """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVReceiver, KVPoll


class NixlKVReceiver(BaseKVReceiver):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room=None):
        self.kv_mgr.update_status(self.room, KVPoll.WaitingForInput)

    def init(self, kv_indices, aux_index=None):
        self.init_time = time.monotonic()

    def poll(self):
        current = self.kv_mgr.check_status(self.room)
        return current
""",
        },
        [
            (
                13,
                5,
                (
                    "NixlKVReceiver can wait forever after its KV indices were sent to the "
                    "prefill: poll() can return WaitingForInput with no waiting timeout "
                    "that can fire"
                ),
                NIXL_CONN_PATH,
            ),
        ],
    ),
    # a time.time() stamp read on time.monotonic(): no elapsed time, nothing fires
    Invalid(
        {
            BASE_CONN_PATH: _BASE,
            NIXL_CONN_PATH: """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVReceiver, KVPoll


class NixlKVReceiver(BaseKVReceiver):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room=None):
        self.kv_mgr.update_status(self.room, KVPoll.WaitingForInput)

    def init(self, kv_indices, aux_index=None):
        self.init_time = time.time()

    def poll(self):
        current = self.kv_mgr.check_status(self.room)
        return current
""",
        },
        [
            (
                13,
                5,
                (
                    "NixlKVReceiver can wait forever after its KV indices were sent to the "
                    "prefill: poll() can return WaitingForInput with no waiting timeout "
                    "that can fire"
                ),
                NIXL_CONN_PATH,
            ),
        ],
    ),
    # the clock started in the constructor: it also counts the wait for decode memory
    Invalid(
        {
            BASE_CONN_PATH: _BASE,
            NIXL_CONN_PATH: """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVReceiver, KVPoll


class NixlKVReceiver(BaseKVReceiver):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room=None):
        self.init_time = time.time()

    def init(self, kv_indices, aux_index=None):
        self.kv_mgr.send(self.room, kv_indices)

    def poll(self):
        if current in (KVPoll.Success, KVPoll.Failed):
            if time.time() - self.init_time > TIMEOUT:
                self.conclude_state = KVPoll.Failed
""",
        },
        [
            (
                13,
                5,
                (
                    "NixlKVReceiver bounds its wait for the prefill on the wrong clock: its "
                    "waiting timeout counts from before the indices were sent, so it also "
                    "fails requests that only wait for decode memory"
                ),
                NIXL_CONN_PATH,
            ),
        ],
    ),
    # NIXL as in 0.4.8.post1 - 0.5.2: no clock, no Failed path
    Invalid(
        {
            BASE_CONN_PATH: _BASE,
            NIXL_CONN_PATH: _NO_FAILED,
        },
        [
            (
                12,
                5,
                (
                    "NixlKVReceiver can wait forever after its KV indices were sent to the "
                    "prefill: poll() can return WaitingForInput with no waiting timeout "
                    "that can fire; poll() never returns Failed"
                ),
                NIXL_CONN_PATH,
            ),
        ],
    ),
)
