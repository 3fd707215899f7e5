"""The Iceberg catalog of the sink's settings, and what the sink's commits left in a table.

`open_catalog` loads the pyiceberg catalog that ``apply.iceberg.catalog`` describes (the one
place it is built: the sink, maintenance, `rowbus verify` and `rowbus status` read the same
tables). `sink_tables` lists the tables the Iceberg sink wrote (a snapshot of theirs names a
rowbus job); `last_commits` reads, from a table's snapshot summaries, each job's newest
committed (batch, step) — what a replay of the batch looks for, and what `rowbus status` shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rowbus.spark_apply.iceberg_types import IcebergError
from rowbus.spark_apply.settings import IcebergSettings

JOB, BATCH, STEP, DDL = "rowbus.job", "rowbus.batch", "rowbus.step", "rowbus.ddl"
"""The snapshot summary properties naming the step a commit wrote (`DDL` "1": the step's
DDL, after its rows)."""


def open_catalog(settings: IcebergSettings) -> Any:
    """The pyiceberg catalog of `settings`; a local warehouse folder and a local sqlite
    file's folder are made. IcebergError in one line when pyiceberg cannot load it."""
    from pyiceberg.catalog import load_catalog

    props = dict(settings.catalog)
    warehouse = props.get("warehouse")
    if warehouse is not None and "://" not in warehouse:
        folder = Path(warehouse).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        props["warehouse"] = folder.as_uri()
    uri = props.get("uri", "")
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        Path(uri.removeprefix("sqlite:///")).resolve().parent.mkdir(parents=True, exist_ok=True)
    try:
        # A SQL catalog keeps each catalog name's tables apart: one name for every job,
        # so readers and other jobs see the same tables.
        return load_catalog(props.pop("name", "rowbus"), **props)
    except Exception as exc:
        raise IcebergError(
            f"apply.iceberg.catalog {sorted(props)}: pyiceberg could not load it ({exc})"
        ) from exc


@dataclass(frozen=True, slots=True)
class LastCommit:
    """A job's newest commit in one table: its batch and step (`ddl`: the step's DDL part),
    the snapshot and when it was committed (ms since the epoch)."""

    job: str
    batch: int
    step: int
    ddl: bool
    snapshot_id: int
    timestamp_ms: int


def marks(snapshot: Any) -> tuple[str, int, int, bool] | None:
    """(job, batch, step, ddl) of a snapshot the sink committed; None for another writer's
    (a compaction, a user's)."""
    props = snapshot.summary.additional_properties if snapshot.summary is not None else {}
    job = props.get(JOB)
    if job is None:
        return None
    return job, int(props[BATCH]), int(props[STEP]), props.get(DDL, "0") == "1"


def last_commits(table: Any) -> list[LastCommit]:
    """Each job's newest commit in `table`, by job name."""
    newest: dict[str, LastCommit] = {}
    for snapshot in table.metadata.snapshots:
        mark = marks(snapshot)
        if mark is None:
            continue
        job, batch, step, ddl = mark
        have = newest.get(job)
        if have is None or (batch, step, ddl) >= (have.batch, have.step, have.ddl):
            newest[job] = LastCommit(
                job, batch, step, ddl, snapshot.snapshot_id, snapshot.timestamp_ms
            )
    return [newest[j] for j in sorted(newest)]


def sink_tables(catalog: Any, namespace: str | None = None) -> list[tuple[str, str]]:
    """The identifiers of the tables a rowbus job committed to (in `namespace` only, when
    given), sorted."""
    spaces = [(namespace,)] if namespace else catalog.list_namespaces()
    found = []
    for space in spaces:
        for ident in catalog.list_tables(space):
            table = catalog.load_table(ident)
            if any(marks(s) is not None for s in table.metadata.snapshots):
                found.append((".".join(ident[:-1]), ident[-1]))
    return sorted(found)
