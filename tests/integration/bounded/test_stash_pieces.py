"""A stash larger than the sink's max_allowed_packet: the apply state is stored in bounded
pieces, so a lane stalled for many batches neither fails a batch nor crashes a restart, and
everything is applied once the lane moves again."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from rowbus.config import Settings
from rowbus.protocol.events import Op, Resolved
from rowbus.routing.routes import Router, RouteSettings
from rowbus.spark_apply.planner import Envelope, plan
from rowbus.spark_apply.sink import MySQLSink
from tests.conftest import connect
from tests.integration.spark_apply.test_sink import sink_connection
from tests.unit.spark_apply.events import row, table

T = "topic"
EXPECTED = [(T, 0, "s1"), (T, 0, "s2")]
PACKET = 32 * 1024
"""The sink's max_allowed_packet during the test (MariaDB's default is 16 MiB)."""
BATCHES = 30
ROWS_PER_BATCH = 100
PAD = "x" * 120


@pytest.fixture
def small_packet(services: Settings) -> Iterator[None]:
    """A small max_allowed_packet on the sink server for the sessions the test opens."""
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.max_allowed_packet, @@GLOBAL.net_buffer_length")
        old_packet, old_net = cur.fetchone()  # type: ignore[misc]
        cur.execute("SET GLOBAL net_buffer_length = 16384")
        cur.execute(f"SET GLOBAL max_allowed_packet = {PACKET}")
    try:
        yield
    finally:
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            cur.execute(f"SET GLOBAL max_allowed_packet = {int(old_packet)}")
            cur.execute(f"SET GLOBAL net_buffer_length = {int(old_net)}")


def test_a_stash_bigger_than_max_allowed_packet_survives_restarts(
    services: Settings,
    unique: Callable[[str], str],
    make_database: Callable[..., str],
    small_packet: None,
) -> None:
    db = make_database(services.resolved_sink)
    with connect(services.resolved_sink, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(255))")
    up = table("up", "t")
    router = Router([RouteSettings(match="up.*", target=f"{db}.{{table}}")], unrouted="error")
    job = unique("job")

    def new_sink() -> MySQLSink:
        return MySQLSink(
            sink_connection(services), job, f"{db}_state", router, {up.schema_id: up}.get
        )

    offset = 0
    expected: dict[int, tuple[int, str]] = {}
    stash_sizes: list[int] = []
    for b in range(BATCHES + 1):
        # Source s1 writes; s2 stays silent (a reader down) until the last batch.
        events: list[Envelope] = []
        if b < BATCHES:
            for i in range(ROWS_PER_BATCH):
                key = b * ROWS_PER_BATCH + i + 1
                ts = key + 10
                ev = row(ts, Op.INSERT, after=(key, f"{key}{PAD}"), tbl=up)
                events.append(Envelope(T, 0, offset, ev))
                offset += 1
                expected[key] = (key, f"{key}{PAD}")
            events.append(Envelope(T, 0, offset, Resolved(source="s1", ts=ts)))
            offset += 1
        else:
            events.append(Envelope(T, 0, offset, Resolved(source="s1", ts=10**9)))
            events.append(Envelope(T, 0, offset + 1, Resolved(source="s2", ts=10**9)))
            offset += 2
        # A restart before every batch: the state is read back from the sink each time.
        with new_sink() as sink:
            previous = sink.previous_state(b)
            assert previous is not None
            p = plan(previous, events, EXPECTED)
            sink.apply(b, p)
            stash_sizes.append(len(p.state.stash))
    assert stash_sizes[BATCHES - 1] == BATCHES * ROWS_PER_BATCH
    assert stash_sizes[-1] == 0
    with connect(services.resolved_sink, db) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, v FROM t ORDER BY id")
        assert {r[0]: tuple(r) for r in cur.fetchall()} == expected
        # The stash really was bigger than one packet, and stored in pieces below it.
        cur.execute(
            f"SELECT MAX(LENGTH(piece)) FROM `{db}_state`.apply_stash WHERE job = %s", (job,)
        )
        (largest,) = cur.fetchone()  # type: ignore[misc]
    assert BATCHES * ROWS_PER_BATCH * len(PAD) > PACKET
    assert largest is None or largest <= PACKET // 4
    # A restart after the end reads an empty stash.
    with new_sink() as sink:
        assert sink.previous_state(BATCHES + 1) == p.state.without_stash()


def test_a_huge_transaction_held_over_restarts_is_kept_in_the_sink_not_the_driver(
    services: Settings,
    unique: Callable[[str], str],
    make_database: Callable[..., str],
    small_packet: None,
) -> None:
    """One fragmented upstream transaction (its count only on its last row) arrives over many
    batches with a restart before each; the planner holds at most its memory limit, the state
    it stores is an index (bytes that do not follow the events held), the events are in
    pieces below the packet limit, and the transaction is applied whole once released."""
    rows, per_batch, limit = 4000, 250, 300
    db = make_database(services.resolved_sink)
    with connect(services.resolved_sink, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(255))")
    up = table("up", "t")
    router = Router([RouteSettings(match="up.*", target=f"{db}.{{table}}")], unrouted="error")
    job = unique("job")
    expected = [(T, 0, "s1")]

    def new_sink() -> MySQLSink:
        return MySQLSink(
            sink_connection(services), job, f"{db}_state", router, {up.schema_id: up}.get
        )

    events = [
        Envelope(
            T,
            0,
            i,
            row(
                50,
                Op.INSERT,
                after=(i, f"{i}{PAD}"),
                tbl=up,
                index=i,
                count=rows if i == rows - 1 else None,
                txn="big",
            ),
        )
        for i in range(rows)
    ]
    events.append(Envelope(T, 0, rows, Resolved(source="s1", ts=10**9)))
    held: list[int] = []
    state_bytes: list[int] = []
    batches = [events[a : a + per_batch] for a in range(0, len(events), per_batch)] + [[]]
    for b, batch in enumerate(batches):
        with new_sink() as sink:
            previous = sink.previous_state(b)
            assert previous is not None
            spill = sink.spill_for(b)
            try:
                p = plan(previous, batch, expected, spill=spill, memory_limit=limit)
                assert p.held_in_memory <= limit
                assert p.state.stash == []
                sink.apply(b, p)
            finally:
                spill.close()
            held.append(p.state.stash_events)
            state_bytes.append(len(p.state.to_bytes()))
    assert max(held) == rows  # the whole transaction was held before its release
    assert held[-1] == 0
    assert max(state_bytes) < 8_000  # the index: a few chunk references per batch
    with connect(services.resolved_sink, db) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, v FROM t ORDER BY id")
        assert cur.fetchall() == tuple((i, f"{i}{PAD}") for i in range(rows))
        cur.execute(
            f"SELECT MAX(LENGTH(piece)) FROM `{db}_state`.apply_stash_pieces WHERE job = %s",
            (job,),
        )
        (largest,) = cur.fetchone()  # type: ignore[misc]
        # Once no kept state refers to them, the pieces are gone.
        cur.execute(f"SELECT COUNT(*) FROM `{db}_state`.apply_stash_pieces WHERE job = %s", (job,))
        (left,) = cur.fetchone()  # type: ignore[misc]
    assert rows * len(PAD) > PACKET
    assert largest is None or largest <= PACKET // 4
    assert left == 0
