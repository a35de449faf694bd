"""The rules, one module each (``pdg00N_<name>.py``): a ``Rule`` subclass with its rationale and
literal VALID/INVALID examples. ``pdguard.checks.RULES`` is their registry."""
