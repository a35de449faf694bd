"""``libcst.codemod`` without the body of ``libcst.matchers`` until a matcher is used.

Every codemod is a ``libcst.codemod.CodemodCommand``, and importing ``libcst.codemod`` imports
``libcst.matchers``, whose ``__init__`` is a generated module of about 170 frozen dataclasses
(one matcher per node type, fields typed with large ``Union``s): executing it costs about
0.2 s of CPU in a fresh process (0.08 s of it ``dataclasses`` building each class's docstring
from its signature), about what ``import libcst`` costs. ``libcst.codemod`` itself needs two
classes of the package's submodule ``_visitors`` (``ContextAwareTransformer``'s bases); its
``visitors`` package, which ``_command`` reaches for ``AddImportsVisitor``, uses matchers while
its ``__init__`` defines a class (``_apply_type_annotations``).

So, when ``libcst.codemod`` is first imported after ``pdguard.codemods`` (``codemods/__init__``
installs ``FINDER``), ``libcst.matchers`` and ``libcst.codemod.visitors`` are entered in
``sys.modules`` as their own modules with their package bodies not yet run: their submodules
import as usual, and the first read of any other name runs the body, in the same module object
(so a name read before and after is the same object). ``libcst.matchers`` is given the two
visitor classes beforehand. A codemod that uses matchers (``sender_abort``, whose patterns are
module constants) loads them when it is imported; the other codemods never do. Where LibCST is
laid out otherwise, or ``libcst.codemod`` was imported first, nothing is deferred.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

CODEMOD = "libcst.codemod"
MATCHERS = "libcst.matchers"
VISITORS = "libcst.codemod.visitors"
_MATCHER_VISITORS = ("MatcherDecoratableTransformer", "MatcherDecoratableVisitor")


def _deferred(name: str, path: Sequence[str]) -> ModuleType | None:
    """The package ``name`` (found in ``path``) entered in ``sys.modules`` with its body not
    run yet (None where it is no package there); the body runs at the first read of a name
    the module does not hold."""
    spec = importlib.machinery.PathFinder.find_spec(name, list(path))
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return None
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def __getattr__(attr: str) -> Any:  # a module's __getattr__ (PEP 562)
        if attr.startswith("__") and attr.endswith("__") and attr != "__all__":
            raise AttributeError(attr)  # what copy, pickle and inspect probe for
        del module.__dict__["__getattr__"]
        loader.exec_module(module)
        return getattr(module, attr)

    module.__dict__["__getattr__"] = __getattr__
    sys.modules[name] = module
    return module


def _defer(codemod: importlib.machinery.ModuleSpec) -> bool:
    """Enter ``libcst.matchers`` and ``libcst.codemod.visitors`` deferred (whether it did),
    before ``libcst.codemod`` (``codemod``, its spec) is executed."""
    import libcst

    if MATCHERS in sys.modules or VISITORS in sys.modules:
        return False
    entered: list[str] = []
    try:
        matchers = _deferred(MATCHERS, libcst.__path__)
        if matchers is not None:
            entered.append(MATCHERS)
            _visitors = importlib.import_module(f"{MATCHERS}._visitors")  # no read of matchers
            for attr in _MATCHER_VISITORS:
                setattr(matchers, attr, getattr(_visitors, attr))
            if _deferred(VISITORS, codemod.submodule_search_locations or ()) is not None:
                entered.append(VISITORS)
                libcst.matchers = matchers  # type: ignore[attr-defined]
                return True
    except Exception:  # an unexpected LibCST layout: import it as it is
        pass
    for name in entered:
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[loaded]
    return False


class _Loader(importlib.abc.Loader):
    """``libcst.codemod``'s own loader, which then binds its deferred ``visitors``."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = module.__spec__.loader = self.loader  # type: ignore[union-attr]
        self.loader.exec_module(module)
        if "visitors" not in vars(module) and VISITORS in sys.modules:
            setattr(module, "visitors", sys.modules[VISITORS])  # noqa: B010 (not typed)


class _Finder(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` entry for the first import of ``libcst.codemod`` only: it defers
    the two package bodies and leaves the path."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != CODEMOD:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not _defer(spec):
            return spec
        spec.loader = _Loader(spec.loader)
        return spec


FINDER = _Finder()


def install() -> None:
    """Defer the bodies when ``libcst.codemod`` is first imported (once a process)."""
    if CODEMOD not in sys.modules and FINDER not in sys.meta_path:
        sys.meta_path.insert(0, FINDER)
