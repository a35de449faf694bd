"""pdguard's LibCST codemods (``pdguard.codemods``)."""
