"""A deliberately broken program for the conformance kit's own test: ``python -m
tests.unit.protocol.broken_program merge|upstream|markers|decode``. `merge`: a merger that
sorts what it read by (ts, source) and keeps every copy — it never drops a replayed record;
`upstream`: the reference merger behind a de-duplication that leaves `position.upstream` out
of the order key (1.1's rule: events after an upstream switch look like replays, §9.4);
`markers`: the reference merger, and an applier that ignores snapshot markers (read rows only
add, §9.5 item 4 without §9.7); `decode`: a decoder that forgets a DDL's 1.5 `time_zone`.
Everything else is the reference's answer."""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from rowbus.merge import conformance
from rowbus.merge.tables import Event, Tables
from rowbus.protocol.codec import decode
from rowbus.protocol.events import DdlChange, RowChange, SnapshotBegin, SnapshotEnd


def naive_merge(request: Mapping[str, Any]) -> dict[str, Any]:
    txns: dict[tuple[str, str], list[Any]] = {}
    for r in request["records"]:
        headers = [(k, v.encode()) for k, v in r["headers"].items()]
        event = decode(base64.b64decode(r["value"]), headers, "broken")
        if isinstance(event, RowChange | DdlChange):
            key = (event.source, event.txn.id if event.txn else str(event.position))
            txns.setdefault(key, []).append(event)
    ordered = sorted(txns.values(), key=lambda events: (events[0].ts, events[0].source))
    return {
        "released": [
            {
                "source": events[0].source,
                "events": [
                    [e.position.file, e.position.offset, e.txn.index if e.txn else None]
                    for e in events
                ],
            }
            for events in ordered
        ]
    }


REFERENCE_MERGE = conformance.OPS["merge"]


def upstream_blind_merge(request: Mapping[str, Any]) -> dict[str, Any]:
    last: dict[tuple[str, int, str], tuple[int, int, int]] = {}
    kept = []
    for r in request["records"]:
        headers = [(k, v.encode()) for k, v in r["headers"].items()]
        event = decode(base64.b64decode(r["value"]), headers, "broken")
        if isinstance(event, RowChange | DdlChange | SnapshotBegin | SnapshotEnd):
            p = event.position
            key = (p.file_number, p.offset, event.txn.index if event.txn else 0)
            lane = (r["topic"], int(r["partition"]), event.source)
            if lane in last and key <= last[lane]:
                continue
            last[lane] = key
        kept.append(r)
    return REFERENCE_MERGE({**request, "records": kept})


REFERENCE_APPLY = Tables.apply


def markerless_apply(self: Tables, events: Iterable[Event]) -> None:
    REFERENCE_APPLY(self, [e for e in events if not isinstance(e, SnapshotBegin | SnapshotEnd)])


REFERENCE_DECODE = conformance.OPS["decode"]


def forgetful_decode(request: Mapping[str, Any]) -> dict[str, Any]:
    answer = REFERENCE_DECODE(request)
    answer.get("record", {}).get("ddl", {}).pop("time_zone", None)
    return answer


if __name__ == "__main__":
    if sys.argv[1] == "merge":
        conformance.OPS["merge"] = naive_merge
    elif sys.argv[1] == "upstream":
        conformance.OPS["merge"] = upstream_blind_merge
    elif sys.argv[1] == "markers":
        Tables.apply = markerless_apply  # type: ignore[method-assign]
    else:
        conformance.OPS["decode"] = forgetful_decode
    conformance.serve(sys.stdin, sys.stdout)
