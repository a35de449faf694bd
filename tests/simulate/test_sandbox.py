"""The sandbox of ``simulate`` (pdguard/simulate/sandbox.py): a hostile tree that reaches for
``os``, writes a file, or exhausts memory, CPU or time exits 2 with one line naming its line,
and nothing of it runs outside the guard.

Each case is the toy prefill module (tests/snippets.py) with one hostile line in its inflight
function (or around it), at a line the test knows."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pdguard import simulate
from pdguard.cli import main
from pdguard.errors import SimulationGap
from pdguard.simulate import sandbox, standins
from pdguard.tree import open_tree
from tests.snippets import TOY_PREFILL, make_toy

ANCHOR = "        undone, done = [], []\n"
PREFILL = "sglang/srt/disaggregation/prefill.py"


def _hostile(tmp_path: Path, line: str, before: str = "", anchor: str = ANCHOR) -> tuple[Path, int]:
    """The toy with ``line`` (indented as the inflight function's body) before its ``anchor``,
    and ``before`` at module level before the class; returns the tree and the hostile line."""
    text = TOY_PREFILL
    if before:
        text = text.replace("\nclass ", f"\n{before}\n\nclass ", 1)
    assert anchor in text
    text = text.replace(anchor, f"        {line}\n{anchor}", 1)
    root = make_toy(tmp_path / "hostile", text)
    number = text.splitlines().index(f"        {line}") + 1
    return root, number


def _error(capsys: pytest.CaptureFixture[str], root: Path) -> str:
    assert main(["simulate", str(root), "--scenario", "healthy-traffic"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    return err


@pytest.mark.parametrize(
    "line",
    [
        "().__class__.__base__.__subclasses__()",  # the escape
        "getattr((), '__cl' + 'ass__')",  # the same, through getattr at run time
        "'{0.__class__}'.format(())",  # through a format field
        "(x for x in ()).gi_frame.f_globals",  # a frame's globals
        "self.__dict__",
        "open('/tmp/pdguard-sandbox-escaped', 'w').write('x')",  # a file written
        "exec('import os')",
        "eval('1')",
        "compile('1', 'x', 'eval')",
        "__import__('os').system('id')",
        "globals()['__builtins__']",
        "vars(self)",
    ],
)
def test_reaching_os_or_a_file_exits_2_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    root, number = _hostile(tmp_path, line)
    err = _error(capsys, root)
    assert f"{PREFILL}:{number}:" in err
    assert "sandbox" in err
    assert not Path("/tmp/pdguard-sandbox-escaped").exists()


def test_module_level_statements_and_defaults_are_guarded_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A module-level statement the loaded code needs, and a loaded function's default
    argument, are compiled under the same policy."""
    before = "HANDLE = open('/tmp/pdguard-sandbox-escaped', 'w')"
    root, _ = _hostile(tmp_path, "HANDLE", before=before)
    err = _error(capsys, root)
    assert "open is a builtin the simulation's sandbox does not give" in err
    text = (root / PREFILL).read_text()
    assert f"{PREFILL}:{text.splitlines().index(before) + 1}:" in err
    assert not Path("/tmp/pdguard-sandbox-escaped").exists()


def test_code_the_scenarios_do_not_need_is_never_compiled(tmp_path: Path) -> None:
    before = "def unused(x=__import__('os').system('id')):\n    return ().__class__"
    root, _ = _hostile(tmp_path, "pass", before=before)
    report = simulate.run(open_tree(root), names=["healthy-traffic"])
    assert [row.verdict for row in report.rows] == ["pass"]


def test_memory_exhaustion_exits_2_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, number = _hostile(tmp_path, "hoard = bytearray(64 * 1024 ** 3)")
    err = _error(capsys, root)
    assert f"{PREFILL}:{number}: cannot run" in err
    assert "MB of memory" in err


def test_a_spinning_target_is_stopped_naming_the_line(tmp_path: Path) -> None:
    root, number = _hostile(tmp_path, "while True: pass")
    limits = sandbox.Limits(cpu_s=2, wall_s=30)
    with pytest.raises(SimulationGap, match=rf"{PREFILL}:{number}: cannot run: .* 2 s of CPU"):
        simulate.run(open_tree(root), names=["healthy-traffic"], limits=limits)


def test_a_long_run_hits_the_wall_clock(tmp_path: Path) -> None:
    root, number = _hostile(tmp_path, "while True: pass")
    limits = sandbox.Limits(cpu_s=60, wall_s=2)
    with pytest.raises(SimulationGap, match=rf"{PREFILL}:{number}: cannot run: .* longer than 2 s"):
        simulate.run(open_tree(root), names=["healthy-traffic"], limits=limits)


def test_no_stand_in_gives_a_module(tmp_path: Path) -> None:
    """Every value the stand-ins give, and every attribute of it (two levels, underscored
    ones included), is refused by the guard if it is a module, code or a frame."""

    class Ctx:
        rank = 0
        env: dict[str, str] = {}  # noqa: RUF012

    value = standins.for_rank(Ctx())
    for key in sorted(standins.KEYS):
        try:
            given = value(key)
        except Exception:  # a stand-in that needs a richer context: not a module either
            continue
        assert type(given).__name__ != "module", key
        for name in dir(given):
            if name.startswith("__"):
                continue
            try:
                sandbox.guarded_getattr(given, name)
            except sandbox.SandboxViolation:
                pass
            except Exception:
                continue
    with pytest.raises(sandbox.SandboxViolation):
        sandbox.guarded_getattr(threading, "_os")
    with pytest.raises(sandbox.SandboxViolation):
        sandbox._read_attribute(threading, "_os")


def test_the_child_limits_do_not_reach_the_parent(tmp_path: Path) -> None:
    import resource

    before = resource.getrlimit(resource.RLIMIT_FSIZE)
    root, _ = _hostile(tmp_path, "pass")
    simulate.run(open_tree(root), names=["healthy-traffic"])
    assert resource.getrlimit(resource.RLIMIT_FSIZE) == before
    (tmp_path / "written").write_text("the parent still writes")


def test_a_package_directory_is_simulated_without_reading_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``simulate <tree>/sglang`` (a form check and apply accept): ``from abc import ABC`` is
    the standard library's, not a file looked for beside the package."""
    text = TOY_PREFILL.replace("import logging\n", "import logging\nfrom abc import ABC\n", 1)
    text = text.replace("class PrefillBootstrapQueue:", "class PrefillBootstrapQueue(ABC):")
    root = make_toy(tmp_path / "toy", text)
    assert main(["simulate", str(root / "sglang"), "--scenario", "healthy-traffic"]) == 0
    assert capsys.readouterr().err == ""


def test_a_limit_names_the_file_of_the_namespace_the_code_runs_in() -> None:
    """How a limit's message names the target's file travels with the target's namespaces
    (``sandbox.TARGET_FILE``, set by ``loader.Target.namespaces``), not a process-wide table:
    two targets whose modules share a relative path (two trees, two runs in one process) are
    each named as their own tree names it, and pdguard's own frames are never the target's."""
    code = compile("def poll():\n    raise MemoryError\n", PREFILL, "exec")
    named = {}
    for shown in ("one/" + PREFILL, "two/" + PREFILL):
        namespace: dict[str, object] = {sandbox.TARGET_FILE: shown}
        exec(code, namespace)
        try:
            namespace["poll"]()  # type: ignore[operator]  # the function just defined
        except MemoryError as exc:
            named[shown] = sandbox._target_line(exc)
    assert named == {shown: f"{shown}:2" for shown in named}
    try:
        raise MemoryError
    except MemoryError as exc:
        assert sandbox._target_line(exc) is None  # a frame of pdguard's (or a test's) own
    assert sandbox._running_line() is None
