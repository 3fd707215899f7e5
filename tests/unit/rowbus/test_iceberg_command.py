"""`rowbus iceberg maintain` on a local SQL catalog (a sqlite file), and the Iceberg part of
`rowbus status`'s text."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pytest

from rowbus.cli import main
from rowbus.config import load_settings
from rowbus.spark_apply.iceberg_catalog import BATCH, JOB, STEP, open_catalog
from rowbus.status import IcebergTableStatus, Report, _print_iceberg


def _config(tmp_path: Path) -> Path:
    catalog = {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": str(tmp_path / "wh"),
    }
    path = tmp_path / "rowbus.yaml"
    path.write_text(
        json.dumps({"apply": {"sink_kind": "iceberg", "iceberg": {"catalog": catalog}}})
    )
    return path


def test_maintain_compacts_expires_and_reports_each_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    config = _config(tmp_path)
    catalog = open_catalog(load_settings(config).apply.iceberg)
    catalog.create_namespace("db")
    schema = Schema(NestedField(1, "id", LongType(), required=True), identifier_field_ids=[1])
    table = catalog.create_table(("db", "t"), schema=schema)
    catalog.create_table(("db", "not_ours"), schema=schema)  # no rowbus commit: left alone
    arrow = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    for batch in range(3):
        table.append(
            pa.table({"id": [batch]}, schema=arrow),
            snapshot_properties={JOB: "j", BATCH: str(batch), STEP: "0"},
        )
    argv = ["-c", str(config), "iceberg", "maintain", "--compact-min-files", "2"]
    assert main([*argv, "--keep-batches", "1", "--orphan-age", "0"]) == 0
    out = capsys.readouterr().out
    assert "db.t: 3 -> 1 data files; 2 snapshot(s) expired; " in out
    assert out.splitlines()[-1] == "iceberg maintain: 1 table(s)"
    assert sorted(catalog.load_table(("db", "t")).scan().to_arrow()["id"].to_pylist()) == [0, 1, 2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--keep-batches", "0"], "--keep-batches 0: input should be greater than or equal to 1"),
        (["--table", "orders"], "--table 'orders': expected NAMESPACE.TABLE"),
    ],
)
def test_bad_options_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["-c", str(_config(tmp_path)), "iceberg", "maintain", *args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


def test_status_shows_each_iceberg_table_last_batch(tmp_path: Path) -> None:
    settings = load_settings(_config(tmp_path))
    report = Report(iceberg=[IcebergTableStatus("db.t", "j", 7, 0, "2026-11-27 00:00:00", 3)])
    out = io.StringIO()
    _print_iceberg(settings, report, out)
    assert out.getvalue().splitlines() == [
        "iceberg tables (apply.iceberg.catalog)",
        "  db.t: job j batch 7 step 0 committed 2026-11-27 00:00:00 UTC; 3 snapshot(s)",
    ]
    report = Report(unavailable={"iceberg": "IcebergError: no catalog"})
    out = io.StringIO()
    _print_iceberg(settings, report, out)
    assert "  iceberg: unavailable (IcebergError: no catalog)" in out.getvalue()
