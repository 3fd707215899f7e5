"""The lock state machine: scenarios, then properties over any interleaving of shard intents."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from rowbus.protocol.events import ControlKind, ControlRecord, StatementSession
from rowbus.shard_ddl import records
from rowbus.shard_ddl.ddl import normalize, retarget
from rowbus.shard_ddl.locks import OPTIMISTIC, PESSIMISTIC, LockState, LockTable, replay

TARGET = "shop.orders"
GROUP = ("s1/db.o_1", "s1/db.o_2", "s2/db.o_1", "s2/db.o_2")


def intent(
    shard: str,
    statement: str,
    seq: int = 1,
    ts: int = 1,
    mode: str = PESSIMISTIC,
    at_ms: int = 1000,
    group: tuple[str, ...] = GROUP,
) -> ControlRecord:
    executable = retarget(statement, "shop", "orders")
    return records.intent(
        target=TARGET,
        seq=seq,
        shard=shard,
        statement=statement,
        executable=executable,
        normalized=normalize(executable),
        ts=ts,
        group=group,
        mode=mode,
        actor=f"job-{shard[:2]}",
        at_ms=at_ms,
    )


def act(
    kind: ControlKind,
    lock: str = "shop.orders#1",
    statement: str | None = None,
    at_ms: int = 2000,
    **detail: object,
) -> ControlRecord:
    return records.action(kind, lock, actor="op", at_ms=at_ms, statement=statement, **detail)


ADD = "ALTER TABLE o_1 ADD c INT"


def test_lock_waits_for_every_shard_then_is_ready_once() -> None:
    table = LockTable()
    for i, shard in enumerate(GROUP[:-1]):
        table = table.apply(intent(shard, ADD.replace("o_1", shard[-3:]), at_ms=1000 + i))
        lock = table.get("shop.orders#1")
        assert lock is not None
        assert lock.state is LockState.WAITING
        assert table.executable() == []
    table = table.apply(intent(GROUP[-1], ADD, at_ms=1500))
    lock = table.get("shop.orders#1")
    assert lock is not None
    assert lock.state is LockState.READY
    assert lock.owner == "job-s1"
    assert lock.statement == "ALTER TABLE `shop`.`orders` ADD c INT"
    assert [lk.lock_id for lk in table.executable()] == ["shop.orders#1"]
    assert not lock.released_for(GROUP[0])
    table = table.apply(act(ControlKind.DONE, statement=lock.statement, at_ms=1530))
    lock = table.get("shop.orders#1")
    assert lock is not None
    assert lock.state is LockState.DONE
    assert lock.latency_ms == 30
    assert all(lock.released_for(s) for s in GROUP)
    assert table.executable() == []


def test_duplicate_intent_changes_nothing() -> None:
    first = LockTable().apply(intent(GROUP[0], ADD))
    again = first.apply(intent(GROUP[0], ADD, at_ms=9999))
    assert again.get("shop.orders#1") == first.get("shop.orders#1")


def test_different_statements_conflict_and_never_execute() -> None:
    table = replay(
        [
            intent(GROUP[0], "ALTER TABLE o_1 MODIFY c BIGINT"),
            intent(GROUP[1], "ALTER TABLE o_2 MODIFY c DECIMAL(20,0)"),
            intent(GROUP[2], "ALTER TABLE o_1 MODIFY c BIGINT"),
            intent(GROUP[3], "ALTER TABLE o_2 MODIFY c BIGINT"),
        ]
    )
    lock = table.get("shop.orders#1")
    assert lock is not None
    assert lock.state is LockState.CONFLICT
    assert lock.cause is not None
    assert "DECIMAL(20, 0)" in lock.cause
    assert GROUP[1] in lock.cause
    assert table.executable() == []
    # a DONE that does not fit is recorded, not obeyed; an UNLOCK without a statement is refused
    table = table.apply(act(ControlKind.UNLOCK))
    lock = table.get("shop.orders#1")
    assert lock is not None
    assert lock.state is LockState.CONFLICT
    assert "needs the statement" in lock.history[-1].text
    # the operator picks the statement
    table = table.apply(
        act(
            ControlKind.UNLOCK,
            statement="ALTER TABLE x MODIFY c BIGINT",
            reason="BIGINT everywhere",
        )
    )
    lock = table.get("shop.orders#1")
    assert lock is not None
    assert lock.state is LockState.READY
    assert lock.statement == "ALTER TABLE `shop`.`orders` MODIFY c BIGINT"
    table = table.apply(act(ControlKind.DONE, statement=lock.statement))
    lock = table.get("shop.orders#1")
    assert lock is not None
    assert lock.state is LockState.DONE
    assert all(lock.released_for(s) for s in GROUP)


def test_skip_releases_without_executing_and_late_shards_pass() -> None:
    table = replay([intent(GROUP[0], ADD), act(ControlKind.SKIP, reason="not wanted")])
    lock = table.get("shop.orders#1")
    assert lock is not None
    assert lock.state is LockState.SKIPPED
    table = table.apply(intent(GROUP[1], "ALTER TABLE o_2 ADD other INT"))
    lock = table.get("shop.orders#1")
    assert lock is not None
    assert lock.state is LockState.SKIPPED
    assert lock.released_for(GROUP[1])
    assert lock.executed == ()


def test_unlock_of_a_waiting_lock_runs_the_reported_statement() -> None:
    table = replay([intent(GROUP[0], ADD), act(ControlKind.UNLOCK, reason="shard gone")])
    lock = table.get("shop.orders#1")
    assert lock is not None
    assert lock.state is LockState.READY
    assert lock.forced
    assert lock.statement == "ALTER TABLE `shop`.`orders` ADD c INT"


def test_actions_on_unknown_locks_and_bad_ids_are_ignored_visibly() -> None:
    table = replay(
        [act(ControlKind.SKIP, lock="shop.orders#7"), act(ControlKind.DONE, lock="nope")]
    )
    assert table.locks == {}
    assert len(table.ignored) == 2


def test_optimistic_lock_is_ready_at_first_sight_and_late_conflict_is_visible() -> None:
    table = replay([intent(GROUP[0], ADD, mode=OPTIMISTIC)])
    lock = table.get("shop.orders#1")
    assert lock is not None
    assert lock.state is LockState.READY
    table = table.apply(act(ControlKind.DONE, statement=lock.statement))
    table = table.apply(intent(GROUP[1], ADD.replace("o_1", "o_2")))
    lock = table.get("shop.orders#1")
    assert lock is not None
    assert lock.state is LockState.DONE
    assert lock.released_for(GROUP[1])
    table = table.apply(intent(GROUP[2], "ALTER TABLE o_1 ADD c BIGINT"))
    lock = table.get("shop.orders#1")
    assert lock is not None
    assert lock.state is LockState.CONFLICT
    assert lock.released_for(GROUP[0])
    assert not lock.released_for(GROUP[2])


def test_seq_follows_each_shards_own_history() -> None:
    table = replay([intent(GROUP[0], ADD, seq=1, ts=10), intent(GROUP[0], ADD, seq=2, ts=20)])
    assert table.seq_for(TARGET, GROUP[0], 10) == 1
    assert table.seq_for(TARGET, GROUP[0], 20) == 2
    assert table.seq_for(TARGET, GROUP[0], 30) == 3
    assert table.seq_for(TARGET, GROUP[1], 15) == 1


def test_next_lock_waits_for_the_previous_one() -> None:
    recs = [intent(s, ADD, seq=1, ts=1) for s in GROUP]
    recs += [intent(s, "ALTER TABLE t ADD d INT", seq=2, ts=2) for s in GROUP]
    table = replay(recs)
    assert [lk.lock_id for lk in table.executable()] == ["shop.orders#1"]


# --- properties ------------------------------------------------------------------------------


@dataclass
class World:
    """Shards that each run the same DDLs; an owner executing what is ready."""

    ddls: list[list[str]]
    table: LockTable = field(default_factory=LockTable)
    log: list[ControlRecord] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    next_ddl: dict[str, int] = field(default_factory=dict)
    blocked: dict[str, str] = field(default_factory=dict)
    reported_at: dict[str, set[str]] = field(default_factory=dict)

    def publish(self, record: ControlRecord) -> None:
        self.log.append(record)
        self.table = self.table.apply(record)

    def shard_step(self, i: int) -> None:
        shard = GROUP[i]
        lock = self.blocked.get(shard)
        if lock is not None:
            if not self.table.get(lock).released_for(shard):  # type: ignore[union-attr]
                return
            del self.blocked[shard]
        n = self.next_ddl.get(shard, 0)
        if n >= len(self.ddls[i]):
            return
        seq = self.table.seq_for(TARGET, shard, n + 1)
        self.publish(intent(shard, self.ddls[i][n], seq=seq, ts=n + 1))
        self.reported_at.setdefault(f"{TARGET}#{seq}", set()).add(shard)
        self.blocked[shard] = f"{TARGET}#{seq}"
        self.next_ddl[shard] = n + 1

    def replay_step(self, i: int) -> None:
        """Shard i restarts and reports its last DDL again."""
        n = self.next_ddl.get(GROUP[i], 0)
        if n:
            seq = self.table.seq_for(TARGET, GROUP[i], n)
            self.publish(intent(GROUP[i], self.ddls[i][n - 1], seq=seq, ts=n))

    def owner_step(self, restart: bool) -> None:
        if restart:
            assert replay(self.log) == self.table
        for lock in self.table.executable():
            assert self.reported_at[lock.lock_id] == set(GROUP), "a partial DDL never executes"
            self.done.append(lock.lock_id)
            self.publish(act(ControlKind.DONE, lock=lock.lock_id, statement=lock.statement))


steps = st.lists(
    st.one_of(
        st.tuples(st.just("shard"), st.integers(0, len(GROUP) - 1)),
        st.tuples(st.just("replay"), st.integers(0, len(GROUP) - 1)),
        st.tuples(st.just("owner"), st.booleans()),
    ),
    max_size=120,
)
N_DDL = 3
SPELLINGS = ["ALTER TABLE {t} ADD c{n} INT", "alter table `db`.`{t}` add  c{n} int;"]


def _drain(world: World) -> None:
    for _ in range(N_DDL * 2 + 2):
        for i in range(len(GROUP)):
            world.shard_step(i)
        world.owner_step(False)


@settings(max_examples=150, deadline=None)
@given(steps, st.lists(st.integers(0, 1), min_size=len(GROUP), max_size=len(GROUP)))
def test_any_interleaving_executes_each_ddl_once_in_order(
    schedule: list[tuple[str, object]], spelling: list[int]
) -> None:
    ddls = [
        [SPELLINGS[spelling[i]].format(t=f"o_{i}", n=n) for n in range(N_DDL)]
        for i in range(len(GROUP))
    ]
    world = World(ddls)
    for kind, arg in schedule:
        if kind == "shard":
            world.shard_step(int(arg))  # type: ignore[call-overload]
        elif kind == "replay":
            world.replay_step(int(arg))  # type: ignore[call-overload]
        else:
            world.owner_step(bool(arg))
    _drain(world)
    assert world.done == [f"{TARGET}#{n + 1}" for n in range(N_DDL)]
    assert all(lk.state is LockState.DONE for lk in world.table)
    assert replay(world.log) == world.table


@settings(max_examples=100, deadline=None)
@given(steps, st.integers(0, len(GROUP) - 1), st.integers(0, N_DDL - 1))
def test_a_conflicting_ddl_never_executes_nor_anything_after_it(
    schedule: list[tuple[str, object]], odd_shard: int, odd_ddl: int
) -> None:
    ddls = [[f"ALTER TABLE o_{i} ADD c{n} INT" for n in range(N_DDL)] for i in range(len(GROUP))]
    ddls[odd_shard][odd_ddl] = f"ALTER TABLE o_{odd_shard} ADD c{odd_ddl} BIGINT"
    world = World(ddls)
    for kind, arg in schedule:
        if kind == "shard":
            world.shard_step(int(arg))  # type: ignore[call-overload]
        elif kind == "owner":
            world.owner_step(bool(arg))
    _drain(world)
    assert world.done == [f"{TARGET}#{n + 1}" for n in range(odd_ddl)]
    lock = world.table.get(f"{TARGET}#{odd_ddl + 1}")
    assert lock is not None
    assert lock.state is LockState.CONFLICT
    assert lock.executed == ()


def test_the_owners_sql_mode_and_time_travel_in_the_intent_and_old_intents_read_as_unknown() -> (
    None
):
    executable = retarget(ADD, "shop", "orders")
    owner = records.intent(
        target=TARGET,
        seq=1,
        shard=GROUP[0],
        statement=ADD,
        executable=executable,
        normalized=normalize(executable),
        ts=1,
        group=GROUP,
        mode=PESSIMISTIC,
        actor="job-s1",
        at_ms=1000,
        session=StatementSession("", 1_700_000_000_123_456, "-03:00"),
    )
    table = replay([owner, *(intent(s, ADD.replace("o_1", s[-3:])) for s in GROUP[1:])])
    lock = table.get("shop.orders#1")
    assert lock is not None and lock.state is LockState.READY
    # an empty sql_mode (a lenient session) is a mode, not an unknown one
    assert lock.session == StatementSession("", 1_700_000_000_123_456, "-03:00")
    assert lock.describe()["intents"][0]["timestamp_us"] == 1_700_000_000_123_456
    assert lock.describe()["intents"][0]["time_zone"] == "-03:00"
    # a record of an older writer (no keys) and a later shard's own session leave it unknown
    assert (
        replay([intent(s, ADD.replace("o_1", s[-3:])) for s in GROUP]).get("shop.orders#1").session
        == StatementSession()
    )  # type: ignore[union-attr]
