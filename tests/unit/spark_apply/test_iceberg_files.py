"""Executor-written Iceberg data files (`iceberg_files`), the task's side run in this process:
the slices a table's rows are cut into, the files a task writes and their names, the
`DataFile`s committed by the driver's fast append, a zero date refused through the task."""

from __future__ import annotations

import datetime as dt
import pickle
from pathlib import Path

from pyspark.cloudpickle import dumps

from rowbus.protocol.events import ColumnSchema, TableSchema
from rowbus.protocol.values import ZeroDate
from rowbus.routing.routes import Router
from rowbus.spark_apply.iceberg_files import PREFIX, FileWork, _run, slices
from rowbus.spark_apply.iceberg_schema import layout
from rowbus.spark_apply.iceberg_sink import IcebergTables, _append_files, _images_arrow
from rowbus.spark_apply.settings import IcebergSettings


def test_slices_are_contiguous_in_order_and_never_empty() -> None:
    assert slices(list(range(7)), 2) == [[0, 1, 2, 3], [4, 5, 6]]
    assert slices(list(range(3)), 8) == [[0], [1], [2]]  # no empty task
    assert slices([], 2) == []
    for rows, parts in ((10, 3), (1, 1), (100, 7)):
        cut = slices(list(range(rows)), parts)
        assert [r for piece in cut for r in piece] == list(range(rows))
        assert len(cut) == min(rows, parts)


def test_tasks_write_named_files_the_driver_commits_in_one_append(tmp_path: Path) -> None:
    """Two tasks' files of one table: distinct names carrying job/batch/step/task/attempt
    (a second attempt of the same task never overwrites the first's file), the rows back
    through the catalog after one fast append, and nothing of them visible before it."""
    schema = TableSchema(
        "db",
        "t",
        (ColumnSchema("id", "int", nullable=False), ColumnSchema("d", "date")),
        ("id",),
    )
    settings = IcebergSettings(
        catalog={"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": str(tmp_path)},
        forms=("current",),
        writers="executors",
    )
    router = Router((), "identity")
    tables = IcebergTables(settings, router, {schema.schema_id: schema}.get, "job").start()
    lay = layout(router.projection(schema), schema, False)  # type: ignore[arg-type]
    table = tables._table(lay, changelog=False)
    rows = [(k, dt.date(2024, 1, k)) for k in range(1, 6)]
    works = [
        FileWork(
            table.metadata.model_dump_json(),
            dict(table.io.properties),
            "job-b3-s1",
            _images_arrow,
            (lay.kinds, lay.converters, lay.names),
            piece,
        )
        for piece in slices(rows, 2)
    ]
    files = works[0].write(0, 0) + works[1].write(1, 0) + works[1].write(1, 1)
    names = [Path(f.file_path).name for f in files]
    assert [n.split("-")[:6] for n in names] == [
        [PREFIX.rstrip("-"), "job", "b3", "s1", f"t{t}", f"a{a}"]
        for t, a in ((0, 0), (1, 0), (1, 1))
    ]
    assert len(set(names)) == 3 and all(
        Path(f.file_path.removeprefix("file://")).is_file() for f in files
    )
    assert [f.record_count for f in files] == [3, 2, 2]
    assert table.current_snapshot() is None  # written is not committed
    with table.transaction() as tx:
        _append_files(tx, files[:2], {"rowbus.job": "job"})
    held = tables._catalog.load_table(("db", "t")).scan().to_arrow().to_pylist()
    assert sorted((r["id"], r["d"]) for r in held) == rows


def test_a_zero_date_in_a_task_comes_back_as_its_one_line(tmp_path: Path) -> None:
    schema = TableSchema(
        "db", "z", (ColumnSchema("id", "int", nullable=False), ColumnSchema("d", "date")), ("id",)
    )
    settings = IcebergSettings(
        catalog={"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": str(tmp_path)},
        forms=("current",),
    )
    router = Router((), "identity")
    tables = IcebergTables(settings, router, {schema.schema_id: schema}.get, "job").start()
    lay = layout(router.projection(schema), schema, False)  # type: ignore[arg-type]
    table = tables._table(lay, changelog=False)
    work = FileWork(
        table.metadata.model_dump_json(),
        dict(table.io.properties),
        "job-b0-s0",
        _images_arrow,
        (lay.kinds, lay.converters, lay.names),
    )
    blob = (4, dumps(work), pickle.dumps([(1, ZeroDate("0000-00-00"))]))  # type: ignore[no-untyped-call]
    [(index, result)] = list(_run([blob]))
    assert index == 4 and isinstance(result, str)
    assert "db.z.d holds the zero date '0000-00-00'" in result
    assert not list(Path(tmp_path).rglob(f"{PREFIX}*"))
