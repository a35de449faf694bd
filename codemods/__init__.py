"""pdguard's LibCST codemods (``pdguard.codemods``)."""

from .lazy_libcst import install

install()  # libcst.matchers' body runs only where a matcher is used (lazy_libcst)
