"""``SenderBootstrapTimeout`` on hand-written sender snippets shaped like SGLang's releases."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest
from libcst.codemod import CodemodContext, CodemodTest

from pdguard.codemods.anchors import AnchorError
from pdguard.codemods.sender_bootstrap_timeout import SenderBootstrapTimeout, black_assignment

# The generated lines that are, word for word, the release's own: the helper call as the
# release's Mooncake sender makes it, and the timeout read as the release reads it (the test
# passes that reading in). The expected outputs below name them by placeholder (``_expect``).
# own-words: pdguard's patch reuses the release's names so that a maintainer would merge it.
GENERATED = {
    "<helper call>": (
        "timeout_result = self._check_bootstrap_timeout()",
        "if timeout_result is not None:",
        "    return timeout_result",
    ),
    "<timeout read>": (
        "self.bootstrap_timeout = get_int_env_var(",
        '    "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 30',
        ")",
    ),
}


def _expect(snippet: str) -> str:
    """``snippet`` with each placeholder line of GENERATED replaced by its lines, indented as
    the placeholder is."""
    out: list[str] = []
    for line in snippet.splitlines(keepends=True):
        block = GENERATED.get(line.strip())
        if block is None:
            out.append(line)
        else:
            indent = line[: len(line) - len(line.lstrip())]
            out.extend(f"{indent}{generated}\n" for generated in block)
    return "".join(out)


def test_expect_fills_in_the_placeholders_at_their_indentation() -> None:
    filled = _expect("a\n    <helper call>\nb\n")
    assert filled.splitlines() == [
        "a",
        "    timeout_result = self._check_bootstrap_timeout()",
        "    if timeout_result is not None:",
        "        return timeout_result",
        "b",
    ]


class TestSenderBootstrapTimeout(CodemodTest):
    TRANSFORM = SenderBootstrapTimeout

    def test_helper_release_sets_init_time_after_super_and_calls_the_helper(self) -> None:
        # 0.5.13 - 0.5.17: CommonKVSender has _check_bootstrap_timeout, init_time = None.
        before = """
            import time

            from sglang.srt.disaggregation.common.conn import CommonKVSender


            class NixlKVSender(CommonKVSender):
                def __init__(self, mgr, addr, room):
                    super().__init__(mgr, addr, room)
                    self.chunks_sent = 0

                def poll(self) -> KVPoll:
                    # the manager's status, unless a send has already failed
                    if self.send_error is not None:
                        return KVPoll.Failed
                    phase = self.kv_mgr.check_status(self.bootstrap_room)
                    return phase
        """
        after = """
            import time

            from sglang.srt.disaggregation.common.conn import CommonKVSender


            class NixlKVSender(CommonKVSender):
                def __init__(self, mgr, addr, room):
                    super().__init__(mgr, addr, room)
                    # pdguard: sender-bootstrap-timeout: the bootstrap timeout counts from here.
                    self.init_time = time.time()
                    self.chunks_sent = 0

                def poll(self) -> KVPoll:
                    # the manager's status, unless a send has already failed
                    if self.send_error is not None:
                        return KVPoll.Failed
                    phase = self.kv_mgr.check_status(self.bootstrap_room)
                    # pdguard: sender-bootstrap-timeout
                    if phase == KVPoll.Bootstrapping:
                        <helper call>
                    return phase
        """
        self.assertCodemod(before, _expect(after), class_name="NixlKVSender")

    def test_inline_release_reads_the_timeout_and_wraps_the_returned_status(self) -> None:
        # 0.4.7 - 0.5.2: no helper, no super().__init__, no `import time`, timeout read in the
        # release through get_int_env_var (imported here by the codemod, in isort order).
        before = """
            import logging
            import threading

            from sglang.srt.utils import get_local_ip_by_remote


            class NixlKVSender(BaseKVSender):
                def __init__(self, mgr, addr, room):
                    self.kv_mgr, self.bootstrap_room = mgr, room
                    mgr.update_status(room, KVPoll.Bootstrapping)
                    # what the transfer engine has been handed so far
                    self.chunks_sent = 0

                def poll(self) -> KVPoll:
                    if self.handed_over:
                        return self.transfer_state()
                    return self.kv_mgr.check_status(self.bootstrap_room)
        """
        after = """
            import logging
            import threading
            import time

            from sglang.srt.utils import get_int_env_var, get_local_ip_by_remote


            class NixlKVSender(BaseKVSender):
                def __init__(self, mgr, addr, room):
                    self.kv_mgr, self.bootstrap_room = mgr, room
                    mgr.update_status(room, KVPoll.Bootstrapping)
                    # pdguard: sender-bootstrap-timeout: the bootstrap timeout counts from here.
                    self.init_time = time.time()
                    <timeout read>
                    # what the transfer engine has been handed so far
                    self.chunks_sent = 0

                def poll(self) -> KVPoll:
                    if self.handed_over:
                        return self.transfer_state()
                    status = self.kv_mgr.check_status(self.bootstrap_room)
                    # pdguard: sender-bootstrap-timeout
                    if status == KVPoll.Bootstrapping and self.init_time is not None:
                        elapsed = time.time() - self.init_time
                        if elapsed >= self.bootstrap_timeout:
                            logger.warning_once(
                                "Requests timed out bootstrapping: decode never sent "
                                "this prefill instance their KV indices. If a longer "
                                "time to first token is acceptable, raise the timeout: "
                                "'export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600'."
                            )
                            self.conclude_state = KVPoll.Failed
                            return KVPoll.Failed
                    return status
        """
        self.assertCodemod(
            before,
            _expect(after),
            class_name="NixlKVSender",
            check_style="inline",
            timeout="self.bootstrap_timeout",
            timeout_setting='get_int_env_var("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 30)',
            record_failure=False,
            imports=["sglang.srt.utils:get_int_env_var"],
        )

    def test_inline_check_records_the_failure_where_the_manager_can(self) -> None:
        before = """
            import time


            class NixlKVSender(CommonKVSender):
                def __init__(self, mgr):
                    super().__init__(mgr)

                def poll(self) -> KVPoll:
                    state = self.kv_mgr.check_status(self.bootstrap_room)
                    return state
        """
        out = _patch(before, check_style="inline", set_init_time=False)
        assert "if state == KVPoll.Bootstrapping and self.init_time is not None:" in out
        assert "if elapsed >= self.kv_mgr.bootstrap_timeout:" in out
        assert "self.kv_mgr.record_failure(" in out
        assert 'f"{elapsed:.1f}s in KVPoll.Bootstrapping",' in out

    def test_init_time_none_becomes_the_construction_time(self) -> None:
        # Mooncake 0.4.7 - 0.4.8: init_time only set in init(), after Bootstrapping.
        before = """
            import time


            class MooncakeKVSender(BaseKVSender):
                def __init__(self, mgr, addr, room):
                    self.kv_mgr, self.bootstrap_room = mgr, room
                    self.init_time = None
                    self.indices_left = None

                def init(self, num_kv_indices):
                    self.indices_left = num_kv_indices
                    self.init_time = time.time()
        """
        after = """
            import time


            class MooncakeKVSender(BaseKVSender):
                def __init__(self, mgr, addr, room):
                    self.kv_mgr, self.bootstrap_room = mgr, room
                    # pdguard: sender-bootstrap-timeout: the bootstrap timeout counts from here.
                    self.init_time = time.time()
                    self.indices_left = None

                def init(self, num_kv_indices):
                    self.indices_left = num_kv_indices
        """
        # init() no longer restarts the clock, as in 0.4.8.post1
        self.assertCodemod(before, after, class_name="MooncakeKVSender", add_check=False)

    def test_only_the_named_class_is_touched(self) -> None:
        before = """
            import time


            class A(BaseKVSender):
                def __init__(self):
                    self.init_time = None


            class B(BaseKVSender):
                def __init__(self):
                    self.init_time = None
        """
        out = _patch(before, class_name="B", add_check=False)
        assert out.count("self.init_time = None") == 1
        assert out.index("self.init_time = None") < out.index("class B")


@pytest.mark.parametrize(
    "poll_body",
    [
        "        return KVPoll.WaitingForInput\n",
        "        a = self.kv_mgr.check_status(1)\n        return self.kv_mgr.check_status(2)\n",
    ],
)
def test_poll_that_does_not_read_the_status_once_is_refused(poll_body: str) -> None:
    src = f"class NixlKVSender:\n    def poll(self):\n{poll_body}"
    with pytest.raises(AnchorError, match="check_status"):
        _patch(src, set_init_time=False)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            "envs.SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT.get()",
            "x = envs.SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT.get()\n",
        ),
        (
            'get_int_env_var(\n    "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 300\n)',
            'x = get_int_env_var("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 300)\n',
        ),
    ],
)
def test_black_assignment_fits_on_one_line(value: str, expected: str) -> None:
    assert black_assignment("x", value, indent=8) == expected


def test_black_assignment_splits_like_black() -> None:
    import black

    value = 'get_int_env_var("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 300)'
    for target in ("self.bootstrap_timeout", "self.a_much_longer_attribute_name_for_the_timeout"):
        code = black_assignment(target, value, indent=0)
        assert black.format_str(code, mode=black.Mode(line_length=88)) == code


def _patch(src: str, class_name: str = "NixlKVSender", **kwargs) -> str:
    codemod = SenderBootstrapTimeout(CodemodContext(), class_name=class_name, **kwargs)
    return codemod.transform_module(cst.parse_module(textwrap.dedent(src))).code


def test_a_default_below_upstreams_is_raised_and_marked() -> None:
    """0.4.7 - 0.4.8: 30 s while the clock now starts at the sender's creation; upstream raised
    it to 120 s when it made the same change (0.4.8.post1), then to 300 s (0.4.9.post1)."""
    from pdguard.codemods.sender_bootstrap_timeout import RaiseBootstrapTimeoutDefault

    src = (
        "class QuillKVManager:\n"
        "    def __init__(self):\n"
        "        self.bootstrap_time_out = get_int_env_var(\n"
        '            "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 30\n'
        "        )\n"
        '        self.other = get_int_env_var("SGLANG_OTHER", 30)\n'
    )
    codemod = RaiseBootstrapTimeoutDefault(
        CodemodContext(), "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"
    )
    out = codemod.transform_module(cst.parse_module(src)).code
    assert codemod.raised == 1
    assert '"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 300\n' in out
    assert '"SGLANG_OTHER", 30' in out
    assert "        # pdguard: sender-bootstrap-timeout: the clock now starts" in out
    # a default at or above upstream's is left alone
    again = RaiseBootstrapTimeoutDefault(
        CodemodContext(), "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"
    )
    assert again.transform_module(cst.parse_module(out)).code == out and again.raised == 0


@pytest.mark.parametrize(
    ("line", "raises"),
    [
        ('x = get_int_env_var("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 30)', True),
        ('x = read_setting("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 0x1E)', True),
        ('x = get_int_env_var(name="SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", default=45)', True),
        ('x = get_int_env_var("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 120)', True),
        ('x = get_int_env_var("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 300)', False),
        ('x = get_int_env_var("SGLANG_OTHER_TIMEOUT", 30)', False),
        ('x = get_int_env_var("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 30, 1)', False),
        ('x = get_int_env_var("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", True)', False),
        ('x = os.environ.get("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT")', False),
    ],
)
def test_the_ast_prefilter_holds_for_every_module_the_transform_changes(
    line: str, raises: bool
) -> None:
    """``may_raise_default`` lets the fix skip a module without parsing it with LibCST: it must
    be true of every module the transform changes (and is false here where it does not)."""
    import ast

    from pdguard.codemods.sender_bootstrap_timeout import (
        RaiseBootstrapTimeoutDefault,
        may_raise_default,
    )

    src = f"def settings():\n    {line}\n    return x\n"
    codemod = RaiseBootstrapTimeoutDefault(
        CodemodContext(), "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"
    )
    changed = codemod.transform_module(cst.parse_module(src)).code != src
    assert changed == raises
    env = "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"
    assert may_raise_default(ast.parse(src), env, src) == raises


@pytest.mark.parametrize(
    "src",
    [
        'x = get_int_env_var(\n    "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT",\n    30,\n)\n',
        '@lru(get_int_env_var("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 30))\ndef f():\n'
        "    return 1\n",
        'if get_int_env_var("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 30) > 5:\n    pass\n',
        'try:\n    pass\nexcept get_int_env_var("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 30):\n'
        "    pass\n",
    ],
)
def test_the_prefilter_reads_every_statement_on_a_line_naming_the_variable(src: str) -> None:
    """Only statements on a line that names the variable are read: the call may span lines,
    sit in a decorator, a compound statement's header or an ``except`` clause."""
    import ast

    from pdguard.codemods.sender_bootstrap_timeout import may_raise_default

    env = "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"
    assert may_raise_default(ast.parse(src), env, src)
    other = src.replace(env, "SGLANG_SOMETHING_ELSE")
    assert not may_raise_default(ast.parse(other), env, other)


# A handle sender with no timeout of its own (as NIXL's up to 0.5.11), for running the code.
_RELAY = """\
import logging
import time

from relay.base import KVPoll

logger = logging.getLogger(__name__)


class RelayKVSender:
    def __init__(self, mgr, room):
        self.kv_mgr, self.bootstrap_room = mgr, room
        self.handed_over = False

    def poll(self):
        if not self.handed_over:
            return self.kv_mgr.check_status(self.bootstrap_room)
        return KVPoll.Success
"""


def test_the_inline_timeout_is_latched_logged_once_and_says_why(monkeypatch, caplog) -> None:
    """The inline check, with sender-abort's concluded state: once timed out the sender stays
    Failed although decode's info arrives late (the status turns WaitingForInput); the hint is
    logged once for any number of senders; the reason is recorded for the client."""
    import logging
    import types

    from pdguard.codemods.sender_abort import SenderAbort

    module = cst.parse_module(_RELAY)
    for codemod in (
        SenderBootstrapTimeout(CodemodContext(), class_name="RelayKVSender", check_style="inline"),
        SenderAbort(CodemodContext(), class_name="RelayKVSender"),
    ):
        module = codemod.transform_module(module)
    kvpoll = types.SimpleNamespace(
        Failed=0, Bootstrapping=1, WaitingForInput=2, Transferring=3, Success=4
    )
    now = [1000.0]
    clock = types.SimpleNamespace(time=lambda: now[0])
    seen: set[str] = set()

    def warning_once(self: logging.Logger, message: str) -> None:
        if message not in seen:
            seen.add(message)
            self.warning(message)

    monkeypatch.setattr(logging.Logger, "warning_once", warning_once, raising=False)
    namespace: dict[str, object] = {"KVPoll": kvpoll}
    code = module.code.replace("from relay.base import KVPoll\n", "")
    exec(compile(code, "relay", "exec"), namespace)
    namespace["time"] = clock
    status = {7: kvpoll.Bootstrapping, 8: kvpoll.Bootstrapping}
    records: dict[int, str] = {}
    manager = types.SimpleNamespace(
        check_status=status.__getitem__,
        bootstrap_timeout=30,
        record_failure=records.__setitem__,
    )
    senders = [namespace["RelayKVSender"](manager, room) for room in (7, 8)]  # type: ignore[operator]
    assert [s.poll() for s in senders] == [kvpoll.Bootstrapping] * 2
    now[0] += 30.0
    with caplog.at_level(logging.WARNING):
        assert [s.poll() for s in senders] == [kvpoll.Failed] * 2
    status[7] = kvpoll.WaitingForInput  # decode's info, late
    assert senders[0].poll() == kvpoll.Failed
    assert caplog.text.count("export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600") == 1
    assert records[7] == "Request 7 timed out after 30.0s in KVPoll.Bootstrapping"


_QUEUE = """\
class ToyBootstrapQueue:
    def pop_bootstrapped(self, rids_to_check=None):
        popped, failed = [], []
        polls = [req.sender.poll() for req in self.queue]
        for req, poll in zip(self.queue, polls):
            if rids_to_check is not None:
                agreed = rids_to_check
                if req.rid not in agreed:
                    continue
                assert poll == KVPoll.WaitingForInput or poll == KVPoll.Failed
            if poll == KVPoll.Bootstrapping:
                continue
            (failed if poll == KVPoll.Failed else popped).append(req)
        return popped, failed
"""


def test_a_later_pp_stage_fails_what_it_still_polls_bootstrapping_instead_of_asserting() -> None:
    """PP (0.5.2 - 0.5.6): the stage before timed a bootstrap out on its own clock and passed
    the request on; this stage still polls it Bootstrapping. It fails it too (no assert)."""
    import types

    from pdguard.codemods.sender_bootstrap_timeout import PPBootstrapConsensus

    out = PPBootstrapConsensus(CodemodContext()).transform_module(cst.parse_module(_QUEUE)).code
    assert "                if poll == KVPoll.Bootstrapping:\n" in out
    kvpoll = types.SimpleNamespace(Failed=0, Bootstrapping=1, WaitingForInput=2)
    namespace: dict[str, object] = {"KVPoll": kvpoll}
    exec(compile(out, "queue", "exec"), namespace)
    queue = namespace["ToyBootstrapQueue"]()  # type: ignore[operator]
    late = types.SimpleNamespace(rid="late", sender=types.SimpleNamespace(poll=lambda: 1))
    other = types.SimpleNamespace(rid="other", sender=types.SimpleNamespace(poll=lambda: 1))
    queue.queue = [late, other]
    assert queue.pop_bootstrapped(rids_to_check=["late"]) == ([], [late])
    # without the consensus (the first stage) Bootstrapping still waits
    assert queue.pop_bootstrapped() == ([], [])
    with pytest.raises(AnchorError, match="no assert on the PP consensus"):
        PPBootstrapConsensus(CodemodContext()).transform_module(
            cst.parse_module(_QUEUE.replace("assert", "print(").replace("Failed\n", "Failed)\n"))
        )
