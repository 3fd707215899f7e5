"""`rowbus demo`'s Iceberg part: two W2 tables of the first source into Iceberg, verified, queried.

Once the MySQL run is verified equal and its processes are stopped, a second apply job reads
the first source's topic from its beginning under its own job name and Spark checkpoint, with
``apply.sink_kind: iceberg`` and both table forms (current state and change log), and stops
when it has applied what the topic holds (``available_now``). Only two of that source's W2
tables are routed (`TABLES`; the rest is skipped): enough to show both forms, and it keeps
the part's cost near one more Spark start-up (measured: with all nine tables of the schema the
job's writes took 50 s of a loaded machine, 39 steps of 18 commits). `rowbus verify` then
compares the current-state tables with the source row by row, and a pyiceberg scan of the
change logs prints the events per operation and the first table's last changes. The catalog
is a sqlite file and a warehouse folder under the demo's home, emptied at the start of each
run (each run has new topics: old tables would not match them).

Lifecycle: ``IcebergDemo(...)`` does no I/O; `run()` writes the part's configuration, runs the
job to its end (bounded by ``job_timeout``), verifies and queries; the job is launched through
the demo's own launcher, so the demo stops it when it is interrupted.
"""

from __future__ import annotations

import datetime as dt
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from rowbus.config import Settings, load_settings
from rowbus.exceptions import LocalStackError
from rowbus.local.procs import exit_description, exit_status
from rowbus.verify import TableDiff, verify

JOB = "rowbus-demo-iceberg"
TABLES = ("t0", "t1")
"""The W2 tables routed into Iceberg: two are enough to show both forms, and the job commits
once per table and form in each step (a DDL of any table in the topic cuts a step)."""
LAST_CHANGES = 5


@dataclass(frozen=True, slots=True)
class IcebergResult:
    """What the part did: the job's wall time, verify's report, events per operation in the
    change logs, the configuration file it wrote."""

    job_s: float
    diffs: list[TableDiff]
    ops: dict[str, int]
    config: Path

    @property
    def equal(self) -> bool:
        return bool(self.diffs) and all(d.equal for d in self.diffs)


class IcebergDemo:
    """See the module docstring. `launch(name, args)` starts a process the demo supervises
    and returns its pid; `say` prints a progress line."""

    def __init__(
        self,
        config: Path,
        home: Path,
        launch: Callable[[str, list[str], dict[str, str]], int],
        say: Callable[[str], None],
        out: TextIO,
        job_timeout: float = 300.0,
    ) -> None:
        self._out = out
        self._demo_config = config
        self._home = home
        self._launch = launch
        self._say = say
        self._job_timeout = job_timeout

    @property
    def config_path(self) -> Path:
        return self._home / "rowbus-demo-iceberg.yaml"

    def run(self, python: str) -> IcebergResult:
        settings = self._settings()
        schema = self.schema(settings)
        from rowbus.jobs import job_config, write_job

        job = self._home / "apply-iceberg-job.json"
        secrets = write_job(job, job_config(settings, available_now=True))
        names = ", ".join(f"{schema}.{t}" for t in TABLES)
        self._say(f"Iceberg: a second apply job (available-now) writes {names} into Iceberg")
        began = time.monotonic()
        pid = self._launch(
            "apply-iceberg", [python, "-m", "rowbus.spark_apply", "--config", str(job)], secrets
        )
        status = exit_status(pid, self._job_timeout)
        if status != 0:
            how = (
                f"was still running after {self._job_timeout:.0f}s"
                if status is None
                else exit_description(pid)
            )
            log = self._home / "apply-iceberg.log"
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            raise LocalStackError(f"the Iceberg apply job {how}; {log}: {' | '.join(tail)}")
        job_s = time.monotonic() - began
        diffs = verify(settings, schemas=[schema])
        ops, last = changes(settings, schema)
        self._say(
            f"Iceberg job done in {job_s:.1f}s; verify: "
            f"{sum(d.differences for d in diffs)} differences across {len(diffs)} tables"
        )
        print(query_lines(schema, ops, last), file=self._out, flush=True)
        return IcebergResult(job_s, diffs, ops, self.config_path)

    def _settings(self) -> Settings:
        """The demo's configuration with the Iceberg job's apply section, written beside it."""
        data = yaml.safe_load(self._demo_config.read_text())
        first = data["sources"][0]["name"]
        folder = (self._home / "iceberg").resolve()
        shutil.rmtree(folder, ignore_errors=True)
        stamp = time.strftime("%Y%m%d%H%M%S")
        data["apply"] = {
            **data["apply"],
            "job": JOB,
            "sources": [first],
            "routes": [{"match": f"demo_w2_{first}.{t}"} for t in TABLES],
            "unrouted": "skip",
            "sink_kind": "iceberg",
            "checkpoint_location": str(self._home / f"spark-checkpoint-iceberg-{stamp}"),
            "iceberg": {
                "catalog": {
                    "type": "sql",
                    "uri": f"sqlite:///{folder / 'catalog.db'}",
                    "warehouse": str(folder / "warehouse"),
                },
                "forms": ["current", "changelog"],
            },
        }
        path = self.config_path
        path.touch(mode=0o600)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return load_settings(path)

    @staticmethod
    def schema(settings: Settings) -> str:
        return f"demo_w2_{settings.apply.sources[0]}"


def changes(settings: Settings, schema: str) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """From the change logs of `schema`'s `TABLES` (a pyiceberg scan of each): the events per
    operation over all of them, and the last `LAST_CHANGES` events of the first, newest
    first."""
    from rowbus.spark_apply.iceberg_catalog import open_catalog

    iceberg = settings.apply.iceberg
    catalog = open_catalog(iceberg)
    namespace = iceberg.namespace or schema
    suffix = iceberg.changelog_suffix
    ops: dict[str, int] = {}
    last: list[dict[str, Any]] = []
    for index, name in enumerate(t + suffix for t in TABLES):
        rows = catalog.load_table((namespace, name)).scan().to_arrow()
        for row in rows.group_by("_op").aggregate([("_op", "count")]).to_pylist():
            ops[str(row["_op"])] = ops.get(str(row["_op"]), 0) + int(row["_op_count"])
        if index == 0:
            order = [("_ts", "descending"), ("_txn_index", "descending")]
            last = rows.sort_by(order).slice(0, LAST_CHANGES).to_pylist()
            for row in last:
                row["_table"] = f"{namespace}.{name.removesuffix(suffix)}"
    return ops, last


def query_lines(schema: str, ops: dict[str, int], last: list[dict[str, Any]]) -> str:
    """The query's answer in a few lines: events per operation, then one table's newest
    changes (operation, the hybrid clock's time to the second, GTID, key and quantity)."""
    counts = ", ".join(f"{op} {n:,}" for op, n in sorted(ops.items()))
    tables = ", ".join(TABLES)
    lines = [f"  Iceberg query, change logs of {schema}.{{{tables}}} by _op: {counts}"]
    if last:
        lines.append(f"  last {len(last)} changes of {last[0]['_table']} (newest first):")
    for row in last:
        image = "before" if row["_op"] == "delete" else "after"
        at = dt.datetime.fromtimestamp((row["_ts"] >> 16) / 1000, dt.UTC).strftime("%H:%M:%S")
        lines.append(
            f"    {row['_op']:<6} {at} gtid {row['_gtid'] or '-':<10} "
            f"id={row[f'{image}_id']} qty={row[f'{image}_qty']}"
        )
    return "\n".join(lines)
