"""What a rule is and what it reports."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar

from .project import PREFILL, Project

__all__ = ["PREFILL", "Finding", "Rule"]


@dataclass(frozen=True, order=True)
class Finding:
    path: str  # relative to the tree's base, e.g. sglang/srt/disaggregation/prefill.py
    line: int
    col: int
    code: str
    symbol: str  # e.g. NixlKVSender.poll
    message: str


class Rule:
    """A property of the PD-disaggregation code. The docstring of a rule says what it checks
    and why; ``VALID`` and ``INVALID`` are example trees (relative path -> source) that the
    tests run: every valid one must give no finding of the rule, every invalid one at least one.
    A single string stands for ``prefill.py``."""

    code: ClassVar[str]
    name: ClassVar[str]
    # "What it does / Why is this bad / Example": the rule module's docstring, whose title
    # ("PDG001: an inflight request can wait forever.") gives the one-line summary.
    summary: ClassVar[str]
    description: ClassVar[str]
    VALID: ClassVar[tuple[str | Mapping[str, str], ...]] = ()
    INVALID: ClassVar[tuple[str | Mapping[str, str], ...]] = ()

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
