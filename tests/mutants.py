"""Mutants of a patched SGLang tree, each breaking one property ``pdguard check`` must prove, and
hand-made correct variants in another style that it must accept.

Everything works on texts in memory (relative path -> source), as ``checks.Project`` takes them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from pdguard.checks.project import PREFILL

NIXL = "sglang/srt/disaggregation/nixl/conn.py"
STAMP_GUARD = re.compile(
    r"( *)if getattr\((\w+), \"inflight_queue_entry_time\", None\) is None:\n"
    r" *(\w+)\.inflight_queue_entry_time = (.*)\n"
)
CALL = re.compile(
    r" *# pdguard: inflight-deadline: fail overdue.*\n *# all-reduce.*\n"
    r"( *)self\._fail_timed_out_inflight_reqs\(\)\n"
)


@dataclass(frozen=True)
class Mutant:
    name: str
    expected: str  # the code that must be among the findings
    mutate: Callable[[dict[str, str]], dict[str, str] | None]  # None: not applicable here


def _edit(texts: dict[str, str], rel: str, new: str | None) -> dict[str, str] | None:
    if new is None or new == texts.get(rel):
        return None
    return {**texts, rel: new}


def _remove_stamp(texts: dict[str, str]) -> dict[str, str] | None:
    return _edit(texts, PREFILL, STAMP_GUARD.sub("", texts[PREFILL], count=1))


def unguarded_stamp(texts: dict[str, str]) -> dict[str, str] | None:
    return _edit(
        texts, PREFILL, STAMP_GUARD.sub(r"\1\3.inflight_queue_entry_time = \4\n", texts[PREFILL])
    )


def _stamp_at_sender_creation(texts: dict[str, str]) -> dict[str, str] | None:
    text = STAMP_GUARD.sub("", texts[PREFILL], count=1)
    match = re.search(r"\n( *)(\w+)\.disagg_kv_sender = \w+\(", text)
    if match is None:
        return None
    indent, req = match.group(1), match.group(2)
    start = match.start() + 1
    stamp = f"{indent}{req}.inflight_queue_entry_time = time.monotonic()\n"
    return _edit(texts, PREFILL, text[:start] + stamp + text[start:])


def _deadline_after_reduce(texts: dict[str, str]) -> dict[str, str] | None:
    text = texts[PREFILL]
    call = CALL.search(text)
    if call is None:
        return None
    indent = call.group(1)
    text = text[: call.start()] + text[call.end() :]
    # The poll all-reduce of this function: the first one after where the call was.
    polls = re.compile(r"\n( *)polls = poll_and_all_reduce\w*\((.|\n)*?\n\1\)\n").search(
        text, call.start() - 1
    )
    if polls is None:
        return None
    at = polls.end()
    return _edit(
        texts, PREFILL, text[:at] + f"{indent}self._fail_timed_out_inflight_reqs()\n" + text[at:]
    )


def _helper_not_called(texts: dict[str, str]) -> dict[str, str] | None:
    return _edit(texts, PREFILL, CALL.sub("", texts[PREFILL], count=1))


def _remove_import(module: str) -> Callable[[dict[str, str]], dict[str, str] | None]:
    def mutate(texts: dict[str, str]) -> dict[str, str] | None:
        return _edit(texts, PREFILL, texts[PREFILL].replace(f"\nimport {module}\n", "\n", 1))

    return mutate


def _remove_init_time(texts: dict[str, str]) -> dict[str, str] | None:
    if NIXL not in texts:
        return None
    pattern = re.compile(
        r" *# pdguard: sender-bootstrap-timeout: the bootstrap timeout.*\n *self\.init_time = .*\n"
    )
    return _edit(texts, NIXL, pattern.sub("", texts[NIXL], count=1))


def _remove_bootstrap_check(texts: dict[str, str]) -> dict[str, str] | None:
    if NIXL not in texts:
        return None
    text = texts[NIXL]
    start = text.find("# pdguard: sender-bootstrap-timeout\n")
    if start < 0:
        return None
    line_start = text.rfind("\n", 0, start) + 1
    indent = start - line_start
    lines = text[line_start:].split("\n")
    end = 2  # marker and `if` line, then the block indented deeper than the marker
    while end < len(lines) and (len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    rest = "\n".join(lines[end:])
    return _edit(texts, NIXL, text[:line_start] + rest)


MUTANTS = (
    Mutant("stamp removed", "PDG001", _remove_stamp),
    Mutant("stamp moved to sender creation", "PDG003", _stamp_at_sender_creation),
    Mutant("stamp rewritten on re-queue", "PDG003", unguarded_stamp),
    Mutant("deadline moved after the all-reduce", "PDG002", _deadline_after_reduce),
    Mutant("deadline helper defined but not called", "PDG001", _helper_not_called),
    Mutant("init_time removed", "PDG004", _remove_init_time),
    Mutant("bootstrap check removed", "PDG004", _remove_bootstrap_check),
    Mutant("import time removed", "PDG005", _remove_import("time")),
    Mutant("import os removed", "PDG005", _remove_import("os")),
)


# -- correct variants in another style --------------------------------------------------------


def _renamed_wall_clock(texts: dict[str, str]) -> dict[str, str] | None:
    """Other names, time.time() instead of time.monotonic()."""
    text = texts[PREFILL].replace("inflight_queue_entry_time", "kv_enqueue_ts")
    text = text.replace("time.monotonic()", "time.time()")
    text = text.replace("_fail_timed_out_inflight_reqs", "_abort_stale_transfers")
    return _edit(texts, PREFILL, text)


def _inline_loop(texts: dict[str, str]) -> dict[str, str] | None:
    """The deadline written inline before the poll, no helper, a local clock variable."""
    text = texts[PREFILL]
    call = CALL.search(text)
    if call is None:
        return None
    i = call.group(1)
    inline = (
        f"{i}current = time.monotonic()\n"
        f"{i}for waiting in self.disagg_prefill_inflight_queue:\n"
        f"{i}    enqueued = getattr(waiting, 'inflight_queue_entry_time', None)\n"
        f"{i}    if enqueued is None or INFLIGHT_QUEUE_TIMEOUT <= 0:\n"
        f"{i}        continue\n"
        f"{i}    if current - enqueued > INFLIGHT_QUEUE_TIMEOUT:\n"
        f"{i}        kv_sender = waiting.disagg_kv_sender\n"
        f"{i}        kv_sender.poll = lambda: KVPoll.Failed\n"
    )
    return _edit(texts, PREFILL, text[: call.start()] + inline + text[call.end() :])


def _stamp_through_helper(texts: dict[str, str]) -> dict[str, str] | None:
    """The stamp set by a helper method called at the append site."""
    text = texts[PREFILL]
    match = STAMP_GUARD.search(text)
    if match is None:
        return None
    indent, req = match.group(1), match.group(2)
    text = (
        text[: match.start()] + f"{indent}self._stamp_inflight_entry({req})\n" + text[match.end() :]
    )
    helper = (
        "    def _stamp_inflight_entry(self, req):\n"
        "        if getattr(req, 'inflight_queue_entry_time', None) is None:\n"
        "            req.inflight_queue_entry_time = time.monotonic()\n\n"
    )
    anchor = text.index("    # pdguard: inflight-deadline\n    def _fail_timed_out_inflight_reqs")
    return _edit(texts, PREFILL, text[:anchor] + helper + text[anchor:])


VARIANTS = (
    ("other names and time.time()", _renamed_wall_clock),
    ("inline loop before the poll", _inline_loop),
    ("stamp through a helper method", _stamp_through_helper),
)


def main() -> None:
    """``python -m tests.mutants [--all]``: the kill rate and false positives over the pinned
    releases (those with ci = true, or all with --all), as the README reports them."""
    import shutil
    import sys
    import tempfile
    from pathlib import Path

    from pdguard import checks
    from pdguard.checks.project import Project
    from pdguard.commands import apply
    from pdguard.commands.check import load_project
    from pdguard.tree import open_tree
    from pdguard.vendor_sglang import fetch_release, load_manifest

    everything = "--all" in sys.argv
    killed = total = false_positives = variants = 0
    for release in load_manifest():
        if release.family == "F1" or not (release.ci or everything):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "tree"
            shutil.copytree(fetch_release(release.version), root)
            apply.write(apply.plan(open_tree(root)))
            texts = load_project(open_tree(root)).texts
        for mutant in MUTANTS:
            mutated = mutant.mutate(texts)
            if mutated is not None:
                total += 1
                killed += mutant.expected in {f.code for f in checks.run(Project(mutated))}
        for _, variant in VARIANTS:
            variants += 1
            false_positives += bool(checks.run(Project(variant(texts) or texts)))
    print(f"mutants reported: {killed}/{total} ({killed / total:.0%})")
    print(f"false positives on correct variants: {false_positives}/{variants}")


if __name__ == "__main__":
    main()
