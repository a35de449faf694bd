"""PDG004's examples, literal code as Fixit's: each VALID tree must give no finding of the
rule, each ``Invalid`` exactly its findings (tests/checks/rules/test_examples.py). A string is
prefill.py; a dict maps relative paths to sources.

Looked up by ``Rule.VALID``/``Rule.INVALID`` (``pdguard.checks.rule``), by the rule's code."""

from __future__ import annotations

from pdguard.checks.rule import Invalid
from pdguard.sglang_names import BASE_CONN_PATH, NIXL_CONN_PATH

_BASE = """\
class KVPoll:
    Failed = 0
    Bootstrapping = 1


class BaseKVSender:
    def poll(self): ...
"""

VALID = (
    # init_time set at construction, checked while Bootstrapping
    {
        BASE_CONN_PATH: _BASE,
        NIXL_CONN_PATH: """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


class NixlKVSender(BaseKVSender):
    def __init__(self, mgr, room):
        self.kv_mgr = mgr
        self.kv_mgr.update_status(room, KVPoll.Bootstrapping)
        self.init_time = time.time()

    def poll(self):
        status = self.kv_mgr.check_status(self.room)
        if status == KVPoll.Bootstrapping:
            if time.time() - self.init_time > self.kv_mgr.bootstrap_timeout:
                return KVPoll.Failed
        return status
""",
    },
    # never reports Bootstrapping: nothing to time out
    {
        BASE_CONN_PATH: _BASE,
        NIXL_CONN_PATH: """\
import time
""",
    },
)

INVALID = (
    # no init_time and no check
    Invalid(
        {
            BASE_CONN_PATH: _BASE,
            NIXL_CONN_PATH: """\
from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


class NixlKVSender(BaseKVSender):
    def __init__(self, mgr, room):
        self.kv_mgr = mgr
        self.kv_mgr.update_status(room, KVPoll.Bootstrapping)

    def poll(self):
        status = self.kv_mgr.check_status(self.room)
        return status
""",
        },
        [
            (
                9,
                5,
                (
                    "NixlKVSender can stay in Bootstrapping forever: init_time is never set "
                    "to a time before or during Bootstrapping; poll() never compares the "
                    "time since init_time with a bootstrap timeout"
                ),
                NIXL_CONN_PATH,
            ),
        ],
    ),
    # init_time never set
    Invalid(
        {
            BASE_CONN_PATH: _BASE,
            NIXL_CONN_PATH: """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


class NixlKVSender(BaseKVSender):
    def __init__(self, mgr, room):
        self.kv_mgr.update_status(room, KVPoll.Bootstrapping)

    def poll(self):
        status = self.kv_mgr.check_status(self.room)
        if status == KVPoll.Bootstrapping:
            if time.time() - self.init_time > self.kv_mgr.bootstrap_timeout:
                return KVPoll.Failed
""",
        },
        [
            (
                10,
                5,
                (
                    "NixlKVSender can stay in Bootstrapping forever: init_time is never set "
                    "to a time before or during Bootstrapping"
                ),
                NIXL_CONN_PATH,
            ),
        ],
    ),
    # check never reached
    Invalid(
        {
            BASE_CONN_PATH: _BASE,
            NIXL_CONN_PATH: """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


class NixlKVSender(BaseKVSender):
    def __init__(self, mgr, room):
        self.kv_mgr.update_status(room, KVPoll.Bootstrapping)
        self.init_time = time.time()

    def poll(self):
        status = self.kv_mgr.check_status(self.room)
""",
        },
        [
            (
                11,
                5,
                (
                    "NixlKVSender can stay in Bootstrapping forever: poll() never compares "
                    "the time since init_time with a bootstrap timeout"
                ),
                NIXL_CONN_PATH,
            ),
        ],
    ),
    # init_time set only in init(), after Bootstrapping
    Invalid(
        {
            BASE_CONN_PATH: _BASE,
            NIXL_CONN_PATH: """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


class NixlKVSender(BaseKVSender):
    def __init__(self, mgr, room):
        self.kv_mgr.update_status(room, KVPoll.Bootstrapping)
        self.init_time = None

    def init(self, n):
        self.init_time = time.time()

    def poll(self):
        status = self.kv_mgr.check_status(self.room)
        if status == KVPoll.Bootstrapping:
            if time.time() - self.init_time > self.kv_mgr.bootstrap_timeout:
                return KVPoll.Failed
""",
        },
        [
            (
                14,
                5,
                (
                    "NixlKVSender can stay in Bootstrapping forever: init_time is None "
                    "while Bootstrapping (set only later, if at all)"
                ),
                NIXL_CONN_PATH,
            ),
        ],
    ),
    # the timeout only logs: nothing fails the sender
    Invalid(
        {
            BASE_CONN_PATH: _BASE,
            NIXL_CONN_PATH: """\
import time

from sglang.srt.disaggregation.base.conn import BaseKVSender, KVPoll


class NixlKVSender(BaseKVSender):
    def __init__(self, mgr, room):
        self.kv_mgr.update_status(room, KVPoll.Bootstrapping)
        self.init_time = time.time()

    def poll(self):
        status = self.kv_mgr.check_status(self.room)
        if status == KVPoll.Bootstrapping:
            if time.time() - self.init_time > self.kv_mgr.bootstrap_timeout:
                print("still bootstrapping")
""",
        },
        [
            (
                11,
                5,
                (
                    "NixlKVSender can stay in Bootstrapping forever: poll()'s test of the "
                    "time since init_time (line 14) reports no Failed when the timeout "
                    "expires"
                ),
                NIXL_CONN_PATH,
            ),
        ],
    ),
)
