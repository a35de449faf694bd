"""pdguard.source_file.SourceFile: decoding and encoding round-trip a file's bytes exactly."""

from __future__ import annotations

import pytest

from pdguard.source_file import SourceDecodeError, SourceFile

ROUND_TRIPS = {
    "utf-8": "x = 'caf\u00e9 \u2603'\ny = 2\n".encode(),
    "utf-8 with BOM": "\ufeffx = 'caf\u00e9'\ny = 2\n".encode(),
    "CRLF": b"x = 1\r\ny = 2\r\n",
    "CRLF with BOM": b"\xef\xbb\xbfx = 1\r\ny = 2\r\n",
    "mixed endings": b"x = 1\r\ny = 2\nz = 3\r\nw = 4\n",
    "lone CR": b"x = 1\ry = 2\r",
    "latin-1 cookie": "# -*- coding: latin-1 -*-\nname = 'Gr\u00fc\u00dfe \u00e9'\n".encode(
        "latin-1"
    ),
    "latin-1 cookie on line 2": (
        "#!/usr/bin/env python\n# vim: set fileencoding=latin-1 :\ns = '\u00ff'\n"
    ).encode("latin-1"),
    "cp1252 cookie with CRLF": "# coding: cp1252\r\ns = '\u20ac'\r\n".encode("cp1252"),
    "no trailing newline": b"x = 1\ny = 2",
    "no trailing newline, CRLF": b"x = 1\r\ny = 2",
    "empty": b"",
    "only a newline": b"\n",
    "trailing whitespace and tabs": b"x = 1   \n\tif x:\n\t\tpass  \n",
    "form feed": b"x = 1\n\x0c\ny = 2\n",
}


@pytest.mark.parametrize("data", ROUND_TRIPS.values(), ids=ROUND_TRIPS.keys())
def test_round_trip_is_byte_exact(data: bytes) -> None:
    source = SourceFile.decode("pkg/mod.py", data)
    assert source.rel == "pkg/mod.py"
    assert source.encode() == data
    # an unchanged copy encodes the same way
    assert source.with_text(source.text).encode() == data


def test_bom_is_not_part_of_the_text_but_is_kept() -> None:
    source = SourceFile.decode("m.py", b"\xef\xbb\xbfx = 1\n")
    assert source.encoding == "utf-8-sig"
    assert source.text == "x = 1\n"
    assert source.with_text("x = 2\n").encode() == b"\xef\xbb\xbfx = 2\n"


def test_plain_utf8_has_no_bom() -> None:
    source = SourceFile.decode("m.py", b"x = 1\n")
    assert source.encoding == "utf-8"
    assert not source.with_text("x = 2\n").encode().startswith(b"\xef\xbb\xbf")


def test_cookie_encoding_is_used_for_new_text() -> None:
    data = "# -*- coding: latin-1 -*-\ns = '\u00e9'\n".encode("latin-1")
    source = SourceFile.decode("m.py", data)
    assert source.encoding == "iso-8859-1"
    assert "\u00e9" in source.text
    new = source.with_text(source.text + "t = '\u00e8'\n").encode()
    assert new == data + "t = '\u00e8'\n".encode("latin-1")


def test_line_endings_are_not_translated() -> None:
    source = SourceFile.decode("m.py", b"a\r\nb\nc\r")
    assert source.text == "a\r\nb\nc\r"


@pytest.mark.parametrize(
    "data",
    [
        b"x = '\xff\xfe'\n",  # not utf-8, no cookie
        b"# -*- coding: utf-8 -*-\nx = '\xe9'\n",  # cookie says utf-8, bytes are latin-1
        b"# coding: no-such-codec\nx = 1\n",  # unknown codec
        b"\xef\xbb\xbf# coding: latin-1\nx = 1\n",  # BOM and a conflicting cookie
        b"x = '\xc3'\n",  # truncated utf-8 sequence
    ],
    ids=["invalid utf-8", "lying cookie", "unknown codec", "BOM vs cookie", "truncated"],
)
def test_undecodable_bytes(data: bytes) -> None:
    with pytest.raises(SourceDecodeError, match=r"^pkg/bad\.py: cannot decode"):
        SourceFile.decode("pkg/bad.py", data)


def test_decode_error_is_a_value_error() -> None:
    assert issubclass(SourceDecodeError, ValueError)


@pytest.mark.parametrize(
    ("data", "newline"),
    [
        (b"a\nb\n", "\n"),
        (b"a\r\nb\r\n", "\r\n"),
        (b"a\r\nb", "\r\n"),
        (b"a\r\nb\r\nc\n", "\r\n"),  # mostly CRLF
        (b"a\r\nb\nc\n", "\n"),  # mostly LF
        (b"a\r\nb\n", "\r\n"),  # a tie goes to CRLF
        (b"", "\n"),  # no line at all
        (b"x = 1", "\n"),
        (b"\xef\xbb\xbfa\r\nb\r\n", "\r\n"),
    ],
)
def test_newline(data: bytes, newline: str) -> None:
    assert SourceFile.decode("m.py", data).newline == newline


def test_source_file_is_immutable() -> None:
    source = SourceFile.decode("m.py", b"x = 1\n")
    changed = source.with_text("x = 2\n")
    assert source.text == "x = 1\n"
    assert changed.text == "x = 2\n"
    assert changed.encoding == source.encoding
    assert changed.rel == source.rel
    with pytest.raises(AttributeError):
        source.text = "y"  # type: ignore[misc]  # assigning to a frozen field is the test
