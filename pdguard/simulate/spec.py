"""What the scenarios ask of one simulated request: shared by the world and its stand-ins."""

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
