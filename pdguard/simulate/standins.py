"""The stand-ins both simulated worlds give the target's code; each half adds its own
(``prefill.standins``, ``decode.standins``).

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


class DeletedAttribute(AttributeError):
    """An attribute the target's code deleted from a stand-in, read again: the AttributeError
    SGLang's object would raise (the target's failure, not the simulation's gap)."""


class Strict:
    """A stand-in with explicit attributes only: reading any other raises MissingStandIn,
    unless the target's code only passes that attribute along (``_recorders``, set by the
    world): then it is a Recorder."""

    _what = "stand-in"
    _recorders: Recorders | None = None

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr in self.__dict__.get("_sim_deleted", ()):
            # the target's code deleted it: reading it again raises, as on SGLang's objects
            raise DeletedAttribute(f"'{self._what}' object has no attribute '{attr}'")
        recorders = self._recorders
        if recorders is not None and attr in recorders.attributes:
            return recorders.make(f"{self._what}.{attr}")
        raise MissingStandIn(
            f"{self._what}.{attr} (read by {_caller()}) has no stand-in in the simulated world"
        )

    def __delattr__(self, attr: str) -> None:
        object.__delattr__(self, attr)
        self.__dict__.setdefault("_sim_deleted", set()).add(attr)


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


# -- scheduler-side objects ------------------------------------------------------------------


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


# -- module-level functions of SGLang --------------------------------------------------------


def _prepare_abort(ctx: Context) -> Callable[..., None]:
    def prepare_abort(
        req: SimReq, error_message: str, status_code: object = None, **_: object
    ) -> None:
        req.finished_reason = FINISH_ABORT(error_message, status_code)
        ctx.record("abort", req, error_message)

    return prepare_abort


class TreeCacheLike(Protocol):
    """What the release's helpers call on either half's tree cache."""

    def cache_finished_req(self, req: SimReq, *args: Any, **kwargs: Any) -> None: ...

    def cache_unfinished_req(self, req: SimReq, *args: Any, **kwargs: Any) -> None: ...


def release_kv_cache(req: SimReq, tree_cache: TreeCacheLike, *_: object, **__: object) -> None:
    tree_cache.cache_finished_req(req)


def maybe_cache_unfinished_req(
    req: SimReq, tree_cache: TreeCacheLike, *_: object, **__: object
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
