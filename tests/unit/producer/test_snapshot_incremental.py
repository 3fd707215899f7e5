"""The watermark steps of an incremental snapshot (`rowbus.producer.snapshot.incremental`):
a chunk waits for the stream to reach its high watermark, drops the keys changed between its
watermarks, and a DDL of its table in the window discards it; the signal's shape."""

from __future__ import annotations

from dataclasses import dataclass, field

from rowbus.producer.assembler import RowItem, Transaction
from rowbus.producer.snapshot.incremental import Incremental, InFlight
from rowbus.producer.snapshot.signals import signal, tables_asked
from rowbus.producer.snapshot.state import Backfill, SnapshotState
from rowbus.protocol.events import BinlogPosition, ColumnSchema, Op, TableSchema
from rowbus.protocol.values import Value

T = TableSchema("d", "t", (ColumnSchema("id", "bigint"), ColumnSchema("v", "int")), ("id",))
LOW = BinlogPosition("binlog.000001", 1000)
HIGH = BinlogPosition("binlog.000001", 2000)
PUBLISHED = BinlogPosition("binlog.000001", 2001)
"""Where a chunk read at HIGH is published: just after it, where no binlog event ends."""


def _txn(at: int, end: int, *keys: int) -> Transaction:
    pos = BinlogPosition("binlog.000001", at)
    return Transaction(
        f"t{at}",
        None,
        BinlogPosition("binlog.000001", end),
        0,
        [RowItem(Op.UPDATE, T, (k, 0), (k, 1), pos) for k in keys],
    )


@dataclass
class _Holder:
    snapshot: SnapshotState | None = None
    resume: BinlogPosition = LOW
    out: list[tuple[list[tuple[Value, ...]], BinlogPosition]] = field(default_factory=list)


def _inc(holder: _Holder) -> Incremental:
    def emit(_t: TableSchema, rows: list[tuple[Value, ...]], _id: str, at: BinlogPosition) -> None:
        holder.out.append((rows, at))

    return Incremental(None, "src", None, 3, holder, lambda s, t: T, lambda s, t: True, emit)  # type: ignore[arg-type]


def test_a_chunk_goes_out_at_its_high_watermark_without_the_keys_changed_in_the_window() -> None:
    holder = _Holder(SnapshotState(LOW, {}, done=True))
    assert holder.snapshot is not None
    holder.snapshot.backfills["d.t"] = Backfill("d.t")
    inc = _inc(holder)
    inc.flight = InFlight(T, [(1, 0), (2, 0), (3, 0)], LOW, HIGH, last=False)
    inc.before(_txn(900, 1000, 1))  # before the low watermark: the chunk shows it
    inc.before(_txn(1500, 1800, 2))  # in the window: key 2 may be older in the chunk
    assert holder.out == []
    inc.before(_txn(2100, 2200, 3))  # after the high watermark: the chunk goes first
    assert holder.out == [([(1, 0), (3, 0)], PUBLISHED)]
    job = holder.snapshot.backfills["d.t"]
    assert job.after == (3,) and job.rows == 2 and not job.done and inc.flight is None


def test_an_idle_stream_at_the_high_watermark_publishes_the_chunk() -> None:
    holder = _Holder(SnapshotState(LOW, {}, done=True, backfills={"d.t": Backfill("d.t")}))
    inc = _inc(holder)
    inc.flight = InFlight(T, [(1, 0)], HIGH, HIGH, last=True)
    inc.reached(LOW)
    assert holder.out == []
    inc.reached(HIGH)
    assert holder.out == [([(1, 0)], PUBLISHED)]
    assert holder.snapshot is not None and holder.snapshot.backfills["d.t"].done


def test_a_signal_names_its_source_and_tables_and_is_no_shard_ddl_lock() -> None:
    from rowbus.shard_ddl.locks import replay

    record = signal("src", ["d.t", "d.u"])
    assert tables_asked(record, "src") == ["d.t", "d.u"]
    assert tables_asked(record, "other") is None
    assert not replay([record]).locks
