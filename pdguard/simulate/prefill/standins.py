"""The prefill half's stand-ins: what the simulated prefill world gives the release's prefill
code besides the shared ``simulate.standins`` (whose ``REGISTRY`` both halves use).

The scripted sender (a tree with no ``MooncakeKVSender``), the senders' KV manager
(:class:`SimKVManager`, whose transport follows each request's script), the tree cache, the
scheduler (the simulated class is ``(loaded mixin, SchedulerStandIn)``), the bootstrap queue
and the prefill batch.
"""

from __future__ import annotations

import threading
from typing import Any

from ... import sglang_names as names
from ..spec import RequestSpec
from ..standins import (
    FINISH_ABORT,
    Config,
    Context,
    Inert,
    KVPoll,
    KVTransferError,
    MetadataAllocator,
    SimReq,
    Strict,
    TransferBackend,
)


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
