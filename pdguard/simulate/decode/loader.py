"""The decode half's loader: what ``simulate`` loads of the release's decode code (with the
shared ``simulate.loader`` machinery, never imported).

* ``DecodePreallocQueue`` (``add``, ``pop_preallocated``, ``resume_retracted_reqs`` and what
  they reach), ``DecodeTransferQueue`` (``extend``, ``pop_transferred``) and the scheduler
  mixin's ``process_decode_queue``, which calls both queues (and holds the retraction gate);
* each backend's KV receiver, ``MooncakeKVReceiver`` and ``NixlKVReceiver`` with their bases:
  the constructor, ``init``/``send_metadata`` (which sends the KV indices), ``poll``,
  ``abort``, ``failure_exception`` and ``clear``.

What the simulated world gives instead is listed in ``DecodeTarget.replaced`` (the JSON report's
``replaced_by_standins``); the stand-ins are in ``decode.standins``, the engine in
``decode.world``.
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ...checks.classes import methods_of
from ...sglang_names import (
    DECODE_PATH,
    MOONCAKE_CONN_PATH,
    NIXL_CONN_PATH,
    PREFILL_PATH,
    UTILS_PATH,
)
from ...tree import SourceTree
from .. import loader
from .standins import KEYS, LIST_OF_SOURCES, _env_defaults, _Lock

RECEIVERS = {
    "mooncake": (MOONCAKE_CONN_PATH, "MooncakeKVReceiver"),
    "nixl": (NIXL_CONN_PATH, "NixlKVReceiver"),
}
PREALLOC_QUEUE = "DecodePreallocQueue"
TRANSFER_QUEUE = "DecodeTransferQueue"
PROCESS_QUEUE = "process_decode_queue"
REQUEUE_FUNCTION = "optimistic_release_and_requeue"  # the prefill's optimistic prefill
PREALLOC_ENTRIES = ("add", "extend", "pop_preallocated", "resume_retracted_reqs")
TRANSFER_ENTRIES = ("extend", "pop_transferred")
RECEIVER_ENTRIES = ("__init__", "init", "send_metadata", "poll", "abort", "failure_exception")
# Replaced by the simulated world (device memory), never loaded from the target.
PREALLOC_REPLACED = frozenset({"_pre_alloc", "_allocatable_tokens", "__init__", "_init_kv_manager"})
TRANSFER_REPLACED = frozenset({"__init__"})
# The receivers' network: replaced by ReceiverNetwork's methods.
RECEIVER_REPLACED = frozenset(
    {
        "_get_bootstrap_info_from_server",
        "_get_prefill_parallel_info_from_server",
        "_get_prefill_dp_size_from_server",
        "_register_kv_args",
        "_connect",
        "_connect_to_bootstrap_server",
        "query_prefill_dp_ranks",
    }
)

# -- the target ------------------------------------------------------------------------------


@dataclass
class DecodeTarget:
    """The release's decode code, compiled once and built per rank."""

    label: str
    version: str | None
    code: loader.Target
    mixin: str
    receivers: dict[str, tuple[str, str]]  # backend -> (module, class)
    # the KV manager of a backend sets ``self.waiting_timeout`` (upstream's receiver timeout
    # reads it there: Mooncake 0.4.9.post1+, NIXL 0.5.6+)
    manager_waiting_timeout: dict[str, bool]
    # backend -> the class-level defaults of the receiver's hierarchy the loader leaves out
    # (it loads methods only): constants, and nullcontext() / Lock() / RLock() as made
    class_defaults: dict[str, dict[str, object]]
    # backend -> replaced look-up -> how many values its return gives (a tuple's length)
    arity: dict[str, dict[str, int]]
    get_buf: tuple[str, ...]  # the metadata buffers MetadataBuffers.get_buf returns, in order
    prealloc_methods: frozenset[str]
    add_params: tuple[str, ...]
    replaced: tuple[str, ...]
    env_defaults: dict[str, object] = field(default_factory=dict)
    # DecodeRequest's fields with a default: name -> the default (an enum member by its
    # lower-case name, as ``_EnumNames`` gives it)
    request_fields: dict[str, object] = field(default_factory=dict)
    # the tree's prefill has optimistic prefill (``optimistic_release_and_requeue``, 0.5.13+):
    # its requests may reach the decode after re-prefills (``--seeds`` draws them)
    prefill_requeues: bool = False
    # queue class -> ``self.X = <literal>`` of its own ``__init__`` (which the world replaces):
    # a fork's queue keeps state of its own there (``self.awaiting_rank = []``)
    init_literals: dict[str, dict[str, str]] = field(default_factory=dict)
    # queue class -> the containers its loaded methods keep on self (``loader.own_state``)
    own_state: dict[str, dict[str, str]] = field(default_factory=dict)
    # a fork's own lists where the prealloc queue parks requests whose prefill DP rank
    # /query_dp_ranks has not answered (``parked_lists``): its pending_reqs
    parked: tuple[str, ...] = ()

    @property
    def retracts(self) -> bool:
        """Does the release retract decode requests into the prealloc queue (0.4.7.post1+)?"""
        return "is_retracted" in self.add_params

    @property
    def pends(self) -> bool:
        """Does the prealloc queue park requests whose prefill DP rank is unknown (0.5.10+)?"""
        return "_resolve_pending_reqs" in self.prealloc_methods

    @property
    def pending_lists(self) -> tuple[str, ...]:
        """The prealloc queue's lists of requests waiting for their prefill DP rank."""
        return ("pending_reqs",) if self.pends else self.parked


def load(tree: SourceTree) -> DecodeTarget:
    """The target's decode code, compiled for the simulation; LoadError says why it cannot be."""
    ldr = loader._Loader(tree, KEYS)
    receivers: dict[str, tuple[str, str]] = {}
    waiting: dict[str, bool] = {}
    arity: dict[str, dict[str, int]] = {}
    defaults: dict[str, dict[str, object]] = {}
    for backend, (rel, name) in RECEIVERS.items():
        if tree.read_bytes(rel) is None or name not in ldr.classes(rel):
            continue
        used = _called_on(ldr.parsed(DECODE_PATH), frozenset({"kv_receiver"}))
        ldr.plan_class(rel, name, (*RECEIVER_ENTRIES, *used), RECEIVER_REPLACED)
        receivers[backend] = (rel, name)
        waiting[backend] = _manager_sets(ldr, rel, "waiting_timeout")
        arity[backend] = _arity(ldr, rel, name)
        defaults[backend] = _class_defaults(ldr, rel, name)
    # after the receivers: decode.py names their base classes (built first)
    mixin = ldr.class_defining(DECODE_PATH, PROCESS_QUEUE)
    # what the mixin and each queue call on the other queue (``self.transfer_queue.X``,
    # ``self.scheduler.disagg_decode_prealloc_queue.X``, ...)
    module = ldr.parsed(DECODE_PATH)
    prealloc = ldr.plan_class(
        DECODE_PATH,
        PREALLOC_QUEUE,
        (*PREALLOC_ENTRIES, *_called_on(module, PREALLOC_HOLDERS)),
        PREALLOC_REPLACED,
    )
    transfer = ldr.plan_class(
        DECODE_PATH,
        TRANSFER_QUEUE,
        (*TRANSFER_ENTRIES, *_called_on(module, TRANSFER_HOLDERS)),
        TRANSFER_REPLACED,
    )
    ldr.plan_class(DECODE_PATH, mixin, (PROCESS_QUEUE,))
    ldr.resolve()
    attributes = loader._attribute_verdicts(ldr)
    code = loader.Target(
        label=tree.label,
        version=tree.sglang_version(),
        mixin=(DECODE_PATH, mixin),
        bootstrap_queue=(DECODE_PATH, PREALLOC_QUEUE),
        nixl_sender=None,
        modules=[ldr.modules[rel] for rel in ldr.order],
        self_reads={},
        loaded=loader._loaded_methods(ldr),
        replaced=(),
        pass_along=frozenset(a for a, v in attributes.items() if v.passes_along),
        attributes=attributes,
        display={rel: tree.display(rel) for rel in ldr.order},
    )
    add = methods_of(prealloc.node).get("add")
    queues = {PREALLOC_QUEUE: prealloc, TRANSFER_QUEUE: transfer}
    init_literals = {name: loader.init_literals(plan.node) for name, plan in queues.items()}
    return DecodeTarget(
        label=tree.label,
        version=tree.sglang_version(),
        code=code,
        mixin=mixin,
        receivers=receivers,
        manager_waiting_timeout=waiting,
        arity=arity,
        class_defaults=defaults,
        get_buf=_get_buf(tree),
        prealloc_methods=frozenset(methods_of(prealloc.node)),
        env_defaults=_env_defaults(tree),
        request_fields=_request_fields(ldr.classes(DECODE_PATH).get("DecodeRequest")),
        add_params=tuple(a.arg for a in add.args.args) if add is not None else (),
        init_literals=init_literals,
        parked=parked_lists(prealloc.node, init_literals[PREALLOC_QUEUE]),
        prefill_requeues=_defines(tree, PREFILL_PATH, REQUEUE_FUNCTION),
        own_state={
            name: loader.own_state(loader._methods_of(plan)) for name, plan in queues.items()
        },
        replaced=tuple(
            sorted(
                {f"{PREALLOC_QUEUE}.{m}" for m in PREALLOC_REPLACED - {"__init__"}}
                | {f"{name}.{m}" for name in ("receivers",) for m in RECEIVER_REPLACED}
            )
        ),
    )


_QUEUES_OF_A_RELEASE = frozenset({"queue", "retracted_queue", "pending_reqs"})


def parked_lists(prealloc: ast.ClassDef | None, literals: Mapping[str, str]) -> tuple[str, ...]:
    """A fork's prealloc queue with no ``_resolve_pending_reqs`` whose methods still ask
    ``query_prefill_dp_ranks`` (/query_dp_ranks) for a room's prefill DP rank: the lists its
    ``__init__`` starts empty beside the release's queues, where it parks requests until the
    rank is known (``awaiting_rank``). Empty for a release (0.5.10+ park in pending_reqs;
    before, the receivers ask the bootstrap server themselves)."""
    methods = methods_of(prealloc) if prealloc is not None else {}
    if "_resolve_pending_reqs" in methods or not any(
        isinstance(n, ast.Attribute) and n.attr == "query_prefill_dp_ranks"
        for function in methods.values()
        for n in ast.walk(function)
    ):
        return ()
    return tuple(
        sorted(
            attr
            for attr, literal in literals.items()
            if literal in ("[]", "list()") and attr not in _QUEUES_OF_A_RELEASE
        )
    )


_CLASS_VALUES: dict[str, Callable[[], object]] = {
    "nullcontext": lambda: _Lock(),
    "Lock": threading.Lock,
    "RLock": threading.RLock,
}


def _class_defaults(ldr: loader._Loader, rel: str, name: str) -> dict[str, object]:
    """Class-level ``name = <constant>`` (and ``nullcontext()``, ``threading.Lock()``) of the
    class and its bases, the class's own first."""
    found: dict[str, object] = {}
    for _, cls, _ in ldr.hierarchy(rel, name):
        for stmt in cls.body:
            target: ast.expr | None = stmt.target if isinstance(stmt, ast.AnnAssign) else None
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
            value = getattr(stmt, "value", None)
            if not isinstance(target, ast.Name) or target.id in found or value is None:
                continue
            if isinstance(value, ast.Constant):
                found[target.id] = value.value
            elif isinstance(value, ast.Call) and not value.args:
                func = value.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called in _CLASS_VALUES:
                    found[target.id] = _CLASS_VALUES[called]
    return found


PREALLOC_HOLDERS = frozenset({"disagg_decode_prealloc_queue", "prealloc_queue"})
TRANSFER_HOLDERS = frozenset({"disagg_decode_transfer_queue", "transfer_queue"})


def _called_on(module: ast.Module, holders: frozenset[str]) -> list[str]:
    """Every X of ``<...>.<holder>.X`` or ``<holder>.X`` (a local) in decode.py: what the
    mixin and the other queue call on a queue."""
    found: set[str] = set()
    for n in ast.walk(module):
        if not isinstance(n, ast.Attribute):
            continue
        value = n.value
        held = value.attr if isinstance(value, ast.Attribute) else getattr(value, "id", None)
        if held in holders:
            found.add(n.attr)
    return sorted(found)


def _manager_sets(ldr: loader._Loader, rel: str, attr: str) -> bool:
    """Does a ``*KVManager`` class of ``rel`` (or a base it names) assign ``self.<attr>``?"""
    for name in ldr.classes(rel):
        if not name.endswith("KVManager"):
            continue
        for _, cls, _ in ldr.hierarchy(rel, name):
            for function in methods_of(cls).values():
                for n in ast.walk(function):
                    if (
                        isinstance(n, ast.Attribute)
                        and isinstance(n.ctx, ast.Store)
                        and n.attr == attr
                        and isinstance(n.value, ast.Name)
                        and n.value.id == "self"
                    ):
                        return True
    return False


def _arity(ldr: loader._Loader, rel: str, name: str) -> dict[str, int]:
    """For each replaced look-up the receiver's hierarchy defines: the length of the tuple
    its ``return`` gives (1 for a single value; LIST_OF_SOURCES for a list of sources)."""
    found: dict[str, int] = {}
    for _, cls, _ in ldr.hierarchy(rel, name):
        for method, function in methods_of(cls).items():
            if method not in RECEIVER_REPLACED or method in found:
                continue
            returns = ast.unparse(function.returns) if function.returns else ""
            if returns.startswith("Optional[List[Dict"):
                found[method] = LIST_OF_SOURCES
                continue
            lengths = [
                len(n.value.elts) if isinstance(n.value, ast.Tuple) else 1
                for n in ast.walk(function)
                if isinstance(n, ast.Return) and n.value is not None
            ]
            found[method] = max(lengths, default=1)
    return found


def _request_fields(node: ast.ClassDef | None) -> dict[str, object]:
    """The defaults of the ``DecodeRequest`` dataclass (constants and enum members)."""
    found: dict[str, object] = {}
    for stmt in node.body if node is not None else []:
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        if isinstance(stmt.value, ast.Constant):
            found[stmt.target.id] = stmt.value.value
        elif isinstance(stmt.value, ast.Attribute):
            found[stmt.target.id] = stmt.value.attr.lower()
    return found


def _defines(tree: SourceTree, rel: str, function: str) -> bool:
    """Does ``rel`` define ``def <function>`` (read with ``ast``, never run)?"""
    data = tree.read_bytes(rel)
    if data is None:
        return False
    try:
        module = ast.parse(data)
    except (SyntaxError, ValueError):
        return False
    return any(
        isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == function
        for n in ast.walk(module)
    )


def _get_buf(tree: SourceTree) -> tuple[str, ...]:
    """The buffers ``MetadataBuffers.get_buf`` returns, in order (``self.<name>[idx]...``)."""
    data = tree.read_bytes(UTILS_PATH)
    if data is None:
        return ()
    module = ast.parse(data)
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef) and node.name == "get_buf":
            for ret in ast.walk(node):
                if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple):
                    return tuple(_buffer_name(e) for e in ret.value.elts)
    return ()


def _buffer_name(node: ast.expr) -> str:
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
            return n.attr
    return "?"


def describe(target: DecodeTarget) -> Mapping[str, object]:
    """What was loaded, for the JSON report."""
    described = dict(loader.describe(target.code))
    described["replaced_by_standins"] = list(target.replaced)
    return described
