"""The KV sender/manager classes of the workspace's current texts."""

from __future__ import annotations

from checks.kv_senders import ClassIndex

from ..tree import DISAGGREGATION_DIR
from ..workspace import Workspace


def sender_index(workspace: Workspace) -> ClassIndex:
    """Index of the classes in the disaggregation modules that can define senders or managers
    (a text prefilter first: only those files are parsed)."""
    index = ClassIndex()
    for rel in workspace.files_containing(DISAGGREGATION_DIR, "KVSender", "KVManager"):
        index.add_module(rel, workspace.ast(rel), workspace.text(rel))
    return index
