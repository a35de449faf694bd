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
from contextlib import suppress
from typing import NoReturn


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
    objects = sys.modules.get("pdguard.git_objects")
    if objects is not None:  # its atexit hook would not run: stop the git readers here
        objects.close_readers()
    os._exit(code)


def run() -> NoReturn:
    """The ``pdguard`` program (console script and ``python -m pdguard``): the collector is
    paused before pdguard's own modules are imported (their classes and functions would
    otherwise be walked by several full collections too), and never restarted."""
    gc.disable()
    from .cli import main

    exit_now(main())
