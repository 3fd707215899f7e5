"""`rowbus.spark_apply._literals` where Python code runs inside a native call (a sequence's
iteration, a message's methods, `classify`) and at the edges of its arguments. Before the
fixes a nested `render` clobbered the shared column arrays, a list emptied meanwhile left them
pointing at freed strings (heap-use-after-free under the sanitizer build), a shrinking message
list was read past its end and a negative start read before it (both SIGSEGV)."""

from __future__ import annotations

import zlib

from rowbus.protocol.codec import Encoding, encode
from rowbus.spark_apply.rendered import _native, classify
from rowbus.testing.events import row
from rowbus.testing.messages import Message
from tests.unit.native import isolated

STRING = b"\x05"


def test_the_native_renderer_is_built() -> None:
    assert _native is not None


def test_a_render_nested_in_another_ones_arguments_leaves_it_whole() -> None:
    class Nesting:
        """A strings array whose iteration renders another image first."""

        def __iter__(self) -> object:
            inner = _native.render(b"\x01\x05", [7], [], [], ["z" * 64], [])
            assert inner == "7\x00'" + "z" * 64 + "'"
            return iter(["a"])

    # The outer image's int was converted before the nested call reset the shared arrays.
    assert _native.render(b"\x01\x05", [5], [], [], Nesting(), []) == "5\x00'a'"


def test_strings_of_a_list_emptied_while_rendering_are_still_held() -> None:
    strings = ["x" * 40 + str(i) for i in range(3)]  # held by the list alone
    expected = "\x00".join(f"'{s}'" for s in strings)

    class Clearing:
        """A blobs array whose iteration empties the strings list given before it."""

        def __iter__(self) -> object:
            strings.clear()
            return iter(())

    assert _native.render(STRING * 3, [], [], [], strings, Clearing()) == expected


def test_a_negative_start_raises() -> None:
    out = isolated.run(
        """
        from rowbus.spark_apply.rendered import _native, classify
        try:
            _native.append_records([object()], -1, 10, ([],) * 9, "t", 0, classify)
        except ValueError as exc:
            print("raised", exc)
        """
    )
    assert out.startswith("raised")


def test_a_message_list_shrunk_by_classify_is_not_read_past_its_end() -> None:
    out = isolated.run(
        """
        from rowbus.spark_apply.rendered import _native, classify
        from rowbus.testing.events import row
        from rowbus.testing.messages import Message
        msgs = [Message.of(row(1, after=(i, "a")), i) for i in range(50)]
        def shrinking(headers):
            del msgs[1:]
            return classify(headers)
        cols = tuple([] for _ in range(9))
        print(_native.append_records(msgs, 0, 100, cols, "t", 0, shrinking), len(cols[0]))
        """
    )
    assert out.split() == ["1", "1"]


def test_records_still_append() -> None:
    msgs = [Message.of(row(1, after=(i, "a")), i) for i in range(3)]
    cols: tuple[list[object], ...] = tuple([] for _ in range(9))
    assert _native.append_records(msgs, 0, 100, cols, "t", 0, classify) == 3
    assert cols[2] == [0, 1, 2]


def test_an_envelope_field_of_32_or_more_is_not_a_row() -> None:
    # `1u << field` for field >= 32 is undefined (UBSan reports it); on x86 field 33 acted as
    # field 1.
    value, _ = encode(row(1, after=(1, "a")), Encoding.PROTOBUF)
    body = bytes([(33 << 3 | 2) & 0x7F | 0x80, (33 << 3 | 2) >> 7, 0])
    record = body + b"\x7d" + zlib.crc32(body).to_bytes(4, "little")
    assert _native.row_text(record) is None
    assert _native.row_text(value) is not None


def test_a_malformed_zero_date_is_left_to_the_decoder_which_rejects_it() -> None:
    # Found by the fuzzer: any zero-date text without a NUL was rendered, where decoding raises
    # (a corrupt record went through as a literal).
    zero = b"\x0c"
    for text in ("2025-00-1>", "0000-00-00 00200:00", "2024-13-01", "2024-01-15", "0000-00-00 "):
        assert _native.render(zero, [], [], [], [text], []) is None, text
    for text in ("0000-00-00", "2024-00-15", "2024-02-31", "0000-00-00 00:00:00.000"):
        assert _native.render(zero, [], [], [], [text], []) == f"'{text}'", text
