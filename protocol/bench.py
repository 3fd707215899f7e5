"""Codec benchmark on W1 rows: ``python -m protocol.bench [--rows N] [--seconds S] [--profile]``.

W1 is the insert-heavy reference workload: a 10-column table (BIGINT PK, INT, BIGINT,
VARCHAR(64), DECIMAL(12,2), DATETIME(6), DOUBLE, TINYINT, TEXT, DATE) in 100-row transactions.
For each encoding it measures, on one core (process CPU time, so other load on the machine does
not count), events per second for encode, decode and encode+decode through the public
`protocol.codec.encode` / `decode` (headers included), and the value size. ``--profile``
prints where the protobuf round trip spends its time (cProfile).
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import io
import pstats
import random
import time
from collections.abc import Callable
from decimal import Decimal
from functools import partial

from protocol.codec import Encoding, decode, encode
from protocol.events import BinlogPosition, ColumnSchema, Op, RowChange, TableSchema, TxnRef
from protocol.hlc import HybridClock

W1 = TableSchema(
    "bench",
    "w1",
    (
        ColumnSchema("id", "bigint", nullable=False),
        ColumnSchema("a", "int"),
        ColumnSchema("b", "bigint"),
        ColumnSchema("name", "varchar", length=64, charset="utf8mb4"),
        ColumnSchema("amount", "decimal", precision=12, scale=2),
        ColumnSchema("created", "datetime", fsp=6),
        ColumnSchema("ratio", "double"),
        ColumnSchema("flag", "tinyint"),
        ColumnSchema("body", "text", charset="utf8mb4"),
        ColumnSchema("day", "date"),
    ),
    ("id",),
)


def w1_rows(n: int, seed: int = 1) -> list[RowChange]:
    """`n` W1 inserts in 100-row transactions, with realistic varied values."""
    rnd = random.Random(seed)
    clock = HybridClock()
    base = dt.datetime(2024, 5, 1)
    gtid_uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    rows = []
    ts = 0
    for i in range(n):
        if i % 100 == 0:
            ts = clock.next(1_714_521_600_000 + i)
        txn_no = i // 100 + 1
        gtid = f"{gtid_uuid}:{txn_no}"
        values = (
            1_000_000 + i,
            rnd.randint(-(2**31), 2**31 - 1),
            rnd.randint(-(2**63), 2**63 - 1),
            f"customer-{rnd.randint(0, 10**9):09d}",
            Decimal(rnd.randint(-(10**12) + 1, 10**12 - 1)).scaleb(-2),
            base + dt.timedelta(microseconds=rnd.randint(0, 10**13)),
            rnd.random() * 1e6,
            rnd.randint(-128, 127),
            "lorem ipsum dolor sit amet " * rnd.randint(1, 4),
            dt.date(2000, 1, 1) + dt.timedelta(days=rnd.randint(0, 9000)),
        )
        rows.append(
            RowChange(
                source="db1",
                ts=ts,
                op=Op.INSERT,
                schema=W1.schema,
                table=W1.table,
                schema_id=W1.schema_id,
                primary_key=W1.primary_key,
                before=None,
                after=values,
                txn=TxnRef(gtid, i % 100, 100),
                position=BinlogPosition("binlog.000042", 4 + 350 * i, gtid),
            )
        )
    return rows


def _rate(fn: Callable[[], object], count: int, seconds: float) -> float:
    """Events per CPU second of `fn` (which handles `count` events), best of a few runs."""
    best = float("inf")
    deadline = time.process_time() + seconds
    runs = 0
    while runs < 3 or time.process_time() < deadline:
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
        runs += 1
    return count / best


def _encode_all(events: list[RowChange], encoding: Encoding) -> None:
    for e in events:
        encode(e, encoding)


def _decode_all(encoded: list[tuple[bytes, list[tuple[str, bytes]]]]) -> None:
    for value, headers in encoded:
        decode(value, headers)


def run(rows: int, seconds: float) -> list[dict[str, float | str]]:
    """Measure every encoding; return one result dict per encoding."""
    events = w1_rows(rows)
    results: list[dict[str, float | str]] = []
    for encoding in Encoding:
        encoded = [encode(e, encoding) for e in events]
        assert [decode(v, h) for v, h in encoded] == events
        enc = _rate(partial(_encode_all, events, encoding), rows, seconds)
        dec = _rate(partial(_decode_all, encoded), rows, seconds)
        results.append(
            {
                "encoding": encoding.value,
                "encode_per_s": enc,
                "decode_per_s": dec,
                "round_trip_per_s": 1 / (1 / enc + 1 / dec),
                "avg_bytes": sum(len(v) for v, _ in encoded) / rows,
            }
        )
    return results


def profile(rows: int) -> str:
    """cProfile of a protobuf encode+decode of `rows` W1 events, top 20 by own time."""
    events = w1_rows(rows)
    prof = cProfile.Profile()
    prof.enable()
    for e in events:
        decode(*encode(e))
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(20)
    return out.getvalue()


def main(argv: list[str] | None = None) -> None:
    """Print a table of the figures (and a profile with --profile)."""
    parser = argparse.ArgumentParser(prog="python -m protocol.bench", description=__doc__)
    parser.add_argument("--rows", type=int, default=20_000, help="W1 events per run")
    parser.add_argument("--seconds", type=float, default=3.0, help="CPU seconds per measurement")
    parser.add_argument("--profile", action="store_true", help="profile the protobuf path")
    args = parser.parse_args(argv)
    print(f"W1 rows, {args.rows} events per run, one core (process CPU time)")
    print(f"{'encoding':<10}{'encode/s':>12}{'decode/s':>12}{'enc+dec/s':>12}{'bytes':>8}")
    for r in run(args.rows, args.seconds):
        print(
            f"{r['encoding']:<10}{r['encode_per_s']:>12,.0f}{r['decode_per_s']:>12,.0f}"
            f"{r['round_trip_per_s']:>12,.0f}{r['avg_bytes']:>8.0f}"
        )
    if args.profile:
        print(profile(args.rows))


if __name__ == "__main__":
    main()
