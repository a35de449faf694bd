"""The KV sender/manager classes of the workspace's current texts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdguard.checks.models.kv_senders import ClassIndex
from pdguard.checks.project import Project

from ..sglang_names import DISAGGREGATION_DIR, SENDER_NEEDLES

if TYPE_CHECKING:
    from ..workspace import Workspace


def sender_index(workspace: Workspace) -> ClassIndex:
    """The checker's own index of sender and manager classes, built from the workspace's current
    texts (a text prefilter first: only those files are parsed)."""
    rels = workspace.files_containing(DISAGGREGATION_DIR, *SENDER_NEEDLES)
    for rel in rels:
        workspace.ast(rel)  # a file that does not parse: the workspace's file:line:col error
    return Project(workspace.project_texts(rels), workspace.run).classes
