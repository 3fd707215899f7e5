"""Iceberg maintenance (`iceberg_maintenance`) on a local SQL catalog (a sqlite file): the
compaction keeps every row (a change log's once each, in commit order) and loses no commit that
races it, the expiry keeps the commits a replay needs, orphan files are found and removed only
past their age and never another table's, a dropped table's files go with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from rowbus.spark_apply.iceberg_catalog import BATCH, JOB, STEP, last_commits, open_catalog
from rowbus.spark_apply.iceberg_maintenance import (
    MAINTENANCE,
    Maintenance,
    expirable,
    orphans,
    referenced,
)
from rowbus.spark_apply.settings import IcebergMaintenanceSettings, IcebergSettings

IDENT = ("db", "t")


def _catalog(tmp_path: Path) -> Any:
    return open_catalog(
        IcebergSettings(
            catalog={
                "type": "sql",
                "uri": f"sqlite:///{tmp_path}/catalog.db",
                "warehouse": str(tmp_path / "wh"),
            }
        )
    )


def _table(catalog: Any) -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    catalog.create_namespace_if_not_exists("db")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "v", StringType()),
        identifier_field_ids=[1],
    )
    return catalog.create_table(IDENT, schema=schema)


def _rows(ids: range, v: str = "x") -> pa.Table:
    return pa.table(
        {"id": pa.array(list(ids), pa.int64()), "v": pa.array([v] * len(ids), pa.large_string())},
        schema=pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.large_string())]),
    )


def _commit(table: Any, batch: int, ids: range) -> None:
    table.append(_rows(ids), snapshot_properties={JOB: "j", BATCH: str(batch), STEP: "0"})


def _ids(catalog: Any) -> list[int]:
    return sorted(catalog.load_table(IDENT).scan().to_arrow().column("id").to_pylist())


def test_compaction_rewrites_small_files_into_one_and_keeps_every_row(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path)
    table = _table(catalog)
    for batch in range(4):
        _commit(table, batch, range(batch * 10, batch * 10 + 10))
    maintenance = Maintenance(catalog, IcebergMaintenanceSettings(compact_min_files=3))
    assert maintenance.compact(IDENT) == (4, 1)
    assert _ids(catalog) == list(range(40))
    latest = catalog.load_table(IDENT)
    assert len(list(latest.scan().plan_files())) == 1
    assert latest.current_snapshot().summary.additional_properties[MAINTENANCE] == "compact"
    # The job's last commit is still what the table says (compactions carry no step).
    assert [(c.job, c.batch) for c in last_commits(latest)] == [("j", 3)]
    assert maintenance.compact(IDENT) is None  # one file: below compact_min_files


def test_a_commit_racing_the_compaction_makes_it_begin_again_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    """The job's commit lands while the compaction has read the table and written its file:
    the compaction's commit is refused, it begins again, and both writes are in the table."""
    catalog = _catalog(tmp_path)
    table = _table(catalog)
    for batch in range(3):
        _commit(table, batch, range(batch * 10, batch * 10 + 10))
    job = _catalog(tmp_path)  # another client: the job
    commit = catalog.commit_table
    raced: list[int] = []

    def commit_after_the_job(tbl: Any, requirements: Any, updates: Any) -> Any:
        if not raced:
            raced.append(1)
            _commit(job.load_table(IDENT), 3, range(100, 105))
        return commit(tbl, requirements, updates)

    catalog.commit_table = commit_after_the_job
    assert Maintenance(catalog).compact(IDENT, min_files=2) == (4, 1)
    assert raced
    assert _ids(catalog) == [*range(30), *range(100, 105)]


def test_expiry_keeps_the_newest_batches_commits_and_orphans_past_their_age_go(
    tmp_path: Path,
) -> None:
    catalog = _catalog(tmp_path)
    table = _table(catalog)
    for batch in range(5):
        _commit(table, batch, range(batch, batch + 1))
    Maintenance(catalog).compact(IDENT, min_files=2)
    table = catalog.load_table(IDENT)
    snapshots = table.metadata.snapshots
    # Batches 3 and 4 (and the compaction after them) stay; batches 0-2 go.
    assert expirable(table, 2) == [s.snapshot_id for s in snapshots[:3]]
    clock = [1e12]  # far in the future: every file is old enough
    maintenance = Maintenance(catalog, IcebergMaintenanceSettings(keep_batches=2), lambda: clock[0])
    stray = Path(table.location().removeprefix("file://")) / "data" / "stray.parquet"
    stray.write_bytes(b"a writer's file before its commit")
    lists = {Path(s.manifest_list.removeprefix("file://")) for s in snapshots[:3]}
    assert maintenance.expire(IDENT) == 3
    table = catalog.load_table(IDENT)
    assert [m[1] for s in table.metadata.snapshots if (m := _mark(s))] == [3, 4]
    found = orphans(table, clock[0])
    # The stray file and the expired snapshots' manifest lists; every data file is still
    # referenced (batch 4's snapshot holds the files of batches 0-4).
    assert found is not None
    assert {p for p in found if p.suffix == ".parquet"} == {stray}
    assert lists <= set(found)
    assert orphans(table, 0.0) == []  # nothing is old enough: nothing goes
    assert maintenance.remove_orphans(IDENT) == len(found)
    table = catalog.load_table(IDENT)
    assert orphans(table, clock[0]) == []
    assert _ids(catalog) == list(range(5))
    # Each snapshot kept still reads (its files are all there).
    for snap in table.metadata.snapshots:
        assert table.scan(snapshot_id=snap.snapshot_id).to_arrow().num_rows > 0


def _changelog(catalog: Any) -> Any:
    """A change-log table as the sink makes it: its own columns, then the images (no
    identifier fields)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, LongType, NestedField, StringType

    from rowbus.spark_apply.iceberg_schema import META

    kinds = {"string": StringType(), "long": LongType(), "int": IntegerType()}
    fields = [NestedField(i, n, kinds[t]) for i, (n, t) in enumerate(META, 1)]
    fields += [NestedField(len(META) + 1, "before_id", LongType())]
    fields += [NestedField(len(META) + 2, "after_id", LongType())]
    catalog.create_namespace_if_not_exists("db")
    return catalog.create_table(("db", "t_changelog"), schema=Schema(*fields))


def _events(table: Any, rows: list[tuple[int, str, int, int]], batch: int) -> None:
    """Append change-log rows (ts, source, binlog offset, txn index) in one commit of `batch`;
    each event's `after_id` names it: ts * 10 + index."""
    from rowbus.spark_apply.iceberg_sink import _arrow

    n = len(rows)
    arrays = [
        pa.array(["insert"] * n, pa.large_string()),
        pa.array([r[0] for r in rows], pa.int64()),
        pa.array([r[1] for r in rows], pa.large_string()),
        pa.array(["bin.000001"] * n, pa.large_string()),
        pa.array([r[2] for r in rows], pa.int64()),
        pa.array([f"0-1-{r[0]}" for r in rows], pa.large_string()),
        pa.array([f"0-1-{r[0]}" for r in rows], pa.large_string()),
        pa.array([r[3] for r in rows], pa.int32()),
        pa.array(["topic"] * n, pa.large_string()),
        pa.array([0] * n, pa.int32()),
        pa.array(list(range(n)), pa.int64()),
        pa.array([r[0] * 10 + r[3] for r in rows], pa.int64()),
    ]
    names = [f.name for f in table.schema().fields if f.name != "before_id"]
    table.append(
        _arrow(table, names, arrays),
        snapshot_properties={JOB: "j", BATCH: str(batch), STEP: "0"},
    )


def test_the_change_log_is_compacted_with_every_event_once_in_commit_order(
    tmp_path: Path,
) -> None:
    """Four steps' files become one holding each event once, ordered by the order columns
    (ts, source, position, index in the transaction), whatever order the scan read the
    files in; the steps' marks stay, so a replay still finds what it committed."""
    catalog = _catalog(tmp_path)
    table = _changelog(catalog)
    steps = [
        [(ts, "source1", ts * 100 + i, i) for ts in range(b * 3, b * 3 + 3) for i in range(2)]
        for b in range(4)
    ]
    steps[2].append((7, "source0", 1, 0))  # same ts, another source: sorts before source1's
    for batch, rows in enumerate(steps):
        _events(table, rows, batch)
    before = catalog.load_table(table.name()).scan().to_arrow()
    ident = ("db", "t_changelog")
    maintenance = Maintenance(catalog, IcebergMaintenanceSettings(compact_min_files=3))
    assert maintenance.compact(ident) == (4, 1)
    after = catalog.load_table(ident)
    assert len(list(after.scan().plan_files())) == 1
    rows = after.scan().to_arrow()
    assert sorted(map(str, rows.to_pylist())) == sorted(map(str, before.to_pylist()))
    expected = sorted(r for step in steps for r in step)
    got = list(
        zip(
            rows["_ts"].to_pylist(),
            rows["_source"].to_pylist(),
            rows["_binlog_offset"].to_pylist(),
            rows["_txn_index"].to_pylist(),
            strict=True,
        )
    )
    assert got == [(t, s, o, i) for t, s, o, i in expected]
    assert rows["after_id"].to_pylist() == [t * 10 + i for t, _, _, i in expected]
    assert [(c.job, c.batch) for c in last_commits(after)] == [("j", 3)]


def test_a_change_log_compaction_leaves_its_large_files_alone(tmp_path: Path) -> None:
    """A change log grows without end: a compaction rewrites only files under half the target
    file size, so what it reads stays bounded and a compacted file is not read again."""
    catalog = _catalog(tmp_path)
    table = _changelog(catalog)
    _events(table, [(ts, "source1", ts, 0) for ts in range(2000)], 0)  # one large file
    for batch in range(1, 4):
        _events(table, [(2000 + batch, "source1", 1, 0)], batch)  # small ones
    files = {t.file.file_path: t.file.file_size_in_bytes for t in table.scan().plan_files()}
    large = max(files, key=lambda f: files[f])
    with table.transaction() as tx:  # the large file is at least half the target: left alone
        tx.set_properties({"write.target-file-size-bytes": str(files[large] * 2 - 1)})
    maintenance = Maintenance(catalog, IcebergMaintenanceSettings(compact_min_files=3))
    ident = ("db", "t_changelog")
    assert maintenance.compact(ident) == (4, 2)  # the 3 small ones into 1
    after = [t.file.file_path for t in catalog.load_table(ident).scan().plan_files()]
    assert large in after and len(after) == 2
    assert catalog.load_table(ident).scan().to_arrow().num_rows == 2003
    assert maintenance.compact(ident) is None  # one small file left: below compact_min_files


def test_a_dropped_table_s_files_are_deleted_with_it(tmp_path: Path) -> None:
    """The sink's DROP TABLE (`IcebergTables.drop`) purges the current-state table: no file
    its metadata named is left in the warehouse; another table keeps every file."""
    from rowbus.routing.routes import Router, Target
    from rowbus.spark_apply.iceberg_sink import IcebergTables

    settings = IcebergSettings(
        catalog={
            "type": "sql",
            "uri": f"sqlite:///{tmp_path}/catalog.db",
            "warehouse": str(tmp_path / "wh"),
        }
    )
    tables = IcebergTables(settings, Router((), "identity"), lambda _: None, "j").start()
    catalog = tables._catalog
    table = _table(catalog)
    for batch in range(3):
        _commit(table, batch, range(batch * 10, batch * 10 + 10))
    other = _changelog(catalog)
    _events(other, [(1, "source1", 4, 0)], 0)
    files = referenced(catalog.load_table(IDENT))
    kept = referenced(catalog.load_table(("db", "t_changelog")))
    assert len([f for f in files if f.endswith(".parquet")]) == 3
    tables.drop(Target("db", "t"))
    assert not catalog.table_exists(IDENT)
    assert [f for f in files if Path(f).exists()] == []
    assert all(Path(f).exists() for f in kept)
    tables.drop(Target("db", "t"))  # a replayed DROP finds no table: nothing to do


def test_orphan_removal_keeps_the_files_of_a_table_renamed_out_of_the_folder(
    tmp_path: Path,
) -> None:
    """A SQL catalog keeps a renamed table's files where they were, and a new table of the old
    name gets that folder: the new table's orphan removal must not take the renamed one's."""
    catalog = _catalog(tmp_path)
    _commit(_table(catalog), 0, range(10))
    catalog.rename_table(IDENT, ("db", "u"))
    table = _table(catalog)
    assert table.location() == catalog.load_table(("db", "u")).location()
    _commit(table, 1, range(100, 103))
    old = Maintenance(catalog, IcebergMaintenanceSettings(orphan_age_s=0), lambda: 1e12)
    assert old.remove_orphans(IDENT) == 0
    renamed = catalog.load_table(("db", "u"))
    assert sorted(renamed.scan().to_arrow().column("id").to_pylist()) == list(range(10))
    assert _ids(catalog) == [100, 101, 102]


def _mark(snapshot: Any) -> tuple[str, int, int, bool] | None:
    from rowbus.spark_apply.iceberg_catalog import marks

    return marks(snapshot)


@pytest.mark.parametrize("spec", ["kill:1", "kill-before-commit:0", "compact-before-commit"])
def test_a_fault_spec_that_does_not_parse_is_refused_in_one_line(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rowbus.spark_apply.exceptions import ApplyError
    from rowbus.spark_apply.iceberg_faults import ENV, armed

    monkeypatch.setenv(ENV, spec)
    with pytest.raises(ApplyError, match=r"ROWBUS_ICEBERG_FAULT=.*expected <action>:<n>"):
        armed(_catalog(tmp_path))
