"""The checked-in golden vectors (protocol/testdata) still hold, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rowbus.protocol.codec import Encoding, decode, encode
from rowbus.protocol.codec.jsonc import to_json, value_from_json
from rowbus.protocol.ddl import DdlKind
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import DdlChange
from rowbus.protocol.golden import READER_DDL_FILE, SAMPLES, TESTDATA, build, reader_samples
from rowbus.protocol.partition import encode_key, java_partition, murmur2
from tests.unit.protocol.protocol_strategies import strict
from tests.unit.protocol.schema_rules import violations

MANIFEST: dict[str, Any] = json.loads((TESTDATA / "manifest.json").read_text(encoding="utf-8"))
RECORDS = {**SAMPLES, **reader_samples()}


def test_every_kind_and_encoding_has_a_vector() -> None:
    seen = {(v["kind"], v["encoding"]) for v in MANIFEST["vectors"]}
    kinds = {"row", "ddl", "resolved", "heartbeat", "schema", "checkpoint", "control"}
    kinds |= {"snapshot_begin", "snapshot_end"}
    assert seen == {(k, e.value) for k in kinds for e in Encoding}


def test_every_ddl_kind_has_a_vector_of_the_readers_real_output() -> None:
    """Captured by tests/integration/producer/test_golden_ddl.py (PROTOCOL.md §10)."""
    captured = {v["name"] for v in MANIFEST["vectors"] if v.get("origin") == "reader"}
    kinds = set()
    for name in captured:
        record = RECORDS[name]
        assert isinstance(record, DdlChange)
        kinds.add(record.kind)
        if record.table_schema is not None:  # as published, it obeys §1.1
            assert violations(record.table_schema) == []
    assert kinds == set(DdlKind)


@pytest.mark.parametrize("vector", MANIFEST["vectors"], ids=lambda v: v["file"])
def test_vector(vector: dict[str, Any]) -> None:
    data = (TESTDATA / vector["file"]).read_bytes()
    headers = [(k, v.encode()) for k, v in vector["headers"].items()]
    record = RECORDS[vector["name"]]
    # encoding the sample gives the checked-in bytes and headers
    value, sent = encode(record, Encoding(vector["encoding"]))
    assert value == data
    assert sent == headers
    # decoding the checked-in bytes gives the sample, and its JSON form the expected file
    back = decode(data, headers, f"testdata/{vector['file']}")
    assert strict(back) == strict(record)
    expected = json.loads((TESTDATA / vector["expected"]).read_text(encoding="utf-8"))
    assert to_json(back) == expected


@pytest.mark.parametrize("case", MANIFEST["keys"], ids=lambda k: k["key"])
def test_key_vector(case: dict[str, Any]) -> None:
    values = tuple(value_from_json(v) for v in case["values"])
    key = encode_key(case["schema"], case["table"], values)
    assert key.decode("utf-8") == case["key"]
    assert murmur2(key) == case["murmur2"]
    for n, partition in case["partitions"].items():
        assert java_partition(key, int(n)) == partition


def test_schema_id_vector() -> None:
    from rowbus.protocol.golden import ALL_TYPES

    (case,) = MANIFEST["schema_ids"]
    assert ALL_TYPES.canonical_bytes().decode("utf-8") == case["canonical"]
    assert ALL_TYPES.schema_id == case["schema_id"]


@pytest.mark.parametrize("case", MANIFEST["invalid"], ids=lambda c: c["why"])
def test_invalid_vector(case: dict[str, Any]) -> None:
    headers = [(k, v.encode()) for k, v in case["headers"].items()]
    with pytest.raises(ProtocolError):
        decode(bytes.fromhex(case["hex"]), headers, "t[0]@1")


def test_testdata_is_exactly_what_the_generator_writes() -> None:
    """Regenerate with ``python -m rowbus.protocol.golden`` after a deliberate format change."""
    on_disk = {
        p.name: p.read_bytes()
        for p in Path(TESTDATA).iterdir()
        if p.is_file() and p != READER_DDL_FILE  # the captured input, not built
    }
    # and what a decoder of this version reads from each older version's frozen values
    for p in Path(TESTDATA).glob("v*/*.expected.json"):
        on_disk[f"{p.parent.name}/{p.name}"] = p.read_bytes()
    assert on_disk == build()
