"""Writes the conformance kit's stream vectors (`protocol/testdata/streams/`, PROTOCOL.md §10):
``python -m tests.unit.protocol.streams [COUNT]``.

Each vector is a random scenario of the merger's reference tests (`tests/unit/consumers/
scenario.py`: sources on shared topics and partitions, DDLs on one or every partition,
watermarks, replayed slices of a lane), its records encoded in one of the three encodings
(in turn) and interleaved across partitions at random, and the release order the scenario
sorts by §9's rule without any merger. The vectors are checked in: regenerating them writes
new random ones, which the reference must pass like the old (`test_conformance`).
"""

from __future__ import annotations

import base64
import json
import random
import sys
import warnings
from typing import Any

from hypothesis.errors import NonInteractiveExampleWarning

from rowbus.protocol.codec import Encoding, encode
from rowbus.protocol.conformance import STREAMS
from rowbus.protocol.events import DdlChange, RowChange
from tests.unit.consumers.scenario import Scenario, scenarios

ENCODINGS = (Encoding.PROTOBUF, Encoding.AVRO, Encoding.JSON)


def _named(event: RowChange | DdlChange) -> list[Any]:
    txn = event.txn
    return [event.position.file, event.position.offset, txn.index if txn else None]


def vector(scenario: Scenario, encoding: Encoding, rng: random.Random) -> dict[str, Any]:
    """The merge request and expected answer of `scenario`."""

    queues = {tp: list(enumerate(records)) for tp, records in scenario.partitions.items()}
    records = []
    while any(queues.values()):
        tp = rng.choice(sorted(tp for tp, q in queues.items() if q))
        offset, event = queues[tp].pop(0)
        value, headers = encode(event, encoding)
        records.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "offset": offset,
                "headers": {k: (v or b"").decode("utf-8") for k, v in headers},
                "value": base64.b64encode(value).decode("ascii"),
            }
        )
    released = [
        {"source": source, "events": [_named(e) for e in events]}
        for source, _, _, events in scenario.reference
    ]
    return {
        "encoding": encoding.value,
        "lanes": [list(lane) for lane in scenario.lanes],
        "records": records,
        "released": released,
    }


def main(count: int = 12) -> int:
    rng = random.Random(20261126)
    STREAMS.mkdir(parents=True, exist_ok=True)
    for old in STREAMS.glob("stream_*.json"):  # the named ones are written by named_streams
        old.unlink()
    written = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonInteractiveExampleWarning)
        for _ in range(count * 50):
            if written == count:
                break
            scenario = scenarios(max_sources=3, max_txns=8).example()
            sizes = sum(len(r) for r in scenario.partitions.values())
            if len(scenario.reference) < 4 or sizes > 300:
                continue
            data = vector(scenario, ENCODINGS[written % len(ENCODINGS)], rng)
            path = STREAMS / f"stream_{written:02d}.json"
            path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", "utf-8")
            written += 1
    print(f"wrote {written} stream vectors to {STREAMS}")
    return 0 if written == count else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 12))
