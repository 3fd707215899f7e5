"""Snapshot progress (`rowbus.producer.snapshot.state`): what a resumed snapshot keeps out of
the stream, and the effective `reader.snapshot` mode."""

from __future__ import annotations

from rowbus.producer.settings import ReaderSettings, snapshot_mode
from rowbus.producer.snapshot.state import SnapshotState
from rowbus.protocol.events import BinlogPosition, ColumnSchema, Op, TableSchema

P1 = BinlogPosition("binlog.000001", 1000, "0-1-10")
P2 = BinlogPosition("binlog.000001", 5000, "0-1-20")
BETWEEN = BinlogPosition("binlog.000001", 3000)
AFTER = BinlogPosition("binlog.000002", 4)

INT_T = TableSchema("d", "t", (ColumnSchema("id", "bigint"), ColumnSchema("v", "int")), ("id",))
STR_T = TableSchema("d", "s", (ColumnSchema("k", "varchar"), ColumnSchema("v", "int")), ("k",))
NEW_T = TableSchema("d", "n", (ColumnSchema("id", "int"),), ("id",))
KEYLESS_T = TableSchema("d", "k", (ColumnSchema("a", "int"), ColumnSchema("b", "varchar")), ())


def resumed() -> SnapshotState:
    """`d.t` committed up to key 100 at P1, `d.s` up to 'm', `d.n` not started; resumed at P2."""
    state = SnapshotState.start(P1, [INT_T, STR_T, NEW_T], {"d.t": 1000})
    state.tables["d.t"].last_key, state.tables["d.t"].rows = (100,), 100
    state.tables["d.s"].last_key, state.tables["d.s"].rows = ("m",), 10
    state = SnapshotState.from_json(state.to_json())  # what the checkpoint carries
    state.resume_at(P2)
    return state


def test_a_first_snapshot_keeps_every_streamed_change() -> None:
    state = SnapshotState.start(P1, [INT_T], {})
    assert not state.filtering(BETWEEN)
    assert state.keep("d.t", Op.UPDATE, (5,), (5,), BETWEEN) is Op.UPDATE


def test_changes_before_the_new_read_view_of_rows_read_there_are_dropped() -> None:
    state = resumed()
    assert state.horizon == P2
    assert state.filtering(BETWEEN) and not state.filtering(P2) and not state.filtering(AFTER)
    # d.t: keys up to 100 were read at P1 (keep), above 100 at P2 (drop before P2)
    assert state.keep("d.t", Op.UPDATE, (100,), (100,), BETWEEN) is Op.UPDATE
    assert state.keep("d.t", Op.DELETE, (101,), None, BETWEEN) is None
    assert state.keep("d.t", Op.INSERT, None, (5000,), BETWEEN) is None
    assert state.keep("d.t", Op.INSERT, None, (5000,), AFTER) is Op.INSERT
    # d.n was not started: all of it read at P2
    assert state.keep("d.n", Op.INSERT, None, (1,), BETWEEN) is None
    # a table the snapshot does not hold
    assert state.keep("d.other", Op.INSERT, None, (1,), BETWEEN) is Op.INSERT


def test_a_key_changing_update_across_read_views_keeps_its_unshown_half() -> None:
    state = resumed()
    # old key read at P1 (its delete is needed), new key read at P2 (already shows it)
    assert state.keep("d.t", Op.UPDATE, (7,), (700,), BETWEEN) is Op.DELETE
    assert state.keep("d.t", Op.UPDATE, (700,), (7,), BETWEEN) is Op.INSERT
    assert state.keep("d.t", Op.UPDATE, (700,), (800,), BETWEEN) is None


def test_a_table_with_a_non_integer_key_is_read_again_and_keeps_its_changes() -> None:
    state = resumed()
    s = state.tables["d.s"]
    assert s.last_key is None and s.rows == 0  # read again from its first key
    assert state.keep("d.s", Op.DELETE, ("a",), None, BETWEEN) is Op.DELETE
    assert state.keep("d.s", Op.DELETE, ("z",), None, BETWEEN) is Op.DELETE


def test_state_round_trips_through_the_checkpoint_text() -> None:
    state = resumed()
    again = SnapshotState.from_json(state.to_json())
    assert again.to_json() == state.to_json()
    assert again.restarts == 1
    assert [s.after for s in again.tables["d.t"].segments] == [None, (100,)]


def test_the_default_mode_is_initial_unless_a_start_position_is_chosen() -> None:
    assert snapshot_mode(ReaderSettings()) == "initial"
    assert snapshot_mode(ReaderSettings(start="latest")) == "never"
    assert snapshot_mode(ReaderSettings(start="earliest", snapshot="initial")) == "initial"
    assert snapshot_mode(ReaderSettings(snapshot="schema_only")) == "schema_only"


def test_status_shows_rows_rate_and_eta_per_table() -> None:
    from rowbus.producer.snapshot.progress import status_line, summary

    state = SnapshotState.start(P1, [INT_T, NEW_T], {"d.t": 1000, "d.n": 50})
    state.started = 100.0
    state.tables["d.t"].rows = state.seq = 500
    state.tables["d.n"].done = True
    info = summary(state, now=110.0)
    assert info["rows_per_s"] == 50.0
    t = next(x for x in info["tables"] if x["table"] == "d.t")  # type: ignore[attr-defined]
    assert t["eta_s"] == 10.0
    assert (
        status_line(info)
        == "snapshot running: 500 rows, 50 rows/s, 1/2 tables; d.t 500/1,000 ETA 10s"
    )


def test_status_shows_incremental_snapshots_and_refusals() -> None:
    from rowbus.producer.snapshot.progress import status_line, summary
    from rowbus.producer.snapshot.state import Backfill

    state = SnapshotState(P1, {}, done=True, started=100.0, finished=100.0)
    state.backfills["d.t"] = Backfill("d.t", after=(9,), rows=1200, chunks=3)
    state.backfills["d.k"] = Backfill("d.k", done=True, refused="it has no primary key")
    state = SnapshotState.from_json(state.to_json())
    assert state.backfills["d.t"].after == (9,)
    assert status_line(summary(state, now=110.0)) == (
        "snapshot done: 0 rows, 0 rows/s, 0/0 tables; incremental: 1 table(s) running, "
        "d.t 1,200 rows; d.k refused: it has no primary key"
    )


KEYLESS = TableSchema("d", "k", (ColumnSchema("a", "int"), ColumnSchema("b", "varchar")), ())


def test_a_keyless_table_read_again_at_a_new_view_drops_every_change_before_it() -> None:
    state = SnapshotState.start(P1, [INT_T, KEYLESS], {})
    assert not state.tables["d.k"].integer_key
    state = SnapshotState.from_json(state.to_json())
    state.resume_at(P2)  # not read at P1: read whole at P2, which shows what came before
    assert state.keep("d.k", Op.INSERT, None, (), BETWEEN) is None
    assert state.keep("d.k", Op.DELETE, (), None, BETWEEN) is None
    assert state.keep("d.k", Op.INSERT, None, (), AFTER) is Op.INSERT
    first = SnapshotState.start(P1, [KEYLESS], {})  # read at P1 = the stream's start
    assert first.keep("d.k", Op.DELETE, (), None, BETWEEN) is Op.DELETE


def test_a_keyless_table_begun_is_read_again_from_its_start_at_the_new_view() -> None:
    """Its chunks are cuts of one scan: no later view continues it (PROTOCOL.md §9.7)."""
    state = SnapshotState.start(P1, [KEYLESS_T, INT_T], {})
    k = state.tables["d.k"]
    assert k.keyless and not state.tables["d.t"].keyless
    k.last_key, k.rows, k.chunks = (), 40, 2  # two chunks committed
    state = SnapshotState.from_json(state.to_json())
    state.resume_at(P2)
    k = state.tables["d.k"]
    assert (k.rows, k.chunks, k.last_key, k.restarts) == (0, 0, None, 1)
    assert [s.position for s in k.segments] == [P2]
    # every change before the new view is shown by its rows, none after
    assert state.keep("d.k", Op.INSERT, None, (), BETWEEN) is None
    assert state.keep("d.k", Op.DELETE, (), None, BETWEEN) is None
    assert state.keep("d.k", Op.INSERT, None, (), AFTER) is Op.INSERT
    # a second restart before any chunk: the same attempt's count, a newer view
    state.resume_at(AFTER)
    assert state.tables["d.k"].restarts == 1
    assert [s.position for s in state.tables["d.k"].segments] == [AFTER]


def test_a_keyless_table_is_half_published_from_its_first_chunk_until_its_end() -> None:
    """What `reader.snapshot_markers: false` must refuse to continue (PROTOCOL.md §9.7): only a
    new `snapshot_begin` takes a keyless table's published rows back."""
    state = SnapshotState.start(P1, [KEYLESS_T, INT_T], {})
    k, t = state.tables["d.k"], state.tables["d.t"]
    assert state.half_published_keyless() == []  # nothing published yet
    t.last_key, t.rows, t.chunks = (9,), 9, 1
    assert state.half_published_keyless() == []  # a keyed table resumes after its last key
    k.last_key, k.rows, k.chunks = (), 40, 2
    assert [x.name for x in state.half_published_keyless()] == ["d.k"]
    state = SnapshotState.from_json(state.to_json())
    state.resume_at(P2)  # read again from its start: no chunk of the new attempt yet
    assert [x.name for x in state.half_published_keyless()] == ["d.k"]
    state.tables["d.k"].done = True
    assert state.half_published_keyless() == []
