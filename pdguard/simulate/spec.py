"""What the scenarios ask of one simulated request, prefill (``RequestSpec``) or decode
(``DecodeSpec``), shared by the worlds and their stand-ins; and what a scenario answers
(``Outcome``), shared by both halves' scenarios."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RequestSpec:
    """One request and the script its sender follows (simulated seconds)."""

    rid: str
    arrival: float = 0.0
    prefill_s: float = 1.0
    bootstrap_s: float = 0.0
    transfer_s: float | None = 1.0  # None: the decode side is gone; WaitingForInput for ever
    nixl: bool = False  # the target's NixlKVSender, with a kv_mgr stuck in Bootstrapping
    # The backend whose sender the release gives the request: "mooncake", or "nixl" (its
    # NixlKVSender on the same scripted transport as Mooncake's)
    backend: str = "mooncake"
    # Taken out of the inflight queue and handed to the append site again this often while it
    # waits there (a re-queue, as SGLang's optimistic prefill does); None: never.
    requeue_every: float | None = None
    # The release's NixlKVSender posts the transfer itself (its ``xfer_handles``, NIXL up to
    # 0.5.11): the last chunk posts one handle, which the transport runs for ``transfer_s``
    posts_transfer: bool = False


@dataclass(frozen=True)
class DecodeSpec:
    """One decode request and what its prefill does."""

    rid: str
    backend: str = "mooncake"
    arrival: float = 0.0
    transfer_s: float | None = 2.0  # None: the prefill is gone after the indices are sent
    registered: bool = True  # False: the prefill never registers the room (0.5.10+ pending)
    retracted: bool = False  # handed to the prealloc queue as retracted (waits for memory)
    # the prefill registers the room this long after the request arrived (a pending request
    # resolves then and is re-queued, 0.5.10+); 0: at once
    register_s: float = 0.0
    decode_s: float = 1.0
    # optimistic prefill (0.5.13+): the prefill yielded the request this many times (request
    # pool full) and re-prefilled it from scratch before its KV reached the decode;
    # ``transfer_s`` includes the ``requeue_s`` those re-prefills took
    requeues: int = 0
    requeue_s: float = 0.0


@dataclass(frozen=True)
class Outcome:
    """A scenario's verdict on one trace."""

    verdict: str  # "pass", "fail", "n/a"
    observed: str
    seconds: float
