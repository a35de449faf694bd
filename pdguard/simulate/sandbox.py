"""The guard around the target's code: ``simulate`` executes functions of a tree it has never
seen, so that code is untrusted.

Three layers, each enough to stop what the one before it misses:

* **A restricted compile** (RestrictedPython, with :class:`TargetPolicy`): no dunder name or
  attribute (``__class__``, ``__subclasses__``, ``__globals__``, ``__builtins__``, name-mangled
  ``__x``), none of the frame, code and traceback attributes (``gi_frame``, ``f_globals``,
  ``tb_frame``, ...), no ``exec``/``eval`` calls, no ``async`` code. A refusal is a
  :class:`~pdguard.errors.LoadError` ``<file>:<line>: cannot load: ...``.
* **Restricted builtins** (:data:`BUILTINS`): no ``open``, ``exec``, ``eval``, ``compile``,
  ``__import__``, ``globals``, ``locals``, ``vars``, ``breakpoint``, ``input``, ``help``,
  ``exit``; ``getattr``/``setattr``/``hasattr``/``delattr`` refuse the names the compile
  refuses, and ``str.format`` refuses a field that reads an underscore attribute
  (``"{0.__class__}"``). The loader refuses, at load time and naming the line, a loaded
  function that reads a builtin the sandbox does not give (``refused_builtins``).
* **A child process** (:func:`run_in_child`) with an address-space limit (RLIMIT_AS), a CPU
  limit (RLIMIT_CPU), no file writes (RLIMIT_FSIZE 0) and a wall-clock limit. A limit reached is
  a :class:`~pdguard.errors.SimulationGap` naming the target's line that was running.

The loader compiles only the definitions the scenarios need (``loader``), so the rest of the
tree's code is never compiled, let alone run.
"""

from __future__ import annotations

import ast
import builtins
import dis
import os
import pickle
import re
import resource
import select
import signal
import string
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import CodeType, FrameType, ModuleType, TracebackType
from typing import Any, TypeVar

from RestrictedPython import compile_restricted_exec
from RestrictedPython.transformer import INSPECT_ATTRIBUTES, RestrictingNodeTransformer

from ..errors import LoadError, PdguardError, SimulationGap

T = TypeVar("T")

# The builtins the target's code gets: data types, exceptions, and functions that reach
# nothing outside the objects they are given.
_SAFE_NAMES = frozenset(
    {
        *("abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr"),
        *("classmethod", "complex", "dict", "dir", "divmod", "enumerate", "filter", "float"),
        *("format", "frozenset", "hash", "hex", "id", "int", "isinstance", "issubclass", "iter"),
        *("len", "list", "map", "max", "memoryview", "min", "next", "object", "oct", "ord"),
        *("pow", "property", "range", "repr", "reversed", "round", "set", "slice", "sorted"),
        *("staticmethod", "str", "sum", "super", "tuple", "type", "zip", "aiter", "anext"),
        *("True", "False", "None", "Ellipsis", "NotImplemented", "__build_class__", "__debug__"),
    }
)
# Names of builtins the sandbox never gives: reading one is refused at load time.
REFUSED_BUILTINS = frozenset(
    {
        "open",
        "exec",
        "eval",
        "compile",
        "__import__",
        "globals",
        "locals",
        "vars",
        "breakpoint",
        "input",
        "help",
        "exit",
        "quit",
        "copyright",
        "credits",
        "license",
        "__loader__",
        "__spec__",
    }
)
# Dunder names the target's code may read: harmless values.
ALLOWED_DUNDER_NAMES = frozenset({"__name__", "__debug__", "__doc__", "__qualname__"})


class SandboxViolation(Exception):
    """The target's code asked the sandbox for something it refuses (at run time)."""


# Dunder attributes the target's code may read: calling a base class's constructor
# (``super().__init__``), an exception's cause and a class's name. Each gives what the code
# could have anyway; none leads to a class's subclasses, a function's globals or the builtins
# (``__class__``, ``__base__``, ``__subclasses__``, ``__globals__``, ``__dict__`` stay refused).
ALLOWED_DUNDER_ATTRIBUTES = frozenset(
    {"__init__", "__name__", "__qualname__", "__cause__", "__context__", "__doc__"}
)


def _refused_attribute(name: str) -> bool:
    return (
        name.startswith("__") and name not in ALLOWED_DUNDER_ATTRIBUTES
    ) or name in INSPECT_ATTRIBUTES


def _check_attribute(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"attribute name must be a string, not {type(name).__name__}")
    if _refused_attribute(name):
        raise SandboxViolation(f"the sandbox refuses the attribute {name!r}")
    return name


class _SafeFormatter(string.Formatter):
    """``str.format`` for the target: a field may not read an underscore attribute."""

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        for part in re.split(r"[.\[]", field_name)[1:]:
            if part.startswith("_"):
                raise SandboxViolation(f"the sandbox refuses the format field {field_name!r}")
        return super().get_field(field_name, args, kwargs)


_FORMATTER = _SafeFormatter()


def _safe_format(template: str) -> Callable[..., str]:
    def format(*args: object, **kwargs: object) -> str:
        return _FORMATTER.vformat(template, args, kwargs)

    return format


def _unbound_format(template: str, *args: object, **kwargs: object) -> str:
    return _FORMATTER.vformat(template, args, kwargs)


def _unbound_format_map(template: str, mapping: Any) -> str:
    return _FORMATTER.vformat(template, (), mapping)


# What no attribute read may give the target's code: a module (``threading._os``), code (whose
# ``replace`` builds unchecked bytecode), a frame or a traceback.
_UNREACHABLE = (ModuleType, CodeType, FrameType, TracebackType)


_UNREACHABLE_TYPES = frozenset(_UNREACHABLE)


def _read_attribute(obj: object, name: str) -> Any:
    """``a.b`` in the target's code (the compile checked the name; ``format`` goes through
    :func:`guarded_getattr`)."""
    value = getattr(obj, name)
    if type(value) in _UNREACHABLE_TYPES:
        raise SandboxViolation(
            f"the sandbox refuses {name!r}: it is a {type(value).__name__} object"
        )
    return value


def guarded_getattr(obj: object, name: str, *default: object) -> Any:
    """``getattr`` (and every ``a.b`` the compile rewrote) in the target's code."""
    _check_attribute(name)
    if name == "format" or name == "format_map":
        if isinstance(obj, str):
            if name == "format":
                return _safe_format(obj)
            return lambda mapping: _FORMATTER.vformat(obj, (), mapping)
        if obj is str:
            return _unbound_format if name == "format" else _unbound_format_map
    value = getattr(obj, name, *default)
    if isinstance(value, _UNREACHABLE):
        raise SandboxViolation(
            f"the sandbox refuses {name!r}: it is a {type(value).__name__} object"
        )
    return value


def _guarded_hasattr(obj: object, name: str) -> bool:
    _check_attribute(name)
    return hasattr(obj, name)


def _guarded_setattr(obj: object, name: str, value: object) -> None:
    setattr(obj, _check_attribute(name), value)


def _guarded_delattr(obj: object, name: str) -> None:
    delattr(obj, _check_attribute(name))


def _write(obj: T) -> T:
    """``_write_`` of RestrictedPython: attribute names are checked by the compile."""
    return obj


def _print(*_: object, **__: object) -> None:
    """``print`` in the target's code writes nothing."""


def _make_builtins() -> dict[str, object]:
    given: dict[str, object] = {name: getattr(builtins, name) for name in _SAFE_NAMES}
    given.update(
        (name, value)
        for name, value in vars(builtins).items()
        if isinstance(value, type) and issubclass(value, BaseException)
    )
    given.update(
        getattr=guarded_getattr,
        hasattr=_guarded_hasattr,
        setattr=_guarded_setattr,
        delattr=_guarded_delattr,
        print=_print,
        _getattr_=guarded_getattr,
        _read_=_read_attribute,
        _write_=_write,
    )
    return given


BUILTINS: dict[str, object] = _make_builtins()
# Every name the target's code may read without the module binding it.
BUILTIN_NAMES = frozenset(BUILTINS)


def builtins_for_target() -> dict[str, object]:
    """A fresh copy of :data:`BUILTINS` for one namespace (the target may not change ours)."""
    return dict(BUILTINS)


# -- the restricted compile ------------------------------------------------------------------


class TargetPolicy(RestrictingNodeTransformer):
    """RestrictedPython's policy, narrowed to what guards the simulation: SGLang's code uses
    single-underscore names and attributes, augmented assignment of attributes, unpacking,
    ``nonlocal`` and ``print``, none of which reaches anything; dunder names and attributes,
    the introspection attributes, ``exec``/``eval`` and async code stay refused. Attribute
    reads go through ``_getattr_`` (``guarded_getattr``: ``str.format`` is made safe there);
    subscripts and iteration are left as Python has them."""

    def check_name(self, node: Any, name: str | None, allow_magic_methods: bool = False) -> None:
        if name is None:
            return
        if name.startswith("__") and name not in ALLOWED_DUNDER_NAMES:
            if allow_magic_methods and name.endswith("__"):
                return  # defining __init__, __repr__, ... on a class
            self.error(node, f'"{name}" is a name the sandbox refuses (it starts with "__")')

    def visit_Name(self, node: ast.Name) -> Any:
        node = self.node_contents_visit(node)
        self.check_name(node, node.id)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        if _refused_attribute(node.attr):
            self.error(node, f'"{node.attr}" is an attribute the sandbox refuses')
        if isinstance(node.ctx, ast.Load):
            node = self.node_contents_visit(node)
            guard = "_getattr_" if node.attr in ("format", "format_map") else "_read_"
            func = ast.copy_location(ast.Name(guard, ast.Load()), node)
            attr = ast.copy_location(ast.Constant(node.attr), node)
            call = ast.Call(func=func, args=[node.value, attr], keywords=[])
            return ast.copy_location(call, node)
        return self.node_contents_visit(node)

    def visit_Call(self, node: ast.Call) -> Any:
        if isinstance(node.func, ast.Name) and node.func.id in ("exec", "eval"):
            self.error(node, f"{node.func.id}() calls are refused by the sandbox")
        return self.node_contents_visit(node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> Any:
        self.check_name(node, node.name)
        return self.node_contents_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        self.check_name(node, node.name, allow_magic_methods=True)
        self.check_function_argument_names(node)
        return self.node_contents_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> Any:
        self.check_name(node, node.name)
        if any(keyword.arg == "metaclass" for keyword in node.keywords):
            self.error(node, "a metaclass is refused by the sandbox")
        return self.node_contents_visit(node)

    # left as Python has them: subscripts, (augmented) assignment and unpacking, iteration,
    # ``with`` and ``nonlocal``; the names and attributes inside are still checked
    visit_Subscript = visit_Assign = visit_AugAssign = visit_For = visit_comprehension = (
        RestrictingNodeTransformer.node_contents_visit
    )
    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_With = (
        RestrictingNodeTransformer.node_contents_visit
    )
    visit_Nonlocal = visit_Module = RestrictingNodeTransformer.node_contents_visit

    def generic_visit(self, node: ast.AST) -> Any:
        """A node RestrictedPython has no rule for (annotated assignment, ``match``,
        ``try``/``except*``): names and attributes inside it are still checked."""
        return self.node_contents_visit(node)


_LINE = re.compile(r"^Line (\d+): (.*)$", re.S)


def restricted_compile(
    module: ast.Module, rel: str, where: Callable[[int], str], flags: int
) -> CodeType:
    """Compile ``module`` (loader-built, not modified) under :class:`TargetPolicy`; a refusal
    is a LoadError ``<where(line)>: cannot load: <why> (the simulation's sandbox)``."""
    tree = ast.fix_missing_locations(_copy(module))
    result = compile_restricted_exec(
        tree, filename=rel, flags=flags, dont_inherit=True, policy=TargetPolicy
    )
    if result.errors:
        first = result.errors[0]
        found = _LINE.match(first)
        line, why = (int(found.group(1)), found.group(2)) if found else (0, first)
        raise LoadError(f"{where(line)}: cannot load: {why.rstrip('.')} (the simulation's sandbox)")
    assert result.code is not None
    return result.code


def _copy(module: ast.Module) -> ast.Module:
    """A deep copy (the policy rewrites the tree it is given; the loader compiles its plan
    again when it grows)."""
    import copy

    return copy.deepcopy(module)


def refused_builtins(code: CodeType) -> Iterator[tuple[str, int]]:
    """(name, line) of each global read of a builtin the sandbox does not give."""
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME") and (
            instruction.argval in REFUSED_BUILTINS
        ):
            line = instruction.positions.lineno if instruction.positions else None
            yield instruction.argval, line or 0
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from refused_builtins(const)


# -- the child process -----------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """What the child that runs the target's code may use."""

    memory_mb: int = 2048  # address space beyond what the parent had at the fork
    cpu_s: int = 120
    wall_s: float = 180.0


LIMITS = Limits()
# The key, in each namespace the target's code runs in (``loader.Target.namespaces``), of how
# messages name that module's file: a frame whose globals hold it runs the target's code, and a
# limit reached is placed on the innermost such frame. The name travels with the code it names,
# so two targets (two runs, or two trees with the same relative paths) never share it; the
# target's code cannot spell it (the policy refuses names that start with ``_``).
TARGET_FILE = "__pdguard_target_file__"


class _LimitReached(BaseException):
    pass


def _shown(frame: FrameType, line: int | None) -> str | None:
    """``<file>:<line>`` when ``frame`` runs the target's code."""
    name = frame.f_globals.get(TARGET_FILE)
    return f"{name}:{line or 0}" if isinstance(name, str) else None


def _running_line() -> str | None:
    """``<file>:<line>`` of the target's code some thread is running, if any."""
    frames: dict[int, FrameType] = sys._current_frames()
    for frame in frames.values():
        current: FrameType | None = frame
        while current is not None:
            shown = _shown(current, current.f_lineno)
            if shown is not None:
                return shown
            current = current.f_back
    return None


def _target_line(exc: BaseException) -> str | None:
    """``<file>:<line>`` of the innermost frame of the target's code ``exc`` went through."""
    frames: list[tuple[FrameType, int]] = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    for frame, line in reversed(frames):
        shown = _shown(frame, line)
        if shown is not None:
            return shown
    return None


def _vm_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[0]) * resource.getpagesize()
    except OSError:
        return 0


def _apply_limits(limits: Limits) -> None:
    memory = _vm_bytes() + limits.memory_mb * 1024 * 1024
    for kind, soft, hard in (
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + 5),
        (resource.RLIMIT_FSIZE, 0, 0),
        (resource.RLIMIT_CORE, 0, 0),
    ):
        _, current_hard = resource.getrlimit(kind)
        if current_hard != resource.RLIM_INFINITY:
            hard = min(hard, current_hard)
            soft = min(soft, hard)
        resource.setrlimit(kind, (soft, hard))


def _limit_message(what: str) -> str:
    line = _running_line()
    return f"{line or 'the target'}: cannot run: {what} (the simulation's sandbox)"


def _child(fn: Callable[..., T], args: tuple[object, ...], limits: Limits, out: int) -> None:
    def on_signal(signum: int, _frame: object) -> None:
        what = (
            f"the target's code used more than {limits.cpu_s} s of CPU"
            if signum == signal.SIGXCPU
            else f"the target's code ran longer than {limits.wall_s:g} s"
        )
        _send(out, ("error", SimulationGap(_limit_message(what))))
        os._exit(0)

    signal.signal(signal.SIGXCPU, on_signal)
    signal.signal(signal.SIGALRM, on_signal)
    signal.setitimer(signal.ITIMER_REAL, limits.wall_s)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        _apply_limits(limits)
        result: tuple[str, object] = ("ok", fn(*args))
    except PdguardError as exc:
        result = ("error", exc)
    except MemoryError as exc:
        line = _target_line(exc) or _running_line() or "the target"
        what = f"the target's code used more than {limits.memory_mb} MB of memory"
        result = ("error", SimulationGap(f"{line}: cannot run: {what} (the simulation's sandbox)"))
    except BaseException:
        result = ("bug", traceback.format_exc())
    signal.setitimer(signal.ITIMER_REAL, 0)
    _send(out, result)


def _send(out: int, result: tuple[str, object]) -> None:
    try:
        data = pickle.dumps(result)
    except Exception:  # an exception the target made that does not pickle
        data = pickle.dumps(("bug", f"the simulation's result does not pickle: {result[1]!r}"))
    view = memoryview(data)
    while view:
        written = os.write(out, view)
        view = view[written:]


def run_in_child(fn: Callable[..., T], *args: object, limits: Limits = LIMITS) -> T:
    """``fn(*args)`` in a forked child under ``limits``; its result, or the PdguardError it
    raised, is given back here. A child that dies without answering is a SimulationGap."""
    read, write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child
        code = 0
        try:
            os.close(read)
            _child(fn, args, limits, write)
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    os.close(write)
    chunks: list[bytes] = []
    deadline = time.monotonic() + limits.wall_s + 10
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                raise SimulationGap(
                    f"cannot run: the target's code ran longer than {limits.wall_s:g} s "
                    "(the simulation's sandbox)"
                )
            ready, _, _ = select.select([read], [], [], left)
            if not ready:
                continue
            chunk = os.read(read, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read)
        _, status = os.waitpid(pid, 0)
    if not chunks:
        why = (
            f"was killed by signal {os.WTERMSIG(status)}"
            if os.WIFSIGNALED(status)
            else f"exited with {os.waitstatus_to_exitcode(status)}"
        )
        raise SimulationGap(f"cannot run: the simulation's child process {why} (the sandbox)")
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "ok":
        return value
    if kind == "error":
        assert isinstance(value, PdguardError)
        raise value
    raise RuntimeError(f"the simulation's child process failed:\n{value}")
