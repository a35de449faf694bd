"""Every stand-in the simulated world gives the target's code: the one place for them.

The target's functions are loaded from its source (``loader``) and never import anything. Each
free global name they use is looked up here by the name it is imported as (``REGISTRY``). The
scheduler, the bootstrap queue, the request, the tree cache, the allocator and the KV manager
the functions reach through ``self``/``req`` are the classes below. What the scenarios observe
(aborts, KV releases, streamed outputs, sender aborts) is recorded as events on the rank's
:class:`Context`; what they do not observe (time stats, metrics, tracing, logprobs,
speculative decoding) is :class:`Inert`.

A name or attribute with no stand-in is never guessed: loading fails with exit code 2, and an
attribute read at run time raises :class:`MissingStandIn` (also exit code 2). The one exception
is a name the target's code only passes along (a fork's own metrics, tracer, logprob processor:
``passalong`` decides which): it gets a :class:`Recorder`, which takes any attribute read and
call and records each call as a ``recorded`` event. A stand-in is given only for a name the
target's module binds itself (an import or a statement): a name it never binds stays unbound
and raises NameError, as it would in SGLang.
"""

from __future__ import annotations

import abc
import array
import contextlib
import datetime
import functools
import hashlib
import http
import sys
import threading
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from .. import sglang_names as names
from . import sandbox
from .spec import RequestSpec

if TYPE_CHECKING:
    from .loader import EnvRegistry

EPOCH = 1_700_000_000.0  # what time.time() reads at simulated second 0
MONOTONIC_BASE = 50_000.0  # what time.monotonic() reads at simulated second 0
FAKE_BOOTSTRAP_HOST = "2.2.2.2"
ENV_DEFAULTS: dict[str, bool | int | float | str] = {  # environ.py defaults for envs.X.get()
    names.BOOTSTRAP_TIMEOUT_ENV: 300,
    names.WAITING_TIMEOUT_ENV: 300,
    "SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK": False,
    "SGLANG_TEST_FORCE_OPTIMISTIC_PREFILL_RETRY_PROB": 0.0,  # the release's own test hook
}


class MissingStandIn(AttributeError):
    """The target's code read something the simulated world does not model."""


def _caller(depth: int = 2) -> str:
    """The function of the target that called the stand-in (the sandbox's guards skipped)."""
    frame = sys._getframe(depth)
    while frame.f_back is not None and frame.f_code.co_filename == sandbox.__file__:
        frame = frame.f_back
    code = frame.f_code
    return getattr(code, "co_qualname", code.co_name)


class Context(Protocol):
    """What one simulated rank gives its stand-ins (``world.Rank`` implements it)."""

    rank: int
    env: dict[str, str]
    tp_group: Group
    cp_group: Group

    def now(self) -> float:
        """This rank's clock: simulated seconds, with its offset and lag."""
        ...

    def world_time(self) -> float:
        """The simulated second of the world (the same on every rank)."""
        ...

    def record(self, kind: str, req: object, detail: str = "") -> None: ...

    def new_sender(self, *args: Any, **kwargs: Any) -> object: ...

    def spec_of_room(self, room: int) -> RequestSpec | None:
        """The script of the request with this bootstrap room."""
        ...

    @property
    def bootstrap_timeout_default(self) -> int:
        """The release's default of SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT."""
        ...

    @property
    def env_registry(self) -> EnvRegistry | None:
        """The release's env registry (``environ.py``), if it has one."""
        ...

    @property
    def optimistic_attempts(self) -> int:
        """Optimistic prefill attempts before bootstrap (``--optimistic-prefill-*``)."""
        ...

    @property
    def allocation_policy(self) -> str:
        """``disaggregation_decode_allocation_policy``: on_bootstrap or prefill_complete."""
        ...

    def pool_full(self) -> bool:
        """Is the request pool full now (nothing can be admitted)?"""
        ...


# -- inert and strict objects ------------------------------------------------------------------


class Inert:
    """Something the target touches whose effect no scenario observes (time stats, metrics,
    tracing, logprob and speculative-decoding state): every attribute and every call gives
    another Inert; it is falsy and empty and accepts assignments."""

    def __init__(self, name: str = "inert", **values: object) -> None:
        object.__setattr__(self, "_name", name)
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def __getattr__(self, attr: str) -> Inert:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Inert(f"{self._name}.{attr}")

    def __setattr__(self, attr: str, value: object) -> None:
        object.__setattr__(self, attr, value)

    def __call__(self, *args: object, **kwargs: object) -> Inert:
        return Inert(f"{self._name}()")

    def __bool__(self) -> bool:
        return False

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"<{self._name}>"

    def _no_value(self, *_: object) -> Any:
        raise MissingStandIn(
            f"{self._name} is used as a value by {_caller()}: the simulated world has none"
        )

    __lt__ = __le__ = __gt__ = __ge__ = __add__ = __sub__ = __radd__ = __rsub__ = _no_value
    __int__ = __float__ = __index__ = _no_value


class Recorder:
    """A name the target's code only passes along (``passalong`` decides which, at load
    time): every attribute read gives another Recorder, every call is recorded (``sink``) and
    gives another Recorder; it is truthy (so the recording code an ``if`` guards runs), a
    context manager that lets exceptions through, and takes assignments. Used as a value
    (compared, iterated, indexed, in arithmetic), which the analysis said it never is, it
    raises MissingStandIn."""

    _name: str
    _sink: Callable[[str, object], None] | None

    def __init__(self, name: str, sink: Callable[[str, object], None] | None = None) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_sink", sink)

    def __getattr__(self, attr: str) -> Recorder:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Recorder(f"{self._name}.{attr}", self._sink)

    def __setattr__(self, attr: str, value: object) -> None:
        object.__setattr__(self, attr, value)

    def __call__(self, *args: object, **kwargs: object) -> Recorder:
        if self._sink is not None:
            req = next((a for a in (*args, *kwargs.values()) if isinstance(a, SimReq)), None)
            self._sink(f"{self._name}()", req)
        return Recorder(f"{self._name}()", self._sink)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"<recorder {self._name}>"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def _no_value(self, *_: object) -> Any:
        raise MissingStandIn(
            f"{self._name} (a recording stand-in) is used as a value by {_caller()}"
        )

    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _no_value
    __add__ = __sub__ = __mul__ = __truediv__ = __radd__ = __rsub__ = __rmul__ = _no_value
    __int__ = __float__ = __index__ = __len__ = __iter__ = __getitem__ = _no_value
    __contains__ = _no_value
    __hash__ = object.__hash__


class Recorders:
    """One rank's recording stand-ins: the attributes the target's code only passes along,
    and where their calls are recorded."""

    def __init__(self, attributes: frozenset[str], ctx: Context | None = None) -> None:
        self.attributes = attributes
        self._ctx = ctx

    def _record(self, call: str, req: object) -> None:
        if self._ctx is not None:
            self._ctx.record("recorded", req, call)

    def make(self, label: str) -> Recorder:
        return Recorder(label, self._record)


class Strict:
    """A stand-in with explicit attributes only: reading any other raises MissingStandIn,
    unless the target's code only passes that attribute along (``_recorders``, set by the
    world): then it is a Recorder."""

    _what = "stand-in"
    _recorders: Recorders | None = None

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        recorders = self._recorders
        if recorders is not None and attr in recorders.attributes:
            return recorders.make(f"{self._what}.{attr}")
        raise MissingStandIn(
            f"{self._what}.{attr} (read by {_caller()}) has no stand-in in the simulated world"
        )


class Config(Strict):
    """Configuration read by the target (``server_args``): explicit values only."""

    def __init__(self, what: str, **values: object) -> None:
        object.__setattr__(self, "_what", what)
        for key, value in values.items():
            object.__setattr__(self, key, value)


# -- SGLang's constants and small types ------------------------------------------------------


# SGLang's KVPoll is a plain class of ints; the target's code gets the same.
KVPoll: Any = type(names.KVPOLL, (), {poll.name: poll.value for poll in names.KVPoll})


class FINISH_LENGTH:
    def __init__(self, length: int = 0, **_: object) -> None:
        self.length = length

    def __repr__(self) -> str:
        return f"FINISH_LENGTH(length={self.length})"


class FINISH_ABORT:
    def __init__(
        self, message: str = "Unknown error", status_code: object = None, err_type: object = None
    ) -> None:
        self.message = message
        self.status_code = status_code
        self.err_type = err_type

    def __repr__(self) -> str:
        return f"FINISH_ABORT({self.message!r})"


class KVTransferError(Exception):
    """What a sender's ``failure_exception()`` raises: the room that failed and why (the
    attributes SGLang's exception has, read by the scheduler's abort path)."""

    def __init__(self, bootstrap_room: int, failure_reason: str, **kwargs: object) -> None:
        Exception.__init__(self, failure_reason)
        self.is_from_another_rank = bool(kwargs.get("is_from_another_rank", False))
        self.bootstrap_room, self.failure_reason = bootstrap_room, failure_reason

    def __str__(self) -> str:  # as SGLang's
        return f"KVTransferError(bootstrap_room={self.bootstrap_room}): {self.failure_reason}"


class TransferBackend:
    MOONCAKE = "mooncake"
    NIXL = "nixl"
    ASCEND = "ascend"
    MORI = "mori"
    FAKE = "fake"


class KVClassType:
    # own-words: SGLang's KVClassType values, which get_kv_class() is called with.
    KVARGS = "kvargs"
    MANAGER = "manager"
    SENDER = "sender"
    RECEIVER = "receiver"
    BOOTSTRAP_SERVER = "bootstrap_server"


class _StandInABC:
    """``abc.ABC`` for the loaded sender classes, without the metaclass."""


# -- clocks, environment, logging ------------------------------------------------------------


class FakeTime:
    """The ``time`` module of one rank: every clock reads the simulated clock."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def monotonic(self) -> float:
        return MONOTONIC_BASE + self._ctx.now()

    perf_counter = monotonic

    def time(self) -> float:
        return EPOCH + self._ctx.now()

    def monotonic_ns(self) -> int:
        return int(self.monotonic() * 1e9)

    perf_counter_ns = monotonic_ns

    def time_ns(self) -> int:
        return int(self.time() * 1e9)

    def sleep(self, seconds: float) -> None:
        raise MissingStandIn(f"time.sleep({seconds}) by {_caller()}: the simulation cannot wait")


class FakeOs:
    """The ``os`` module of one rank: only its environment."""

    def __init__(self, env: dict[str, str]) -> None:
        self.environ = env

    def getenv(self, key: str, default: str | None = None) -> str | None:
        return self.environ.get(key, default)


class _EnvVar:
    def __init__(self, name: str, env: dict[str, str]) -> None:
        self.name, self._env = name, env

    def get(self) -> object:
        default = ENV_DEFAULTS[self.name]
        raw = self._env.get(self.name)
        if raw is None:
            return default
        if isinstance(default, bool):
            return raw.lower() in ("1", "true", "yes")
        return type(default)(raw)

    value = property(get)


class FakeWarnings:
    """``warnings`` of the release's env registry: each warning is a ``log`` event."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def warn(self, message: object, *_: object, **__: object) -> None:
        self._ctx.record("log", None, f"warning: {message}")


class FakeEnvs:
    """``sglang.srt.environ.envs``: ``envs.NAME.get()`` reads the scenario's environment.

    An entry of the release's own registry (``environ.py``, loaded by the loader) is an
    instance of the release's own Env class, reading this rank's environment (so a value it
    rejects is its own warning, a ``log`` event); another known name gets a stand-in."""

    def __init__(self, ctx: Context) -> None:
        self._env = ctx.env
        self._registry = ctx.env_registry
        self._fields: dict[str, object] = {}
        self._classes: dict[str, Any] = {}
        if self._registry is not None:
            namespace: dict[str, Any] = {
                "__name__": "sglang.srt.environ",
                "os": FakeOs(ctx.env),
                "warnings": FakeWarnings(ctx),
                "contextmanager": contextlib.contextmanager,
                "Any": Any,
                "__builtins__": sandbox.builtins_for_target(),
            }
            exec(self._registry.code, namespace)
            self._classes = namespace

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._fields:
            return self._fields[name]
        entry = self._registry.entries.get(name) if self._registry is not None else None
        if entry is not None:
            field = self._classes[entry[0]](entry[1])
            field.name = name  # what Envs' class body gives it (__set_name__)
            self._fields[name] = field
            return field
        if name not in ENV_DEFAULTS:
            raise MissingStandIn(f"envs.{name} (read by {_caller()}) has no stand-in")
        return _EnvVar(name, self._env)


class SimLogger:
    """``logger``: each message is recorded as a ``log`` event."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def _log(self, level: str, message: object, *args: object) -> None:
        text = str(message) % args if args else str(message)
        self._ctx.record("log", None, f"{level}: {text}")

    def debug(self, message: object, *args: object, **_: object) -> None:
        self._log("debug", message, *args)

    def info(self, message: object, *args: object, **_: object) -> None:
        self._log("info", message, *args)

    def warning(self, message: object, *args: object, **_: object) -> None:
        self._log("warning", message, *args)

    def error(self, message: object, *args: object, **_: object) -> None:
        self._log("error", message, *args)

    def log(self, level: object, message: object, *args: object, **_: object) -> None:
        self._log(str(level), message, *args)

    exception = critical = error
    warning_once = warning
    info_once = info
    warn = warning


# -- collectives -----------------------------------------------------------------------------


class Group:
    """A CPU process group of simulated ranks; ``all_reduce_min`` is what
    ``dist.all_reduce(..., op=MIN)`` does to the polls."""

    def __init__(self, rank: int, collective: Callable[[int, list[int]], list[int]] | None):
        self.rank = rank
        self._collective = collective

    def all_reduce_min(self, values: list[int]) -> list[int]:
        if self._collective is None:  # a group of one rank
            return list(values)
        return self._collective(self.rank, values)


def poll_and_all_reduce(pollers: Iterable[Any], group: Group, *_: object) -> list[int]:
    polls = [int(poller.poll()) for poller in pollers]
    return group.all_reduce_min(polls)


def poll_and_all_reduce_attn_cp_tp_group(
    pollers: Iterable[Any], attn_cp_cpu_group: Group, attn_tp_cpu_group: Group
) -> list[int]:
    return attn_cp_cpu_group.all_reduce_min(poll_and_all_reduce(pollers, attn_tp_cpu_group))


def _pipeline_parallel(*_: object, **__: object) -> list[int]:
    raise MissingStandIn("pipeline parallelism (pp_size > 1) is not simulated")


# -- requests, senders, KV manager -----------------------------------------------------------


class SimReq(Strict):
    """A request, with the attributes SGLang's ``Req`` gives the code under test."""

    _what = "req"

    def __init__(self, rid: str, bootstrap_room: int, input_len: int = 64) -> None:
        self.rid = rid
        self.bootstrap_room = bootstrap_room
        self.bootstrap_host = "10.0.0.2"
        self.bootstrap_port = None
        self.disagg_kv_sender: Any = None
        self.disagg_prefill_dp_rank = None
        self.finished_reason: object = None
        self.to_finish: object = None
        self.to_abort = False  # Req's flag for an abort requested while it runs
        self.discard_output_reason = None
        self.origin_input_ids = list(range(input_len))
        self.output_ids: list[int] = []
        self.transferred_output_id: int | None = None  # 0.4.6 - 0.4.6.post4's decode side
        self.fill_ids = self.origin_input_ids
        self.return_logprob = False
        self.return_routed_experts = False
        self.return_sampling_mask = False
        self.return_hidden_states = False
        self.grammar = None
        self.is_chunked = 0
        self.inflight_middle_chunks = 0
        self.pending_bootstrap = False
        self.is_retracted = False
        self.prefill_attempt_count = 0
        self.arrival_processed_tokens = 0
        self.metadata_buffer_index = -1
        self.start_send_idx = 0
        self.disagg_decode_prefix_len = 0
        self.tmp_end_idx = -1
        self.extend_end = None
        self.req_pool_idx = 0
        self.cache_request_handle = None
        self.swa_branching_seqlen = None
        self.hidden_states_tensor = None
        self.output_topk_p = None
        self.output_topk_index = None
        self.sampling_params = Inert("req.sampling_params")
        self.time_stats = Inert("req.time_stats", prefill_retry_count=0)
        self.kv = Inert("req.kv", cache_protected_len=0)
        self.skip_radix_cache_insert = False
        self.full_untruncated_fill_ids = self.origin_input_ids
        self.early_send_prefix_end = None

    def finished(self) -> bool:
        return self.finished_reason is not None

    # what optimistic prefill's requeue calls (0.5.13+)

    def reset_for_retract(self) -> None:
        self.prefix_indices: list[int] = []
        self.extend_end = None

    def _compute_max_prefix_len(self, input_len: int) -> int:
        return max(input_len - 1, 0)

    def advance_cache_request_handle(self) -> None:
        pass

    def add_latency(self, *_: object) -> None:
        pass


class ScriptedSender:
    """A KV sender whose ``poll()`` follows its request's script in simulated time:
    Bootstrapping for ``bootstrap_s`` after it is created, WaitingForInput until the scheduler
    sends the last chunk, then Transferring for ``transfer_s`` and Success. With ``transfer_s``
    None the decode side is gone (it restarted): WaitingForInput for ever. Once aborted it
    reports Failed, as every release's sender does once pdguard's sender-abort has run (a
    tree without sender classes gets this one)."""

    def __init__(
        self,
        ctx: Context,
        spec: RequestSpec,
        mgr: object = None,
        bootstrap_addr: str | None = None,
        bootstrap_room: int | None = None,
        **_: object,
    ) -> None:
        self._ctx, self._spec = ctx, spec
        self._created = ctx.world_time()
        self._sent_at: float | None = None
        # The sender's public face, as the scheduler and the transfer queues see it.
        self.kv_mgr = mgr
        self.bootstrap_room = bootstrap_room
        self.conclude_state: int | None = None  # Failed once aborted; then poll() says so

    def poll(self) -> int:
        now = self._ctx.world_time()
        if self.conclude_state is not None:
            state = self.conclude_state
        elif now < self._created + self._spec.bootstrap_s - 1e-9:
            state = KVPoll.Bootstrapping
        elif self._sent_at is None or self._spec.transfer_s is None:
            state = KVPoll.WaitingForInput  # not all sent yet, or decode is gone
        elif now < self._sent_at + self._spec.transfer_s - 1e-9:
            state = KVPoll.Transferring
        else:
            state = KVPoll.Success
        return state

    def sim_sent(self) -> None:
        if self._sent_at is None:
            self._sent_at = self._ctx.world_time()

    def init(self, *_: object, **__: object) -> None:
        pass

    def send(self, *_: object, **__: object) -> None:
        pass

    def pop_decode_prefix_len(self) -> int:
        return 0

    def mark_prefill_complete(self) -> None:
        pass

    def get_transfer_metric(self) -> None:
        return None

    def clear(self) -> None:
        pass

    def failure_exception(self) -> None:
        raise KVTransferError(self.bootstrap_room or 0, "KV transfer failed (scripted sender)")

    def abort(self) -> None:
        self._ctx.record("sender_abort", self._spec.rid)
        self.conclude_state = KVPoll.Failed


class DeferredBootstrap(Strict):
    """0.5.22+: the KV manager's table of rooms whose decode allocation waits for prefill to
    complete. Opening a room succeeds; completing it is recorded."""

    _what = "kv_mgr.deferred_bootstrap"

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def open(self, bootstrap_room: int, sender: object) -> Config:
        return Config("room_state", failed=False)

    def complete(self, bootstrap_room: int, sender: object) -> None:
        self._ctx.record("prefill_complete", None, str(bootstrap_room))

    def close(self, bootstrap_room: int, *_: object, **__: object) -> None:
        return None


class SimKVManager(Strict):
    """The KV manager of the release's own senders, with a scripted transport in place of the
    bootstrap server and the transfer engine. The release's sender calls it as it calls its
    real manager (``update_status``, ``check_status``, ``record_failure``,
    ``failure_records``). What the threads of the real manager would do, it does when a status
    is read: a room created ``bootstrap_s`` ago has got decode's bootstrap info
    (WaitingForInput); once the scheduler sent the last chunk (``sim_sent``) it is Transferring
    for ``transfer_s``, then Success; with ``transfer_s`` None decode is gone (WaitingForInput
    for ever). A room whose request is scripted ``nixl`` (or unknown) is never moved: decode
    never sends its info. A status the sender set (Failed by ``abort()`` or a timeout) is
    never overwritten."""

    _what = "kv_mgr"

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        timeout = int(ctx.env.get(names.BOOTSTRAP_TIMEOUT_ENV, str(ctx.bootstrap_timeout_default)))
        self.bootstrap_timeout = timeout
        self.bootstrap_time_out = timeout  # its name in 0.4.7 - 0.4.9
        self.request_status: dict[int, int] = {}
        self.failure_records: dict[int, str] = {}
        self.exceptions: dict[int, Exception] = {}
        self.failure_lock = threading.Lock()
        self.req_to_decode_prefix_len: dict[int, int] = {}
        self.transfer_infos: dict[int, object] = {}
        self._staging_outstanding: dict[int, int] = {}
        self._staging_ctx = None
        self.enable_staging = False
        self.is_dummy_cp_rank = False
        self.attn_dp_rank = 0
        # 0.5.22+: decode allocates after prefill; mark_prefill_complete() restarts the
        # bootstrap budget through the deferred bootstrap
        deferred = ctx.allocation_policy == "prefill_complete"
        self.defer_decode_allocation = deferred
        self.deferred_bootstrap = DeferredBootstrap(ctx) if deferred else None
        self.sender_trace_module = None
        self.reports_transfer_latency = False
        self.server_args = Config(
            "kv_mgr.server_args", dp_size=1, load_balance_method="round_robin"
        )
        self.kv_args = Config("kv_mgr.kv_args", kv_item_lens=[1])
        self.enable_trace = False
        self.kv_item_lens_sum = 1
        self.state_item_lens_sum = 0
        self.enable_all_cp_ranks_for_transfer = False
        self._created: dict[int, float] = {}
        self._sent: dict[int, float] = {}

    @property
    def agent(self) -> Config:
        """NIXL's agent, for a sender that posted its transfer (``posts_transfer``): a posted
        transfer runs ("PROC") for the request's ``transfer_s``, then is "DONE"."""
        return Config("kv_mgr.agent", check_xfer_state=self._xfer_state)

    def _xfer_state(self, room: int) -> str:
        spec = self._ctx.spec_of_room(room)
        sent = self._sent.get(room)
        if spec is None or sent is None or spec.transfer_s is None:
            return "PROC"
        done = self._ctx.world_time() + 1e-9 >= sent + spec.transfer_s
        return "DONE" if done else "PROC"

    def _advance(self, room: int) -> None:
        """Move ``room`` as decode and the transfer engine would have by now."""
        status = self.request_status.get(room)
        if status is None or status in (KVPoll.Failed, KVPoll.Success):
            return
        spec = self._ctx.spec_of_room(room)
        if spec is None or spec.nixl:
            return
        now = self._ctx.world_time()
        if now + 1e-9 < self._created.get(room, now) + spec.bootstrap_s:
            return
        new = KVPoll.WaitingForInput
        sent = self._sent.get(room)
        if sent is not None and spec.transfer_s is not None:
            done = now + 1e-9 >= sent + spec.transfer_s
            new = KVPoll.Success if done else KVPoll.Transferring
        self.request_status[room] = max(status, new)

    def _notify_bootstrap(self, bootstrap_room: int, *_: object) -> None:
        self._ctx.record("bootstrap_notified", None, str(bootstrap_room))

    def get_session_id(self) -> str:
        return "sim-session"

    def get_kv_replica_factor(self) -> int:
        return 1

    def sim_sent(self, room: int) -> None:
        """The scheduler sent the request's last chunk (``send_kv_chunk``)."""
        self._sent.setdefault(room, self._ctx.world_time())

    def check_status(self, bootstrap_room: int) -> int:
        self._advance(bootstrap_room)
        return self.request_status.get(bootstrap_room, KVPoll.Bootstrapping)

    def update_status(self, bootstrap_room: int, status: int) -> None:
        self._created.setdefault(bootstrap_room, self._ctx.world_time())
        old = self.request_status.get(bootstrap_room)
        if old is None or status == KVPoll.Failed:
            self.request_status[bootstrap_room] = status
        else:
            self.request_status[bootstrap_room] = max(old, status)

    def record_failure(self, bootstrap_room: int, failure_reason: str) -> None:
        """Keep why ``bootstrap_room`` failed, for its sender's ``failure_exception()``."""
        with self.failure_lock:
            self.failure_records.update({bootstrap_room: failure_reason})

    def conclude_failure(
        self, *, bootstrap_room: int, failure_reason: str, targets: object = None
    ) -> int | None:
        """0.5.20+ (``CommonKVManager.conclude_failure``): nothing for a cleared room; else
        keep the first recorded reason, mark the room Failed and tell decode (recorded)."""
        if bootstrap_room not in self.request_status:
            return None
        with self.failure_lock:
            self.failure_records.setdefault(bootstrap_room, failure_reason)
        self.update_status(bootstrap_room, KVPoll.Failed)
        self._ctx.record("decode_notified", None, str(bootstrap_room))
        return KVPoll.Failed

    def _maybe_ack_drained_abort(self, bootstrap_room: int) -> None:
        pass


# -- scheduler-side objects ------------------------------------------------------------------


class TreeCache(Strict):
    """The radix cache: ``cache_finished_req`` releases a request's KV (recorded)."""

    _what = "tree_cache"

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def cache_finished_req(self, req: SimReq, *_: object, **__: object) -> None:
        self._ctx.record("kv_released", req)

    def cache_unfinished_req(self, req: SimReq, *_: object, **__: object) -> None:
        self._ctx.record("kv_locked", req)

    def release_aborted_request(self, rid: str) -> None:
        pass

    def supports_mamba(self) -> bool:  # 0.5.21+: a radix cache without Mamba state
        return False

    def finish(self, *_: object, **__: object) -> None:
        pass


class MetadataAllocator(Strict):
    _what = "req_to_metadata_buffer_idx_allocator"

    def __init__(self, size: int = 4096) -> None:
        self._free = list(range(size))

    def available_size(self) -> int:
        return len(self._free)

    def alloc(self) -> int | None:
        return self._free.pop(0) if self._free else None

    def free(self, index: int) -> None:
        if index is not None and index >= 0:
            self._free.append(index)


class _OutputStreamer:
    def __init__(self, scheduler: SchedulerStandIn) -> None:
        self._scheduler = scheduler

    def stream_output(self, reqs: list[SimReq], *args: object, **kwargs: object) -> None:
        self._scheduler.stream_output(reqs, *args, **kwargs)


class SchedulerStandIn(Strict):
    """What the loaded mixin methods use of SGLang's ``Scheduler`` and the target does not
    define. The simulated scheduler class is ``(loaded mixin, SchedulerStandIn)``."""

    _what = "self (scheduler)"
    # Mixin methods replaced here rather than loaded: the KV data path (tensors, page tables).
    REPLACES = frozenset({"send_kv_chunk"})

    def sim_init(self, ctx: Context, allocator: MetadataAllocator) -> None:
        self._ctx = ctx
        self.tp_rank = ctx.rank
        self.pp_rank = 0
        self.attn_tp_cpu_group = ctx.tp_group
        self.tp_cpu_group = ctx.tp_group  # the whole TP group (no DP attention: the same)
        self.attn_cp_cpu_group = ctx.cp_group
        self.pp_group = Inert("pp_group")
        self.ps = Config("self.ps", pp_rank=0, tp_rank=ctx.rank, pp_size=1)
        self.server_args = Config(
            "server_args",
            optimistic_prefill_retries=ctx.optimistic_attempts,  # 0.5.13 - 0.5.15
            optimistic_prefill_attempts=ctx.optimistic_attempts,  # 0.5.16+
            enable_dp_attention=False,
            enable_sp_layernorm=False,
            enable_prefill_context_parallel=False,
            chunked_prefill_size=8192,
            disaggregation_ib_device=None,
        )
        self.tree_cache = TreeCache(ctx)
        self.req_to_metadata_buffer_idx_allocator = allocator
        self.req_to_token_pool = Config(
            "req_to_token_pool", available_size=lambda: 0 if ctx.pool_full() else 1 << 20
        )
        self.token_to_kv_pool_allocator = Config("token_to_kv_pool_allocator", page_size=1)
        self.disagg_prefill_inflight_queue: list[SimReq] = []
        self.disagg_prefill_bootstrap_queue: Any = None
        self.disagg_prefill_pending_chunk_rids: set[str] = set()
        self.waiting_queue: list[SimReq] = []
        self.chunked_req = None
        self.enable_overlap = False
        self.enable_metrics = False
        self.enable_hicache_storage = False
        self.processed_tokens_counter = 0
        self.kv_transfer_latency_ms = None
        self.kv_transfer_speed_gb_s = None
        self.metrics_collector = Inert("metrics_collector")
        self.metrics_reporter = Inert("metrics_reporter")
        self.spec_algorithm = Inert("spec_algorithm")
        self.batch_result_processor = Inert("batch_result_processor")
        self.tp_worker = Inert("tp_worker")
        self.output_streamer = _OutputStreamer(self)

    def stream_output(self, reqs: list[SimReq], *_: object, **__: object) -> None:
        for req in reqs:
            self._ctx.record("streamed", req, repr(req.finished_reason))
            reason = req.finished_reason
            if isinstance(reason, FINISH_ABORT):  # what the client receives
                self._ctx.record("client_error", req, str(reason.message))

    def send_kv_chunk(
        self, req: SimReq, last_chunk: bool = False, token_id: object = None, **_: object
    ) -> None:
        if last_chunk or token_id is not None:  # 0.4.6 - 0.4.6.post4: the token marks the last
            self._ctx.record("kv_send", req)
            sender = req.disagg_kv_sender
            if isinstance(sender, ScriptedSender):
                sender.sim_sent()
                return
            manager = getattr(sender, "kv_mgr", None)
            if isinstance(manager, SimKVManager):
                manager.sim_sent(req.bootstrap_room)
                spec = self._ctx.spec_of_room(req.bootstrap_room)
                if spec is not None and spec.posts_transfer and hasattr(sender, "xfer_handles"):
                    # what its send() does: post the transfer, keep its handle
                    sender.xfer_handles.append(req.bootstrap_room)
                    sender.has_sent = True
                    self._ctx.record("kv_posted", req)

    def retire_unadmitted_request(self, req: SimReq) -> None:
        self._ctx.record("rejected", req)

    def _release_aborted_request(self, req: SimReq) -> None:
        pass

    def _noop(self, *_: object, **__: object) -> None:
        pass

    add_logprob_return_values = add_input_logprob_return_values = _noop
    set_next_batch_sampling_info_done = report_prefill_stats = log_prefill_stats_late = _noop
    maybe_send_health_check_signal = _noop


class BootstrapQueueStandIn(Strict):
    """The state of SGLang's ``PrefillBootstrapQueue`` (its ``__init__`` is not run)."""

    _what = "self (bootstrap queue)"

    def sim_init(
        self, ctx: Context, scheduler: SchedulerStandIn, allocator: MetadataAllocator
    ) -> None:
        self.queue: list[SimReq] = []
        self.scheduler = scheduler
        self.kv_manager = SimKVManager(ctx)
        self.transfer_backend = TransferBackend.NIXL
        self.bootstrap_port = 8998
        self.gloo_group = ctx.tp_group
        self.tp_rank = ctx.rank
        self.pp_rank = 0
        self.pp_size = 1
        self.pp_poll_sync_work_list: list[object] = []
        self.req_to_metadata_buffer_idx_allocator = allocator
        self.token_to_kv_pool = Config("token_to_kv_pool", page_size=1)
        self.max_total_num_tokens = 1 << 30
        self.max_input_len = 1 << 30


def prefill_batch(reqs: list[SimReq]) -> tuple[Config, Config]:
    """The ``batch`` and ``result`` of a prefill forward pass over ``reqs``: one sampled token
    each, no logprobs, no hidden states, no speculative decoding."""
    tokens = [0] * len(reqs)
    batch = Config(
        "batch",
        reqs=reqs,
        return_logprob=False,
        spec_info=None,
        prefill_stats=None,
        dp_cooperation_info=None,
    )
    logits = Config(
        "logits_output",
        next_token_logprobs=None,
        input_token_logprobs=None,
        hidden_states=None,
        sampling_mask_output=None,
        next_token_sampling_mask_status=None,
    )
    result = Config(
        "result",
        next_token_ids=Config("next_token_ids", tolist=lambda: list(tokens)),
        logits_output=logits,
        extend_input_len_per_req=None,
        extend_logprob_start_len_per_req=None,
        copy_done=None,
        routed_experts_output=None,
        indexer_topk_output=None,
        next_draft_input=None,
        can_run_cuda_graph=False,
        auxiliary_host_output=None,
        bid=0,
    )
    return batch, result


# -- module-level functions of SGLang --------------------------------------------------------


def _prepare_abort(ctx: Context) -> Callable[..., None]:
    def prepare_abort(
        req: SimReq, error_message: str, status_code: object = None, **_: object
    ) -> None:
        req.finished_reason = FINISH_ABORT(error_message, status_code)
        ctx.record("abort", req, error_message)

    return prepare_abort


def release_kv_cache(req: SimReq, tree_cache: TreeCache, *_: object, **__: object) -> None:
    tree_cache.cache_finished_req(req)


def maybe_cache_unfinished_req(
    req: SimReq, tree_cache: TreeCache, *_: object, **__: object
) -> None:
    tree_cache.cache_unfinished_req(req)


def release_metadata_buffer(req: SimReq, allocator: MetadataAllocator, *_: object) -> None:
    if req.metadata_buffer_index is not None and req.metadata_buffer_index >= 0:
        allocator.free(req.metadata_buffer_index)
        req.metadata_buffer_index = -1


def is_aborted(req: SimReq) -> bool:
    return isinstance(req.finished_reason, FINISH_ABORT) or isinstance(req.to_finish, FINISH_ABORT)


def kv_to_page_num(num_kv_indices: int, page_size: int) -> int:
    return (num_kv_indices + page_size - 1) // page_size


def _identity_decorator(*_: object, **__: object) -> Callable[[Any], Any]:
    return lambda function: function


def _get_int_env_var(ctx: Context) -> Callable[[str, int], int]:
    # as sglang.srt.utils.get_int_env_var: the default when unset, blank or not an int
    def get_int_env_var(name: str, default: int = 0) -> int:
        value = ctx.env.get(name)
        if value is None or not value.strip():
            return default
        try:
            return int(value)
        except ValueError:
            return default

    return get_int_env_var


class Unavailable:
    """A module the loaded code names only on paths no scenario takes (networking for
    data-parallel registration, ...): any use is a MissingStandIn."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        raise MissingStandIn(f"{self._name}.{attr} (used by {_caller()}) is not simulated")

    def __call__(self, *_: object, **__: object) -> Any:
        raise MissingStandIn(f"{self._name}() (used by {_caller()}) is not simulated")


def no_import(name: str, *_: object, **__: object) -> Any:
    """``__import__`` in the loaded code: the simulation never imports a module."""
    raise MissingStandIn(f"import of {name} (by {_caller()}): the simulation never imports")


def _constant(value: object) -> Callable[[Context], object]:
    return lambda ctx: value


def _noop(*_: object, **__: object) -> None:
    return None


# -- the registry: stand-in key (the name as imported) -> factory(rank context) ---------------

REGISTRY: dict[str, Callable[[Context], object]] = {
    # the time and environment of the rank
    "time": FakeTime,
    "time.monotonic": lambda ctx: FakeTime(ctx).monotonic,
    "time.perf_counter": lambda ctx: FakeTime(ctx).perf_counter,
    "time.time": lambda ctx: FakeTime(ctx).time,
    "os": lambda ctx: FakeOs(ctx.env),
    "os.environ": lambda ctx: ctx.env,
    "envs": FakeEnvs,
    "lru_cache": _constant(functools.lru_cache),
    "get_int_env_var": _get_int_env_var,
    "logger": SimLogger,
    # polls and collectives
    names.KVPOLL: _constant(KVPoll),
    "poll_and_all_reduce": _constant(poll_and_all_reduce),
    "poll_and_all_reduce_attn_cp_tp_group": _constant(poll_and_all_reduce_attn_cp_tp_group),
    "poll_and_all_reduce_pp": _constant(_pipeline_parallel),
    "poll_and_all_reduce_prefill_pp": _constant(_pipeline_parallel),
    # finishing, aborting, releasing
    "FINISH_LENGTH": _constant(FINISH_LENGTH),
    "FINISH_ABORT": _constant(FINISH_ABORT),
    "HTTPStatus": _constant(http.HTTPStatus),
    "prepare_abort": _prepare_abort,
    "release_kv_cache": _constant(release_kv_cache),
    "maybe_cache_unfinished_req": _constant(maybe_cache_unfinished_req),
    "checkpoint_kv_cache": _constant(maybe_cache_unfinished_req),
    "release_req_to_metadata_buffer": _constant(release_metadata_buffer),
    "maybe_release_metadata_buffer": _constant(release_metadata_buffer),
    "is_aborted": _constant(is_aborted),
    "is_unadmitted_reject": _constant(lambda req: False),
    # should_force_retry (a test hook of 0.5.13+) is the release's own, loaded from prefill.py
    # the hash constructors only: the module itself would reach the rest of the library
    "hashlib": _constant(
        types.SimpleNamespace(
            **{name: getattr(hashlib, name) for name in ("md5", "sha1", "sha256", "sha512", "new")}
        )
    ),
    "_uses_write_through_cache": _constant(lambda cache: False),
    "CacheRequestOutcome": _constant(
        Config("CacheRequestOutcome", SUCCESS="success", ABORT="abort")
    ),
    # senders
    "get_kv_class": lambda ctx: lambda backend, class_type: ctx.new_sender,
    "KVClassType": _constant(KVClassType),
    "TransferBackend": _constant(TransferBackend),
    "FAKE_BOOTSTRAP_HOST": _constant(FAKE_BOOTSTRAP_HOST),
    "FakeBootstrapHost": _constant(FAKE_BOOTSTRAP_HOST),
    "kv_to_page_num": _constant(kv_to_page_num),
    "KVTransferError": _constant(KVTransferError),
    "KVTransferMetric": _constant(lambda: Config("KVTransferMetric()", transfer_latency_s=None)),
    "ABC": _constant(_StandInABC),
    "abstractmethod": _constant(abc.abstractmethod),
    "TraceNullContext": _constant(Inert),
    "TraceReqContext": _constant(Inert),
    "get_observability": _constant(lambda: Config("get_observability()", enable_trace=False)),
    # configuration and parallelism
    "get_disagg": lambda ctx: (
        lambda: Config(
            "get_disagg()",
            disaggregation_decode_allocation_policy=ctx.allocation_policy,
            optimistic_prefill_attempts=ctx.optimistic_attempts,
        )
    ),
    "get_parallel": lambda ctx: (
        lambda: Config(
            "get_parallel()",
            tp_rank=ctx.rank,
            pp_rank=0,
            pp_size=1,
            dp_size=1,
            num_dp_ranks=1,
            load_balance_method="round_robin",
        )
    ),
    "scheduler_stage_method": _constant(_identity_decorator),
    "SCHEDULER_STAGE_PROCESS_QUEUE": _constant("process_queue"),
    # telemetry no scenario observes
    "RequestStage": _constant(Inert("RequestStage")),
    "trace_slice": _constant(_noop),
    "trace_slice_end": _constant(_noop),
    "trace_slice_start": _constant(_noop),
    "trace_event": _constant(_noop),
    # the standard library, given rather than imported
    "array": _constant(array.array),
    "datetime.time": _constant(datetime.time),  # a class: ``time.monotonic`` raises on it
    # used only on paths no scenario takes
    "requests": _constant(Unavailable("requests")),
}

KEYS = frozenset(REGISTRY)


def for_rank(
    ctx: Any, registry: Mapping[str, Callable[[Any], object]] | None = None
) -> Callable[[str], object]:
    """The stand-in values of one rank: ``value(key)``, one object per key, made by
    ``registry`` (this module's ``REGISTRY`` unless another world extends it)."""
    made: dict[str, object] = {}
    makers = REGISTRY if registry is None else registry

    def value(key: str) -> object:
        if key not in made:
            made[key] = makers[key](ctx)
        return made[key]

    return value
