"""The wedge report (issue 28) with an injected clock: a lock that waits too long is named once,
with the shards it waits for and where they are; a resolved lock is forgotten; the report is
kept on the lock (what `rowbus status` shows) until the lock resolves."""

from __future__ import annotations

from rowbus.merge.positions import Floor
from rowbus.protocol.events import ControlKind
from rowbus.shard_ddl.locks import LockTable, replay
from rowbus.shard_ddl.wedge import WedgeWatch, where_in
from tests.unit.shard_ddl.test_locks import ADD, GROUP, act, intent


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


FLOORS = {"s1": Floor((0, 1, "bin.000001", 4242, 0))}


def test_a_lock_waiting_longer_than_the_setting_is_reported_once() -> None:
    clock = Clock()
    watch = WedgeWatch(60, clock)
    table = replay([intent(GROUP[0], ADD), intent(GROUP[2], ADD)])
    where = where_in(FLOORS)
    assert watch.observe(table, 1000, where) == []
    clock.now += 59
    assert watch.observe(table, 2000, where) == []
    clock.now += 2
    (report,) = watch.observe(table, 3000, where)
    assert report.lock_id == "shop.orders#1"
    assert report.waiting_for == (GROUP[1], GROUP[3])
    assert report.where == ("s1 released through bin.000001:4242", "no position known")
    assert report.advancing
    text = str(report)
    assert "shop.orders#1" in text
    assert "advanced from 1000 to 3000" in text
    assert f"{GROUP[1]} at s1 released through bin.000001:4242" in text
    assert watch.stuck() == {"shop.orders#1"}
    clock.now += 600
    assert watch.observe(table, 4000, where) == []  # once per lock
    # resolved (the missing shards report): forgotten
    table = table.apply(intent(GROUP[1], ADD)).apply(intent(GROUP[3], ADD))
    assert watch.observe(table, 5000, where) == []
    assert watch.stuck() == frozenset()


def test_a_stalled_merge_is_told_apart_from_a_wedge() -> None:
    clock = Clock()
    watch = WedgeWatch(5, clock)
    table = replay([intent(GROUP[0], ADD)])
    watch.observe(table, 1000, where_in({}))
    clock.now += 5
    (report,) = watch.observe(table, 1000, where_in({}))
    assert not report.advancing
    assert "has not moved" in str(report)


def test_the_report_is_kept_on_the_lock_until_it_resolves() -> None:
    table: LockTable = replay([intent(GROUP[0], ADD)])
    table = table.apply(act(ControlKind.OPERATOR_NOTE, note="stuck: waits for ...", wedge=True))
    lock = table.get("shop.orders#1")
    assert lock is not None
    assert lock.stuck == "stuck: waits for ..."
    assert lock.describe()["stuck"] == "stuck: waits for ..."
    for shard in GROUP[1:]:
        table = table.apply(intent(shard, ADD))
    table = table.apply(act(ControlKind.DONE, statement="x"))
    done = table.get("shop.orders#1")
    assert done is not None
    assert done.state.final
