"""`rowbus.producer._rows.decode` on bodies and plans out of MySQL's domain (a corrupt or
hostile table map or rows event): it must answer None (the pure path then reads or raises)
rather than read or write outside its buffers. The fuzzer (`benchmarks.fuzz`) found or
confirmed each; under the sanitizer build (`python -m benchmarks.fuzz unit`) the memory errors
are reported at the faulty access."""

from __future__ import annotations

from rowbus.producer import fastrows
from rowbus.producer.fastrows import BYTES, DATETIME2, DECIMAL, SINT, TIME2, TIMESTAMP2
from tests.unit.native import isolated

_rows = fastrows._BUILT


def test_the_native_decoder_is_built() -> None:
    assert _rows is not None


def test_a_decimal_whose_scale_exceeds_its_precision_is_left_to_the_pure_path() -> None:
    # precision 10, scale 40: the digit groups went negative and indexed DIG2BYTES[-3], and a
    # larger scale wrote past the 160-byte text buffer.
    out = isolated.run(
        f"""
        from rowbus.producer import fastrows
        body = b"\\x00" + bytes(64)
        for precision, scale in ((10, 40), (1, 255), (65, 31)):
            plan = (({DECIMAL}, precision, scale, None),)
            print(fastrows._BUILT.decode(body, 0, len(body), 0, 1, b"\\x01", None, plan))
        """
    )
    assert out.split() == ["None"] * 3


def test_a_fractional_precision_over_six_is_left_to_the_pure_path() -> None:
    # fsp 40 on a zero DATETIME2 wrote frac[40] of a 32-byte stack buffer; any fsp over 6
    # indexed FRAC_UNIT past its end.
    zero = (0x8000000000).to_bytes(5, "big")
    for kind in (DATETIME2, TIMESTAMP2, TIME2):
        body = b"\x00" + zero + bytes(32)
        assert _rows.decode(body, 0, len(body), 0, 1, b"\x01", None, ((kind, 40, 0, None),)) is None


def test_a_length_prefix_of_eight_bytes_cannot_wrap_the_cursor() -> None:
    # Eight length bytes of 0xFF: the length became negative as a Py_ssize_t, passed the
    # bounds check, and the pad copy got a huge size (SIGSEGV).
    isolated.run(
        f"""
        from rowbus.producer import fastrows
        body = b"\\x00" + b"\\xff" * 8 + b"abc"
        plan = (({BYTES}, 8, 0, None),)
        print(fastrows._BUILT.decode(body, 0, len(body), 0, 1, b"\\x01", None, plan))
        """
    )


def test_rows_that_consume_no_bytes_do_not_loop_forever() -> None:
    # No column present: each image read zero bytes, so the loop appended rows until memory
    # ran out.
    out = isolated.run(
        f"""
        from rowbus.producer import fastrows
        plan = (({SINT}, 4, 0, None),)
        print(fastrows._BUILT.decode(b"\\x01\\x02", 0, 2, 0, 1, b"\\x00", None, plan))
        print(fastrows._BUILT.decode(b"\\x01\\x02", 0, 2, 2, 0, b"", b"", ()))
        """
    )
    assert out.split() == ["None", "None"]


def test_integer_widths_outside_the_plan_kinds_are_left_to_the_pure_path() -> None:
    body = b"\x00" + bytes(16)
    for width in (-1, 0, 5, 9):
        plan = ((SINT, width, 0, None),)
        assert _rows.decode(body, 0, len(body), 0, 1, b"\x01", None, plan) is None


def test_plans_in_the_domain_still_decode() -> None:
    body = b"\x00" + (7).to_bytes(4, "little", signed=True)
    assert _rows.decode(body, 0, len(body), 0, 1, b"\x01", None, ((SINT, 4, 0, None),)) == [
        (None, (7,))
    ]
