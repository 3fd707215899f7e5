"""The Iceberg sink's operations on real services (broker, MariaDB state database, Spark, a
sqlite SQL catalog and a local warehouse): the driver killed with SIGKILL between writing a
commit's files and committing them, then right after a commit; a compaction racing a commit;
maintenance afterwards. One W2 stream (updates, inserts, deletes) into both table forms, the
data files written by the executors (``apply.iceberg.writers: executors``: two tasks a table
and step, local[2]); the commit the kills fall around is the driver's, the same for both
writers."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from rowbus.cli import main
from rowbus.commands.verify import _verify as verify_command
from rowbus.config import Settings
from rowbus.routing.routes import RouteSettings
from rowbus.spark_apply.iceberg_catalog import last_commits, marks, open_catalog, sink_tables
from rowbus.spark_apply.iceberg_faults import ENV
from rowbus.spark_apply.iceberg_files import PREFIX
from rowbus.spark_apply.iceberg_maintenance import MAINTENANCE, orphans
from rowbus.spark_apply.iceberg_schema import ORDER
from rowbus.spark_apply.settings import IcebergMaintenanceSettings, IcebergSettings, JobConfig
from rowbus.status import iceberg_status
from tests import proclogs
from tests.budget import wait_for_work
from tests.conftest import connect
from tests.integration.spark_apply.harness import SINK_DDL, Model, Publisher
from tests.integration.spark_apply.test_spark_apply import job_config
from tests.integration.spark_apply.test_throughput import run_available_now

PARTITIONS = 2
TXNS = 24
"""Transactions of two row changes each (and a Resolved per partition): with 30 records a
trigger, about four batches."""


def _run_killed(config: JobConfig, fault: str, tmp_path: Path, name: str) -> str:
    """The apply job as its own process (driver, JVM, workers in one process group) with
    `fault` armed; it must die of SIGKILL there. Returns its log."""
    path = tmp_path / f"{name}.json"
    path.write_text(config.dump())
    log = tmp_path / f"{name}.log"
    proclogs.keep(log, f"the apply job ({fault})")
    env = {**os.environ, ENV: fault, "PYSPARK_PYTHON": sys.executable}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rowbus.spark_apply", "--config", str(path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
            start_new_session=True,
        )
        try:
            # Bounded by the work the job does (its CPU), not by the wall clock: under load the
            # same start and batches take longer.
            wait_for_work(
                lambda: True if proc.poll() is not None else None,
                session=proc.pid,
                cpu_s=240,
                wall_s=900,
                what=f"the apply job to reach its fault {fault}",
            )
            rc = proc.wait(timeout=30)
        finally:
            # Whatever the driver left (its JVM ends when the driver's pipe closes; a worker
            # might linger): the group goes with it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    text = log.read_text(errors="replace")
    assert rc == -signal.SIGKILL, f"the job ended with {rc}, not at its fault {fault}"
    return text


def _stray(catalog: Any) -> dict[str, list[Path]]:
    """Each sink table's files that nothing references (any age)."""
    found = {}
    for ident in sink_tables(catalog):
        files = orphans(catalog.load_table(ident), time.time() + 60)
        assert files is not None
        found[".".join(ident)] = files
    return found


def test_kill_9_around_the_iceberg_commit_and_a_racing_compaction_end_equal_once(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, schemas_topic = make_topic("src", PARTITIONS), make_topic("schemas", 1)
    upstream = make_database(services.sources[0])  # the source `rowbus verify` reads
    model = Model(upstream, tables=2, seed=34)
    pub = Publisher(services.kafka.client_config(), topic, schemas_topic, topic, PARTITIONS)
    pub.schemas(list(model.table_schemas.values()))
    for _ in range(TXNS):
        pub.txn([model.step(), model.step()])
    pub.close()
    del pub  # its producer closes now, not with a failure's traceback
    job = unique("job")
    base = job_config(
        services,
        job,
        [topic],
        schemas_topic,
        [RouteSettings(match=f"{upstream}.*")],
        tmp_path / "cp",
        max_offsets_per_trigger=30,
        available_now=True,
    )
    iceberg = IcebergSettings(
        catalog={
            "type": "sql",
            "uri": f"sqlite:///{tmp_path}/catalog.db",
            "warehouse": str(tmp_path / "warehouse"),
        },
        forms=("current", "changelog"),
        writers="executors",
    )
    config = base.model_copy(
        update={"apply": base.apply.model_copy(update={"sink_kind": "iceberg", "iceberg": iceberg})}
    )
    catalog = open_catalog(iceberg)
    try:
        # 1. Killed with the files of its 6th commit written and not committed: they are
        # orphans, the commit is in no snapshot.
        text = _run_killed(config, "kill-before-commit:6", tmp_path, "before")
        assert "SIGKILL before" in text
        stray = _stray(catalog)
        assert any(stray.values()), "the killed commit left no file behind"
        # Among them, data files the executor tasks wrote for the commit that never came.
        assert any(p.name.startswith(PREFIX) for files in stray.values() for p in files), stray
        # 2. The restart replays the batch; killed right after its 3rd commit, before the
        # state database records the step.
        text = _run_killed(config, "kill-after-commit:3", tmp_path, "after")
        assert "SIGKILL after" in text
        # 3. The last restart, in this process's Spark, with a compaction committed just
        # before its first commit to a current-state table (the commit's base is stale), and
        # the job's own maintenance after every batch: orphan files of any age (nothing of the
        # job is in flight between two batches), no expiry (every commit stays countable
        # below), no compaction (out of reach: the change logs' executor-written files stay to count).
        monkeypatch.setenv(ENV, "compact-before-commit:1")
        scheduled = IcebergMaintenanceSettings(
            every_batches=1, keep_batches=1000, orphan_age_s=0, compact_min_files=1000
        )
        last = iceberg.model_copy(update={"maintenance": scheduled})
        with caplog.at_level(logging.INFO, logger="rowbus.spark_apply"):
            run_available_now(
                config.model_copy(
                    update={"apply": config.apply.model_copy(update={"iceberg": last})}
                )
            )
        assert "compacted before" in caplog.text
        assert "commit conflict" in caplog.text or "concurrent update" in caplog.text
        assert not any(_stray(catalog).values()), "the job's maintenance left orphan files"

        def current() -> dict[str, dict[int, tuple[Any, ...]]]:
            return {
                name: {
                    r["id"]: tuple(r.values())
                    for r in catalog.load_table((upstream, name)).scan().to_arrow().to_pylist()
                }
                for name in model.rows
            }

        assert current() == model.rows
        # Every event once in the change log, wherever the kills fell.
        events = _events(catalog, upstream, model.rows)
        assert len(events) == 2 * TXNS and len(set(events)) == 2 * TXNS
        # The change logs' files (never compacted) were written by executor tasks, two of them
        # writing files of one table in one step at least once.
        writers: dict[tuple[str, str], set[str]] = {}
        for name in model.rows:
            log_table = catalog.load_table((upstream, f"{name}_changelog"))
            for task in log_table.scan().plan_files():
                file = Path(task.file.file_path).name
                assert file.startswith(f"{PREFIX}{job}-b"), file
                batch_step, _, rest = file.removeprefix(f"{PREFIX}{job}-").partition("-t")
                writers.setdefault((name, batch_step), set()).add(rest.split("-")[0])
        assert max(len(tasks) for tasks in writers.values()) >= 2, writers
        # No (batch, step) committed twice to a table: each commit of a step appends once (a
        # current state's commit is a delete, maybe an overwrite of the files it rewrites, and
        # the append of the last images, in one transaction).
        for ident in sink_tables(catalog, upstream):
            table = catalog.load_table(ident)
            appends = Counter(
                m[1:3]
                for s in table.metadata.snapshots
                if (m := marks(s))
                and s.summary is not None
                and s.summary.operation.value == "append"
            )
            assert appends and max(appends.values()) == 1, (ident, appends)
        # The racing compaction landed between two of the job's commits, and the job's
        # commit went on top of it.
        compacted = [
            (ident, s)
            for ident in sink_tables(catalog, upstream)
            for s in catalog.load_table(ident).metadata.snapshots
            if s.summary is not None and MAINTENANCE in s.summary.additional_properties
        ]
        assert len(compacted) == 1
        ident, compaction = compacted[0]
        after = [
            s
            for s in catalog.load_table(ident).metadata.snapshots
            if s.parent_snapshot_id == compaction.snapshot_id
        ]
        assert after and marks(after[0]) is not None
        # 4. Maintenance: everything compacted, old snapshots expired, no orphan left; the
        # newest batch's commits are still there for a replay to find.
        newest = {ident: last_commits(catalog.load_table(ident)) for ident in sink_tables(catalog)}
        yaml = tmp_path / "rowbus.yaml"
        yaml.write_text(
            json.dumps({"apply": {"sink_kind": "iceberg", "iceberg": iceberg.model_dump()}})
        )
        capsys.readouterr()
        maintain = ["iceberg", "maintain", "--json", "--orphan-age", "0", "--keep-batches", "1"]
        assert main(["-c", str(yaml), *maintain, "--compact-min-files", "2"]) == 0
        reports = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert {r["table"] for r in reports} == {".".join(i) for i in newest}
        assert all(r["expired"] > 0 for r in reports)  # each table has batches 0 and 1 at least
        for ident in sink_tables(catalog, upstream):  # both forms: compacted into one file
            assert len(list(catalog.load_table(ident).scan().plan_files())) == 1, ident
        assert not any(_stray(catalog).values())
        assert current() == model.rows
        assert _events(catalog, upstream, model.rows) == events  # each once, none lost
        for ident, commits in newest.items():
            assert last_commits(catalog.load_table(ident)) == commits
        # `rowbus status` shows each table's last committed batch.
        settings = services.model_copy(
            update={
                "apply": services.apply.model_copy(
                    update={"sink_kind": "iceberg", "iceberg": iceberg}
                )
            }
        )
        shown = {(t.table, t.job, t.batch, t.step) for t in iceberg_status(settings)}
        assert shown == {(".".join(i), job, c[0].batch, c[0].step) for i, c in newest.items()}
        # `rowbus verify` compares the source with the Iceberg tables: equal, then one row
        # changed upstream is reported with exit status 1.
        with connect(services.sources[0], upstream) as conn, conn.cursor() as cur:
            for name, table_rows in model.rows.items():
                cur.execute(SINK_DDL.format(db=upstream, table=name))
                cur.executemany(
                    f"INSERT INTO `{name}` VALUES (%s, %s, %s, %s, %s)", list(table_rows.values())
                )
        args = argparse.Namespace(
            route=[RouteSettings(match=f"{upstream}.*")],
            schema=[upstream],
            chunk_rows=100,
            json=False,
        )
        assert verify_command(args, settings) == 0
        assert "verify: EQUAL: 2 table(s)" in capsys.readouterr().out
        changed = min(model.rows["t0"])
        with connect(services.sources[0], upstream) as conn, conn.cursor() as cur:
            cur.execute("UPDATE t0 SET qty = qty + 1 WHERE id = %s", (changed,))
        assert verify_command(args, settings) == 1
        out = capsys.readouterr().out
        assert (
            f"different: {changed}" in out and "verify: DIFFERENT: 2 table(s), 1 differing" in out
        )
    finally:
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `state_{job}`")


def _events(catalog: Any, upstream: str, tables: Iterable[str]) -> list[tuple[Any, ...]]:
    """Each change log's events as (binlog file, offset), table by table in commit order
    (the files' order is no order: sorted as a compaction writes them)."""
    events = []
    for name in tables:
        rows = catalog.load_table((upstream, f"{name}_changelog")).scan().to_arrow()
        rows = rows.sort_by([(c, "ascending") for c in ORDER])
        events += [(r["_binlog_file"], r["_binlog_offset"]) for r in rows.to_pylist()]
    return events
