"""The patch series ``pdguard export`` writes: one commit per fix that a release needs, in the
order of ``FIXES`` (the order the fixes depend on each other: the sender fixes before the
inflight deadline that fails senders with ``abort()``), marker-free, each with its unit test
(``test/srt/disaggregation/``, unittest, the style of SGLang's own tests there) and its line in
SGLang's environment-variable page, written with git itself (``git format-patch``).

What each commit says (its subject, the hazard it closes, the upstream PR it follows) and its
test are the templates of ``COMMITS``, by fix name: pdguard's own text, filled with the names
of ``sglang_names`` and ``fix_names``.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from string import Template

from .errors import PdguardError, RefusedError, TargetError, WriteError
from .fix_names import (
    DECODE_QUEUE_BOUND,
    INFLIGHT_DEADLINE,
    INFLIGHT_HELPER,
    INFLIGHT_STAMP,
    INFLIGHT_TIMEOUT_READER,
    RECEIVER_WAITING_TIMEOUT,
    SENDER_ABORT,
    SENDER_BOOTSTRAP_TIMEOUT,
)
from .sglang_names import (
    BOOTSTRAP_TIMEOUT_ENV,
    DISAGGREGATION_DIR,
    ENVIRON_PATH,
    INFLIGHT_TIMEOUT_ENV,
    RECEIVER_INIT_TIME,
    WAITING_TIMEOUT_ENV,
)
from .tree import CONFIG_SOURCES, DirectoryTree

# Where SGLang keeps them, relative to a checkout's root.
PACKAGE_ROOT = "python"
DOCS_PAGE = "docs/references/environment_variables.md"
TEST_DIR = "test/srt/disaggregation"
# The files pdguard reads (and so the series may touch), relative to the package root.
_READ = (DISAGGREGATION_DIR, ENVIRON_PATH, "sglang/version.py", "sglang/_version.py")

_BODY_WIDTH = 72  # git's convention for a commit message body


@dataclass(frozen=True)
class EnvDoc:
    """The docs line of an environment variable a fix reads: a row of the page's table, or
    (where the page already lists the variable) a sentence added to its description."""

    name: str
    description: str  # the row's description (a new row)
    default: str
    also: str  # the sentence added to an existing row's description


@dataclass(frozen=True)
class Commit:
    """What one fix's commit says and carries."""

    subject: str
    hazard: str  # what goes wrong without it
    change: str  # what the commit does
    follows: str  # the upstream PRs or releases whose semantics it follows
    test_name: str  # test/srt/disaggregation/<test_name>.py
    test: Template  # the unit test; $-placeholders from ``_names``
    env: EnvDoc | None = None


_INFLIGHT_ENV = EnvDoc(
    INFLIGHT_TIMEOUT_ENV,
    "Timeout (in seconds) for a request waiting in the prefill inflight queue for its KV "
    "transfer to finish; the request is then failed on every rank. `0` disables it.",
    "`300`",
    "",
)
_WAITING_ENV = EnvDoc(
    WAITING_TIMEOUT_ENV,
    "Timeout (in seconds) for a decode request waiting for its KV cache from prefill.",
    "`300`",
    "Also bounds how long the decode prealloc queue keeps a request whose prefill DP rank "
    "is not resolved.",
)
_RECEIVER_ENV = EnvDoc(
    WAITING_TIMEOUT_ENV,
    _WAITING_ENV.description,
    "`300`",
    "Applies to every backend's KV receiver: one that waits for its KV longer than this "
    "reports Failed.",
)
_BOOTSTRAP_ENV = EnvDoc(
    BOOTSTRAP_TIMEOUT_ENV,
    "Timeout (in seconds) for a prefill KV sender waiting for its decode peer to bootstrap.",
    "`300`",
    "Applies to every backend's KV sender, counted from the sender's construction.",
)

_HEADER = """\
import os
import time
import unittest
from types import SimpleNamespace
from unittest import mock

from sglang.srt.disaggregation.base import KVPoll
"""
_FOOTER = """

if __name__ == "__main__":
    unittest.main()
"""

_INFLIGHT_TEST = Template(
    _HEADER
    + """from sglang.srt.disaggregation import prefill
from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin


class _Sender:
    def __init__(self, status):
        self.status = status
        self.aborted = False
        self.kv_mgr = mock.MagicMock()

    def poll(self):
        return KVPoll.Failed if self.aborted else self.status

    def abort(self):
        self.aborted = True


def _request(rid, waited, status=KVPoll.Transferring):
    return SimpleNamespace(
        rid=rid,
        bootstrap_room=hash(rid) % 1000,
        pending_bootstrap=False,
        $stamp=time.monotonic() - waited,
        disagg_kv_sender=_Sender(status),
    )


def _failed(req):
    sender = req.disagg_kv_sender
    return sender.aborted or sender.kv_mgr.conclude_failure.called


class TestPrefillInflightDeadline(unittest.TestCase):
    def _sweep(self, reqs, timeout):
        scheduler = SimpleNamespace(disagg_prefill_inflight_queue=reqs)
$clear        with mock.patch.dict(os.environ, {"$env": str(timeout)}):
            SchedulerDisaggregationPrefillMixin.$helper(scheduler)

    def test_transfer_past_the_deadline_is_failed(self):
        req = _request("stuck", waited=120)
        self._sweep([req], timeout=60)
        self.assertTrue(_failed(req))

    def test_transfer_within_the_deadline_is_kept(self):
        req = _request("fresh", waited=1)
        self._sweep([req], timeout=60)
        self.assertFalse(_failed(req))
        self.assertEqual(req.disagg_kv_sender.poll(), KVPoll.Transferring)

    def test_zero_disables_the_deadline(self):
        req = _request("stuck", waited=10_000)
        self._sweep([req], timeout=0)
        self.assertFalse(_failed(req))
"""
    + _FOOTER
)

_DECODE_TEST = Template(
    _HEADER
    + """from sglang.srt.disaggregation import decode
from sglang.srt.disaggregation.decode import SchedulerDisaggregationDecodeMixin


class TestDecodeQueueWhileRetracted(unittest.TestCase):
    def _scheduler(self):
        scheduler = mock.MagicMock()
        scheduler.polling_count = 0
        scheduler.polling_interval = 1
        scheduler.waiting_queue = []
        prealloc = scheduler.disagg_decode_prealloc_queue
        prealloc.retracted_queue = [SimpleNamespace(rid="retracted")]
        prealloc.resume_retracted_reqs.return_value = []
        prealloc.pop_preallocated.return_value = ([], [])
        scheduler.disagg_decode_transfer_queue.pop_transferred.return_value = []
        return scheduler

    def test_transfer_queue_is_polled_while_requests_are_retracted(self):
        scheduler = self._scheduler()
        with $patches:
            SchedulerDisaggregationDecodeMixin.process_decode_queue(scheduler)
        scheduler.disagg_decode_transfer_queue.pop_transferred.assert_called_once()
        scheduler.disagg_decode_prealloc_queue.pop_preallocated.assert_not_called()
"""
    + _FOOTER
)

# Both sender tests build the release's sender without its constructor (which connects to a
# bootstrap server): the attributes its __init__ sets to a literal, a mocked manager.
_NEW_SENDER = """$logger_import
from $module import $cls

# what $cls's constructor (and its bases') sets, without connecting anywhere
_STATE = $state


# a KV manager whose methods report nothing (None) unless a test says otherwise
class _Manager(mock.MagicMock):
    def _get_child_mock(self, **kwargs):
        return mock.MagicMock(return_value=None)


def _sender(status, timeout=None, **state):
    sender = $cls.__new__($cls)
    sender.kv_mgr = _Manager()
    sender.kv_mgr.check_status.return_value = status
    sender.bootstrap_room = 7
    for name, value in {**_STATE, **state}.items():
        setattr(sender, name, value)
    # the timeouts its poll() reads, on the sender and on its manager
    for name in $timeouts:
        setattr(sender, name, timeout)
    for name in $manager_timeouts:
        setattr(sender.kv_mgr, name, timeout)
    return sender
"""

_SENDER_TEST = Template(
    _HEADER
    + _NEW_SENDER
    + """

class TestSenderBootstrapTimeout(unittest.TestCase):
    def _poll(self, waited, timeout):
        sender = _sender(
            KVPoll.Bootstrapping, timeout=timeout, init_time=time.time() - waited
        )
        with mock.patch.dict(os.environ, {"$env": str(timeout)}), mock.patch.object(
            $logger_module, "logger"
        ):
            return sender.poll()

    def test_bootstrapping_past_the_timeout_fails(self):
        self.assertEqual(self._poll(waited=120, timeout=60), KVPoll.Failed)

    def test_bootstrapping_within_the_timeout_waits(self):
        self.assertEqual(self._poll(waited=1, timeout=60), KVPoll.Bootstrapping)
"""
    + _FOOTER
)

_ABORT_TEST = Template(
    _HEADER
    + _NEW_SENDER
    + """

class TestSenderAbort(unittest.TestCase):
    def test_poll_reports_failed_after_abort(self):
        sender = _sender(KVPoll.Transferring, timeout=300)
        with mock.patch.object($logger_module, "logger"):
            sender.abort()
            self.assertEqual(sender.poll(), KVPoll.Failed)
"""
    + _FOOTER
)

_RECEIVER_TEST = Template(
    _HEADER
    + """$logger_import
from $module import $cls

# what $cls's constructor and init() (and its bases') set, connecting nowhere
_STATE = $state


# a KV manager whose methods report nothing (None) unless a test says otherwise
class _Manager(mock.MagicMock):
    def _get_child_mock(self, **kwargs):
        return mock.MagicMock(return_value=None)


class TestReceiverWaitingTimeout(unittest.TestCase):
    def _poll(self, waited, timeout):
        receiver = $cls.__new__($cls)
        for name, value in _STATE.items():
            setattr(receiver, name, value)
        receiver.kv_mgr = _Manager()
        receiver.kv_mgr.check_status.return_value = KVPoll.WaitingForInput
        receiver.bootstrap_room = 7
        # the timeouts its poll() reads, on the receiver and on its manager
        for name in $timeouts:
            setattr(receiver, name, timeout)
        for name in $manager_timeouts:
            setattr(receiver.kv_mgr, name, timeout)
        receiver.$init_time = time.time() - waited
        with mock.patch.dict(os.environ, {"$env": str(timeout)}), mock.patch.object(
            $logger_module, "logger"
        ):
            return receiver.poll()

    def test_waiting_past_the_timeout_fails(self):
        self.assertEqual(self._poll(waited=120, timeout=60), KVPoll.Failed)

    def test_waiting_within_the_timeout_waits(self):
        self.assertEqual(self._poll(waited=1, timeout=60), KVPoll.WaitingForInput)
"""
    + _FOOTER
)


COMMITS: dict[str, Commit] = {
    SENDER_BOOTSTRAP_TIMEOUT: Commit(
        subject="[PD] Time out KV senders stuck in Bootstrapping",
        hazard="A KV sender whose decode peer never bootstraps (a decode restarted or gone) "
        "polls Bootstrapping for ever: no timeout is reached on its poll path, so the "
        "request holds its prefill KV and stays in the bootstrap queue without bound.",
        change="Start the sender's bootstrap clock when the sender is created and check the "
        "timeout on every poll that reports Bootstrapping, through the release's own timeout "
        "check where it has one.",
        follows="Follows #34692 (NIXL: init_time after super().__init__, "
        "_check_bootstrap_timeout() while Bootstrapping) and 0.4.8.post1 (Mooncake: the "
        "clock starts at construction).",
        test_name="test_sender_bootstrap_timeout",
        test=_SENDER_TEST,
        env=_BOOTSTRAP_ENV,
    ),
    SENDER_ABORT: Commit(
        subject="[PD] Make abort() fail every KV sender",
        hazard="A sender without an effective abort() keeps polling its old state after the "
        "scheduler aborts it, so the request is never released; the inflight deadline of "
        "the next commit fails senders with abort() and needs every sender to honour it.",
        change="Give the senders that lack it an abort() that concludes the transfer as "
        "Failed, and a poll() that reports the concluded state first.",
        follows="Follows #24522 (abort() must call update_status(Failed)).",
        test_name="test_sender_abort",
        test=_ABORT_TEST,
    ),
    INFLIGHT_DEADLINE: Commit(
        subject="[PD] Add a deadline to the prefill inflight queue",
        hazard="After prefill a request waits in the inflight queue until its KV transfer "
        "ends. A non-terminal poll puts it back with no deadline, so after a decode "
        "restart such requests stay for ever and the deployment wedges "
        "(decode_running=0).",
        change=f"Stamp each request when it enters the inflight queue (prefill time never "
        f"counts) and, before the poll all-reduce, fail the senders of requests waiting "
        f"longer than {INFLIGHT_TIMEOUT_ENV} (through the KV manager's conclude_failure() "
        f"where the release has it, which keeps the first root cause and tells decode; "
        f"else abort()), so that the reduced poll is Failed on every TP/CP rank in the same "
        f"step and the Failed branch frees the request.",
        follows="Follows #28652 (the FakeKVSender waiting timeout: a monotonic clock, a "
        "warning with the variable to raise) and #36612 (the reason the client gets is the "
        "first root cause).",
        test_name="test_prefill_inflight_deadline",
        test=_INFLIGHT_TEST,
        env=_INFLIGHT_ENV,
    ),
    RECEIVER_WAITING_TIMEOUT: Commit(
        subject="[PD] Time out decode KV receivers waiting for their KV",
        hazard="A decode receiver whose prefill peer is gone polls WaitingForInput for ever, "
        "so the decode request and its preallocated KV are never released.",
        change=f"Read {WAITING_TIMEOUT_ENV} once in the manager, start the clock when the KV "
        f"indices are sent, and report Failed once it is exceeded.",
        follows="Follows Mooncake 0.4.9.post1 (kv_mgr.waiting_timeout) and #13657 (NIXL).",
        test_name="test_receiver_waiting_timeout",
        test=_RECEIVER_TEST,
        env=_RECEIVER_ENV,
    ),
    DECODE_QUEUE_BOUND: Commit(
        subject="[PD] Bound the decode prealloc queue and poll transfers while retracted",
        hazard="A decode request whose prefill DP rank is never resolved is re-queued on "
        "every step without bound, and while retracted requests wait for memory "
        "process_decode_queue returns before it polls the transfer queue, so failed, "
        "timed-out and aborted transfers never free their KV.",
        change=f"Give up on a pending request once it has waited {WAITING_TIMEOUT_ENV}, and "
        f"while requests are retracted admit no new request but keep polling the transfer "
        f"queue.",
        follows="Follows #21299 (the pending_reqs lifecycle) and the PP decode loop "
        "(process_prealloc_queue blocks only admission while requests are retracted).",
        test_name="test_decode_queue_bound",
        test=_DECODE_TEST,
        env=_WAITING_ENV,
    ),
}


@dataclass(frozen=True)
class Exported:
    """One commit of the series: its fix, patch file and the files it touches."""

    fix: str
    patch: Path
    files: tuple[str, ...]
    added: int
    removed: int


def checkout_root(tree: DirectoryTree) -> Path:
    """The checkout a series is made for: ``python/sglang/...`` and the docs page."""
    root = tree.base.parent if tree.base.name == PACKAGE_ROOT else None
    if root is None or not (root / DOCS_PAGE).is_file():
        where = root if root is not None else tree.base
        raise TargetError(
            f"{where}: no {DOCS_PAGE}: export needs an SGLang checkout "
            f"({PACKAGE_ROOT}/sglang/... and docs/)"
        )
    return root


def identity(root: Path) -> dict[str, str]:
    """The author of the series: the checkout's git identity (``user.name``, ``user.email``,
    as ``git commit`` there would use), else pdguard's."""
    found = {"name": "pdguard", "email": "pdguard@localhost"}
    for key in found:
        done = subprocess.run(
            ["git", "-C", str(root), "config", f"user.{key}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0 and done.stdout.strip():
            found[key] = done.stdout.strip()
    return {
        f"GIT_{who}_{key.upper()}": value
        for who in ("AUTHOR", "COMMITTER")
        for key, value in found.items()
    }


def _git(repo: Path, *args: str, author: dict[str, str] | None = None) -> str:
    """git in the series' own repository: no user or system settings (hooks, signing)."""
    env = {**os.environ, **(author or {}), "GIT_CONFIG_GLOBAL": os.devnull}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        first = (done.stderr.strip() or done.stdout.strip()).splitlines()[:1]
        raise PdguardError(f"git {args[0]} failed: {first[0] if first else done.returncode}")
    return done.stdout


def _copy_read_files(root: Path, repo: Path) -> None:
    """The files the fixes read (and so may change), the isort settings and the docs page."""
    package = root / PACKAGE_ROOT
    for rel in _READ:
        source = package / rel
        if source.is_dir():
            shutil.copytree(
                source, repo / PACKAGE_ROOT / rel, ignore=shutil.ignore_patterns("__pycache__")
            )
        elif source.is_file():
            (repo / PACKAGE_ROOT / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, repo / PACKAGE_ROOT / rel)
    for where in (root, package):
        for name in CONFIG_SOURCES:
            if (where / name).is_file():
                target = repo / where.relative_to(root) / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(where / name, target)
    (repo / DOCS_PAGE).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(root / DOCS_PAGE, repo / DOCS_PAGE)


_ROW = re.compile(r"^\|.*\|\s*$")


def document(page: str, env: EnvDoc) -> str:
    """``page`` with ``env``'s line: a sentence added to the variable's row where the page
    lists it, else a new row after the last row of the table that lists the most
    ``SGLANG_DISAGGREGATION_`` variables (the page's last table where none does)."""
    lines = page.splitlines(keepends=True)
    own = f"`{env.name}`"
    for i, line in enumerate(lines):
        cells = line.rstrip("\r\n").split("|")
        if _ROW.match(line) and len(cells) >= 4 and cells[1].strip() == own:
            if env.also in cells[2]:
                return page
            said = cells[2].strip()
            said += "" if said.endswith((".", ")")) else "."
            cells[2] = f" {said} {env.also} "
            lines[i] = "|".join(cells) + "\n"
            return "".join(lines)
    tables: list[tuple[int, int]] = []  # (rows naming the family, index of the last row)
    count, last = 0, -1
    for i, line in enumerate([*lines, "\n"]):
        if _ROW.match(line):
            count += "`SGLANG_DISAGGREGATION_" in line
            last = i
        elif last >= 0:
            tables.append((count, last))
            count, last = 0, -1
    row = f"| {own} | {env.description} | {env.default} |\n"
    if not tables:
        return (
            page.rstrip("\n")
            + "\n\n## PD Disaggregation\n\n"
            + (
                "| Environment Variable | Description | Default Value |\n| --- | --- | --- |\n"
                + row
            )
        )
    best = max(tables)  # the most rows naming the family; of equals, the last table
    at = best[1] + 1
    if not lines[best[1]].endswith("\n"):
        lines[best[1]] += "\n"
    return "".join([*lines[:at], row, *lines[at:]])


def _fill_test(
    commit: Commit,
    fix: str,
    changed: dict[str, str],
    originals: dict[str, str],
    env: str,
    final: dict[str, str],
) -> str:
    """The commit's unit test, filled from what the fix wrote in this release."""
    names: dict[str, str] = {
        "env": env,
        "helper": INFLIGHT_HELPER,
        "stamp": INFLIGHT_STAMP,
        "init_time": RECEIVER_INIT_TIME,
        "state": "{}",
        "module": "sglang.srt.disaggregation.base",
        "cls": "BaseKVSender",
        "patches": 'mock.patch.object(decode, "logger")',
        "clear": "",
    }
    prefill = changed.get(f"{DISAGGREGATION_DIR}/prefill.py", "")
    if re.search(rf"^def {INFLIGHT_TIMEOUT_READER}\(", prefill, re.MULTILINE):
        # the release reads the timeout once (a cached reader): read it again for each test
        reader = f"prefill.{INFLIGHT_TIMEOUT_READER}.cache_clear"
        names["clear"] = f"        {reader}()\n        self.addCleanup({reader})\n"
    if fix == DECODE_QUEUE_BOUND:
        decode = changed.get(f"{DISAGGREGATION_DIR}/decode.py", "")
        if re.search(r"\bget_disagg\b", decode):
            names["patches"] = (
                'mock.patch.object(decode, "logger"), mock.patch.object(\n'
                "            decode,\n"
                '            "get_disagg",\n'
                "            return_value=SimpleNamespace(\n"
                "                disaggregation_decode_enable_offload_kvcache=False,\n"
                "                disaggregation_decode_polling_interval=1,\n"
                "                disaggregation_decode_host_receive_threshold=1,\n"
                "            ),\n"
                "        )"
            )
    owner = _first_class(fix, changed, originals)
    if owner is not None:
        rel, cls = owner
        names["module"] = rel.removesuffix(".py").replace("/", ".")
        names["cls"] = cls
        lineage = _lineage(final, cls)
        receiver = fix == RECEIVER_WAITING_TIMEOUT
        names["state"] = _init_state(
            lineage, ("__init__", "init", "send_metadata") if receiver else ("__init__",)
        )
        names["timeouts"], names["manager_timeouts"] = _timeouts(lineage)
        package, _, module = names["module"].rpartition(".")
        names["logger_import"] = f"from {package} import {module}"
        names["logger_module"] = module
    return _black(_drop_unused_imports(commit.test.substitute(names)))


def _drop_unused_imports(code: str) -> str:
    """``code`` without the header's imports its body does not use (``ruff``'s F401)."""
    tree = ast.parse(code)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    keep = []
    for line in code.splitlines(keepends=True):
        match = re.match(r"(?:import (\w+)|from [\w.]+ import (\w+))\n", line)
        if match and (match[1] or match[2]) not in used:
            continue
        keep.append(line)
    return "".join(keep)


def _black(code: str) -> str:
    """``code`` in black's style (SGLang's), where black is installed; as written otherwise
    (the templates are written in it, up to the lines they are filled with)."""
    try:
        import black
    except ImportError:
        return code
    return black.format_str(code, mode=black.Mode())


def _lineage(final: dict[str, str], cls: str) -> list[ast.ClassDef]:
    """``cls`` and its bases among the classes of ``final`` (the disaggregation package as
    the whole series leaves it), by name, subclass first."""
    classes: dict[str, ast.ClassDef] = {}
    for rel in sorted(final):
        for node in ast.parse(final[rel]).body:
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, node)
    found: list[ast.ClassDef] = []
    todo = [cls]
    while todo:
        owner = classes.get(todo.pop(0))
        if owner is None or owner in found:
            continue
        found.append(owner)
        todo.extend(ast.unparse(base).rpartition(".")[2] for base in owner.bases)
    return found


def _init_state(lineage: list[ast.ClassDef], methods: tuple[str, ...] = ("__init__",)) -> str:
    """The attributes that ``methods`` of a class and its bases set to a literal
    (``self._send_failed = False``), as a dict literal: what a test that builds the object
    with ``__new__`` sets before it polls. Read from the tree the whole series leaves, so that
    a later commit's attribute (``conclude_state``) is there too. Within a method the
    subclass's value wins, as it does at run time; a later method's (a receiver's ``init()``,
    which marks the KV indices sent) wins over the constructor's."""
    state: dict[str, str] = {}
    for method in methods:
        found: dict[str, str] = {}
        for node in lineage:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    for stmt in ast.walk(item):
                        _literal_attribute(stmt, found)
        state.update(found)
    return "{" + ", ".join(f'"{k}": {v}' for k, v in state.items()) + "}"


def _timeouts(lineage: list[ast.ClassDef]) -> tuple[str, str]:
    """The timeout attributes the class's methods read, on the object (``self.X``) and on its
    manager (``self.kv_mgr.X``), as two list literals: the test sets each to its timeout."""
    own: set[str] = set()
    manager: set[str] = set()
    called = {
        ast.unparse(sub.func)
        for node in lineage
        for sub in ast.walk(node)
        if isinstance(sub, ast.Call)
    }
    for node in lineage:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and ast.unparse(sub) in called:
                continue  # a method (self._check_bootstrap_timeout()), not a value
            if not isinstance(sub, ast.Attribute) or "time" not in sub.attr.lower():
                continue
            if "out" not in sub.attr.lower():
                continue
            holder = ast.unparse(sub.value)
            if holder == "self":
                own.add(sub.attr)
            elif holder == "self.kv_mgr":
                manager.add(sub.attr)
    return repr(sorted(own)), repr(sorted(manager))


def _literal_attribute(stmt: ast.AST, state: dict[str, str]) -> None:
    """``self.X = <a literal>`` into ``state`` (the first one of X kept)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return
    target, value = stmt.targets[0], stmt.value
    empty = isinstance(value, ast.List | ast.Dict | ast.Set) and not ast.unparse(value)[1:-1]
    if (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
        and (isinstance(value, ast.Constant) or empty)
        and target.attr not in (RECEIVER_INIT_TIME, "bootstrap_room")
    ):
        state.setdefault(target.attr, ast.unparse(value))


def _first_class(
    fix: str, changed: dict[str, str], originals: dict[str, str]
) -> tuple[str, str] | None:
    """The class a per-class fix's test builds: the first (by file, then by line) whose
    ``poll()`` the fix changed, else the first it changed at all."""
    if fix not in (SENDER_BOOTSTRAP_TIMEOUT, SENDER_ABORT, RECEIVER_WAITING_TIMEOUT):
        return None
    suffix = "Receiver" if fix == RECEIVER_WAITING_TIMEOUT else "Sender"

    def classes(text: str, method: str | None) -> dict[str, str]:
        """Each class's dump (or only its ``method``'s)."""
        found = {}
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef):
                parts = [
                    item
                    for item in node.body
                    if method is None or (isinstance(item, ast.FunctionDef) and item.name == method)
                ]
                found[node.name] = "".join(ast.dump(part) for part in parts)
        return found

    # a class whose poll() the fix changed first (its test polls), then any it changed
    for method in ("poll", None):
        for rel in sorted(changed):
            before = classes(originals[rel], method)
            for name, dump in classes(changed[rel], method).items():
                if name.endswith(suffix) and before.get(name) != dump:
                    return rel, name
    return None


def message(commit: Commit, env: EnvDoc | None, test_rel: str) -> str:
    """The commit message: the subject, then the hazard, the change, the upstream PR, and
    where the test and the docs line are, wrapped at 72 columns."""
    paragraphs = [commit.hazard, commit.change, commit.follows]
    tail = f"Test: {test_rel}."
    if env is not None:
        tail += f" Docs: {env.name} in {DOCS_PAGE}."
    paragraphs.append(tail)
    body = "\n\n".join(textwrap.fill(p, _BODY_WIDTH) for p in paragraphs)
    return f"{commit.subject}\n\n{body}\n"


def export(tree: DirectoryTree, out: Path) -> list[Exported]:
    """Write the series for ``tree`` (an SGLang checkout) into ``out``, ``0001-<slug>.patch``
    and so on; the commits made, in order. Nothing is written when a fix is refused."""
    from .commands.apply import plan, write
    from .fixes import FIXES, Status
    from .run import Run
    from .tree import open_tree

    root = checkout_root(tree)
    author = identity(root)
    with tempfile.TemporaryDirectory(prefix="pdguard-export-") as tmp:
        repo = Path(tmp) / "sglang"
        repo.mkdir()
        _copy_read_files(root, repo)
        _git(repo, "init", "-q")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", "base", author=author)
        base = _git(repo, "rev-parse", "HEAD").strip()
        run = Run()  # the export's one run: the steps share its parses and models
        whole = plan(open_tree(repo), markers=False, run=run)
        package = repo / PACKAGE_ROOT
        final = {
            rel: whole.changes[rel].text if rel in whole.changes else (package / rel).read_text()
            for rel in open_tree(repo).python_files(DISAGGREGATION_DIR)
        }
        if whole.refused:
            raise RefusedError(whole.refusal())
        applied = [f for f in FIXES if whole.outcomes[f.name].status is Status.APPLIED]
        made: list[tuple[str, tuple[str, ...]]] = []
        for fix in applied:
            step = plan(open_tree(repo), (fix,), markers=False, run=run)
            if step.refused:
                raise RefusedError(step.refusal())
            if step.outcomes[fix.name].status is not Status.APPLIED or not step.changes:
                raise PdguardError(
                    f"{fix.name}: applied with the other fixes but not after the commits "
                    "before it (the series order does not hold)"
                )
            write(step)
            commit = COMMITS[fix.name]
            files = [f"{PACKAGE_ROOT}/{rel}" for rel in step.changes]
            test_rel = f"{TEST_DIR}/{commit.test_name}.py"
            env = commit.env
            changed = {rel: new.text for rel, new in step.changes.items()}
            originals = {rel: step.originals[rel].text for rel in step.changes}
            test = _fill_test(commit, fix.name, changed, originals, env.name if env else "", final)
            (repo / test_rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / test_rel).write_text(test)
            files.append(test_rel)
            if env is not None:
                page = repo / DOCS_PAGE
                page.write_text(document(page.read_text(), env))
                files.append(DOCS_PAGE)
            _git(repo, "add", "-A")
            _git(repo, "commit", "-q", "-m", message(commit, env, test_rel), author=author)
            made.append((fix.name, tuple(files)))
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WriteError(f"{out}: cannot be created ({exc.strerror or exc})") from exc
        names = _git(repo, "format-patch", "--no-signature", "-o", str(out), base)
        patches = [Path(line) for line in names.splitlines() if line.strip()]
        stats = _git(repo, "log", "--reverse", "--numstat", "--format=%x00", f"{base}..HEAD")
    result = []
    for (name, touched), patch, chunk in zip(made, patches, stats.split("\0")[1:], strict=True):
        added = removed = 0
        for line in chunk.strip().splitlines():
            a, r, _ = line.split("\t", 2)
            added, removed = added + int(a), removed + int(r)
        result.append(Exported(name, patch, touched, added, removed))
    return result
