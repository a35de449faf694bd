"""The prefill half of ``simulate``: the release's own prefill code (``loader``), the stand-ins
it is given (``standins``), the world it runs in (``world``) and the scenarios (``scenarios``)."""

from __future__ import annotations

from ...tree import SourceTree
from .. import standins as shared_standins
from . import loader, standins


def load(tree: SourceTree) -> loader.Target:
    """The target's prefill code, compiled for the simulation; LoadError says why it cannot be."""
    return loader.load(tree, shared_standins.KEYS, standins.SchedulerStandIn.REPLACES)
