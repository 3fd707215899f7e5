"""The Iceberg spike (issue #34): ``python -m benchmarks.iceberg [--rows N] [--changes N]
[--sink HOST:PORT] [--writers driver,executors] [--sink-only] [--pyiceberg-core off|on|both]``.

Measures, on this machine and in one run, what writing W1-shaped rows costs through pyiceberg
(a SQL catalog in a sqlite file, a local warehouse folder) against a bare pyarrow Parquet write
of the same rows:

- ``parquet``: `pyarrow.parquet.write_table` of the N rows (the floor: encoding Parquet);
- ``append``: the N rows appended to an Iceberg table in one commit (the change-log form's
  write, and a current-state table's inserts);
- ``append, 10 commits``: the same rows in ten commits (a streaming job's shape);
- ``changelog append``: the change log's rows for the upserts and deletes below (op, ts,
  position, txn and the images) appended in one commit;
- ``upsert``: `Table.upsert` of C rows (changed values) by the key, copy-on-write;
- ``overwrite by key``: the same C rows as one `Table.overwrite` whose filter is the rows'
  keys (delete the keys' rows, append the new images: one commit, no read of the old rows);
- ``delete``: `Table.delete` of C/10 keys (copy-on-write: every file holding one is rewritten).

Then the sink's own path for each table form (`sink_phases`: W1 inserts, a W2-like mix) and
maintenance's cost on what they left (compaction, expiry, orphan files); with ``--sink``, the
same events through the MySQL sink in the same run (`mysql_phases`, with the sink server's CPU).
``--writers`` runs the sink's phases once per writer (``apply.iceberg.writers``): ``executors``
starts a local[2] Spark session in this process (one warm-up job first) and reports each
phase's CPU by process, the driver's Python, the JVM and the Python workers (`benchmarks.cpu`).
``--sink-only`` leaves out the spike's bare pyiceberg phases (the Parquet baseline stays).

``--pyiceberg-core both`` runs every phase twice in one process (after a small warm-up run),
with pyiceberg-core (the iceberg-rust bindings, ``pip install 'pyiceberg[pyiceberg-core]'``)
hidden from pyiceberg, then importable. One phase is there for it: ``partitioned append``, the
N rows appended in ten commits to a table partitioned by ``year(t)`` and ``bucket(8, id)``
(32 partitions: W1's ``t`` spans four years). pyiceberg 0.12 calls pyiceberg-core only for
partition transforms on write (bucket, year/month/day/hour, truncate: without it such a
write is refused) and for its DataFusion table provider; nothing of the sink's unpartitioned
tables' writes, reads, deletes or maintenance goes through it, which the "off" pass shows by
running them all with the module unimportable. ``manifests read`` compares pyiceberg's own
manifest reader with pyiceberg-core's Rust one (which pyiceberg does not call) on what
maintenance's orphan search reads.

Rates are rows per wall-clock second and CPU microseconds per row (this process's CPU: pyarrow
writes on its own threads, which count too). Each current-state phase runs on the table the
appends left (N rows in eleven files).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import importlib
import importlib.util
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

from rowbus.workloads import w1_row

W1_NAMES = ("id", "i", "b", "s", "d", "t", "f", "y", "x", "dt")


def _arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("i", pa.int32()),
            pa.field("b", pa.int64()),
            pa.field("s", pa.large_string()),
            pa.field("d", pa.decimal128(12, 2)),
            pa.field("t", pa.timestamp("us")),
            pa.field("f", pa.float64()),
            pa.field("y", pa.int32()),
            pa.field("x", pa.large_string()),
            pa.field("dt", pa.date32()),
        ]
    )


def w1_arrow(first: int, rows: int, seed: int) -> Any:
    """W1 rows `first`..`first+rows-1` as an Arrow table (the values `rowbus.workloads.w1_row`
    makes, the types the Iceberg sink maps them to)."""

    rng = random.Random(seed)
    return _to_arrow([w1_row(rng, k) for k in range(first, first + rows)])


def _to_arrow(data: list[tuple[Any, ...]]) -> Any:
    """Rows of Python values (as the protocol decodes them) → an Arrow table of W1."""
    import pyarrow as pa

    columns = list(zip(*data, strict=True))
    return pa.Table.from_arrays(
        [pa.array(col, type=f.type) for col, f in zip(columns, _arrow_schema(), strict=True)],
        schema=_arrow_schema(),
    )


def changelog_arrow(images: Any, op: str, ts: int) -> Any:
    """The change log's rows for `images` (one event each): op, ts, position, txn id and
    index, and the after image's columns (a delete's before image, for ``d``)."""
    import pyarrow as pa

    n = images.num_rows
    meta = {
        "_op": pa.array([op] * n, pa.large_string()),
        "_ts": pa.array([ts] * n, pa.int64()),
        "_position": pa.array([f"bin.000001:{4 + i * 350}" for i in range(n)], pa.large_string()),
        "_txn": pa.array([f"0-1-{i // 100}" for i in range(n)], pa.large_string()),
        "_txn_index": pa.array([i % 100 for i in range(n)], pa.int32()),
    }
    return pa.Table.from_arrays(
        [*meta.values(), *images.columns], names=[*meta, *images.column_names]
    )


@dataclass
class Figure:
    phase: str
    rows: int
    wall_s: float
    cpu_s: float
    refused: str = ""
    """Why the phase could not run (its figures are then zero)."""

    def line(self) -> str:
        if self.refused:
            return f"| {self.phase} | {self.rows:,} | - | - | refused: {self.refused} |"
        rate = self.rows / self.wall_s if self.wall_s else 0.0
        per_row = self.cpu_s / self.rows * 1e6 if self.rows else 0.0
        return (
            f"| {self.phase} | {self.rows:,} | {self.wall_s:.2f} | {rate:,.0f} | {per_row:,.1f} |"
        )


CORE = "pyiceberg_core"


@contextlib.contextmanager
def pyiceberg_core(on: bool) -> Iterator[None]:
    """pyiceberg-core importable (`on`) or not, for what runs inside: pyiceberg imports it
    lazily at each use, and a None in `sys.modules` makes that import fail as if it were not
    installed."""
    if on and importlib.util.find_spec(CORE) is None:
        raise SystemExit(
            "--pyiceberg-core on: pyiceberg-core is not installed "
            "(pip install 'pyiceberg[pyiceberg-core]', which pins the version pyiceberg supports)"
        )
    hidden = {k: v for k, v in sys.modules.items() if k == CORE or k.startswith(CORE + ".")}
    if not on:
        for name in hidden:
            del sys.modules[name]
        sys.modules[CORE] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if not on:
            del sys.modules[CORE]
            sys.modules.update(hidden)


def partitioned_append(catalog: Any, data: Any, commits: int = 10) -> Figure:
    """The rows appended in `commits` commits to a table partitioned by ``year(t)`` and
    ``bucket(8, id)`` (the transforms pyiceberg 0.12 computes with pyiceberg-core)."""
    from pyiceberg.exceptions import NotInstalledError
    from pyiceberg.transforms import BucketTransform, YearTransform

    name = f"bench.w1_part_{int(time.time() * 1000)}"
    table = catalog.create_table(name, schema=data.schema)
    with table.update_spec() as spec:
        spec.add_field("t", YearTransform(), "t_year")
        spec.add_field("id", BucketTransform(8), "id_bucket")
    step = max(1, data.num_rows // commits)

    def append() -> None:
        for first in range(0, data.num_rows, step):
            table.append(data.slice(first, step))

    phase = f"partitioned append (year(t), bucket(8, id)), {commits} commits"
    try:
        return _timed(phase, data.num_rows, append)
    except NotInstalledError as exc:
        return Figure(phase, data.num_rows, 0.0, 0.0, refused=str(exc))


def _timed(phase: str, rows: int, work: Callable[[], object]) -> Figure:
    cpu, wall = time.process_time(), time.perf_counter()
    work()
    return Figure(phase, rows, time.perf_counter() - wall, time.process_time() - cpu)


def _catalog(folder: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = folder / "warehouse"
    warehouse.mkdir()
    return SqlCatalog(
        "bench", uri=f"sqlite:///{folder / 'catalog.db'}", warehouse=f"file://{warehouse}"
    )


def spike_phases(
    catalog: Any, data: Any, rows: int, changes: int, seed: int, figures: list[Figure]
) -> Any:
    """pyiceberg's own writes of the rows (appends, upsert, overwrite and delete by key) into
    `figures`; the table they leave."""
    from pyiceberg.expressions import In

    once = catalog.create_table("bench.once", schema=data.schema)
    figures.append(_timed("append, 1 commit", rows, lambda: once.append(data)))
    table = catalog.create_table("bench.w1", schema=data.schema)
    step = max(1, rows // 10)

    def ten_commits() -> None:
        for first in range(0, rows, step):
            table.append(data.slice(first, step))

    figures.append(_timed("append, 10 commits", rows, ten_commits))
    figures.append(partitioned_append(catalog, data))
    # C rows spread over the whole key range, so every data file holds some (a streaming
    # job's updates touch old and new rows alike).
    rng = random.Random(seed + 1)
    keys = sorted(rng.sample(range(1, rows + 1), changes))
    changed = w1_arrow(1, changes, seed + 2).set_column(0, data.schema.field(0), _ids(keys))
    gone = keys[: max(1, changes // 10)]
    log_table = catalog.create_table(
        "bench.w1_changelog", schema=changelog_arrow(changed, "u", 0).schema
    )
    events = changelog_arrow(changed, "u", 1)
    figures.append(_timed("changelog append (events)", changes, lambda: log_table.append(events)))
    figures.append(
        _timed("upsert (pyiceberg upsert)", changes, lambda: table.upsert(changed, ["id"]))
    )
    again = w1_arrow(1, changes, seed + 3).set_column(0, data.schema.field(0), _ids(keys))
    figures.append(
        _timed(
            "overwrite by key (delete + append, 1 commit)",
            changes,
            lambda: table.overwrite(again, overwrite_filter=In(term="id", literals=keys)),
        )
    )
    figures.append(
        _timed("delete by key", len(gone), lambda: table.delete(In(term="id", literals=gone)))
    )
    tenth = max(1, changes // 10)

    def small_overwrites() -> None:
        for first in range(0, changes, tenth):
            part = again.slice(first, tenth)
            table.overwrite(part, overwrite_filter=In(term="id", literals=part["id"].to_pylist()))

    figures.append(
        _timed(f"overwrite by key, {changes // tenth} commits", changes, small_overwrites)
    )
    return table


def run(
    rows: int,
    changes: int,
    seed: int = 1,
    sink: Any = None,
    writers: tuple[str, ...] = ("driver",),
    sink_only: bool = False,
) -> list[Figure]:
    """Every phase once, in one folder (deleted after); returns the figures in order."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    folder = Path(tempfile.mkdtemp(prefix="rowbus-iceberg-bench-"))
    try:
        rng = random.Random(seed)
        values = [w1_row(rng, k) for k in range(1, rows + 1)]
        made: list[Any] = []
        figures = [_timed("Python rows → Arrow", rows, lambda: made.append(_to_arrow(values)))]
        data = made[0]
        catalog = _catalog(folder)
        catalog.create_namespace("bench")
        figures.append(
            _timed("parquet (pyarrow, bare)", rows, lambda: pq.write_table(data, folder / "b.pq"))
        )
        if sink_only:
            for writer in writers:
                figures += sink_phases(folder, rows, changes, max(1, changes), seed, writer)
            if sink is not None:
                figures += mysql_phases(sink, rows, changes, step_rows=max(1, changes), seed=seed)
            return figures
        table = spike_phases(catalog, data, rows, changes, seed, figures)
        figures += manifest_phases(table)
        for writer in writers:
            figures += sink_phases(folder, rows, changes, max(1, changes), seed, writer)
        if sink is not None:
            figures += mysql_phases(sink, rows, changes, step_rows=max(1, changes), seed=seed)
        final = table.scan().to_arrow()
        # The last overwrites put the deleted keys back: every key is there once.
        assert final.num_rows == rows, final.num_rows
        assert pc.count_distinct(final["id"]).as_py() == rows
        return figures
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def manifest_phases(table: Any, repeat: int = 20) -> list[Figure]:
    """Every manifest of `table`'s snapshots read for its data files' paths, `repeat` times
    (what maintenance's orphan search does, `iceberg_maintenance.referenced`): by pyiceberg's
    own reader, then by pyiceberg-core's Rust reader (``pyiceberg_core.manifest``, which
    pyiceberg 0.12 does not call). Rows: manifest entries read; both must find the same
    files."""
    io = table.io
    snapshots = table.metadata.snapshots

    def by_pyiceberg(found: set[str]) -> int:
        entries = 0
        seen: set[str] = set()
        for snap in snapshots:
            for manifest in snap.manifests(io):
                if manifest.manifest_path in seen:
                    continue
                seen.add(manifest.manifest_path)
                for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                    found.add(entry.data_file.file_path)
                    entries += 1
        return entries

    def by_core(found: set[str]) -> int:
        core = importlib.import_module(CORE + ".manifest")  # optional: not typed, maybe absent
        read_manifest_entries, read_manifest_list = (
            core.read_manifest_entries,
            core.read_manifest_list,
        )
        entries = 0
        seen: set[str] = set()
        for snap in snapshots:
            listed = read_manifest_list(io.new_input(snap.manifest_list).open().read())
            for manifest in listed.entries():
                if manifest.manifest_path in seen:
                    continue
                seen.add(manifest.manifest_path)
                read = read_manifest_entries(io.new_input(manifest.manifest_path).open().read())
                for entry in read.entries():
                    found.add(entry.data_file.file_path)
                    entries += 1
        return entries

    mine: set[str] = set()
    count = by_pyiceberg(mine)
    figures = [
        _timed(
            f"manifests read by pyiceberg (entries, {repeat} times)",
            count * repeat,
            lambda: [by_pyiceberg(set()) for _ in range(repeat)],
        )
    ]
    phase = f"manifests read by pyiceberg-core, Rust (entries, {repeat} times)"
    try:
        importlib.import_module(CORE + ".manifest")
    except ImportError:
        return [*figures, Figure(phase, count * repeat, 0.0, 0.0, refused="not importable")]
    theirs: set[str] = set()
    assert by_core(theirs) == count
    assert theirs == mine
    return [
        *figures,
        _timed(phase, count * repeat, lambda: [by_core(set()) for _ in range(repeat)]),
    ]


def sink_events(rows: int, changes: int, seed: int) -> tuple[Any, list[Any], list[Any]]:
    """(the W1 table schema, W1 inserts, a W2-like mix on the same table: single-row
    transactions, 60% updates, 20% inserts, 20% deletes of keys spread over the table), as
    decoded protocol events in envelopes."""
    from benchmarks.workloads import w1_events, w1_table
    from rowbus.protocol.events import Op, RowChange, TxnRef
    from rowbus.spark_apply.planner import Envelope

    table = w1_table()
    inserts = [Envelope("w1", 0, i, e) for i, e in enumerate(w1_events("db1", rows))]
    rng = random.Random(seed + 4)
    mix: list[Envelope] = []
    live = list(range(1, rows + 1))
    fresh = w1_events("db1", changes, first_key=rows + 1, seed=seed + 5)
    for i in range(changes):
        pick = rng.random()
        ref = TxnRef(f"0-1-{rows + i}", 0, 1)
        if pick < 0.2:
            e = fresh[i]
            live.append(int(e.after[0]))  # type: ignore[index, arg-type]
        else:
            key = live.pop(rng.randrange(len(live)))
            old = (key, *inserts[0].event.after[1:])  # type: ignore[union-attr, index]
            if pick < 0.8:
                new = (key, rng.randint(0, 10**6), *old[2:])
                e = RowChange(
                    **{
                        **_fields(fresh[i]),
                        "op": Op.UPDATE,
                        "before": old,
                        "after": new,
                        "txn": ref,
                    }
                )
                live.append(key)
            else:
                e = RowChange(
                    **{
                        **_fields(fresh[i]),
                        "op": Op.DELETE,
                        "before": old,
                        "after": None,
                        "txn": ref,
                    }
                )
        mix.append(Envelope("w1", 0, rows + i, e))
    return table, inserts, mix


def sink_phases(
    folder: Path, rows: int, changes: int, step_rows: int, seed: int, writer: str = "driver"
) -> list[Figure]:
    """The sink's own write path (`IcebergTables.write_step`: fold per key, Arrow, one commit
    per table and step) for each table form: `sink_events`' W1 inserts in steps of
    `step_rows`, then its W2-like mix; then maintenance (`iceberg_maintenance`: compaction of
    the current state, expiry down to the last batch, orphan files) on what they left. With
    `writer` ``executors`` the data files are written by Spark tasks (`_spark_session`)."""
    from rowbus.routing.routes import Router
    from rowbus.spark_apply.iceberg_maintenance import Maintenance
    from rowbus.spark_apply.iceberg_sink import IcebergTables
    from rowbus.spark_apply.settings import IcebergMaintenanceSettings, IcebergSettings

    table, inserts, mix = sink_events(rows, changes, seed)
    schemas = {table.schema_id: table}
    figures = []
    forms: tuple[Literal["current", "changelog"], ...] = ("current", "changelog")
    spark = _spark_session() if writer == "executors" else None
    for form in forms:
        settings = IcebergSettings(
            catalog={
                "type": "sql",
                "uri": f"sqlite:///{folder}/{writer}-{form}.db",
                "warehouse": str(folder / f"{writer}-{form}"),
            },
            namespace="bench",
            forms=(form,),
            writers=writer,
        )
        tables = IcebergTables(settings, Router((), "identity"), schemas.get, "bench").start()
        for phase, events, first in (("W1 inserts", inserts, 0), ("W2-like mix", mix, 10**6)):
            figures.append(
                _by_process(
                    f"sink, {form}, {writer} writes: {phase}, {step_rows:,}-row steps",
                    len(events),
                    partial(_write, tables, events, first, step_rows),
                )
            )
        options = IcebergMaintenanceSettings(compact_min_files=2, keep_batches=1, orphan_age_s=0)
        done: list[Any] = []
        figure = _timed(
            f"maintenance, {form}",
            rows,
            partial(_maintain, Maintenance(tables._catalog, options), done),
        )
        report = done[0]
        files = f"{report.compacted[0]}→{report.compacted[1]} files" if report.compacted else ""
        figures.append(
            dataclasses.replace(
                figure,
                phase=f"{figure.phase} ({files}{', ' if files else ''}{report.expired} snapshots "
                f"expired, {report.orphans} files removed)",
            )
        )
        if form == "current":  # the figures are of rows really written
            held = tables._catalog.load_table(("bench", table.table)).scan().to_arrow()
            assert held.num_rows == _final_rows(rows, mix), held.num_rows
        tables.close()
    if spark is not None:
        spark.stop()
    return figures


def _spark_session() -> Any:
    """A local[2] session on loopback, as the job's (`job.local_bind`), its Python workers
    started, and their imports done, by one warm-up job (not a step's cost)."""
    import os
    import sys

    from pyspark.sql import SparkSession

    from rowbus.spark_apply.job import local_bind

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master("local[2]").appName("rowbus-bench-iceberg")
    for key, value in {
        **local_bind("local[2]"),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # Each worker imports what a write task needs once: not a step's cost either.
    warm = spark.sparkContext.parallelize(range(2), 2)
    warm.map(lambda x: bool(__import__("rowbus.spark_apply.iceberg_sink")) and x).collect()
    return spark


def _by_process(phase: str, rows: int, work: Callable[[], object]) -> Figure:
    """`_timed`, the phase named with its CPU per row by process (driver Python, JVM, Python
    workers: `benchmarks.cpu`)."""
    from benchmarks.cpu import CpuSample

    before = CpuSample.take(0, 0)
    figure = _timed(phase, rows, work)
    spent = CpuSample.take(0, 0).minus(before).seconds
    split = " + ".join(
        f"{kind} {spent[kind] / rows * 1e6:.1f}"
        for kind in ("driver Python", "JVM", "Python workers")
    )
    total = sum(spent[k] for k in ("driver Python", "JVM", "Python workers")) / rows * 1e6
    return dataclasses.replace(figure, phase=f"{phase} ({split} = {total:.1f} µs/row)")


def _final_rows(rows: int, mix: list[Any]) -> int:
    """The rows W1's inserts and the mix leave in a current-state table."""
    from rowbus.protocol.events import Op

    ops = [env.event.op for env in mix]
    return rows + ops.count(Op.INSERT) - ops.count(Op.DELETE)


def _maintain(maintenance: Any, reports: list[Any]) -> None:
    reports.extend(maintenance.run())


def mysql_phases(sink: Any, rows: int, changes: int, step_rows: int, seed: int) -> list[Figure]:
    """`sink_events` through the MySQL sink (`MySQLSink.apply`: collapse, SQL, the checkpoint
    in the same transaction), in the same steps as the Iceberg sink's phases, into a new
    database of the server `sink` (a `MySQLConnection`; dropped after). CPU per row by
    process: this one's and the sink server's (`benchmarks.cpu`)."""
    from benchmarks.apply import W1_SINK_DDL
    from benchmarks.cpu import CpuSample
    from rowbus.clients import mysql
    from rowbus.routing.routes import Router, RouteSettings
    from rowbus.spark_apply.planner import Plan, PlannerState, Step
    from rowbus.spark_apply.sink import MySQLSink

    table, inserts, mix = sink_events(rows, changes, seed)
    db = f"bench_ice_{int(time.time())}"
    with mysql.connect(sink, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(W1_SINK_DDL.format(name=f"`{db}`.`{table.table}`"))
    router = Router([RouteSettings(match=f"{table.qualified}", target=f"{db}.{{table}}")], "skip")
    figures = []
    try:
        with MySQLSink(sink, "bench", f"{db}_state", router, {table.schema_id: table}.get) as out:
            batch = [0]

            def write(events: list[Any]) -> None:
                for start in range(0, len(events), step_rows):
                    step = Step(rows=tuple(events[start : start + step_rows]))
                    out.apply(batch[0], Plan(steps=(step,), state=PlannerState(), bound=0))
                    batch[0] += 1

            for phase, events in (("W1 inserts", inserts), ("W2-like mix", mix)):
                before = CpuSample.take(sink.port, 0)
                figure = _timed(
                    f"MySQL sink: {phase}, {step_rows:,}-row steps",
                    len(events),
                    partial(write, events),
                )
                spent = CpuSample.take(sink.port, 0).minus(before).seconds
                server = spent["sink"] / len(events) * 1e6
                figures.append(
                    dataclasses.replace(
                        figure, phase=f"{figure.phase} (+ server {server:.1f} µs/row)"
                    )
                )
        with mysql.connect(sink, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM `{db}`.`{table.table}`")
            count = cur.fetchone()
        assert count is not None
        assert count[0] == _final_rows(rows, mix), count
    finally:
        with mysql.connect(sink, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
            cur.execute(f"DROP DATABASE IF EXISTS `{db}_state`")
    return figures


def _write(tables: Any, events: list[Any], first_batch: int, step_rows: int) -> None:
    """`events` as steps of `step_rows`, one batch each."""
    for n, start in enumerate(range(0, len(events), step_rows)):
        tables.write_step(first_batch + n, 0, events[start : start + step_rows])


def _fields(event: Any) -> dict[str, Any]:
    import dataclasses

    return {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}


def _ids(keys: list[int]) -> Any:
    import pyarrow as pa

    return pa.array(keys, pa.int64())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--changes", type=int, default=10_000)
    parser.add_argument(
        "--pyiceberg-core",
        choices=("off", "on", "both"),
        default="off",
        help="run the phases with pyiceberg-core hidden from pyiceberg, importable, or both "
        "in one run (off first)",
    )
    parser.add_argument(
        "--sink",
        metavar="HOST:PORT",
        help="also write the same rows through the MySQL sink into this server (user and "
        "password from ROWBUS_BENCH_SINK_USER / _PASSWORD, default rowbus/rowbus)",
    )
    parser.add_argument(
        "--writers",
        default="driver",
        help="comma-separated apply.iceberg.writers to run the sink's phases with: driver, "
        "executors (a local[2] Spark session in this process)",
    )
    parser.add_argument(
        "--sink-only",
        action="store_true",
        help="only the Parquet baseline and the sinks' phases, not the spike's pyiceberg ones",
    )
    args = parser.parse_args()
    writers = tuple(w.strip() for w in args.writers.split(",") if w.strip())
    if not writers or any(w not in ("driver", "executors") for w in writers):
        parser.error(f"--writers {args.writers!r}: expected driver, executors or both")
    sink = None
    if args.sink:
        import os

        from rowbus.clients.settings import MySQLConnection

        host, _, port = args.sink.rpartition(":")
        sink = MySQLConnection(
            host=host,
            port=int(port),
            user=os.environ.get("ROWBUS_BENCH_SINK_USER", "rowbus"),
            password=os.environ.get("ROWBUS_BENCH_SINK_PASSWORD", "rowbus"),
        )
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    states = {"off": [False], "on": [True], "both": [False, True]}[args.pyiceberg_core]
    figures = []
    if len(states) > 1:
        run(min(args.rows, 2_000), min(args.changes, 200))  # warm-up: the first pass pays it
    for on in states:
        with pyiceberg_core(on):
            label = f"[pyiceberg-core {'on' if on else 'off'}] "
            figures += [
                dataclasses.replace(f, phase=label + f.phase)
                for f in run(
                    args.rows, args.changes, sink=sink, writers=writers, sink_only=args.sink_only
                )
            ]
    print(f"Iceberg spike, {args.rows:,} W1 rows, {args.changes:,} changed ({started})")
    print("| phase | rows | wall s | rows/s | CPU µs/row |")
    print("| --- | --- | --- | --- | --- |")
    for f in figures:
        print(f.line())


if __name__ == "__main__":
    main()
