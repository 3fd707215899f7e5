"""Huge upstream transactions, published in fragments (PROTOCOL.md §9.1).

A reader that held a whole transaction in memory and sent it as one Kafka transaction would
need memory in proportion to the transaction and could outlive the Kafka transaction timeout.
Instead, once the open transaction has gathered `fragment_rows` changes, the reader publishes
them as a *fragment*: one Kafka transaction holding those events (ts of the transaction, `txn`
with index but no count), a `Resolved` at the tick *before* the transaction's (so no consumer's
watermark passes it), the source's unchanged checkpoint, and a fragment record (key
``{source}/fragment``): the same checkpoint except that its `position` is that of the last
event published. The transaction's ts is the tick right after the checkpoint's ts, so a
restarted reader gives it the same ts again. The last part
goes out with the transaction's commit, its events carrying the count, in the Kafka transaction
that moves the checkpoint past it. Consumers hold a transaction until the watermark passes its
ts and its count is complete, so a partial one is never released.

Fragments end at rows-event boundaries, so the position of the last event published names
exactly what is committed. A reader restarted between fragments resumes the binlog at the
transaction's start (the checkpoint) and re-reads it, recounting event indexes without
publishing the events at or before that position.
"""

from __future__ import annotations

from dataclasses import dataclass

from rowbus.producer.exceptions import ReaderError
from rowbus.protocol.events import BinlogPosition
from rowbus.protocol.hlc import HybridClock, physical_ms


class FragmentMismatchError(ReaderError):
    """The binlog at the checkpoint is not the transaction the fragment record names."""

    retryable = False


@dataclass(slots=True)
class OpenStream:
    """The transaction being published in fragments.

    `ts`: its tick; `before`: the clock before it (what checkpoints and watermarks carry until
    it is whole); `next_index`: the index of its next event; `last`: the position of its last
    event published (or, after a restart, committed before it); `txn_id`/`gtid`: known from
    the first fragment read."""

    ts: int
    before: int
    next_index: int = 0
    last: BinlogPosition | None = None
    txn_id: str | None = None
    gtid: str | None = None
    skip_through: BinlogPosition | None = None

    @classmethod
    def start(cls, clock: HybridClock, skip_through: BinlogPosition | None = None) -> OpenStream:
        """A stream whose transaction takes the tick right after `clock`'s last: the same
        after a restart, whose clock is restored from the checkpoint's ts."""
        before = clock.last
        ts = clock.next(physical_ms(before))
        return cls(
            ts=ts,
            before=before,
            last=skip_through,
            gtid=skip_through.gtid if skip_through else None,
            skip_through=skip_through,
        )

    def check(self, txn_id: str, gtid: str | None) -> None:
        """Bind the stream to its transaction; refuse another one."""
        if self.txn_id is None:
            if self.gtid is not None and gtid is not None and gtid != self.gtid:
                raise FragmentMismatchError(
                    f"the fragment record names transaction {self.gtid} but the binlog resumes "
                    f"with {gtid}: the checkpoints topic and the binlog disagree"
                )
            self.txn_id, self.gtid = txn_id, gtid
        elif txn_id != self.txn_id:
            raise FragmentMismatchError(
                f"transaction {txn_id} arrived while {self.txn_id} was published in fragments"
            )

    def published(self, position: BinlogPosition) -> bool:
        """Whether the events at `position` were committed before a restart."""
        skip = self.skip_through
        return skip is not None and position.file == skip.file and position.offset <= skip.offset
