"""The planner state in the sink, in bounded pieces, written with the batch's checkpoint.

Today's layout (written since the stash moved out of the driver, see spark_apply/README.md):

- ``apply_state_header`` (one row per batch): `header` is the marker ``RBS3``, `base` the
  oldest piece segment the state refers to, `stash_events` the events it holds;
- ``apply_stash`` (job, batch id, seq): the state's bytes (`PlannerState.to_bytes`: the merger's
  state with the stash's *index*, `SpilledTxn`s naming chunks) cut into pieces;
- ``apply_stash_pieces`` (job, segment, byte start): the events themselves, the byte stream a
  batch's `sink_spill.PieceSpill` spilled (segment = that batch's id), cut into pieces. Written
  once, by the batch that spilled them, and only if its state refers to them; deleted in the
  transaction of the first batch after which neither of the two kept states refers to them
  (a segment older than every kept state's `base`).

The layout below (the stash itself in segments) was written before; such a state is still read.

What a batch leaves to the next (`PlannerState`: watermarks, offsets and the stash of held
events) can grow without bound while a lane stalls (a reader down, a held shard-DDL lock, a
source clock ahead). Stored as one value it would one day exceed the sink's
``max_allowed_packet`` and make every restart fail. So:

- ``apply_state_header`` (one row per batch): the state without its stash — bounded by the
  number of lanes — and `base`, the first batch whose stash segment is still part of it;
- ``apply_stash`` (rows of at most `piece_bytes`): per batch, the *segment* of the stash that
  batch added, as a byte stream cut into pieces keyed by (job, batch id, seq).

The stash of batch B is the concatenation of the segments of batches base..B. A batch that
released nothing of the stash it was given only appends its new events (a stall costs what
arrives, not a rewrite of everything held); one that released something rewrites the whole
stash as its own segment (base = B). Every statement carries at most one piece, and pieces
are a quarter of the server's ``max_allowed_packet`` at most (escaping can double bytes). The
header, pieces and the cleanup of pieces no kept state refers to are written in the sink
transaction that commits the batch's checkpoint, so state and checkpoint move together.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Any

from rowbus.protocol.codec import decode, encode
from rowbus.protocol.events import DdlChange, RowChange, SnapshotBegin, SnapshotEnd
from rowbus.spark_apply.planner import Envelope, PlannerState
from rowbus.spark_apply.sink_spill import Fetch, PieceSpill

PIECE_BYTES = 1 << 20
"""The largest piece written, unless the server's max_allowed_packet asks for less."""
_FRAME = struct.Struct(">HiqI")  # topic length, partition, offset, event length


def piece_size(max_allowed_packet: int, limit: int = PIECE_BYTES) -> int:
    """The piece size for a server: a quarter of its packet limit, at most `limit`."""
    return max(256, min(limit, max_allowed_packet // 4))


def frames(stash: Iterable[Envelope]) -> Iterator[bytes]:
    """The stash as a stream of framed events (topic, partition, offset, protobuf event)."""
    for env in stash:
        topic = env.topic.encode()
        blob = encode(env.event)[0]
        yield _FRAME.pack(len(topic), env.partition, env.offset, len(blob)) + topic + blob


def pieces(stream: Iterable[bytes], size: int) -> Iterator[bytes]:
    """The byte stream cut into pieces of exactly `size` bytes (the last one shorter)."""
    buf = bytearray()
    for part in stream:
        buf += part
        while len(buf) >= size:
            yield bytes(buf[:size])
            del buf[:size]
    if buf:
        yield bytes(buf)


def unframe(data: bytes) -> list[Envelope]:
    """The events of a segment's bytes."""
    out: list[Envelope] = []
    pos, end = 0, len(data)
    while pos < end:
        n, partition, offset, size = _FRAME.unpack_from(data, pos)
        pos += _FRAME.size
        topic = data[pos : pos + n].decode()
        pos += n
        event = decode(data[pos : pos + size], None)
        pos += size
        assert isinstance(event, RowChange | DdlChange | SnapshotBegin | SnapshotEnd)
        out.append(Envelope(topic, partition, offset, event))
    return out


MARKER = b"RBS3"
"""`apply_state_header.header` of a state stored whole in `apply_stash` pieces."""


class StateStore:
    """The state tables of one job in `db` (quoted). Methods take a cursor of the caller's
    transaction: the caller commits."""

    def __init__(self, db: str, job: str, piece_bytes: int = PIECE_BYTES) -> None:
        self.db = db
        self.job = job
        self.piece_bytes = piece_bytes

    def create(self, cur: Any) -> None:
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {self.db}.apply_state_header (job VARCHAR(128) NOT NULL, "
            "batch_id BIGINT NOT NULL, base BIGINT NOT NULL, header LONGBLOB NOT NULL, "
            "stash_events BIGINT NOT NULL, PRIMARY KEY (job, batch_id)) ENGINE=InnoDB"
        )
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {self.db}.apply_stash (job VARCHAR(128) NOT NULL, "
            "batch_id BIGINT NOT NULL, seq INT NOT NULL, piece LONGBLOB NOT NULL, "
            "PRIMARY KEY (job, batch_id, seq)) ENGINE=InnoDB"
        )
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {self.db}.apply_stash_pieces (job VARCHAR(128) NOT NULL, "
            "segment BIGINT NOT NULL, start BIGINT NOT NULL, piece LONGBLOB NOT NULL, "
            "PRIMARY KEY (job, segment, start)) ENGINE=InnoDB"
        )

    def load(self, cur: Any, batch_id: int) -> PlannerState | None:
        """The state batch `batch_id` left, or None if it stored none here."""
        cur.execute(
            f"SELECT base, header FROM {self.db}.apply_state_header "
            "WHERE job = %s AND batch_id = %s",
            (self.job, batch_id),
        )
        row = cur.fetchone()
        if row is None:
            return None
        base, header = int(row[0]), bytes(row[1])
        if header == MARKER:
            return PlannerState.from_bytes(self._segment(cur, batch_id))
        state = PlannerState.from_bytes(header)
        for segment in range(base, batch_id + 1):
            state.stash.extend(unframe(self._segment(cur, segment)))
        return state

    def _segment(self, cur: Any, batch_id: int) -> bytes:
        # One piece per statement: no result row or statement exceeds a piece.
        data = bytearray()
        seq = 0
        while True:
            cur.execute(
                f"SELECT piece FROM {self.db}.apply_stash "
                "WHERE job = %s AND batch_id = %s AND seq = %s",
                (self.job, batch_id, seq),
            )
            row = cur.fetchone()
            if row is None:
                return bytes(data)
            data += row[0]
            seq += 1

    def fetcher(self, cur: Any) -> Fetch:
        """`PieceSpill`'s access to stored segments, through `cur`."""

        def fetch(segment: int, pos: int) -> tuple[int, bytes] | None:
            cur.execute(
                f"SELECT start, piece FROM {self.db}.apply_stash_pieces WHERE job = %s AND "
                "segment = %s AND start <= %s ORDER BY start DESC LIMIT 1",
                (self.job, segment, pos),
            )
            row = cur.fetchone()
            return None if row is None else (int(row[0]), bytes(row[1]))

        return fetch

    def save(
        self, cur: Any, batch_id: int, state: PlannerState, spill: PieceSpill | None = None
    ) -> int:
        """Store `state` as batch `batch_id`'s, with the segment `spill` wrote if the state
        refers to it; returns its base (the oldest segment it refers to)."""
        segments = state.segments()
        base = min(segments | {batch_id})
        for table, column in (("apply_stash", "batch_id"), ("apply_stash_pieces", "segment")):
            cur.execute(
                f"DELETE FROM {self.db}.{table} WHERE job = %s AND {column} = %s",
                (self.job, batch_id),
            )
        for seq, piece in enumerate(pieces([state.to_bytes()], self.piece_bytes)):
            cur.execute(
                f"INSERT INTO {self.db}.apply_stash (job, batch_id, seq, piece) "
                "VALUES (%s, %s, %s, %s)",
                (self.job, batch_id, seq, piece),
            )
        if spill is not None and spill.segment in segments:
            assert spill.segment == batch_id
            for start, piece in spill.pieces(self.piece_bytes):
                cur.execute(
                    f"INSERT INTO {self.db}.apply_stash_pieces (job, segment, start, piece) "
                    "VALUES (%s, %s, %s, %s)",
                    (self.job, batch_id, start, piece),
                )
        cur.execute(
            f"INSERT INTO {self.db}.apply_state_header (job, batch_id, base, header, "
            "stash_events) VALUES (%s, %s, %s, %s, %s)",
            (self.job, batch_id, base, MARKER, state.stash_events),
        )
        # Keep this state and the one before it (a replay of this batch plans from it); drop
        # what neither refers to.
        cur.execute(
            f"SELECT base, header = %s FROM {self.db}.apply_state_header "
            "WHERE job = %s AND batch_id >= %s",
            (MARKER, self.job, batch_id - 1),
        )
        kept = [(int(b), bool(new)) for b, new in cur.fetchall()]
        oldest = min(b for b, _ in kept)
        # A state of the older layout keeps its stash segments base..batch in apply_stash.
        legacy = min([b for b, new in kept if not new], default=batch_id - 1)
        cur.execute(
            f"DELETE FROM {self.db}.apply_state_header WHERE job = %s AND batch_id < %s",
            (self.job, batch_id - 1),
        )
        cur.execute(
            f"DELETE FROM {self.db}.apply_stash WHERE job = %s AND batch_id < %s",
            (self.job, min(legacy, batch_id - 1)),
        )
        cur.execute(
            f"DELETE FROM {self.db}.apply_stash_pieces WHERE job = %s AND segment < %s",
            (self.job, oldest),
        )
        return base

    def base_of(self, cur: Any, batch_id: int) -> int | None:
        cur.execute(
            f"SELECT base FROM {self.db}.apply_state_header WHERE job = %s AND batch_id = %s",
            (self.job, batch_id),
        )
        row = cur.fetchone()
        return None if row is None else int(row[0])
