"""A deliberately broken program for the conformance kit's own test: ``python -m
tests.unit.protocol.broken_program merge|decode``. `merge`: a merger that sorts what it read
by (ts, source) and keeps every copy — it never drops a replayed record; `decode`: a decoder
that forgets a DDL's 1.5 `time_zone`. Everything else is the reference's answer."""

from __future__ import annotations

import base64
import sys
from collections.abc import Mapping
from typing import Any

from rowbus.merge import conformance
from rowbus.protocol.codec import decode
from rowbus.protocol.events import DdlChange, RowChange


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


REFERENCE_DECODE = conformance.OPS["decode"]


def forgetful_decode(request: Mapping[str, Any]) -> dict[str, Any]:
    answer = REFERENCE_DECODE(request)
    answer.get("record", {}).get("ddl", {}).pop("time_zone", None)
    return answer


if __name__ == "__main__":
    if sys.argv[1] == "merge":
        conformance.OPS["merge"] = naive_merge
    else:
        conformance.OPS["decode"] = forgetful_decode
    conformance.serve(sys.stdin, sys.stdout)
