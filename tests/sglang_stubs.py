"""Run unittest files against a checkout's own SGLang code, with the packages SGLang imports
and this machine lacks (torch, zmq, SGLang's modules outside the fetched tree, ...) replaced by
inert stand-ins: ``python -m tests.sglang_stubs CHECKOUT TEST_FILE ...`` exits 0 when every
test ran and passed, 1 otherwise.

A stand-in module gives a stand-in for any attribute. A stand-in is callable (applied to one
function it returns the function, so decorators keep what they decorate), usable as a base
class (a fresh empty class), iterable (empty), false, and a union member in annotations.
What SGLang's own code gets from the modules outside the tree and relies on is given as SGLang
defines it: ``logging.Logger.warning_once`` and the environment readers of
``sglang.srt.utils``. pdguard's own code, not SGLang's.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import types
import unittest
from pathlib import Path
from typing import Any


class _StubBase:
    def __init_subclass__(cls, **kwargs: Any) -> None:
        pass

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


class Stub:
    def __init__(self, name: str = "stub") -> None:
        self._name = name

    def __getattr__(self, name: str) -> Stub:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Stub(f"{self._name}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], Stub):
            return args[0]
        return Stub(f"{self._name}()")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (type(self._name.rpartition(".")[2] or "Stub", (_StubBase,), {}),)

    def __iter__(self) -> Any:
        return iter(())

    def __or__(self, other: Any) -> Stub:
        return self

    __ror__ = __or__

    def __getitem__(self, item: Any) -> Stub:
        return self

    def __bool__(self) -> bool:
        return False


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Stub:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Stub(f"{self.__name__}.{name}")


def _get_int_env_var(name: str, default: int = 0) -> int:
    value = os.getenv(name)
    try:
        return int(value) if value is not None and value.strip() else default
    except ValueError:
        return default


def _get_bool_env_var(name: str, default: str = "false") -> bool:
    return os.getenv(name, default).lower() in ("true", "1")


_GIVEN = {
    "sglang.srt.utils": {
        "get_int_env_var": _get_int_env_var,
        "get_bool_env_var": _get_bool_env_var,
    }
}


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on ``sys.meta_path``: a module no other finder finds is a stand-in module."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        for finder in sys.meta_path:
            if finder is self:
                continue
            try:
                if finder.find_spec(fullname, path, target) is not None:  # type: ignore[attr-defined]
                    return None
            except (ImportError, AttributeError, ValueError):
                continue
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        for name, value in _GIVEN.get(module.__name__, {}).items():
            setattr(module, name, value)


def run(checkout: Path, tests: list[Path]) -> bool:
    """Whether every test of ``tests`` ran and passed against ``checkout/python``."""
    sys.path.insert(0, str(checkout / "python"))
    sys.meta_path.append(_Finder())
    if not hasattr(logging.Logger, "warning_once"):
        logging.Logger.warning_once = logging.Logger.warning  # type: ignore[attr-defined]
    suite = unittest.TestSuite()
    for path in tests:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        suite.addTests(unittest.defaultTestLoader.loadTestsFromModule(module))
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    return result.wasSuccessful() and result.testsRun > 0


if __name__ == "__main__":
    sys.exit(0 if run(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]) else 1)
