"""The base of pdguard's codemods: plain transforms, and the LibCST codemod commands built from
them on first use.

A transform (``Transform``) is a plain class: built from its options, ``transform_module(tree)``
returns the new ``cst.Module`` (subclasses write ``transform_module_impl``, as LibCST's do).
``pdguard apply`` runs transforms directly, so it never imports ``libcst.codemod``, which imports
``libcst.matchers`` (about 0.2 s: it defines a dataclass per node type); the transforms test
nodes with ``isinstance`` (``anchors.find_all``, ``is_name``, ``is_attribute``).

For ``python -m libcst.tool codemod``, each codemod module names its commands with
``__getattr__, __dir__ = commands(__name__, InflightDeadline=InflightDeadlineTransform)``. The
first ``getattr(module, "InflightDeadline")`` (what the tool does with a class path) builds a
``CodemodCommand`` subclass around the transform, with its ``DESCRIPTION`` and ``add_args``,
and every later one returns the same class. No metadata is computed: ``Codemod.transform_module``
would wrap the module in a ``MetadataWrapper``, which deep-copies it; the transforms find their
anchors by shape and need none of that.
"""

from __future__ import annotations

import argparse
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import libcst as cst

from .holes import Scope, fill_known

# The source text of the modules ``parse`` made, by identity (LibCST nodes are immutable), so that
# a transform reading its input as text (``source_of``) need not generate it again.
_SOURCES: OrderedDict[int, tuple[cst.Module, str]] = OrderedDict()
_KEPT = 64


def parse(code: str) -> cst.Module:
    """``cst.parse_module(code)``, remembering ``code`` as the module's source."""
    return with_source(cst.parse_module(code), code)


def with_source(module: cst.Module, code: str) -> cst.Module:
    """``module``, remembered as parsed from ``code`` (a hollowed module's whole text): what
    ``source_of`` gives for it."""
    _SOURCES[id(module)] = (module, code)
    while len(_SOURCES) > _KEPT:
        _SOURCES.popitem(last=False)
    return module


def source_of(module: cst.Module) -> str:
    """``module.code``: the text ``parse`` read it from, if it did, else generated; with the
    holes of a hollowed module filled (``holes``), so that what is asked of the text is
    answered for the whole module."""
    known = _SOURCES.get(id(module))
    code = known[1] if known is not None and known[0] is module else module.code
    return fill_known(code)


class Transform:
    """One edit of a module; ``DESCRIPTION`` and ``add_args`` serve its codemod command."""

    DESCRIPTION: str = ""

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        """The command-line options, named as the keyword arguments of ``__init__``."""

    def key(self) -> str:
        """The transform and its options (taken before it runs): two transforms with the same
        key make the same edit of the same text."""
        options = sorted((name, repr(value)) for name, value in vars(self).items())
        return f"{type(self).__module__}.{type(self).__qualname__}{options}"

    def scope(self, text: str) -> Scope | None:
        """Where in ``text`` (the module's source) the transform can look or edit, so that the
        rest need not be parsed with LibCST (``holes``); None (the default): anywhere."""
        return None

    def transform_module(self, tree: cst.Module) -> cst.Module:
        """``tree`` with the edit made."""
        return self.transform_module_impl(tree)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        raise NotImplementedError


class ClassTransform(Transform):
    """A transform of one class of a module (``--class``), which reads only the methods
    ``methods()`` names (``scope``)."""

    class_name: str
    METHODS: tuple[str, ...] = ()

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.add_argument("--class", dest="class_name", required=True)

    def methods(self) -> tuple[str, ...]:
        """The methods of the class the transform reads or edits (whole)."""
        return self.METHODS

    def scope(self, text: str) -> Scope:
        """Its methods, whole."""
        return Scope(members=frozenset((self.class_name, name) for name in self.methods()))


def _command(module: str, name: str, transform: type[Transform]) -> type:
    from libcst.codemod import CodemodCommand, CodemodContext

    def __init__(self: Any, context: CodemodContext, *args: Any, **kwargs: Any) -> None:
        CodemodCommand.__init__(self, context)
        self.transform = transform(*args, **kwargs)

    def transform_module(self: Any, tree: cst.Module) -> cst.Module:
        return self.transform_module_impl(tree)

    def transform_module_impl(self: Any, tree: cst.Module) -> cst.Module:
        result = self.transform.transform_module(tree)
        assert isinstance(result, cst.Module)
        return result

    namespace = {
        "__module__": module,
        "__qualname__": name,
        "__doc__": transform.__doc__,
        "DESCRIPTION": transform.DESCRIPTION,
        "add_args": staticmethod(transform.add_args),
        "__init__": __init__,
        "transform_module": transform_module,
        "transform_module_impl": transform_module_impl,
    }
    return type(name, (CodemodCommand,), namespace)


def commands(
    module: str, **transforms: type[Transform]
) -> tuple[Callable[[str], Any], Callable[[], Iterable[str]]]:
    """A module's ``__getattr__`` and ``__dir__`` (PEP 562) that give the codemod command of
    each transform under its keyword (``InflightDeadline=InflightDeadlineTransform``), built on
    first use and kept."""
    import sys

    built: dict[str, type] = {}

    def __getattr__(name: str) -> Any:
        if name not in transforms:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        if name not in built:
            built[name] = _command(module, name, transforms[name])
        return built[name]

    def __dir__() -> Iterable[str]:
        return sorted({*vars(sys.modules[module]), *transforms})

    return __getattr__, __dir__
