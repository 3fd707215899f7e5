"""A snapshot chunk's SELECT read in bulk by the native `_resultset` (when built).

pymysql sends the query and reads the column descriptions as usual; the rows that follow are
read from its socket in large blocks and parsed many per native call, into the tuples pymysql
would build with the same per-column (encoding, converter), each value then passed through
the snapshot's converter of its column. Without the native module, or for a connection in a
character set other than utf8mb4, pymysql reads the rows itself: the same values, slower.

`select` reads a whole result; `stream` hands a result over in lists of at most `rows` rows
as it arrives (a keyless table read in bounded chunks, PROTOCOL.md §9.7), holding at most one
list plus one socket block's rows. Until it is exhausted the connection serves nothing else;
closing it early closes the connection (the rest of the result is never read).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from typing import Any

import pymysql
import pymysql.cursors
from pymysql import err

from rowbus.producer.snapshot import values
from rowbus.protocol.values import Value

log = logging.getLogger(__name__)

try:
    from rowbus.producer.snapshot import _resultset  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - an install without a C compiler
    _resultset = None
    log.info("rowbus.producer.snapshot._resultset is not built: pymysql reads snapshot rows")
else:
    _resultset.configure(Decimal)

AVAILABLE = _resultset is not None

BLOCK = 1 << 18
"""Bytes asked of the socket at a time."""

# The native module's column kinds (enum Kind in _resultset.c).
_BYTES, _UTF8, _ASCII, _INT, _FLOAT, _DECIMAL, _CALL_BYTES, _CALL_UTF8, _CALL_ASCII = range(9)
_PLAIN: dict[Any, int] = {int: _INT, float: _FLOAT, Decimal: _DECIMAL}
_TEMPORAL = {values.parse_date: 9, values.parse_datetime: 10, values.parse_timestamp: 11}
"""Converters the native module also does itself for text in their plain form."""

Post = Callable[[Any], Value] | None


def _kind(encoding: str | None, converter: Any, post: Post) -> tuple[int, Any] | None:
    """The native kind of a column pymysql reads with (encoding, converter) and the snapshot
    converts with `post`; None when the native module would not read it as pymysql does."""
    if encoding not in (None, "utf8", "ascii"):
        return None
    if encoding == "ascii" and converter is None and post in _TEMPORAL:
        return _TEMPORAL[post], None
    if converter is None:
        return {None: _BYTES, "utf8": _UTF8, "ascii": _ASCII}[encoding], None
    if encoding == "ascii" and converter in _PLAIN:
        return _PLAIN[converter], None
    return {None: _CALL_BYTES, "utf8": _CALL_UTF8, "ascii": _CALL_ASCII}[encoding], converter


def _columns(result: Any, post: Sequence[Post]) -> tuple[tuple[int, Any, Post], ...] | None:
    if len(result.converters) != len(post):
        return None
    columns = []
    for (encoding, converter), after in zip(result.converters, post, strict=True):
        kind = _kind(encoding, converter, after)
        if kind is None:
            return None
        columns.append((kind[0], kind[1], after))
    return tuple(columns)


def select(conn: Any, sql: str, args: Sequence[Any], post: Sequence[Post]) -> list[tuple[Any, ...]]:
    """The rows of `sql`, each value of column i passed through post[i] unless NULL or None.
    pymysql errors are raised as pymysql raises them."""
    with conn.cursor(pymysql.cursors.SSCursor) as cur:
        # No arguments must mean none: pymysql would %-format the text (a `%` in a name).
        cur.execute(sql, list(args) or None)
        result = conn._result
        columns = None if _resultset is None else _columns(result, post)
        if columns is None:
            return [_converted(row, post) for row in cur.fetchall()]
        return _read(conn, result, columns)


def _converted(row: tuple[Any, ...], post: Sequence[Post]) -> tuple[Any, ...]:
    return tuple(v if v is None or f is None else f(v) for v, f in zip(row, post, strict=False))


def stream(
    conn: Any, sql: str, args: Sequence[Any], post: Sequence[Post], rows: int
) -> Iterator[tuple[list[tuple[Any, ...]], bool]]:
    """The rows of `sql` (converted as by `select`) in lists of exactly `rows` but the last,
    which holds the rest (none only for an empty result), each with whether it is the last
    (known without reading ahead: a list is cut only once a row after it is held). A
    generator closed before its end closes `conn`: the unread rest of the result leaves the
    connection of no further use."""
    if rows < 1:
        raise ValueError(f"rows per list must be at least 1, not {rows}")
    with conn.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute(sql, list(args) or None)
        result = conn._result
        try:
            columns = None if _resultset is None else _columns(result, post)
            blocks = (
                _fetched(cur, post, rows) if columns is None else _blocks(conn, result, columns)
            )
            held: list[Any] = []
            for block in blocks:
                held += block
                while len(held) > rows:
                    out, held = held[:rows], held[rows:]
                    yield out, False
            yield held, True
        except BaseException:
            # Closed early or failed: closing the cursor would read the rest of the result.
            if result.unbuffered_active:
                result.unbuffered_active = False
                conn._force_close()
            raise


def _fetched(cur: Any, post: Sequence[Post], rows: int) -> Iterator[list[Any]]:
    for _ in range(1 << 62):  # bounded by the result: each round reads rows of it
        part = cur.fetchmany(rows)
        if not part:
            return
        yield [_converted(r, post) for r in part]


def _read(conn: Any, result: Any, columns: tuple[tuple[int, Any, Post], ...]) -> list[Any]:
    """The rows that follow the descriptions pymysql read, from its socket's buffered file."""
    rows: list[Any] = []
    for block in _blocks(conn, result, columns):
        rows += block
    return rows


def _blocks(
    conn: Any, result: Any, columns: tuple[tuple[int, Any, Post], ...]
) -> Iterator[list[Any]]:
    """The rows that follow the descriptions pymysql read, from its socket's buffered file,
    one list per block read."""
    assert _resultset is not None
    pending = bytearray()
    pos, seq = 0, conn._next_seq_id
    parse = _resultset.rows
    rfile = conn._rfile
    while True:
        try:
            block = rfile.read1(BLOCK)
        except OSError as exc:
            conn._force_close()
            lost = f"Lost connection to server during query ({exc})"
            raise err.OperationalError(2013, lost) from exc
        if not block:
            conn._force_close()
            raise err.OperationalError(2013, "Lost connection to server during query")
        pending += block
        rows: list[Any] = []
        try:
            pos, seq, status, error = parse(pending, pos, seq, columns, rows)
        except BaseException as exc:
            # The rest of the result is unread: the connection is of no further use (pymysql
            # would read on from the middle of a packet).
            result.unbuffered_active = False
            conn._force_close()
            if isinstance(exc, ConnectionError):
                raise err.InternalError(str(exc)) from None
            raise
        if status:
            break
        del pending[:pos]
        pos = 0
        yield rows
    conn._next_seq_id = seq
    result.unbuffered_active = False
    result.connection = None
    if status == 2:
        err.raise_mysql_exception(error)
    if pos != len(pending):
        # The server sends nothing after a result's end unasked: bytes here mean the stream
        # and this reading disagree, and the connection cannot be used further.
        conn._force_close()
        raise err.InternalError(f"{len(pending) - pos} unexpected bytes after a result set")
    yield rows
