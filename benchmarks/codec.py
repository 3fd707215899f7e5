"""Codec benchmark on W1 rows: ``python -m benchmarks.codec [--rows N] [--seconds S] [--profile]``.

W1 is the insert-heavy reference workload: a 10-column table (BIGINT PK, INT, BIGINT,
VARCHAR(64), DECIMAL(12,2), DATETIME(6), DOUBLE, TINYINT, TEXT, DATE) in 100-row transactions.
For each encoding it measures, on one core (process CPU time, so other load on the machine does
not count), events per second for encode, decode and encode+decode through the public
`rowbus.protocol.codec.encode` / `decode` (headers included), and the value size. ``--profile``
prints where the protobuf round trip spends its time (cProfile).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from collections.abc import Callable
from functools import partial

from benchmarks.workloads import w1_events
from rowbus.protocol.codec import Encoding, decode, encode
from rowbus.protocol.events import RowChange


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
    events = w1_events("db1", rows)
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
    events = w1_events("db1", rows)
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
    parser = argparse.ArgumentParser(prog="python -m benchmarks.codec", description=__doc__)
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
