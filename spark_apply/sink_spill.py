"""The planner's spill store: stashed events kept in the sink, in pieces, not in the driver.

A batch's planner (`rowbus.spark_apply.planner.plan`) runs the merger with a `PieceSpill`:
every event the merger still holds after the batch is spilled (`Merger.spill_all`), so the
state it leaves names chunks (`consumers.spill.Chunk`), not events. A chunk is a byte range of
one *segment*, the byte stream of the events spilled while planning one batch (segment id =
batch id). While the batch is planned and applied the segment is a local temporary file; the
sink writes it, in pieces of bounded size keyed by (job, segment, byte start), in the sink
transaction that commits the batch's checkpoint and state (`state_store.StateStore.save`) —
only if that state still refers to it. Chunks of older segments are read back from the sink's
pieces, one piece per statement, through `fetch`.

The bytes are the local spill's records (`>qI` Kafka offset and length, then the event
encoded with the protocol's codec; for a row built from rendered columns, `rendered.Wire`, its
record's own protobuf bytes, which decode to the same event), so what is spilled is the same
however it was planned: a replayed batch (same stored state, same records) spills the same
bytes at the same places.
"""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

from rowbus.merge.spill import Chunk, DataEvent
from rowbus.protocol.codec import decode, encode
from rowbus.protocol.events import DdlChange, RowChange, SnapshotBegin, SnapshotEnd
from rowbus.spark_apply.literals import LitImage
from rowbus.spark_apply.rendered import Wire

_HEADER = struct.Struct(">qI")
_WRITE_BYTES = 1 << 20
Fetch = Callable[[int, int], tuple[int, bytes] | None]
"""(segment, byte) → (start, piece) of the stored piece holding that byte, None if none."""


class PieceSpill:
    """The spill store of batch `segment`; older segments are read through `fetch`.

    Lifecycle: made for one batch; `pieces()` streams the batch's own segment for storing;
    `close()` deletes the local file. `release` is a no-op: the sink drops a segment when no
    kept state refers to it (`StateStore.save`).
    """

    def __init__(self, segment: int, fetch: Fetch | None = None, wire: Wire | None = None) -> None:
        self.segment = segment
        self._fetch = fetch
        self._wire = wire or {}
        """The record bytes of events built from rendered columns (`rendered.Wire`)."""
        self._file: BinaryIO | None = None
        self._size = 0
        self._cached: tuple[int, int, bytes] | None = None
        """(segment, start, piece): the piece last fetched (chunks are read in order)."""
        self.fetched = 0
        """Pieces fetched from the sink (for tests and metrics)."""

    @property
    def size(self) -> int:
        """Bytes spilled to this batch's segment."""
        return self._size

    def write(self, items: Iterable[tuple[int, DataEvent]]) -> Chunk:
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="rowbus-stash-")  # noqa: SIM115 - owned
        out = self._file
        start = self._size
        buf = bytearray()
        count = 0
        wire = self._wire
        for offset, event in items:
            found = wire.get(id(event))
            value = found[1] if found is not None and found[0] is event else _encoded(event)
            buf += _HEADER.pack(offset, len(value))
            buf += value
            count += 1
            if len(buf) >= _WRITE_BYTES:
                self._append(out, buf)
                buf.clear()
        self._append(out, buf)
        return Chunk(self.segment, start, self._size - start, count)

    def _append(self, out: BinaryIO, buf: bytearray) -> None:
        # `items` may be read from this very file while it is written (the merger re-writes a
        # split transaction's spilled run, `Stash.cut`): a read moves the file position, so
        # every write goes to the end explicitly.
        out.seek(self._size)
        out.write(buf)
        self._size += len(buf)

    def read(self, chunk: Chunk) -> Iterator[tuple[int, DataEvent]]:
        return _records(self._bytes(chunk), chunk.count)

    def _bytes(self, chunk: Chunk) -> Iterator[bytes]:
        """The chunk's bytes, in parts of at most a piece (or 1 MB locally)."""
        pos, end = chunk.start, chunk.start + chunk.size
        if chunk.segment == self.segment:
            while pos < end:
                assert self._file is not None
                self._file.seek(pos)
                part = self._file.read(min(_WRITE_BYTES, end - pos))
                if not part:
                    raise EOFError(f"stash segment {chunk.segment} ends at {pos}")
                pos += len(part)
                yield part
            return
        while pos < end:
            start, piece = self._piece(chunk.segment, pos)
            part = piece[pos - start : end - start]
            if not part:
                raise EOFError(f"stash segment {chunk.segment}: no piece holds byte {pos}")
            pos += len(part)
            yield part

    def _piece(self, segment: int, pos: int) -> tuple[int, bytes]:
        cached = self._cached
        if (
            cached is not None
            and cached[0] == segment
            and cached[1] <= pos < cached[1] + len(cached[2])
        ):
            return cached[1], cached[2]
        if self._fetch is None:
            raise LookupError(f"stash segment {segment} is not stored here")
        found = self._fetch(segment, pos)
        if found is None:
            raise LookupError(f"stash segment {segment}: no piece holds byte {pos}")
        self.fetched += 1
        self._cached = (segment, found[0], found[1])
        return found

    def pieces(self, size: int) -> Iterator[tuple[int, bytes]]:
        """(start, piece) of this batch's segment, pieces of `size` bytes (the last shorter)."""
        pos = 0
        while pos < self._size:
            assert self._file is not None
            self._file.seek(pos)
            piece = self._file.read(min(size, self._size - pos))
            yield pos, piece
            pos += len(piece)

    def release(self, chunks: Iterable[Chunk]) -> None:
        """Nothing to do: see the class docstring."""

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._cached = None


def _encoded(event: DataEvent) -> bytes:
    if isinstance(event, RowChange) and (
        type(event.after) is LitImage or type(event.before) is LitImage
    ):
        # Its images are literals, not values: encoding it would store strings.
        raise AssertionError(f"a rendered row at {event.position} has no record bytes to spill")
    return encode(event)[0]


def _records(parts: Iterator[bytes], count: int) -> Iterator[tuple[int, DataEvent]]:
    buf, pos = b"", 0

    def need(n: int) -> None:
        nonlocal buf, pos
        if len(buf) - pos < n:
            rest = [buf[pos:]]
            have = len(rest[0])
            while have < n:
                part = next(parts)
                rest.append(part)
                have += len(part)
            buf, pos = b"".join(rest), 0

    for _ in range(count):
        need(_HEADER.size)
        offset, length = _HEADER.unpack_from(buf, pos)
        need(_HEADER.size + length)
        start = pos + _HEADER.size
        event = decode(buf[start : start + length], None)
        pos = start + length
        # every kind a merger holds, snapshot markers (1.5) included: a marker stashed at a
        # batch's end is read back from the pieces in a later one
        assert isinstance(event, RowChange | DdlChange | SnapshotBegin | SnapshotEnd)
        yield offset, event
