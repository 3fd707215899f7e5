"""The statements of snapshot markers (PROTOCOL.md §9.7) and the planner step they make."""

from __future__ import annotations

from rowbus.protocol.events import BinlogPosition, MarkerMode, SnapshotBegin, SnapshotEnd, TxnRef
from rowbus.routing.routes import Router, RouteSettings, Target
from rowbus.spark_apply import snapshots
from rowbus.spark_apply.planner import PlannerState, plan

AT = BinlogPosition("bin.000003", 500)
TS = 111_411_200_000_000_000


def _marker(end: bool, ts: int, index: int) -> SnapshotBegin | SnapshotEnd:
    ref = TxnRef(f"snapshot:0/bin.000003:500:db.t:{'end' if end else 'begin'}", index)
    common = {
        "source": "s1",
        "ts": ts,
        "schema": "db",
        "table": "t",
        "snapshot": "snapshot:0/bin.000003:500:db.t",
        "mode": MarkerMode.REPLACE,
        "position": AT,
        "txn": ref,
    }
    return SnapshotEnd(**common, rows=0) if end else SnapshotBegin(**common)  # type: ignore[arg-type]


def test_the_seen_set_is_a_table_of_the_key_beside_the_target() -> None:
    target = Target("shop", "orders")
    seen = snapshots.seen_table(target)
    assert seen.schema == "shop" and seen.table.startswith(snapshots.SEEN_PREFIX)
    assert len(seen.table) <= 64
    assert seen == snapshots.seen_table(Target("shop", "orders"))
    assert seen != snapshots.seen_table(Target("shop", "orders_2"))
    drop, create = snapshots.begin_ddl(target, ["a", "b"])
    assert drop == f"DROP TABLE IF EXISTS {seen.quoted}"
    assert create.startswith(f"CREATE TABLE {seen.quoted} (PRIMARY KEY (`a`, `b`)) ")
    assert create.endswith("SELECT `a`, `b` FROM `shop`.`orders` LIMIT 0")
    (delete,) = snapshots.end_statements(target, ["a", "b"])
    assert delete == (
        f"DELETE FROM `shop`.`orders` WHERE NOT EXISTS (SELECT 1 FROM {seen.quoted} AS s "
        "WHERE s.`a` = `shop`.`orders`.`a` AND s.`b` = `shop`.`orders`.`b`)"
    )
    assert snapshots.begin_keyless(target) == "DELETE FROM `shop`.`orders`"


def test_seen_keys_are_inserted_in_bounded_statements() -> None:
    target = Target("shop", "orders")
    keys = [(i, f"k'{i}") for i in range(1000)]
    statements = list(snapshots.seen_statements(target, ["a", "b"], keys, max_bytes=2000))
    assert len(statements) > 5
    assert all(len(s) < 2100 for s in statements)
    assert all(s.startswith("INSERT IGNORE INTO ") for s in statements)
    assert "(0,'k\\'0')" in statements[0]
    assert sum(s.count("),(") + 1 for s in statements) == 1000


def test_a_marker_of_a_sharded_target_is_left_alone() -> None:
    router = Router(
        [
            RouteSettings(match="db.t_*", target="merged.t", sharded=True),
            RouteSettings(match="db.*", target="copy.{table}"),
        ]
    )
    seen = snapshots.SeenSets(router)
    begin = _marker(False, TS, 0)
    assert seen.target(begin) == Target("copy", "t")
    shard = SnapshotBegin(
        source="s1",
        ts=TS,
        schema="db",
        table="t_1",
        snapshot="x",
        mode=MarkerMode.REPLACE,
        position=AT,
        txn=TxnRef("x:begin", 0),
    )
    assert seen.target(shard) is None


def test_the_planner_ends_a_step_at_each_marker() -> None:
    from rowbus.protocol.events import Resolved
    from rowbus.spark_apply.planner import Envelope

    batch = [
        Envelope("a", 0, 0, _marker(False, TS + 1, 0)),
        Envelope("a", 0, 1, _marker(True, TS + 2, 1)),
        Envelope("a", 0, 2, Resolved(source="s1", ts=TS + 2)),
    ]
    got = plan(PlannerState(), batch, [("a", 0, "s1")], lambda _: True)
    barriers = [s.ddl for s in got.steps if s.ddl is not None]
    assert [type(b.event).__name__ for b in barriers] == ["SnapshotBegin", "SnapshotEnd"]
    assert (barriers[0].topic, barriers[0].partition, barriers[0].offset) == ("a", 0, 0)
