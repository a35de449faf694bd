"""pdguard: apply, and prove, a liveness fix for SGLang prefill-decode disaggregation."""

__version__ = "0.1.0"
# As in pyproject.toml's [project.urls].
HOMEPAGE = "https://github.com/pdguard/pdguard"
ISSUES_URL = f"{HOMEPAGE}/issues"
