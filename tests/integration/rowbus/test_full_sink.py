"""A sink that runs out of space (issue #33): the apply job stops with one line naming the
sink, the table, the server's error and what to change; the batch it was writing is rolled
back whole (its checkpoint not written); once there is room, a restarted job resumes and the
sink equals the source, no transaction applied twice.

The sink is a private MariaDB whose InnoDB system tablespace has a cap
(``innodb_data_file_path=ibdata1:12M:autoextend:max:16M``, every table in it with
``innodb_file_per_table=OFF``): a write past the cap gets the error a full disk gives InnoDB,
1114 "The table 't' is full", without a mount (measured once by hand on a full 140 MB tmpfs:
the server logged "preallocating … for file ./d/t.ibd failed with error 28" and the client got
the same 1114). Raising the cap is a restart with a larger ``max``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from rowbus.config import Settings, load_settings
from rowbus.local.procs import ProcessRecord, launch
from rowbus.local.services import LOCAL_PASSWORD, LOCAL_USER, MariaDB
from rowbus.protocol.events import ColumnSchema, Op, TableSchema
from rowbus.verify import verify
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import _free_port
from tests.integration.rowbus.test_bad_input import _rowbus
from tests.integration.spark_apply.harness import Publisher

TRANSACTIONS, ROWS, WIDTH = 40, 50, 2000
"""2,000 rows of 2 kB: the capped sink holds ~1,500 of them (measured), a batch 600 records."""
BATCH_RECORDS = 600
CAP_MB, LIFTED_MB = 16, 64


@contextmanager
def capped_sink(folder: Path, port: int, cap_mb: int) -> Iterator[MariaDB]:
    """A private MariaDB on `port` whose tables all live in a system tablespace of at most
    `cap_mb` MB (the datadir in `folder` is created once and kept across restarts)."""
    server = MariaDB(
        "fullsink",
        port,
        "test.fullsink",
        folder,
        server_id=91,
        binlog=False,
        extra=(
            "--innodb-file-per-table=OFF",
            f"--innodb-data-file-path=ibdata1:12M:autoextend:max:{cap_mb}M",
            "--innodb-buffer-pool-size=32M",
        ),
    )
    server.prepare()
    record = ProcessRecord(
        server.name, launch(server.command(), server.log_file), server.marker, server.address
    )
    try:
        wait_for(server.ready, timeout=120, what="the capped sink to start")
        server.after_ready()
        yield server
    finally:
        server.shutdown(record)


def _publish(services: Settings, topic: str, schemas: str, db: str) -> list[TableSchema]:
    """The source's transactions into `topic` (one partition): each inserts `ROWS` wide rows
    of ``t`` and one row of the keyless ``audit``, which a transaction applied twice would
    leave twice."""
    wide = TableSchema(
        db,
        "t",
        (
            ColumnSchema(name="id", type="bigint", nullable=False),
            ColumnSchema(name="v", type="varchar", length=WIDTH),
        ),
        ("id",),
    )
    audit = TableSchema(db, "audit", (ColumnSchema(name="n", type="bigint"),), ())
    publisher = Publisher(services.kafka.client_config(), topic, schemas, topic, 1)
    publisher.schemas([wide, audit])
    for k in range(TRANSACTIONS):
        rows: list[Any] = [
            (Op.INSERT, wide, None, (k * ROWS + i, f"{k:04d}" * (WIDTH // 4))) for i in range(ROWS)
        ]
        publisher.txn([*rows, (Op.INSERT, audit, None, (k,))])
    publisher.close()
    return [wide, audit]


def _source_tables(services: Settings, db: str) -> None:
    """The same rows on the source, for `verify` to compare the sink with."""
    with connect(services.sources[0], db) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR({WIDTH}))")
        cur.execute("CREATE TABLE audit (n BIGINT)")
        for k in range(TRANSACTIONS):
            cur.executemany(
                "INSERT INTO t VALUES (%s, %s)",
                [(k * ROWS + i, f"{k:04d}" * (WIDTH // 4)) for i in range(ROWS)],
            )
            cur.execute("INSERT INTO audit VALUES (%s)", (k,))


def _apply(config: Path) -> subprocess.CompletedProcess[str]:
    return _rowbus(config, "apply", "--available-now", timeout=300)


def _held(sink: Any, db: str, state: str, job: str) -> tuple[int, int, int, list[Any]]:
    """(rows of t, rows of audit, rows the committed write markers count, the checkpoint
    rows). A throughput batch's closing marker (shard -1) repeats its tasks' count."""
    with connect(sink) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{db}`.t")
        (wide,) = cur.fetchone()
        cur.execute(f"SELECT COUNT(*) FROM `{db}`.audit")
        (audit,) = cur.fetchone()
        cur.execute(
            f"SELECT batch_id, step, shard, row_count FROM `{state}`.apply_checkpoint "
            "WHERE job = %s ORDER BY batch_id, step, shard",
            (job,),
        )
        checkpoints = list(cur.fetchall())
    counted = sum(int(c[3]) for c in checkpoints if c[2] >= 0)
    return int(wide), int(audit), counted, checkpoints


@pytest.mark.parametrize("mode", ["snapshot", "throughput"])
def test_a_full_sink_stops_the_job_in_one_line_and_a_restart_resumes(
    services: Settings,
    tmp_path: Path,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    mode: str,
) -> None:
    topic, schemas = make_topic("full", partitions=1), make_topic("schemas", partitions=1)
    db, job = unique("full"), unique("fulljob")
    state = f"{job}_state"
    port = _free_port()
    with connect(services.sources[0]) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
    try:
        _source_tables(services, db)
        _publish(services, topic, schemas, db)
        data = {
            "kafka": {"bootstrap_servers": services.kafka.bootstrap_servers},
            "zookeeper": {"hosts": services.zookeeper.hosts},
            "sink": {"port": port, "user": LOCAL_USER, "password": LOCAL_PASSWORD},
            "sources": [{"name": topic, "port": services.sources[0].port}],
            "apply": {
                "job": job,
                "mode": mode,
                "state_database": state,
                "topic_template": "{source}",
                "schemas_topic": schemas,
                "checkpoint_location": str(tmp_path / "ckpt"),
                "max_offsets_per_trigger": BATCH_RECORDS,
            },
        }
        config = tmp_path / "rowbus.yaml"
        config.write_text(yaml.safe_dump(data))
        folder = tmp_path / "sink"
        sink = services.resolved_sink.model_copy(update={"port": port})
        with capped_sink(folder, port, CAP_MB):
            with connect(sink) as conn, conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE `{db}`")
                cur.execute(f"CREATE TABLE `{db}`.t (id BIGINT PRIMARY KEY, v VARCHAR({WIDTH}))")
                cur.execute(f"CREATE TABLE `{db}`.audit (n BIGINT)")
            out = _apply(config)
            assert out.returncode == 2, out.stderr
            assert "Traceback" not in out.stderr and "\tat " not in out.stderr, out.stderr
            errors = [ln for ln in out.stderr.strip().splitlines() if " INFO " not in ln]
            assert len(errors) == 2, out.stderr  # the JVM's notice, then the line
            assert errors[-1].endswith(
                f" ERROR rowbus.spark_apply: apply stopped: writing rows of {db}.t: the sink "
                f"127.0.0.1:{port} has no room for it (1114: The table 't' is full): free "
                "space on its disk, or raise its cap (innodb_data_file_path's max, a quota on "
                "its data folder), then start the job again; the transaction was rolled back "
                "and resumes from the sink's last checkpoint"
            ), out.stderr
            wide, audit, counted, checkpoints = _held(sink, db, state, job)
            # Nothing half-applied: the sink holds exactly what its checkpoints count.
            assert wide + audit == counted, checkpoints
            assert 0 < wide < TRANSACTIONS * ROWS, "some batches committed, the full one not"
        with capped_sink(folder, port, LIFTED_MB):
            out = _apply(config)
            assert out.returncode == 0, out.stderr
            wide, audit, counted, checkpoints = _held(sink, db, state, job)
            assert (wide, audit) == (TRANSACTIONS * ROWS, TRANSACTIONS)
            assert counted == wide + audit, checkpoints  # no step applied twice
            settings = load_settings(config)
            diffs = verify(settings, [], [db], 1000)
            assert [d.equal for d in diffs] == [True, True], diffs
    finally:
        with connect(services.sources[0]) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
