"""Deeply nested but valid code: run what recurses once per nesting level with room to do so."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

from .errors import TargetError

T = TypeVar("T")


_DEEP_STACK = 512 << 20  # bytes of C stack for a retry of deeply nested code
_DEEP_LIMIT = 60_000  # Python frames for it


def deep_call(where: str, func: Callable[[], T]) -> T:
    """``func()``; if it runs out of recursion (LibCST's code generation recurses once per
    nesting level: a valid 900-term ``1 + 1 + ...`` exceeds Python's default 1,000 frames), once
    more in a thread with a 512 MB stack and a 60,000-frame limit; if even that is not enough, a
    ``TargetError`` naming ``where`` (the file), never a RecursionError."""
    try:
        return func()
    except RecursionError:
        pass
    import threading

    outcome: list[tuple[bool, object]] = []

    def run() -> None:
        try:
            outcome.append((True, func()))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append((False, exc))

    previous_stack = threading.stack_size(_DEEP_STACK)
    previous_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous_limit, _DEEP_LIMIT))
    try:
        thread = threading.Thread(target=run, name="pdguard-deep")
        thread.start()
        thread.join()
    finally:
        threading.stack_size(previous_stack)
        sys.setrecursionlimit(previous_limit)
    ok, value = outcome[0]
    if ok:
        return value  # type: ignore[return-value]
    if isinstance(value, RecursionError):
        raise TargetError(
            f"{where}: nested too deeply for pdguard (more than {_DEEP_LIMIT} levels of "
            "recursion to rewrite it); refused, nothing changed"
        ) from value
    assert isinstance(value, BaseException)
    raise value
