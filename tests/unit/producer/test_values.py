"""The value layer's charset conversions, as MySQL converts to Unicode."""

from __future__ import annotations

import pytest

from rowbus.producer.values import UnsupportedCharsetError, text_decoder


def test_latin1_is_mysqls_cp1252_with_the_undefined_bytes_mapped_one_to_one() -> None:
    latin1 = text_decoder("latin1")
    assert latin1(b"\xc3\x81") == "\u00c3\u0081"  # UTF-8 'Á' stored in a latin1 column
    assert latin1(b"\x80\x81\x8d\x8f\x90\x9d\x9f\xff") == "€\x81\x8d\x8f\x90\x9dŸÿ"
    assert len(latin1(bytes(range(256)))) == 256  # every byte decodes, none raises


@pytest.mark.parametrize(
    ("charset", "raw", "text"),
    [
        ("utf8mb4", "😀é".encode(), "😀é"),
        ("utf8mb3", "ñ€".encode(), "ñ€"),
        ("ascii", b"abc", "abc"),
        ("ucs2", "Ωx".encode("utf-16-be"), "Ωx"),
        ("utf16", "😀".encode("utf-16-be"), "😀"),
        ("utf16le", "😀".encode("utf-16-le"), "😀"),
        ("utf32", "😀".encode("utf-32-be"), "😀"),
        ("cp1251", "Жж".encode("cp1251"), "Жж"),
    ],
)
def test_other_charsets_round_trip(charset: str, raw: bytes, text: str) -> None:
    assert text_decoder(charset)(raw) == text


def test_a_charset_without_a_python_codec_is_refused() -> None:
    with pytest.raises(UnsupportedCharsetError):
        text_decoder("swe7")
