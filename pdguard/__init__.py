"""pdguard: apply, and prove, a liveness fix for SGLang prefill-decode disaggregation."""

from pkgutil import extend_path

# pdguard.checks, pdguard.codemods and pdguard.vendor_sglang are the top-level folders checks/,
# codemods/ and vendor_sglang/, installed under pdguard by pyproject.toml's package-dir mapping.
# Run from a checkout's root, ``pdguard`` is this folder (the current directory comes first on
# sys.path) and the installed copy of the mapped folders is found through ``__path__``
# (docs/cli.md, "Layout").
__path__ = extend_path(__path__, __name__)

__version__ = "0.1.0"
# As in pyproject.toml's [project.urls].
HOMEPAGE = "https://github.com/pdguard/pdguard"
ISSUES_URL = f"{HOMEPAGE}/issues"
