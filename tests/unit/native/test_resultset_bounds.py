"""`rowbus.producer.snapshot._resultset.rows` at its edges: a wide column tuple, a call before
`configure`. Each crashed the interpreter (SIGSEGV) before its fix, hence the child process."""

from __future__ import annotations

from rowbus.producer.snapshot import resultset
from tests.unit.native import isolated


def packet(seq: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([seq]) + payload


def test_the_native_reader_is_built() -> None:
    assert resultset.AVAILABLE


def test_a_row_of_a_very_wide_result_does_not_overflow_the_stack() -> None:
    # The row's values were gathered in a stack array of one pointer per column: 2M columns
    # are 16 MB, twice the main thread's stack.
    out = isolated.run(
        """
        from rowbus.producer.snapshot import resultset
        columns = ((0, None, None),) * 2_000_000
        buf = b"\\x02\\x00\\x00\\x00\\xfb\\x00" + b"\\x05\\x00\\x00\\x01\\xfe\\x00\\x00\\x02\\x00"
        rows = []
        print(resultset._resultset.rows(buf, 0, 0, columns, rows), rows)
        """
    )
    assert out.split("\n")[0] == "(15, 2, 1, None) [(None, b'')]"


def test_short_rows_keep_only_the_values_read() -> None:
    rows: list[object] = []
    buf = packet(0, b"\x01a") + packet(1, b"\xfe\x00\x00\x02\x00")
    columns = ((1, None, None), (1, None, None), (3, None, None))
    assert resultset._resultset.rows(buf, 0, 0, columns, rows) == (len(buf), 2, 1, None)
    assert rows == [("a",)]


def test_a_decimal_column_before_configure_raises_instead_of_crashing() -> None:
    # The module imported alone (resultset.py configures it on import): Decimal was NULL and
    # PyObject_CallOneArg dereferenced it.
    out = isolated.run(
        """
        import sys
        from rowbus.producer.snapshot import _resultset as fresh
        assert "rowbus.producer.snapshot.resultset" not in sys.modules
        buf = b"\\x02\\x00\\x00\\x00\\x011"
        try:
            fresh.rows(buf, 0, 0, ((5, None, None),), [])
        except RuntimeError as exc:
            print("raised", exc)
        """
    )
    assert out.startswith("raised")
