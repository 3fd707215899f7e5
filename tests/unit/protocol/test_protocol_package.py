"""Package-level promises: no I/O imports, generated code up to date, public names."""

from __future__ import annotations

import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from rowbus import protocol
from rowbus.protocol.codec import decode

ROOT = Path(protocol.__file__).resolve().parent


def test_protocol_imports_no_io_library() -> None:
    code = (
        "import sys, rowbus.protocol, rowbus.protocol.codec, rowbus.protocol.partition, "
        "rowbus.protocol.topics, rowbus.protocol.hlc, rowbus.protocol.golden\n"
        "bad = {'confluent_kafka', 'pymysql', 'pyspark', 'kazoo', 'pymysqlreplication'}\n"
        "print(sorted(bad & {m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT.parent
    )
    assert out.stdout.strip() == "[]"


def test_generated_code_matches_the_proto(tmp_path: Path) -> None:
    from rowbus.protocol.regenerate import main  # needs grpcio-tools, part of the test extra

    assert main(tmp_path) == 0
    for name in ("rowbus_pb2.py", "rowbus_pb2.pyi"):
        assert (tmp_path / name).read_text() == (ROOT / "_generated" / name).read_text(), (
            "run python -m rowbus.protocol.regenerate"
        )


def test_public_names() -> None:
    for name in protocol.__all__:
        assert hasattr(protocol, name), name


def test_a_protobuf_row_whose_images_contradict_its_op_is_refused() -> None:
    from rowbus.protocol._generated import rowbus_pb2 as pb

    env = pb.Envelope()
    env.row.op = pb.OP_INSERT
    env.row.before.kinds = b"\x00"
    env.row.after.kinds = b"\x00"
    body = env.SerializeToString()
    value = body + b"\x7d" + zlib.crc32(body).to_bytes(4, "little")
    with pytest.raises(protocol.ProtocolError, match="an insert has only after") as info:
        decode(value, None, "t[1]@2")
    assert info.value.position == "t[1]@2"
    env.row.op = 9
    body = env.SerializeToString()
    value = body + b"\x7d" + zlib.crc32(body).to_bytes(4, "little")
    with pytest.raises(protocol.ProtocolError, match="unknown row op 9"):
        decode(value, None)


def test_an_update_whose_images_differ_in_width_is_refused() -> None:
    from rowbus.protocol._generated import rowbus_pb2 as pb
    from rowbus.protocol.events import BinlogPosition, Op, RowChange, TxnRef

    env = pb.Envelope()
    env.row.op = pb.OP_UPDATE
    env.row.before.kinds = b"\x00"
    env.row.after.kinds = b"\x00\x00"
    body = env.SerializeToString()
    value = body + b"\x7d" + zlib.crc32(body).to_bytes(4, "little")
    with pytest.raises(protocol.ProtocolError, match="before has 1 values, after 2"):
        decode(value, None)
    with pytest.raises(ValueError, match="before has 1 values, after 2"):
        RowChange(
            source="a",
            ts=1,
            op=Op.UPDATE,
            schema="s",
            table="t",
            schema_id=1,
            primary_key=(),
            before=(1,),
            after=(1, 2),
            txn=TxnRef("x", 0),
            position=BinlogPosition("f", 4),
        )
