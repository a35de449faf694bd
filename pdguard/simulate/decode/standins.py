"""The decode half's stand-ins: what the simulated world gives the release's decode code.

* the network: the receivers' bootstrap look-ups (``_get_bootstrap_info_from_server``,
  ``_get_prefill_parallel_info_from_server``, ...), their ZMQ ``_connect`` (a socket that hands
  the indices to the stand-in transport) and ``_register_kv_args``; the KV manager is
  :class:`DecodeKVManager`, whose transport follows each request's script: the prefill writes
  the KV and the metadata and reports Success ``transfer_s`` after the indices arrived, or, when
  the prefill is gone, nothing ever (no release tells the decode that its prefill failed a
  request, sgl-project/sglang#28651);
* device memory: ``_pre_alloc`` (a request-pool slot and the KV pages, recorded) and
  ``_allocatable_tokens`` (0 while the scenario holds decode memory full);
* the scheduler, the tree cache, the request pool, the token allocator, the metadata buffers
  and the queues' own state; the rest comes from the shared ``simulate.standins``
  (``REGISTRY`` extends its registry).
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from ...sglang_names import (
    ENVIRON_PATH,
    WAITING_TIMEOUT_ENV,
)
from ...tree import SourceTree
from .. import lockstep, standins
from ..lockstep import EPS
from ..spec import DecodeSpec
from ..standins import (
    FINISH_ABORT,
    Config,
    Group,
    Inert,
    MetadataAllocator,
    MissingStandIn,
    SimReq,
    Strict,
)

PREFILL_SERVER = "10.0.0.2:8998"
PREFILL_RANK_PORT = 17000
LIST_OF_SOURCES = -1  # a look-up annotated to return a list of {rank: info} (NIXL 0.4.6.x)


class _WorldView(Protocol):
    @property
    def config(self) -> lockstep.LockstepConfig[DecodeSpec]: ...


class DecodeContext(Protocol):
    """What one decode rank gives its stand-ins (``decode.world.DecodeRank`` implements it)."""

    @property
    def rank(self) -> int: ...

    @property
    def world(self) -> _WorldView: ...

    @property
    def tp_group(self) -> Group: ...

    @property
    def scheduler(self) -> Any: ...

    @property
    def kv_manager(self) -> DecodeKVManager: ...

    @property
    def tree_cache(self) -> DecodeTreeCache: ...

    @property
    def req_pool(self) -> ReqToTokenPool: ...

    @property
    def metadata_allocator(self) -> MetadataAllocator: ...

    @property
    def metadata_buffers(self) -> MetadataBuffers: ...

    def now(self) -> float: ...

    def record(self, kind: str, req: object, detail: str = "") -> None: ...

    def rid_of(self, room: int) -> str | None: ...

    def script(self, room: int) -> DecodeSpec | None: ...

    def memory_full(self) -> bool: ...

    def write_metadata(self, room: int) -> None: ...

    def alloc_kv(self, req: SimReq) -> None: ...

    def free_kv(self, req: SimReq) -> None: ...


# -- stand-ins -------------------------------------------------------------------------------


KV_INDICES_MARK = b"pdguard-kv-indices:"


class SimTensor:
    """A small CPU tensor / numpy array: KV indices and metadata-buffer rows."""

    def __init__(self, values: list[int]) -> None:
        self._values = list(values)

    def __getitem__(self, key: int | slice) -> SimTensor:
        if isinstance(key, slice):
            return SimTensor(self._values[key])
        return SimTensor([self._values[key]])

    def __len__(self) -> int:
        return len(self._values)

    def item(self) -> int:
        return self._values[0]

    def tolist(self) -> list[int]:
        return list(self._values)

    def cpu(self) -> SimTensor:
        return self

    def numpy(self) -> SimTensor:
        return self

    def clone(self) -> SimTensor:
        return SimTensor(self._values)

    def tobytes(self) -> bytes:
        """The indices as the receiver sends them, marked so the socket knows them."""
        return KV_INDICES_MARK + b"".join(
            v.to_bytes(8, "little", signed=True) for v in self._values
        )

    def astype(self, *_: object) -> SimTensor:
        return self

    @property
    def size(self) -> int:
        return len(self._values)


class FakeTorch:
    """``torch`` as the decode queues use it on the CPU: ``torch.distributed.ReduceOp``
    names for ``all_reduce_flags`` (0.5.23); anything else is not simulated."""

    def __init__(self) -> None:
        self.distributed = Config(
            "torch.distributed", ReduceOp=Config("ReduceOp", MIN="min", MAX="max")
        )

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise MissingStandIn(f"torch.{attr} (used by {standins._caller()}) is not simulated")


def all_reduce_flags(flags: list[int], group: Group, op: str) -> list[int]:
    """SGLang's ``all_reduce_flags`` (0.5.23): MIN or MAX of each entry over the group."""
    if not flags:
        return flags
    if op == "max":
        return [-v for v in group.all_reduce_min([-int(f) for f in flags])]
    return group.all_reduce_min([int(f) for f in flags])


class FakeNumpy:
    """``numpy`` as the decode queues use it on the KV indices: dtypes only (``astype``)."""

    int32 = "int32"
    int64 = "int64"

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise MissingStandIn(f"numpy.{attr} (used by {standins._caller()}) is not simulated")


class SimDecodeRequest(Strict):
    """SGLang's ``DecodeRequest`` dataclass: the fields the queues set and read."""

    _what = "decode_req"

    # the release's fields with their defaults (``DecodeTarget.request_fields``), per rank
    fields: ClassVar[dict[str, object]] = {}

    def __init__(self, req: SimReq, kv_receiver: Any, **values: object) -> None:
        for key, value in self.fields.items():
            setattr(self, key, value)
        self.req = req
        self.kv_receiver = kv_receiver
        for key, value in values.items():
            setattr(self, key, value)

    @property
    def seqlen(self) -> int:
        return len(self.req.origin_input_ids) + len(self.req.output_ids)


@dataclass
class RoomScript:
    """What the prefill does for one bootstrap room."""

    transfer_s: float | None  # after the indices arrive; None: the prefill is gone
    registered: bool = True  # the prefill registered the room (answers /query_dp_ranks)


class DecodeKVManager(Strict):
    """The KV manager every receiver of a rank shares, with a scripted transport: the prefill
    of a room reports Success (and writes the room's metadata) ``transfer_s`` seconds after
    the decode sent its indices; a prefill that is gone reports nothing."""

    _what = "kv_mgr"

    def __init__(self, rank: DecodeContext, waiting_timeout: int | None) -> None:
        self._rank = rank
        self.request_status: dict[int, int] = {}
        self.failure_records: dict[int, str] = {}
        self.failure_lock = threading.Lock()
        self.transfer_statuses: dict[int, _TransferStatus] = _Statuses()
        self.sent_at: dict[int, float] = {}
        self.prefill_tp_size_table: dict[str, int] = {}
        self.prefill_dp_size_table: dict[str, int] = {}
        self.prefill_pp_size_table: dict[str, int] = {}
        self.prefill_attention_tp_size_table: dict[str, int] = {}
        self.prefill_info_table: dict[str, object] = {}
        self.connection_pool: dict[str, object] = {}
        self.required_prefill_response_num_table: dict[int, int] = {}
        self.prefill_response_tracker: dict[int, set[int]] = {}
        self.addr_to_rooms_tracker: dict[str, set[int]] = _RoomTracker()
        self.tp_size = rank.world.config.ranks
        self.dp_size = 1
        self.attn_tp_size = rank.world.config.ranks
        self.attn_tp_rank = rank.rank
        self.attn_cp_size = 1
        self.attn_cp_rank = 0
        self.attn_dp_size = 1
        self.attn_dp_rank = 0
        self.pp_size = 1
        self.pp_rank = 0
        self.system_dp_rank = 0
        self.is_mla_backend = False
        self.enable_dp_attention = False
        self.prefill_peer_infos: dict[str, object] = {}  # NIXL 0.4.6.x: its bootstrap cache
        self.enable_all_cp_ranks_for_transfer = False
        self.local_ip = "10.0.0.3"
        self.rank_port = 17100 + rank.rank
        self.server_socket = Inert("server_socket")
        self.agent = Config(
            "agent",
            name=f"decode-agent-{rank.rank}",
            get_agent_metadata=lambda: b"decode-agent-metadata",
        )
        self.kv_args = Config(
            "kv_args",
            engine_rank=rank.rank,
            gpu_id=rank.rank,
            page_size=1,
            kv_data_ptrs=[],
            aux_data_ptrs=[],
            state_data_ptrs=[],
            state_types=[],
            kv_item_lens=[1],
            aux_item_lens=[1],
            prefill_pp_size=1,
            pp_rank=0,
            system_dp_rank=0,
        )
        self.server_args = Config(
            "kv_mgr.server_args",
            disaggregation_decode_allocation_policy="early",
        )
        self.bootstrap_timeout = 300
        self.enable_staging = False
        self.defer_decode_allocation = False  # the default allocation policy, early
        self.enable_deferred_decode_kv_release = False
        self.connection_lock = threading.Lock()
        if waiting_timeout is not None:
            self.waiting_timeout = waiting_timeout

    def __getattr__(self, attr: str) -> Any:
        if attr.endswith("_table"):  # the per-prefill caches a manager keeps: empty at first
            table: dict[object, object] = {}
            object.__setattr__(self, attr, table)
            return table
        return super().__getattr__(attr)

    def build_receiver_metadata_message(self, *, bootstrap_room: int, **_: object) -> list[bytes]:
        """The message that carries a room's KV indices (0.5.23): the room first."""
        return [str(bootstrap_room).encode("ascii"), KV_INDICES_MARK]

    def build_receiver_registration_message(self, *_: object, **__: object) -> list[bytes]:
        return [b"None", b"kv-args"]

    def try_ensure_parallel_info(self, bootstrap_addr: str) -> bool:
        """The prefill's parallel info is cached (its bootstrap server answered)."""
        return bootstrap_addr in self.prefill_info_table

    # upstream's later name for the same question (forks on 0.5.21+)
    ensure_parallel_info = try_ensure_parallel_info

    # Mooncake's status table

    def get_session_id(self) -> str:
        return f"decode-session-{self._rank.rank}"

    def update_status(self, room: int, status: int) -> None:
        if room not in self.request_status or status == int(standins.KVPoll.Failed):
            self.request_status[room] = int(status)
        else:
            self.request_status[room] = max(self.request_status[room], int(status))

    def check_status(self, room: int) -> int:
        self._deliver(room)
        return self.request_status[room]

    def record_failure(self, room: int, reason: str) -> None:
        with self.failure_lock:
            self.failure_records[room] = reason

    # NIXL's transfer table

    def update_transfer_status(self) -> None:
        for room in list(self.sent_at):
            self._deliver(room)

    def check_transfer_done(self, room: int) -> bool:
        self._deliver(room)
        status = self.transfer_statuses.get(room)
        return status is not None and (status.is_done() or status.is_failed())

    # the transport

    def sim_sent(self, room: int) -> None:
        """The decode sent the room's KV indices (the receiver's socket)."""
        self.sent_at.setdefault(room, self._rank.now())
        self._rank.record("indices_sent", self._rank.rid_of(room))

    def sim_abort_sent(self, room: int) -> None:
        self._rank.record("abort_sent", self._rank.rid_of(room))

    def _deliver(self, room: int) -> None:
        script = self._rank.script(room)
        sent = self.sent_at.get(room)
        if script is None or script.transfer_s is None or sent is None:
            return
        if self._rank.now() + EPS < sent + script.transfer_s:
            return
        if self.request_status.get(room) != int(standins.KVPoll.Success):
            self._rank.write_metadata(room)
            self.update_status(room, int(standins.KVPoll.Success))
            self.transfer_statuses[room].done = True


class _TransferStatus:
    """NIXL's ``TransferStatus`` of a room."""

    def __init__(self) -> None:
        self.done = False
        self.num_kvs_expected: int | None = None

    def is_done(self) -> bool:
        return self.done

    def is_failed(self) -> bool:
        return self.num_kvs_expected == -1


class _Statuses(dict[int, _TransferStatus]):
    def __missing__(self, room: int) -> _TransferStatus:
        self[room] = _TransferStatus()
        return self[room]


class _RoomTracker(dict[str, set[int]]):
    def __missing__(self, addr: str) -> set[int]:
        self[addr] = set()
        return self[addr]


class _Lock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


class SimSocket:
    """The ZMQ PUSH socket to the prefill: a message that names a room in its first two
    frames (NIXL sends a guard frame first) and carries KV indices (``SimTensor.tobytes``)
    hands that room's indices to the transport; an abort notification (0.5.13+) is
    recorded; any other message (a registration) changes nothing."""

    def __init__(self, manager: DecodeKVManager) -> None:
        self._manager = manager

    def send_multipart(self, frames: list[bytes], *_: object, **__: object) -> None:
        texts = [f.decode("ascii", "replace") if isinstance(f, bytes) else "" for f in frames]
        room = next((int(t) for t in texts[:2] if t.isdigit()), None)
        if room is None:
            return
        if any("abort" in t.lower() for t in texts):
            self._manager.sim_abort_sent(room)
        elif any(isinstance(f, bytes) and f.startswith(KV_INDICES_MARK) for f in frames):
            self._manager.sim_sent(room)


class PrefillInfo(Config):
    """``PrefillServerInfo`` (0.5.10+): the prefill's parallel layout, from its bootstrap
    server."""


class ReceiverNetwork:
    """The receivers' network calls, replaced (the rest of each receiver is the release's)."""

    kv_mgr: DecodeKVManager

    # how many values the release's own look-up returns (a tuple of sizes), by method
    sim_arity: ClassVar[dict[str, int]] = {}

    def _sizes(self, method: str) -> Any:
        """The prefill's TP size (the decode's: one prefill rank per decode rank), then a
        size of one for each other value (DP, PP, ...)."""
        arity = self.sim_arity.get(method, 1)
        tp = self.kv_mgr.tp_size
        return tp if arity <= 1 else (tp,) + (1,) * (arity - 1)

    def _get_prefill_parallel_info_from_server(self, *_: object) -> Any:
        return self._sizes("_get_prefill_parallel_info_from_server")

    def _get_prefill_dp_size_from_server(self, *_: object) -> Any:
        return self._sizes("_get_prefill_dp_size_from_server")

    def _get_bootstrap_info_from_server(self, *_: object, **__: object) -> Any:
        """The prefill rank's address; NIXL 0.4.6.x asks for a list of {rank: address}
        ("equal sources"), one entry per prefill rank this rank reads from."""
        info = {"rank_ip": PREFILL_SERVER.split(":")[0], "rank_port": PREFILL_RANK_PORT}
        if self.sim_arity.get("_get_bootstrap_info_from_server") == LIST_OF_SOURCES:
            return [{0: info}]
        return info

    def _register_kv_args(self, *_: object, **__: object) -> None:
        return None

    # the rank's KV manager: ``_connect`` is a classmethod in SGLang
    sim_manager: DecodeKVManager

    @classmethod
    def _connect(cls, *_: object, **__: object) -> Any:
        """A socket, with its lock where the release's ``_connect`` returns both."""
        if cls.sim_arity.get("_connect", 2) == 1:
            return SimSocket(cls.sim_manager)
        return SimSocket(cls.sim_manager), _Lock()

    _connect_to_bootstrap_server = _connect


class ScriptedReceiver:
    """A KV receiver for a tree with no receiver class of its own (a decode corpus tree, a
    fork's ``decode.py`` alone): bootstrapped once created (0.5.10+: once
    ``init(prefill_dp_rank)`` gives it its prefill's DP rank), WaitingForInput until the queue sends
    its KV indices (``init(indices, ...)`` up to 0.5.9, ``send_metadata`` after), then
    Transferring until the rank's KV manager delivers the room (Success). Like every
    receiver once pdguard's receiver-waiting-timeout has run, it reports Failed once its
    indices have waited the waiting timeout for the prefill, and once aborted."""

    def __init__(
        self, rank: DecodeContext, spec: DecodeSpec, pends: bool, *args: Any, **kwargs: Any
    ) -> None:
        self._rank = rank
        self._spec = spec
        self.kv_mgr: DecodeKVManager = rank.kv_manager
        self.bootstrap_room: int = int(
            kwargs.get("bootstrap_room", args[2] if len(args) > 2 else 0)
        )
        self.bootstrap_addr = kwargs.get("bootstrap_addr", args[1] if len(args) > 1 else None)
        # 0.5.10+ (``pends``): bootstrapped by ``init(prefill_dp_rank)`` once the rank is
        # known; before, as it is created
        self._bootstrapped = not pends
        self._sent_at: float | None = None
        self.conclude_state: int | None = None
        timeout = rank.world.config.env.get(WAITING_TIMEOUT_ENV, "300")
        self._waiting_timeout = float(timeout)

    def init(self, *args: Any, **kwargs: Any) -> None:
        first = args[0] if args else kwargs.get("prefill_dp_rank", kwargs.get("kv_indices"))
        if first is None or isinstance(first, int):
            self._bootstrapped = True  # 0.5.10+: the prefill DP rank is known now
        else:
            self._send()

    def send_metadata(self, *_: object, **__: object) -> None:
        self._send()

    def _send(self) -> None:
        if self._sent_at is None:
            self._sent_at = self._rank.now()
            self.kv_mgr.sim_sent(self.bootstrap_room)

    def poll(self) -> int:
        kv_poll = standins.KVPoll
        if self.conclude_state is not None:
            return self.conclude_state
        if not self._bootstrapped:
            return int(kv_poll.Bootstrapping)
        if self._sent_at is None:
            return int(kv_poll.WaitingForInput)
        self.kv_mgr._deliver(self.bootstrap_room)
        if self.kv_mgr.request_status.get(self.bootstrap_room) == int(kv_poll.Success):
            return int(kv_poll.Success)
        if self._rank.now() - self._sent_at >= self._waiting_timeout - EPS:
            self.kv_mgr.record_failure(self.bootstrap_room, "waiting timeout (scripted receiver)")
            self.conclude_state = int(kv_poll.Failed)
            return self.conclude_state
        return int(kv_poll.Transferring)

    def abort(self) -> None:
        self.conclude_state = int(standins.KVPoll.Failed)

    def failure_exception(self) -> None:
        raise standins.KVTransferError(
            self.bootstrap_room, "KV transfer failed (scripted receiver)"
        )

    def clear(self) -> None:
        pass


def poll_and_all_reduce(
    pollers: list[Any],
    group: Group,
    decode_reqs: list[SimDecodeRequest] | None = None,
    metadata_buffers: MetadataBuffers | None = None,
    server_args: object = None,
) -> list[int]:
    """SGLang's decode ``poll_and_all_reduce``: each receiver's poll, with (0.5.13+, when the
    queue passes its requests and metadata buffers) Success held as Transferring while the
    request's metadata row has no room yet, then the MIN over the group."""
    polls = [int(poller.poll()) for poller in pollers]
    if decode_reqs is not None and metadata_buffers is not None and server_args is not None:
        success = int(standins.KVPoll.Success)
        for i, poll in enumerate(polls):
            index = decode_reqs[i].metadata_buffer_index
            if poll == success and metadata_buffers.rooms.get(index, 0) == 0:
                polls[i] = int(standins.KVPoll.Transferring)
    return group.all_reduce_min(polls)


def _kv_to_page_indices(kv_indices: SimTensor, page_size: int) -> SimTensor:
    return kv_indices


def _bootstrap_addr(req: SimReq) -> str:
    return f"{req.bootstrap_host}:{req.bootstrap_port}"


def _not_fake(*_: object) -> bool:
    return False


class _NotThisPool:
    """A KV pool or request pool type the simulated decode does not use (``isinstance`` of
    the simulated pools with it is False)."""


# Pool types the queues test with ``isinstance`` (SWA, hybrid-linear, NSA, Mamba models).
OTHER_POOLS = (
    "HybridLinearKVPool",
    "SWAKVPool",
    "NSATokenToKVPool",
    "HybridMambaDecodeReqToTokenPool",
    "HybridReqToTokenPool",
    "MambaPool",
    "SWATokenToKVPoolAllocator",
    "DeepSeekV4TokenToKVPool",
)

# Names the loaded code reaches only on paths no decode scenario takes (staging buffers,
# HiCache restore, host staging): any use is a MissingStandIn, so the run exits 2 naming it.
UNREACHED = (
    "poll_and_all_reduce_with_staging",
    "DecodePrefixMatch",
    "HiCacheRestoreGatedKVReceiver",
    "InitLoadBackParams",
    "MatchPrefixParams",
    "match_prefix_for_req",
    "dsv4_state_payloads",
    "get_dsv4_c128_state_indices",
    "get_num_new_pages",
    "is_dsv4_c128_online_enabled",
    "page_align_floor",
    "AbortNotification",
    "_bigram_boundary_tokens",
    "_req_radix_key",
    "PoolName",
    "PoolTransfer",
    "RetractionBackup",
    "_bind_root_prefix",
    "_generate_fake_prefill_handoff_output_id",
    "ceil_align",
    "discard_kv_cache_backup",
    "get_dsa_tail_state_indices",
    "get_qsa_pending_state_indices",
    "is_swa_req_ring",
    "match_kv_cache",
    "minimax_index_transfer_pages",
    "suffix_page_indices",
    "DecodeStagingHandler",
    "retraction_restore",
    "DecLockRefParams",
    "EvictParams",
)


class KVTransferDestination:
    """Where a receiver puts the KV (0.5.21+): the simulated decode uses device memory."""

    DEVICE = "device"
    HOST = "host"


class _EnumNames:
    """A string enum of SGLang's (``StateType``): each member is its lower-case name; the
    simulated model has no extra state, so the members only key dictionaries."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> str:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return attr.lower()


class DecodeEnvs:
    """``envs``: ``envs.NAME.get()`` reads the scenario's environment, else the release's own
    default (its environ.py)."""

    def __init__(self, env: dict[str, str], defaults: Mapping[str, object]) -> None:
        self._env = env
        self._defaults = defaults

    def __getattr__(self, name: str) -> _EnvValue:
        if name.startswith("__"):
            raise AttributeError(name)
        if name not in self._defaults:
            raise MissingStandIn(f"envs.{name} has no default in the release's environ.py")
        return _EnvValue(self._env.get(name), self._defaults[name])


class _EnvValue:
    def __init__(self, raw: str | None, default: object) -> None:
        self._raw, self._default = raw, default

    def get(self) -> object:
        if self._raw is None:
            return self._default
        if isinstance(self._default, bool):
            return self._raw.lower() in ("1", "true", "yes")
        if isinstance(self._default, int | float):
            return type(self._default)(self._raw)
        return self._raw

    value = property(get)


_ENV_KINDS = {"EnvInt": int, "EnvFloat": float, "EnvBool": bool, "EnvStr": str}


def _env_defaults(tree: SourceTree) -> dict[str, object]:
    """``NAME = EnvInt(300)`` and the like in the release's environ.py: name -> default."""
    data = tree.read_bytes(ENVIRON_PATH)
    found: dict[str, object] = dict(standins.ENV_DEFAULTS)
    if data is None:
        return found
    for node in ast.walk(ast.parse(data)):
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id in _ENV_KINDS
        ):
            continue
        args = node.value.args
        if args and isinstance(args[0], ast.Constant):
            found[node.targets[0].id] = args[0].value
    return found


def _pool_type(name: str) -> Callable[[Any], object]:
    return lambda ctx: type(name, (_NotThisPool,), {})


def _unreached(name: str) -> Callable[[Any], object]:
    return lambda ctx: standins.Unavailable(name)


DISAGG_ARGS = {  # the decode server's disaggregation arguments (SGLang's defaults)
    "disaggregation_decode_enable_offload_kvcache": False,
    "disaggregation_decode_allocation_policy": "early",
    "disaggregation_decode_polling_interval": 1,
    "disaggregation_decode_enable_radix_cache": False,
    "disaggregation_transfer_backend": "mooncake",
    "disaggregation_decode_host_receive_threshold": 1.0,  # 1: never receive into host memory
    "disaggregation_decode_retraction_backup": False,
    "disaggregation_enable_kv_checksum": False,
    "disaggregation_ib_device": None,
}

KEYS_EXTRA: dict[str, Callable[[Any], object]] = {
    "poll_and_all_reduce": lambda ctx: poll_and_all_reduce,
    "get_disagg": lambda ctx: lambda: Config("get_disagg()", **DISAGG_ARGS),
    "get_memory": lambda ctx: lambda: Config("get_memory()", disable_radix_cache=True),
    # no DeepSeek-V4 pools: a retracted request waits in retracted_queue (0.5.23)
    **{
        name: (lambda ctx: lambda *_, **__: False)
        for name in ("dsv4_needs_rebootstrap", "dsv41_dspark_needs_rebootstrap")
    },
    # a resumed retracted request's KV comes back from the host (0.5.23; before, the request's
    # own load_kv_cache): nothing to simulate, as DecodeReq.load_kv_cache
    "restore_kv_cache": lambda ctx: lambda *_, **__: None,
    # no Mamba state: its capacity never limits admission
    "ensure_mamba_capacity": lambda ctx: lambda *_, **__: True,
    "envs": lambda ctx: DecodeEnvs(ctx.env, ctx.world.target.env_defaults),
    "KVTransferDestination": lambda ctx: KVTransferDestination,
    "StateType": lambda ctx: _EnumNames("StateType"),
    "HiCacheRestoreResult": lambda ctx: _EnumNames("HiCacheRestoreResult"),
    # the simulated decode runs on a GPU-less host like a CUDA one: no NPU, HIP or XPU paths
    **{name: (lambda ctx: _not_fake) for name in ("is_npu", "is_hip", "is_xpu", "is_cpu")},
    "pack_int_lists": lambda ctx: lambda *lists: b"",
    **{name: _unreached(name) for name in UNREACHED},
    **{name: _pool_type(name) for name in OTHER_POOLS},
    "get_kv_class": lambda ctx: lambda backend, class_type: ctx.new_receiver,
    # a tree with no receiver hierarchy of its own (a decode fork's ``decode.py`` alone): the
    # static look-up ``_resolve_pending_reqs`` calls on the class (0.5.10+), the prefill
    # bootstrap server's ``/query_dp_ranks`` (a tree's own class is loaded instead, and the
    # world answers the same look-up on it)
    "CommonKVReceiver": lambda ctx: Config(
        "CommonKVReceiver", query_prefill_dp_ranks=ctx.query_dp_ranks
    ),
    "DecodeRequest": lambda ctx: type(
        "DecodeRequest", (SimDecodeRequest,), {"fields": ctx.world.target.request_fields}
    ),
    "kv_to_page_indices": lambda ctx: _kv_to_page_indices,
    "_bootstrap_addr": lambda ctx: _bootstrap_addr,
    "_is_fake_transfer": lambda ctx: _not_fake,
    "torch": lambda ctx: FakeTorch(),
    "all_reduce_flags": lambda ctx: all_reduce_flags,
    "numpy": lambda ctx: FakeNumpy(),
    "zmq": lambda ctx: standins.Unavailable("zmq"),
    "requests": lambda ctx: standins.Unavailable("requests"),
    "struct": lambda ctx: __import__("struct"),
    "socket": lambda ctx: standins.Unavailable("socket"),
    "defaultdict": lambda ctx: __import__("collections").defaultdict,
    "threading": lambda ctx: threading,
    "get_local_ip_by_remote": lambda ctx: lambda: "10.0.0.3",
    "is_valid_ipv6_address": lambda ctx: lambda addr: False,
    "format_tcp_address": lambda ctx: lambda ip, port: f"tcp://{ip}:{port}",
}
REGISTRY = {**standins.REGISTRY, **KEYS_EXTRA}
KEYS = frozenset(REGISTRY)


# -- the scheduler and the queues' state -----------------------------------------------------


# No speculative decoding: ``spec_algorithm.is_none()``.
NO_SPECULATION = Config("spec_algorithm", is_none=lambda: True)


class DecodeSchedulerStandIn(Strict):
    """What ``process_decode_queue`` and the queues use of SGLang's ``Scheduler``."""

    _what = "self (scheduler)"

    def sim_init(self, rank: DecodeContext) -> None:
        self._rank = rank
        self.waiting_queue: list[SimReq] = []
        self.running_batch = Config("running_batch", reqs=[], is_empty=lambda: True)
        self.last_batch = None
        self.enable_hisparse = False
        self.enable_decode_hicache = False
        self.enable_priority_scheduling = False
        self.num_tokens_pre_allocated = 0  # 0.4.6 - 0.4.6.post4 count it on the scheduler
        self.tp_rank = rank.rank
        self.schedule_low_priority_values_first = False
        self.enable_lora = False
        self.enable_overlap = False
        self.kv_checksum_computer = None
        self.sliding_window_size = None
        self.running_mbs: list[object] = []
        self.metrics_reporter = Inert("metrics_reporter")
        self.tp_worker = Inert("tp_worker")
        self.batch_result_processor = Inert("batch_result_processor")
        self.output_streamer = Config("output_streamer", stream_output=self.stream_output)
        self.enable_metrics = False
        self.enable_hicache_storage = False
        self.metrics_collector = Inert("metrics_collector")
        self.spec_algorithm = NO_SPECULATION
        self.tree_cache = rank.tree_cache
        self.pp_size = 1
        # the decode's radix cache is off by default (as ``get_memory()`` says): read when a
        # retracted request is resumed
        self.server_args = Config(
            "server_args", enable_dp_attention=False, disable_radix_cache=True, **DISAGG_ARGS
        )

    def stream_output(self, reqs: list[SimReq], *_: object, **__: object) -> None:
        for req in reqs:
            self._rank.record("streamed", req, repr(req.finished_reason))
            reason = req.finished_reason
            if isinstance(reason, FINISH_ABORT):
                self._rank.record("client_error", req, str(reason.message))


class DecodeTreeCache(Strict):
    """The radix cache: releasing a request's KV frees its pages and its request-pool slot."""

    _what = "tree_cache"

    def __init__(self, rank: DecodeContext) -> None:
        self._rank = rank

    def cache_finished_req(self, req: SimReq, *_: object, **__: object) -> None:
        self._rank.free_kv(req)

    def release_aborted_request(self, rid: str) -> None:
        pass

    def unlock(self, lock: object) -> None:
        """Release a HiCache restore lock (0.5.23); the simulated decode takes none."""
        if lock is not None:
            raise MissingStandIn("a HiCache restore lock: HiCache is not simulated")


class ReqToTokenPool(Strict):
    """``req_to_token_pool``: request slots, none free while decode memory is full."""

    _what = "req_to_token_pool"

    def __init__(self, rank: DecodeContext, size: int) -> None:
        self._rank = rank
        self.size = size
        self.used: dict[str, int] = {}
        self.req_to_token = _TokenRows()

    def available_size(self) -> int:
        if self._rank.memory_full():
            return 0
        return self.size - len(self.used)


class _TokenRows:
    def __getitem__(self, idx: object) -> SimTensor:
        return SimTensor(list(range(4096)))


class _RoomColumn:
    """``metadata_buffers.bootstrap_room``: the room the prefill wrote into each row."""

    def __init__(self, rooms: dict[int, int]) -> None:
        self._rooms = rooms

    @staticmethod
    def _row(key: object) -> int:
        row = key[0] if isinstance(key, tuple) else key
        assert isinstance(row, int)
        return row

    def __getitem__(self, key: object) -> SimTensor:
        return SimTensor([self._rooms.get(self._row(key), 0)])

    def __setitem__(self, key: object, value: int) -> None:
        self._rooms[self._row(key)] = int(value)


class TokenAllocator(Strict):
    """``token_to_kv_pool_allocator``: one token a page, no free token while memory is full."""

    _what = "token_to_kv_pool_allocator"
    SIZE = 1 << 20

    def __init__(self, rank: DecodeContext) -> None:
        self._rank = rank
        self.page_size = 1
        self.size = self.SIZE
        self.device = "cpu"

    def available_size(self) -> int:
        return 0 if self._rank.memory_full() else self.SIZE

    def translate_kv_indices_for_transfer(self, indices: SimTensor) -> SimTensor:
        """The same indices: no compressed or host-side layout (0.5.23)."""
        return indices

    def prealloc_fits_assumes_reclaim(self) -> bool:
        return False

    def prealloc_fits(
        self, tree_cache: object, full_tokens: int, swa_tokens: int, **budgets: Any
    ) -> bool:
        """A plain allocator's check: the full tokens within their budget (0.5.23)."""
        return full_tokens <= budgets["full_budget_tokens"]

    def prealloc_ceiling_fits(self, *_: object) -> None:
        """No unified FULL/SWA byte budget (0.5.23): None, as SGLang's plain allocator."""
        return None


class _OutputIdRows:
    """``metadata_buffers[0]`` of 0.4.6 - 0.4.6.post4: the output-id rows (16 padded values)."""

    def __getitem__(self, idx: object) -> SimTensor:
        return SimTensor([7] + [0] * 15)


class MetadataBuffers(Strict):
    """The metadata rows the prefill writes (``get_buf`` returns the release's buffers).

    Up to 0.4.6.post4 there is no ``MetadataBuffers`` class (no ``get_buf``): the queues get a
    list of tensors, the output ids first, and read ``metadata_buffers[0][idx][0]``."""

    _what = "metadata_buffers"

    def __init__(self, names: tuple[str, ...]) -> None:
        self._names = names
        self.rooms: dict[int, int] = {}
        self.bootstrap_room = _RoomColumn(self.rooms)

    def __getitem__(self, buffer: int) -> _OutputIdRows:
        if self._names or buffer != 0:
            raise MissingStandIn(
                f"metadata_buffers[{buffer}] (read by {standins._caller()}) has no stand-in: "
                "only the output ids of a release with no MetadataBuffers class"
            )
        return _OutputIdRows()

    def clear_slot(self, idx: int) -> None:
        """The row is free again: no room written (0.5.23)."""
        self.rooms.pop(idx, None)

    def get_buf(self, idx: int) -> tuple[SimTensor | None, ...]:
        room = self.rooms.get(idx, 0)
        return tuple(
            SimTensor([room]) if name == "bootstrap_room" else SimTensor([7] + [0] * 15)
            for name in self._names
        )


class QueueState(Strict):
    """The state of a decode queue (its ``__init__`` is not run: it builds the KV manager and
    device buffers)."""

    _what = "self (decode queue)"

    def sim_init(self, rank: DecodeContext) -> None:
        self.queue: list[SimDecodeRequest] = []
        self.retracted_queue: list[SimReq] = []
        self.pending_reqs: list[SimDecodeRequest] = []
        self.scheduler = rank.scheduler
        self.tree_cache = rank.tree_cache
        self.gloo_group = rank.tp_group
        self.tp_rank = rank.rank
        self.tp_size = rank.world.config.ranks
        self.dp_size = 1
        self.pp_size = 1
        self.attn_tp_size = rank.world.config.ranks
        self.kv_manager = rank.kv_manager
        self.transfer_backend = "mooncake"
        self.req_to_token_pool = rank.req_pool
        self.token_to_kv_pool = Config("token_to_kv_pool", page_size=1)
        self.token_to_kv_pool_allocator = TokenAllocator(rank)
        self.req_to_metadata_buffer_idx_allocator = rank.metadata_allocator
        self.metadata_buffers = rank.metadata_buffers
        self.num_reserved_decode_tokens = 512
        self.max_total_num_tokens = 1 << 20
        self.spec_algorithm = NO_SPECULATION
        self.enable_staging = False
        self.prefill_pp_size = 1
        self._ensure_last_attempt_time: dict[str, float] = {}
        self._ensure_retry_count: dict[str, int] = {}
        self._max_ensure_retries = 15
        self._ensure_retry_interval = 1.0
        self._rank = rank
        # 0.5.19+: rebootstrap, deferred KV release (off by default), host receive (off)
        self.held_rebootstrap_reqs: list[SimReq] = []
        self._deferred_releases: list[object] = []
        self.enable_deferred_kv_release = False
        self.deferred_kv_release_timeout = 30.0
        self.enable_host_receive = False
        # host receive off: no host pool, so nothing is reserved on it
        self.host_pool, self.host_reserved_tokens = None, 0
        self._num_published_destinations = 0
        self._skipped_checksum_signatures: set[object] = set()
        self.kv_checksum_signature = 0
        self.staging_handler = None
        self.is_mla_backend = False
        self.draft_token_to_kv_pool = None
        self._prefill_dp_rank_queries: dict[str, object] = {}

    # device memory, replaced

    def _allocatable_tokens(self, *_: object, **__: object) -> int:
        return 0 if self._rank.memory_full() else 1 << 20

    def _pre_alloc(self, req: SimReq, *_: object, **__: object) -> SimTensor:
        self._rank.alloc_kv(req)
        return SimTensor(list(range(len(req.origin_input_ids))))


class DecodeReq(SimReq):
    """A decode request: SimReq and what the decode queues read of SGLang's ``Req``."""

    def __init__(self, rid: str, bootstrap_room: int) -> None:
        super().__init__(rid, bootstrap_room)
        self.bootstrap_host, port = PREFILL_SERVER.split(":")
        self.bootstrap_port: Any = port
        self.sampling_params: Any = Config("sampling_params", max_new_tokens=16, ignore_eos=False)
        self.eos_token_ids: set[int] = set()
        self.top_logprobs_num = 0
        self.data_parallel_rank = None
        self.kv_committed_len = 0
        self.pd_rebootstrap_forced_output_id = None

    def load_kv_cache(self, *_: object) -> None:
        """A retracted request's KV comes back from the host (nothing to simulate)."""

    def check_finished(self, *_: object) -> None:
        """16 new tokens: not finished after the first."""
