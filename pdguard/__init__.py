"""pdguard: apply, and prove, a liveness fix for SGLang prefill-decode disaggregation."""

__version__ = "0.1.0"
