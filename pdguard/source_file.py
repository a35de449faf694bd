"""Python source files as pdguard reads and writes them: text that round-trips to the same bytes.

The encoding comes from the BOM or the PEP 263 cookie (``tokenize.detect_encoding``); line
endings are left as they are in the text (no newline translation), so an unchanged file encodes
back to exactly the bytes it was read from.
"""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass, replace

from .errors import ParseError


class SourceDecodeError(ParseError, ValueError):
    """The bytes are not text in the encoding the file declares."""


@dataclass(frozen=True)
class SourceFile:
    rel: str
    text: str
    encoding: str  # codec name; "utf-8-sig" keeps a BOM

    @classmethod
    def decode(cls, rel: str, data: bytes) -> SourceFile:
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
            text = data.decode(encoding)
        except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
            error = SourceDecodeError(f"{rel}: cannot decode: {exc}")
            error.rel, error.why = rel, f"cannot decode: {exc}"
            raise error from exc
        return cls(rel=rel, text=text, encoding=encoding)

    def encode(self) -> bytes:
        return self.text.encode(self.encoding)

    def with_text(self, text: str) -> SourceFile:
        return replace(self, text=text)

    @property
    def newline(self) -> str:
        """The file's dominant line ending, for lines pdguard adds."""
        crlf = self.text.count("\r\n")
        return "\r\n" if crlf and crlf >= self.text.count("\n") - crlf else "\n"
