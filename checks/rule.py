"""What a rule is and what it reports."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from .project import PREFILL, Project

__all__ = ["PREFILL", "Example", "Expected", "Finding", "Invalid", "Rule"]


@dataclass(frozen=True, order=True)
class Finding:
    path: str  # relative to the tree's base, e.g. sglang/srt/disaggregation/prefill.py
    line: int
    col: int
    code: str
    symbol: str  # e.g. NixlKVSender.poll
    message: str


Example = str | Mapping[str, str]  # a tree (relative path -> source); a string is prefill.py


class Expected(NamedTuple):
    """One finding an INVALID example must give: where, and its exact message."""

    line: int
    col: int
    message: str
    path: str = PREFILL


@dataclass(frozen=True)
class Invalid:
    """An INVALID example and every finding the rule must give on it, no more, no less (as
    Fixit's ``Invalid(code, line=, column=, expected_message=)``)."""

    code: Example
    expected: Sequence[Expected | tuple[int, int, str] | tuple[int, int, str, str]]

    def __post_init__(self) -> None:
        object.__setattr__(self, "expected", tuple(Expected(*e) for e in self.expected))


# Where each rule's examples live: one module per rule, named by its code (``pdg001``).
EXAMPLES_PACKAGE = "pdguard.checks.rule_examples"


class _Examples:
    """``Rule.VALID`` / ``Rule.INVALID``: the tuple of that name in the rule's examples module
    (``EXAMPLES_PACKAGE``), imported when first asked for (``check`` never loads them)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: object, owner: type[Rule]) -> tuple[Any, ...]:
        module = importlib.import_module(f"{EXAMPLES_PACKAGE}.{owner.code.lower()}")
        return tuple(getattr(module, self.name))


class Rule:
    """A property of the PD-disaggregation code. The docstring of a rule says what it checks
    and why; ``VALID`` and ``INVALID`` are examples that the tests run, literal code in the
    rule's examples module (``checks/rule_examples/pdg00N.py``). A valid example is a tree
    (relative path -> source; a single string stands for ``prefill.py``) that must give no
    finding of the rule; an ``Invalid`` one must give exactly its ``expected`` findings."""

    code: ClassVar[str]
    name: ClassVar[str]
    # "What it does / Why is this bad / Example": the rule module's docstring, whose title
    # ("PDG001: an inflight request can wait forever.") gives the one-line summary.
    summary: ClassVar[str]
    description: ClassVar[str]
    VALID: ClassVar[tuple[Example, ...]] = _Examples()  # type: ignore[assignment]
    INVALID: ClassVar[tuple[Invalid, ...]] = _Examples()  # type: ignore[assignment]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        doc = sys.modules[cls.__module__].__doc__ or ""
        title, _, body = doc.partition("\n")
        if "summary" not in cls.__dict__:
            cls.summary = title.split(":", 1)[-1].strip()
        if "description" not in cls.__dict__:
            cls.description = body.strip()

    def check(self, project: Project) -> Iterator[Finding]:
        raise NotImplementedError

    def finding(self, path: str, line: int, col: int, symbol: str, message: str) -> Finding:
        return Finding(path, line, col, self.code, symbol, message)
