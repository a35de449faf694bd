"""The base of pdguard's codemods."""

from __future__ import annotations

import libcst as cst
from libcst.codemod import CodemodCommand


class SourceCodemod(CodemodCommand):
    """A codemod command that reads no LibCST metadata.

    ``Codemod.transform_module`` wraps the module in a ``MetadataWrapper``, which deep-copies
    it; these codemods find their anchors by shape and need none of that, so they skip it.
    """

    def transform_module(self, tree: cst.Module) -> cst.Module:
        return self.transform_module_impl(tree)
