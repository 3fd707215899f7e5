"""Bad input a new user meets gets one clear line naming what to change, found before expensive
start-up where it can be (issue #33): a wrong password on the sink or on a source, a corrupt
record in a data topic, a topic no source is known on, a sink user that may not write a
target table. Each runs the command as a user does and compares its whole stderr with the
line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from rowbus.clients import kafka
from rowbus.config import Settings
from rowbus.protocol.codec import encode
from rowbus.protocol.events import Resolved
from tests.conftest import connect
from tests.integration.consumers.publisher import publish_schema, txn_events

Run = Callable[..., subprocess.CompletedProcess[str]]


def _config(services: Settings, tmp_path: Path, **sections: Any) -> Path:
    """A rowbus.yaml for the test services, `sections` merged over it."""
    data: dict[str, Any] = {
        "kafka": {"bootstrap_servers": services.kafka.bootstrap_servers},
        "zookeeper": {"hosts": services.zookeeper.hosts},
        "sink": {"port": services.resolved_sink.port},
        "sources": [{"name": s.name, "port": s.port} for s in services.sources],
    }
    for name, value in sections.items():
        data[name] = {**data[name], **value} if isinstance(data.get(name), dict) else value
    path = tmp_path / "rowbus.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _rowbus(config: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rowbus", "-c", str(config), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _lines(text: str) -> list[str]:
    return text.strip().splitlines()


def _topic_job(services: Settings, tmp_path: Path, topic: str, job: str, **apply: Any) -> Path:
    """A configuration whose one source is `topic` (its own data topic) and whose job is `job`."""
    return _config(
        services,
        tmp_path,
        sources=[{"name": topic, "port": services.sources[0].port}],
        apply={
            "job": job,
            "state_database": f"{job}_state",
            "topic_template": "{source}",
            "checkpoint_location": str(tmp_path / "ckpt"),
            **apply,
        },
    )


def _apply_stops_with(config: Path, cause: str) -> None:
    """`rowbus apply` exits 2 with one line ending in `cause` on stderr (besides the JVM's own
    start-up notice, printed before any log profile): no Python or Java trace."""
    out = _rowbus(config, "apply", "--available-now", timeout=300)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "\tat " not in out.stderr, out.stderr
    *jvm, line = _lines(out.stderr)
    assert jvm == [JVM_NOTICE], out.stderr
    assert line.endswith(f" ERROR rowbus.spark_apply: apply stopped: {cause}"), out.stderr


def test_a_wrong_sink_password_is_refused_before_spark_starts(
    services: Settings, tmp_path: Path
) -> None:
    sink = services.resolved_sink
    config = _config(services, tmp_path, sink={"password": "not-the-password"})
    refused = (
        f"connecting to the sink {sink.host}:{sink.port}: access denied (Access denied for "
        f"user '{sink.user}'@'localhost' (using password: YES)); the user or the password is "
        "wrong: check user and password (or password_file, password_env) of the sink"
    )
    began = time.monotonic()
    out = _rowbus(config, "apply", "--available-now")
    assert out.returncode == 2, out.stderr
    assert _lines(out.stderr) == [f"rowbus: error: {refused}"], out.stderr
    # The job as spark-submit runs it (no rowbus shell in front) refuses it before its JVM.
    job = tmp_path / "job.json"
    printed = json.loads(_rowbus(_config(services, tmp_path), "apply", "--print-config").stdout)
    printed["sink"]["password"] = "not-the-password"
    job.write_text(json.dumps(printed))
    alone = subprocess.run(
        [sys.executable, "-m", "rowbus.spark_apply", "--config", str(job)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert alone.returncode == 2, alone.stderr
    (line,) = _lines(alone.stderr)
    assert line.endswith(f" ERROR rowbus.spark_apply: apply stopped: {refused}"), alone.stderr
    assert time.monotonic() - began < 20, "refused before any Spark start-up"


def test_a_wrong_source_password_says_so_not_to_grant_replication(
    services: Settings, tmp_path: Path
) -> None:
    source = services.sources[0]
    config = _config(
        services,
        tmp_path,
        sources=[{"name": source.name, "port": source.port, "password": "not-the-password"}],
    )
    out = _rowbus(config, "reader", "run", "--source", source.name)
    assert out.returncode == 2, out.stderr
    assert _lines(out.stderr) == [
        f"rowbus: error: connecting to source {source.name} ({source.host}:{source.port}): "
        f"access denied (Access denied for user '{source.user}'@'localhost' (using password: "
        "YES)); the user or the password is wrong: check user and password (or password_file, "
        "password_env) of the source"
    ], out.stderr


UNREADABLE = (
    "; no rowbus reader writes such a record: find what else writes to {topic} (a consumer "
    "cannot go past it)"
)

BAD_RECORDS = {
    "truncated": (
        [],
        "protobuf value is truncated (no CRC trailer)" + UNREADABLE,
    ),
    "future version": (
        [("rowbus-version", b"2.0")],
        "unsupported protocol version 2.0: this decoder reads 1.x; upgrade the consumer (or "
        "the rowbus package) to read it",
    ),
    "unknown encoding": (
        [("rowbus-encoding", b"zstd")],
        "unknown encoding 'zstd' in header rowbus-encoding (known: protobuf, avro, json)"
        + UNREADABLE,
    ),
}
"""Records the readers never write, each with the end of the line it is refused with."""


def _bad_topic(services: Settings, make_topic: Callable[..., str], case: str) -> str:
    """A one-partition topic holding the record of `case` at offset 0."""
    headers, _reason = BAD_RECORDS[case]
    topic = make_topic("bad", partitions=1)
    producer = kafka.producer(services.kafka.client_config())
    producer.produce(topic, b"\x0a\xff\xff", partition=0, headers=headers)
    assert producer.flush(15) == 0
    return topic


@pytest.mark.parametrize("case", ["truncated", "future version"])
def test_a_record_the_job_cannot_read_is_one_line(
    services: Settings,
    tmp_path: Path,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    case: str,
) -> None:
    """The job stops at the record with one line naming its position and what to do (exit 2);
    Spark's failure messages, which carry the Python and Java traces, are in its log only.
    (One Spark start per case: the job stops at the first record it cannot read.)"""
    topic = _bad_topic(services, make_topic, case)
    reason = BAD_RECORDS[case][1].format(topic=topic)
    _apply_stops_with(
        _topic_job(services, tmp_path, topic, unique("bad")),
        f"ProtocolError: {topic}[0]@0: {reason}",
    )
    # Spark's traces are kept in the job's Spark log.
    log = (tmp_path / "ckpt.spark.log").read_text()
    assert "PythonException" in log and "\tat " in log


JVM_NOTICE = "WARNING: Using incubator modules: jdk.incubator.vector"


def test_tail_reads_a_topic_the_named_source_is_on_without_a_checkpoint(
    services: Settings, tmp_path: Path, make_topic: Callable[..., str]
) -> None:
    """`rowbus tail TOPIC --source NAME`: the template does not place NAME on TOPIC and no reader
    checkpoint does either; naming both says the source is there (it was refused with "name
    the sources")."""
    topic, schemas = make_topic("tail", partitions=1), make_topic("schemas", partitions=1)
    publish_schema(services, schemas)
    producer = kafka.producer(services.kafka.client_config())
    rows = txn_events("source1", 0, 0, rows=2)
    for event in [*rows, Resolved(source="source1", ts=rows[0].ts)]:
        value, headers = encode(event)
        producer.produce(topic, value, partition=0, headers=headers)
    assert producer.flush(15) == 0
    config = _config(services, tmp_path, subscriber={"schemas_topic": schemas})
    out = _rowbus(config, "tail", topic, "--source", "source1", "--max-transactions", "1")
    assert out.returncode == 0, out.stderr
    (line,) = _lines(out.stdout)
    got = json.loads(line)
    assert got["source"] == "source1"
    assert [e["after"] for e in got["events"]] == [
        {"id": r.after[0], "k": r.after[1]} for r in rows
    ]


@pytest.mark.parametrize("case", ["truncated", "unknown encoding"])
def test_a_record_tail_cannot_read_is_one_line(
    services: Settings, tmp_path: Path, make_topic: Callable[..., str], case: str
) -> None:
    """A subscriber (`rowbus tail`) refuses the record with the job's line (one `ProtocolError`
    says what to do, for every consumer)."""
    topic = _bad_topic(services, make_topic, case)
    out = _rowbus(_config(services, tmp_path), "tail", topic, "--source", "source1")
    assert out.returncode == 2, out.stderr
    reason = BAD_RECORDS[case][1].format(topic=topic)
    assert _lines(out.stderr) == [f"rowbus: error: {topic}[0]@0: {reason}"], out.stderr


def test_a_sink_user_without_the_grants_is_refused_before_spark_starts(
    services: Settings, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    """The sink's user logs in but may not create the job's state tables (CREATE revoked):
    `rowbus apply` stops with one line naming the statement and what to grant, before its
    JVM starts."""
    sink = services.resolved_sink
    user, password, state = unique("apply"), unique("pw"), unique("state")
    with connect(sink) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
        cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{user}'@'%'")
        cur.execute(f"REVOKE CREATE ON *.* FROM '{user}'@'%'")
    try:
        config = _config(
            services,
            tmp_path,
            sink={"user": user, "password": password},
            apply={"state_database": state, "checkpoint_location": str(tmp_path / "ckpt")},
        )
        began = time.monotonic()
        out = _rowbus(config, "apply", "--available-now")
        assert out.returncode == 2, out.stderr
        (line,) = _lines(out.stderr)
        assert line.endswith(
            " ERROR rowbus.spark_apply: apply stopped: creating the apply state tables: access "
            f"denied (Access denied for user '{user}'@'%' to database '{state}'); grant it to "
            "the sink's user (the job creates apply.state_database and its tables, and writes "
            "the target tables)"
        ), out.stderr
        assert time.monotonic() - began < 20, "refused before any Spark start-up"
    finally:
        with connect(sink) as conn, conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")


def test_a_row_whose_schema_is_not_in_the_schemas_topic_is_one_line(
    services: Settings,
    tmp_path: Path,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
) -> None:
    """A row whose schema id the schemas topic does not hold (apply.schemas_topic names
    another topic than the readers write): one line naming the row and the setting (exit 2)."""
    topic, schemas = make_topic("rows", partitions=1), make_topic("schemas", partitions=1)
    (row,) = txn_events(topic, 0, 0, rows=1)
    producer = kafka.producer(services.kafka.client_config())
    for event in (row, Resolved(source=topic, ts=row.ts)):
        value, headers = encode(event)
        producer.produce(topic, value, partition=0, headers=headers)
    assert producer.flush(15) == 0
    _apply_stops_with(
        _topic_job(services, tmp_path, topic, unique("noschema"), schemas_topic=schemas),
        f"BadEventError: {topic}[0]@0 (binlog bin.000001:1000 gtid=0-1-0): unknown schema id "
        f"{row.schema_id} of db.t: the schemas topic does not hold it; apply.schemas_topic "
        "must name the topic the readers of its source write (reader.schemas_topic)",
    )


@pytest.mark.parametrize("mode", ["snapshot", "throughput"])
def test_a_sink_user_that_may_not_write_the_target_is_one_line(
    services: Settings,
    tmp_path: Path,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    mode: str,
) -> None:
    """The sink's user may keep the job's state but not write a target table (INSERT not
    granted, or revoked under a running job): the write of the first batch — on the driver, or
    on the executors in throughput mode — stops the job with one line naming what was denied
    and what to grant (exit 2), the batch not committed."""
    sink = services.resolved_sink
    topic, schemas = make_topic("denied", partitions=1), make_topic("schemas", partitions=1)
    publish_schema(services, schemas)
    producer = kafka.producer(services.kafka.client_config())
    rows = txn_events(topic, 0, 0, rows=2)
    for event in [*rows, Resolved(source=topic, ts=rows[0].ts)]:
        value, headers = encode(event)
        producer.produce(topic, value, partition=0, headers=headers)
    assert producer.flush(15) == 0
    user, password, job = unique("writer"), unique("pw"), unique("denied")
    with connect(sink) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
        cur.execute(f"GRANT ALL PRIVILEGES ON `{job}_state`.* TO '{user}'@'%'")
        cur.execute(f"GRANT SELECT ON *.* TO '{user}'@'%'")
    try:
        config = _topic_job(services, tmp_path, topic, job, schemas_topic=schemas, mode=mode)
        data = yaml.safe_load(config.read_text())
        data["sink"].update(user=user, password=password)
        config.write_text(yaml.safe_dump(data))
        out = _rowbus(config, "apply", "--available-now", timeout=300)
        assert out.returncode == 2, out.stderr
        assert "Traceback" not in out.stderr and "\tat " not in out.stderr, out.stderr
        # Besides the JVM's notice, only INFO lines of the job's progress before the line.
        *before, line = [ln for ln in _lines(out.stderr) if " INFO " not in ln]
        assert before == [JVM_NOTICE], out.stderr
        # One form from either mode: the driver's own write or an executor's task.
        assert line.endswith(
            " ERROR rowbus.spark_apply: apply stopped: writing rows: access denied "
            f"(INSERT, UPDATE command denied to user '{user}'@'localhost' for table `db`.`t`); "
            "grant it to the sink's user (the job creates apply.state_database and its tables, "
            "and writes the target tables)"
        ), out.stderr
        with connect(sink) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM `{job}_state`.apply_checkpoint")
            assert cur.fetchone() == (0,), "a batch committed without its rows"
    finally:
        with connect(sink) as conn, conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
