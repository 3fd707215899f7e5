"""The participant's gate (holding and re-sync) and shard groups from routing."""

from __future__ import annotations

from rowbus.protocol.events import ControlKind
from rowbus.shard_ddl import records
from rowbus.shard_ddl.gate import Barrier, ShardGate
from rowbus.shard_ddl.groups import ShardGroups
from rowbus.shard_ddl.locks import LockTable
from rowbus.testing import shard_routes


def _intent(shard: str, seq: int = 1) -> records.ControlRecord:
    return records.intent(
        target="t.t",
        seq=seq,
        shard=shard,
        statement="ALTER TABLE x ADD c INT",
        executable="ALTER TABLE `t`.`t` ADD c INT",
        normalized="N",
        ts=seq,
        group=["a", "b"],
        mode="pessimistic",
        actor="j",
        at_ms=1,
    )


def _done(seq: int = 1) -> records.ControlRecord:
    return records.action(ControlKind.DONE, f"t.t#{seq}", actor="j", at_ms=2, statement="X")


def test_rows_after_a_ddl_are_held_while_other_shards_flow() -> None:
    gate: ShardGate[str] = ShardGate()
    assert gate.push("a", "a1") == ["a1"]
    assert gate.push("a", "A-ddl", ddl=True) == [Barrier("a", "A-ddl")]
    assert gate.push("a", "a2") == [], "queued even before the lock id is known"
    gate.block("a", "t.t#1")
    assert gate.push("a", "a3") == []
    assert gate.push("b", "b1") == ["b1"]
    table = LockTable().apply(_intent("a"))
    assert gate.release(table) == []
    assert gate.push("b", "B-ddl", ddl=True) == [Barrier("b", "B-ddl")]
    gate.block("b", "t.t#1")
    assert gate.push("b", "b2") == []
    assert list(gate.held()) == [("a", "a2"), ("a", "a3"), ("b", "b2")]
    table = table.apply(_intent("b"))
    assert gate.release(table) == []
    table = table.apply(_done())
    assert gate.release(table) == ["a2", "a3", "b2"]
    assert gate.waiting() == {}
    assert gate.push("a", "a4") == ["a4"]


def test_release_stops_at_the_next_ddl_of_the_shard() -> None:
    gate: ShardGate[str] = ShardGate()
    gate.push("a", "D1", ddl=True)
    gate.block("a", "t.t#1")
    for item, ddl in (("r1", False), ("D2", True), ("r2", False)):
        gate.push("a", item, ddl=ddl)
    table = LockTable().apply(_intent("a")).apply(_intent("b")).apply(_done())
    assert gate.release(table) == ["r1", Barrier("a", "D2")]
    assert gate.waiting() == {"a": None}
    assert gate.push("a", "r3") == []
    gate.block("a", "t.t#2")
    assert list(gate.held()) == [("a", "r2"), ("a", "r3")]


def test_groups_from_routing() -> None:
    route = shard_routes(
        [("shop_*.orders_*", "shop.orders"), ("shop_*.skip", "shop.single_{schema}")]
    )
    tables = [
        ("s1", "shop_1", "orders_1"),
        ("s1", "shop_1", "orders_2"),
        ("s2", "shop_2", "orders_1"),
        ("s1", "shop_1", "skip"),
        ("s1", "other", "t"),
    ]
    groups = ShardGroups.build(route, tables)
    assert groups.group("shop.orders") == {
        "s1/shop_1.orders_1",
        "s1/shop_1.orders_2",
        "s2/shop_2.orders_1",
    }
    assert groups.target_of("s2", "shop_2", "orders_1") == "shop.orders"
    assert groups.target_of("s1", "shop_1", "skip") is None, "one shard: not sharded"
    assert groups.target_of("s1", "other", "t") is None
    single = ShardGroups.build(route, tables, sharded=["shop.single_shop_1"])
    assert single.target_of("s1", "shop_1", "skip") == "shop.single_shop_1"
