"""SGLang's vocabulary: every path, class, function, attribute and environment variable name of
SGLang's PD-disaggregation code that pdguard reads, matches or writes.

This is the one place those names are spelled. When upstream renames one, change it here and
every analysis (checks), transform (codemods), fix and the simulator follow together.
pdguard's *own* names (its helper, its stamp attribute, its markers) belong to the fix that
writes them, not here.
"""

from __future__ import annotations

from enum import IntEnum

# --- Paths, relative to the directory that holds the ``sglang`` package -------------------
PACKAGE = "sglang"
DISAGGREGATION_DIR = "sglang/srt/disaggregation"
PREFILL_PATH = f"{DISAGGREGATION_DIR}/prefill.py"
NIXL_CONN_PATH = f"{DISAGGREGATION_DIR}/nixl/conn.py"
BASE_CONN_PATH = f"{DISAGGREGATION_DIR}/base/conn.py"
COMMON_CONN_PATH = f"{DISAGGREGATION_DIR}/common/conn.py"
MOONCAKE_CONN_PATH = f"{DISAGGREGATION_DIR}/mooncake/conn.py"
UTILS_PATH = f"{DISAGGREGATION_DIR}/utils.py"
# setuptools-scm's ``_version.py`` (0.5.9+), then the older hand-kept ``version.py``.
VERSION_PATHS = ("sglang/_version.py", "sglang/version.py")
# Where a checkout keeps the package: ``python/sglang`` (SGLang's repository), or at its root.
CHECKOUT_PREFIXES = ("python/", "")

# --- The prefill scheduler mixin (``prefill.py``) -----------------------------------------
INFLIGHT_FUNCTION = "process_disagg_prefill_inflight_queue"
INFLIGHT_QUEUE = "disagg_prefill_inflight_queue"
BOOTSTRAP_QUEUE = "disagg_prefill_bootstrap_queue"
# Where finished prefills are appended to the inflight queue.
APPEND_FUNCTION = "process_batch_result_disagg_prefill"
# The bootstrap queue's methods the simulator runs.
BOOTSTRAP_QUEUE_METHODS = ("add", "pop_bootstrapped")
# The inflight function's parameter under pipeline parallelism (0.4.7.post1+): the requests
# every PP stage reported as transferred (Success or Failed), which each stage then ends by
# its own poll.
PP_CONSENSUS_PARAM = "rids_to_check"
# ``Req`` attribute holding the request's KV sender.
REQ_SENDER = "disagg_kv_sender"
# ``poll_and_all_reduce``, ``poll_and_all_reduce_attn_cp_tp_group``, ``..._pp``: every name
# that MIN-reduces senders' polls over the ranks starts with this.
POLL_ALL_REDUCE_PREFIX = "poll_and_all_reduce"

# --- KV senders and their managers (``*/conn.py``) ----------------------------------------
BASE_SENDER = "BaseKVSender"
# The registration function that picks a transfer backend's classes (disaggregation/utils.py)
GET_KV_CLASS = "get_kv_class"
NIXL_SENDER = "NixlKVSender"
SENDER_METHODS = ("__init__", "poll", "init", "failure_exception", "clear", "abort")
SENDER_INIT_TIME = "init_time"
SENDER_BOOTSTRAP_TIMEOUT = "bootstrap_timeout"
CHECK_BOOTSTRAP_TIMEOUT = "_check_bootstrap_timeout"  # 0.5.13+
MANAGER_CHECK_STATUS = "check_status"
MANAGER_UPDATE_STATUS = "update_status"
MANAGER_RECORD_FAILURE = "record_failure"
# Records the reason (the first root cause is kept), marks the room Failed and tells decode
# (``CommonKVManager``, 0.5.20+).
MANAGER_CONCLUDE_FAILURE = "conclude_failure"

# --- KV receivers (``*/conn.py``) and the decode queues (``decode.py``) ---------------------
DECODE_PATH = f"{DISAGGREGATION_DIR}/decode.py"
BASE_RECEIVER = "BaseKVReceiver"
# The receiver methods that hand the KV indices to the prefill, in the order the decode queues
# call them: ``init(kv_indices, aux_index)`` up to 0.5.9; ``init(prefill_dp_rank)`` and then
# ``send_metadata(kv_indices, ...)`` from 0.5.10.
RECEIVER_SEND_METHODS = ("init", "send_metadata")
RECEIVER_ABORT = "abort"
# What fails a KV sender: its poll() reports Failed from then on (where the class honours it).
SENDER_ABORT = "abort"
# ``DecodeRequest`` attribute holding the request's KV receiver.
REQ_RECEIVER = "kv_receiver"
# Scheduler attributes holding the decode queues (``SchedulerDisaggregationDecodeMixin``).
DECODE_PREALLOC_QUEUE = "disagg_decode_prealloc_queue"
DECODE_TRANSFER_QUEUE = "disagg_decode_transfer_queue"
# The list of requests of each decode queue (``DecodePreallocQueue.queue``, ...).
DECODE_QUEUE_LIST = "queue"
# What fails a decode request: ``prepare_abort(req, ...)`` in the decode queues.
PREPARE_ABORT = "prepare_abort"
# The receiver's clock (set when its KV indices are sent, 0.4.9.post1+ upstream) and the
# terminal status it remembers (``conclude_state``, Mooncake 0.4.7+, NIXL 0.4.8.post1+).
RECEIVER_INIT_TIME = "init_time"
RECEIVER_CONCLUDE_STATE = "conclude_state"
# NIXL's decode heartbeat (0.5.3+): the rooms it tracks per prefill address, the per-room
# transfer status its receiver polls, and what it does when a prefill stops answering.
ROOMS_TRACKER = "addr_to_rooms_tracker"
TRANSFER_STATUSES = "transfer_statuses"
CHECK_TRANSFER_DONE = "check_transfer_done"
HANDLE_NODE_FAILURE = "_handle_node_failure"
# The decode scheduler function that polls both decode queues, the prealloc queue's list of
# retracted requests (its retraction gate, 0.4.7.post1+), and the queues' pop methods.
PROCESS_DECODE_QUEUE = "process_decode_queue"
RETRACTED_QUEUE = "retracted_queue"
# The scheduler's launch configuration (``self.server_args``): fixed for the life of the process.
SERVER_ARGS = "server_args"
# The scheduler's own rank in its groups: a test on one differs from rank to rank.
RANK_ATTRS = frozenset(
    {"tp_rank", "attn_tp_rank", "attn_cp_rank", "pp_rank", "dp_rank", "moe_ep_rank", "engine_rank"}
)
POP_PREALLOCATED = "pop_preallocated"
POP_TRANSFERRED = "pop_transferred"
# ``_allocatable_tokens(..., count_retracted=True)``: preallocation reserves the retracted
# requests' tokens first.
COUNT_RETRACTED = "count_retracted"
# The prealloc queue's requests whose prefill DP rank is not known yet (0.5.10+), and the
# method that resolves them every step.
PENDING_REQS = "pending_reqs"
RESOLVE_PENDING_REQS = "_resolve_pending_reqs"
# The prealloc queue's reduced poll of its requests' handshakes (0.5.10+): a Failed poll
# becomes ``prepare_abort``; and the abort reason ``pop_preallocated`` streams and drops.
UPDATE_HANDSHAKE_WAITERS = "_update_handshake_waiters"
FINISH_ABORT = "FINISH_ABORT"
# SGLang's typed environment (0.5.8+): ``envs.<NAME>.get()``.
ENVIRON_MODULE = "sglang.srt.environ"
ENVIRON_OBJECT = "envs"
ENVIRON_PATH = "sglang/srt/environ.py"


class KVPoll(IntEnum):
    """``sglang.srt.disaggregation.base.conn.KVPoll``. The all-reduce takes the MIN over the
    ranks, so ``Failed`` (0) on one rank is Failed everywhere."""

    Failed = 0  # own-words: SGLang's wire numbers (ranks all-reduce them), so they must match
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


KVPOLL = "KVPoll"

# --- Environment variables ----------------------------------------------------------------
BOOTSTRAP_TIMEOUT_ENV = "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"
WAITING_TIMEOUT_ENV = "SGLANG_DISAGGREGATION_WAITING_TIMEOUT"
# The variable pdguard's inflight deadline reads (named as SGLang names its siblings).
INFLIGHT_TIMEOUT_ENV = "SGLANG_DISAGGREGATION_INFLIGHT_TIMEOUT"

# --- Text prefilter -----------------------------------------------------------------------
# Only files under DISAGGREGATION_DIR holding one of these can matter to a rule or a fix.
SENDER_NEEDLES = ("KVSender", "KVManager")
RECEIVER_NEEDLES = ("KVReceiver",)
# The decode rules read the files that name a request's ``kv_receiver`` and one of these.
DECODE_NEEDLES = (DECODE_PREALLOC_QUEUE, DECODE_TRANSFER_QUEUE, POLL_ALL_REDUCE_PREFIX)
NEEDLES = (*SENDER_NEEDLES, INFLIGHT_QUEUE, *RECEIVER_NEEDLES, REQ_RECEIVER)
# Scheduler modules outside DISAGGREGATION_DIR that the decode rules read too: those that call
# a decode queue's pop method themselves (the pipeline-parallel mixin's disaggregated decode
# loop, ``managers/scheduler_pp_mixin.py``, 0.5.7+; the non-PP loop lives in decode.py).
MANAGERS_DIR = "sglang/srt/managers"
SCHEDULER_PATH = f"{MANAGERS_DIR}/scheduler.py"
PP_MIXIN_PATH = f"{MANAGERS_DIR}/scheduler_pp_mixin.py"  # the PP loops, 0.5.4+
SCHEDULER_DECODE_NEEDLES = (POP_PREALLOCATED, POP_TRANSFERRED)
# Everything the rules and fixes read of a tree (verify's cache key holds their git ids): the
# files of these directories, these single files, and the version file (for reports only).
READ_DIRS = (DISAGGREGATION_DIR, MANAGERS_DIR)
READ_FILES = (ENVIRON_PATH,)
