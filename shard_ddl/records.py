"""Control-topic records of shard-DDL coordination, and the JSON carried in their `detail`.

`rowbus.protocol.events.ControlRecord` has ``lock_id, kind, shard, statement, ts, actor,
detail``; what coordination needs beyond those travels in `detail` as a JSON object (keys
below). A record whose detail is not JSON is read as ``{"note": detail}``.

- INTENT: ``statement`` = the shard's own statement, ``ts`` = the DDL's upstream ts; detail
  ``target``, ``seq``, ``group`` (every shard of the target the reporter knows), ``executable``
  (the statement retargeted to the target table), ``normalized``, ``mode``
  (``pessimistic``/``optimistic``), ``at_ms`` (reporter's clock), ``position`` (binlog), and
  when the DDL event carries them (PROTOCOL.md §1.3) ``sql_mode`` (the source session's, 1.4),
  ``timestamp_us`` (the statement's time, µs since the epoch, 1.4) and ``time_zone`` (the
  session's UTC offset, 1.5); a record without them (an older writer) reads as unknown
  (None): the sink's own mode, time and zone.
- CONFLICT: detail ``cause``, ``at_ms``.
- DONE: ``statement`` = what was executed (None if nothing: already applied), detail
  ``at_ms``, ``already`` (the sink had it already: a crash between executing and publishing).
- UNLOCK: ``statement`` = the statement the operator chose (None: the reported one), detail
  ``reason``, ``at_ms``.
- SKIP: detail ``reason``, ``at_ms``: release the shards, execute nothing.
- OPERATOR_NOTE: detail ``note``, ``at_ms``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from rowbus.protocol.events import UNKNOWN, ControlKind, ControlRecord, StatementSession


def lock_id(target: str, seq: int) -> str:
    """``schema.table#seq``: the `seq`-th DDL of the shards of `target` (1-based)."""
    return f"{target}#{seq}"


def parse_lock_id(lock: str) -> tuple[str, int]:
    """Inverse of `lock_id` (ValueError if `lock` is not one)."""
    target, sep, seq = lock.rpartition("#")
    if not sep or not target or not seq.isdigit() or int(seq) < 1:
        raise ValueError(f"{lock!r} is not a lock id (schema.table#N)")
    return target, int(seq)


def detail_of(record: ControlRecord) -> dict[str, Any]:
    """The record's detail as a dict."""
    if not record.detail:
        return {}
    try:
        data = json.loads(record.detail)
    except ValueError:
        return {"note": record.detail}
    return data if isinstance(data, dict) else {"note": record.detail}


def _dump(data: dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def hlc_now(at_ms: int) -> int:
    """A hybrid-logical-clock-shaped ts for records that have no upstream ts."""
    return at_ms << 16


def intent(
    *,
    target: str,
    seq: int,
    shard: str,
    statement: str,
    executable: str,
    normalized: str,
    ts: int,
    group: Iterable[str],
    mode: str,
    actor: str,
    at_ms: int,
    position: str = "",
    session: StatementSession = UNKNOWN,
) -> ControlRecord:
    known = {
        key: value
        for key, value in (
            ("sql_mode", session.sql_mode),
            ("timestamp_us", session.timestamp_us),
            ("time_zone", session.time_zone),
        )
        if value is not None
    }
    return ControlRecord(
        lock_id=lock_id(target, seq),
        kind=ControlKind.INTENT,
        shard=shard,
        statement=statement,
        ts=ts,
        actor=actor,
        detail=_dump(
            {
                "target": target,
                "seq": seq,
                "group": sorted(set(group)),
                "executable": executable,
                "normalized": normalized,
                "mode": mode,
                "at_ms": at_ms,
                "position": position,
                **known,
            }
        ),
    )


def action(
    kind: ControlKind,
    lock: str,
    *,
    actor: str,
    at_ms: int,
    statement: str | None = None,
    **detail: Any,
) -> ControlRecord:
    """A CONFLICT, DONE, UNLOCK, SKIP or OPERATOR_NOTE record."""
    return ControlRecord(
        lock_id=lock,
        kind=kind,
        shard=None,
        statement=statement,
        ts=hlc_now(at_ms),
        actor=actor,
        detail=_dump({**detail, "at_ms": at_ms}),
    )
