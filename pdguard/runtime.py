"""How a pdguard command runs: without the cyclic garbage collector, and without the
interpreter's teardown at the end.

Parsing builds hundreds of thousands of ``ast`` (and LibCST) nodes that live until the command
ends. Each of those allocations counts towards the collector's thresholds, and each full
collection walks every live node again: on SGLang 0.5.23, ``check`` spent half its CPU time in
the collector (0.8 s with it, 0.4 s without). A command is short-lived and its nodes are freed
by reference counting, so the collector is paused for the command and restored after it (a
library caller of ``pdguard.cli.main`` keeps its own setting: ``cli.collector_paused``).
``verify``'s worker processes, forked while it is paused, run without it too.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from contextlib import suppress
from typing import NoReturn, TypeVar

T = TypeVar("T")


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` once stdout and stderr are flushed, without the
    interpreter's teardown: it would run a full collection over every node the command left
    in its caches (parsed trees are cached by content), 0.3 s after a ``check`` of 0.5.23.
    Under coverage, a profiler or a tracer (they write their data at exit), the usual exit is
    kept."""
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):  # a closed pipe or stream: main already said so
            stream.flush()
    if "coverage" in sys.modules or sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    os._exit(code)


def run() -> NoReturn:
    """The ``pdguard`` program (console script and ``python -m pdguard``): the collector is
    paused before pdguard's own modules are imported (their classes and functions would
    otherwise be walked by several full collections too), and never restarted."""
    gc.disable()
    from .cli import main

    exit_now(main())


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

    from .errors import TargetError

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
