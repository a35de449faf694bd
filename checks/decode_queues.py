"""The decode queues (``decode.py``) and the scheduler functions that poll them (PDG007)."""

from __future__ import annotations

from .kv_senders import ClassIndex


class DecodeQueueModel:
    def __init__(self, index: ClassIndex) -> None:
        self.index = index
