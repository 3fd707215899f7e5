"""The shard-DDL lock state machine: pure, replayable from the control topic.

``LockTable().apply(r1).apply(r2)…`` gives the state after the records `r1, r2, …` (each a
`ControlRecord`, in control-topic order); the table is a frozen value, `apply` returns a new one
and never raises: a record that does not fit (a DONE for a lock that is not ready, an UNLOCK of
an unknown lock) is kept in the lock's history, or in `ignored`, and changes nothing. Every actor
that replays the same topic computes the same table.

A lock is one DDL of one target table: ``schema.table#seq``, the `seq`-th DDL its shards run.
States::

    WAITING ──all shards reported the same statement──▶ READY ──owner executed──▶ DONE
       │   ╲                                             ▲   (optimistic: READY at the first
       │    ╲──shards report different statements──▶ CONFLICT        compatible intent)
       │                                   │ UNLOCK [statement] ───┘
       └──────────────SKIP (any state but DONE)──────────────────────────▶ SKIPPED

A shard's rows after its DDL are released when the lock is DONE or SKIPPED (or, in an optimistic
lock that turned CONFLICT later, when its own statement is the one that was executed).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType
from typing import Any

from rowbus.protocol.events import UNKNOWN, ControlKind, ControlRecord, StatementSession
from rowbus.shard_ddl.ddl import normalize, retarget
from rowbus.shard_ddl.exceptions import DdlTextError
from rowbus.shard_ddl.records import detail_of, parse_lock_id

log = logging.getLogger(__name__)


class LockState(Enum):
    WAITING = "waiting"
    READY = "ready"
    CONFLICT = "conflict"
    DONE = "done"
    SKIPPED = "skipped"

    @property
    def final(self) -> bool:
        return self in (LockState.DONE, LockState.SKIPPED)


PESSIMISTIC = "pessimistic"
OPTIMISTIC = "optimistic"


@dataclass(frozen=True, slots=True)
class Intent:
    """One shard's report that its DDL reached the barrier."""

    shard: str
    statement: str
    executable: str
    normalized: str
    ts: int
    actor: str
    at_ms: int
    position: str = ""
    session: StatementSession = UNKNOWN
    """What the shard's DDL ran under upstream: sql_mode, time, time zone (None: unknown)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of a lock's history."""

    kind: str
    actor: str
    at_ms: int
    text: str


@dataclass(frozen=True, slots=True)
class Lock:
    lock_id: str
    target: str
    seq: int
    mode: str = PESSIMISTIC
    state: LockState = LockState.WAITING
    group: frozenset[str] = frozenset()
    intents: tuple[Intent, ...] = ()
    owner: str | None = None
    """The actor whose intent opened the lock (DM's owner); the elected coordinator executes."""
    statement: str | None = None
    """The statement to execute downstream (retargeted): the reported one, or the operator's."""
    cause: str | None = None
    forced: bool = False
    """Resolved by an operator (UNLOCK/SKIP): shards that report later pass."""
    executed: tuple[str, ...] = ()
    """Normalised statements executed downstream for this lock."""
    first_at_ms: int = 0
    ready_at_ms: int | None = None
    done_at_ms: int | None = None
    last_ddl_ts: int = 0
    history: tuple[Entry, ...] = ()
    stuck: str | None = None
    """The last wedge report a participant published for it (`wedge.WedgeWatch`): the
    shards it waits for and where they are."""

    @property
    def session(self) -> StatementSession:
        """The session the statement runs under downstream: the owner's, i.e. of the intent
        that opened the lock, whose statement it is (a replica runs a statement under its
        session's mode, time and zone; shards that ran it at other moments cannot all be
        matched by one downstream statement). All unknown for a lock of older writers."""
        return self.intents[0].session if self.intents else UNKNOWN

    @property
    def arrived(self) -> frozenset[str]:
        return frozenset(i.shard for i in self.intents)

    @property
    def waiting_for(self) -> tuple[str, ...]:
        return tuple(sorted(self.group - self.arrived))

    def intent_of(self, shard: str) -> Intent | None:
        return next((i for i in self.intents if i.shard == shard), None)

    def released_for(self, shard: str) -> bool:
        """Whether `shard`'s rows after this DDL may be applied."""
        if self.state.final:
            return True
        if self.state is LockState.CONFLICT and self.executed:
            mine = self.intent_of(shard)
            return mine is not None and mine.normalized in self.executed
        return False

    @property
    def latency_ms(self) -> int | None:
        """From the last shard's report (or the operator's unlock) to DONE."""
        if self.done_at_ms is None or self.ready_at_ms is None:
            return None
        return self.done_at_ms - self.ready_at_ms

    @property
    def ddl_latency_ms(self) -> int | None:
        """From the last shard's DDL upstream (its ts' physical part) to DONE."""
        if self.done_at_ms is None or not self.last_ddl_ts:
            return None
        return self.done_at_ms - (self.last_ddl_ts >> 16)

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary (what `rowbus ddl-locks show` prints)."""
        return {
            "lock": self.lock_id,
            "target": self.target,
            "seq": self.seq,
            "mode": self.mode,
            "state": self.state.value,
            "stuck": self.stuck,
            "owner": self.owner,
            "statement": self.statement,
            "cause": self.cause,
            "group": sorted(self.group),
            "arrived": sorted(self.arrived),
            "waiting_for": list(self.waiting_for),
            "executed": list(self.executed),
            "latency_ms": self.latency_ms,
            "ddl_latency_ms": self.ddl_latency_ms,
            "intents": [
                {
                    "shard": i.shard,
                    "statement": i.statement,
                    "normalized": i.normalized,
                    "actor": i.actor,
                    "at_ms": i.at_ms,
                    "position": i.position,
                    "sql_mode": i.session.sql_mode,
                    "timestamp_us": i.session.timestamp_us,
                    "time_zone": i.session.time_zone,
                }
                for i in self.intents
            ],
            "history": [[e.kind, e.actor, e.at_ms, e.text] for e in self.history],
        }


def _note(lock: Lock, record: ControlRecord, at_ms: int, text: str) -> Lock:
    entry = Entry(record.kind.value, record.actor, at_ms, text)
    return replace(lock, history=(*lock.history, entry))


@dataclass(frozen=True)
class LockTable:
    """All locks, by id; `applied` counts the records applied."""

    locks: Mapping[str, Lock] = field(default_factory=lambda: MappingProxyType({}))
    applied: int = 0
    ignored: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[Lock]:
        return iter(sorted(self.locks.values(), key=lambda lk: (lk.target, lk.seq)))

    def get(self, lock: str) -> Lock | None:
        return self.locks.get(lock)

    def of_target(self, target: str) -> list[Lock]:
        return sorted(
            (lk for lk in self.locks.values() if lk.target == target), key=lambda x: x.seq
        )

    def seq_for(self, target: str, shard: str, ddl_ts: int) -> int:
        """The seq of `shard`'s DDL at `ddl_ts`: the lock it already reported this DDL to, else
        one after the last lock it reported to."""
        last = 0
        for lk in self.of_target(target):
            mine = lk.intent_of(shard)
            if mine is not None:
                if mine.ts == ddl_ts:
                    return lk.seq
                last = lk.seq
        return last + 1

    def executable(self) -> list[Lock]:
        """READY locks whose previous DDL on the same target is resolved, in order."""
        out = []
        for lk in self:
            if lk.state is not LockState.READY:
                continue
            prev = self.locks.get(f"{lk.target}#{lk.seq - 1}")
            if prev is None or prev.state.final:
                out.append(lk)
        return out

    def unresolved(self) -> list[Lock]:
        return [lk for lk in self if not lk.state.final]

    def apply(self, record: ControlRecord) -> LockTable:
        """The table after `record`."""
        detail = detail_of(record)
        at_ms = int(detail.get("at_ms", record.ts >> 16))
        try:
            target, seq = parse_lock_id(record.lock_id)
        except ValueError as exc:
            return self._ignore(f"{record.kind.value} by {record.actor}: {exc}")
        lock = self.locks.get(record.lock_id)
        if record.kind is ControlKind.INTENT:
            if lock is None:
                lock = Lock(record.lock_id, target, seq, first_at_ms=at_ms)
            new = _intent(lock, record, detail, at_ms)
        elif lock is None:
            return self._ignore(
                f"{record.kind.value} by {record.actor} for unknown {record.lock_id}"
            )
        else:
            new = _ACTIONS[record.kind](lock, record, detail, at_ms)
        if new.state is not lock.state:
            log.info(
                "shard DDL lock %s: %s -> %s (%s by %s)",
                new.lock_id,
                lock.state.value,
                new.state.value,
                record.kind.value,
                record.actor,
            )
        locks = dict(self.locks)
        locks[new.lock_id] = new
        return replace(self, locks=MappingProxyType(locks), applied=self.applied + 1)

    def _ignore(self, text: str) -> LockTable:
        log.warning("control record ignored: %s", text)
        return replace(self, applied=self.applied + 1, ignored=(*self.ignored, text))


def _intent(lock: Lock, record: ControlRecord, detail: dict[str, Any], at_ms: int) -> Lock:
    shard = record.shard or "?"
    statement = record.statement or ""
    executable = str(detail.get("executable") or statement)
    normalized = str(detail.get("normalized") or normalize(executable))
    sql_mode = detail.get("sql_mode")
    timestamp_us = detail.get("timestamp_us")
    time_zone = detail.get("time_zone")
    mine = Intent(
        shard,
        statement,
        executable,
        normalized,
        record.ts,
        record.actor,
        at_ms,
        str(detail.get("position", "")),
        StatementSession(
            sql_mode if isinstance(sql_mode, str) else None,
            timestamp_us
            if isinstance(timestamp_us, int) and not isinstance(timestamp_us, bool)
            else None,
            time_zone if isinstance(time_zone, str) else None,
        ),
    )
    known = lock.intent_of(shard)
    if known is not None:
        if known.normalized != normalized:
            return _note(
                lock,
                record,
                at_ms,
                f"{shard} reported again with another statement "
                f"{normalized!r} (kept {known.normalized!r})",
            )
        return lock  # the same report again (a replay or a restart): nothing changes
    group = frozenset(str(s) for s in detail.get("group", ())) | {shard}
    first = not lock.intents
    lock = replace(
        lock,
        intents=(*lock.intents, mine),
        group=lock.group | group,
        owner=lock.owner or record.actor,
        statement=lock.statement or executable,
        mode=str(detail.get("mode", PESSIMISTIC)) if first else lock.mode,
        last_ddl_ts=max(lock.last_ddl_ts, record.ts),
        history=(*lock.history, Entry("intent", record.actor, at_ms, f"{shard}: {statement}")),
    )
    if lock.forced:
        return lock  # an operator resolved it before this shard came: it passes
    if lock.state in (LockState.DONE, LockState.CONFLICT) and lock.executed:
        if normalized in lock.executed:
            return lock
        cause = (
            f"{shard} reports {normalized!r} but {', '.join(lock.executed)!r} was already "
            "executed downstream"
        )
        return replace(lock, state=LockState.CONFLICT, cause=lock.cause or cause)
    if lock.state is LockState.CONFLICT:
        return lock
    others = [i for i in lock.intents if i.normalized != lock.intents[0].normalized]
    if others:
        a, b = lock.intents[0], others[0]
        cause = f"{b.shard} reports {b.normalized!r} but {a.shard} reported {a.normalized!r}"
        return replace(lock, state=LockState.CONFLICT, cause=cause)
    if lock.state is LockState.WAITING and (lock.mode == OPTIMISTIC or lock.group <= lock.arrived):
        return replace(lock, state=LockState.READY, ready_at_ms=at_ms)
    return lock


def _done(lock: Lock, record: ControlRecord, detail: dict[str, Any], at_ms: int) -> Lock:
    if lock.state is LockState.DONE:
        return lock
    executed = normalize(record.statement or lock.statement or "")
    text = (
        "already applied in the sink" if detail.get("already") else f"executed {record.statement}"
    )
    lock = _note(lock, record, at_ms, text)
    if lock.state is LockState.CONFLICT:
        # an optimistic lock turned into a conflict while its owner executed it: keep both facts
        return replace(lock, done_at_ms=at_ms, executed=(*lock.executed, executed))
    if lock.state is not LockState.READY:
        return _note(lock, record, at_ms, f"DONE ignored: the lock is {lock.state.value}")
    return replace(
        lock, state=LockState.DONE, done_at_ms=at_ms, executed=(*lock.executed, executed)
    )


def _conflict(lock: Lock, record: ControlRecord, detail: dict[str, Any], at_ms: int) -> Lock:
    cause = str(detail.get("cause") or lock.cause or "conflict")
    lock = _note(lock, record, at_ms, cause)
    if lock.state in (LockState.WAITING, LockState.READY):
        return replace(lock, state=LockState.CONFLICT, cause=cause)
    return lock


def _unlock(lock: Lock, record: ControlRecord, detail: dict[str, Any], at_ms: int) -> Lock:
    reason = str(detail.get("reason", ""))
    if lock.state.final or lock.state is LockState.READY:
        return _note(lock, record, at_ms, f"UNLOCK ignored: the lock is {lock.state.value}")
    statement = lock.statement
    if record.statement:
        schema, _, table = lock.target.partition(".")
        try:
            statement = retarget(record.statement, schema, table)
        except DdlTextError as exc:
            return _note(lock, record, at_ms, f"UNLOCK ignored: {exc}")
    elif lock.state is LockState.CONFLICT:
        return _note(lock, record, at_ms, "UNLOCK ignored: a conflict needs the statement to run")
    lock = _note(lock, record, at_ms, f"unlock: run {statement} ({reason})")
    return replace(lock, state=LockState.READY, statement=statement, forced=True, ready_at_ms=at_ms)


def _skip(lock: Lock, record: ControlRecord, detail: dict[str, Any], at_ms: int) -> Lock:
    if lock.state.final:
        return _note(lock, record, at_ms, f"SKIP ignored: the lock is {lock.state.value}")
    lock = _note(lock, record, at_ms, f"skip ({detail.get('reason', '')})")
    return replace(lock, state=LockState.SKIPPED, forced=True, done_at_ms=at_ms)


def _operator_note(lock: Lock, record: ControlRecord, detail: dict[str, Any], at_ms: int) -> Lock:
    noted = _note(lock, record, at_ms, str(detail.get("note", "")))
    if detail.get("wedge") and not lock.state.final:
        return replace(noted, stuck=str(detail.get("note", "")))
    return noted


_ACTIONS = {
    ControlKind.DONE: _done,
    ControlKind.CONFLICT: _conflict,
    ControlKind.UNLOCK: _unlock,
    ControlKind.SKIP: _skip,
    ControlKind.OPERATOR_NOTE: _operator_note,
}


def replay(records: Iterator[ControlRecord] | list[ControlRecord]) -> LockTable:
    """The table after all `records`."""
    table = LockTable()
    for record in records:
        table = table.apply(record)
    return table
