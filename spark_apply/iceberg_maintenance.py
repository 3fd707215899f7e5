"""Maintenance of the Iceberg sink's tables while the job writes them: compaction, snapshot
expiry, orphan-file removal (spark_apply README "Iceberg maintenance").

Lifecycle: ``Maintenance(catalog, settings)`` does no I/O; each call loads the table it works
on from the catalog afresh and commits at most once per try. It runs beside a running job (from
`rowbus iceberg maintain`) or inside it between two batches (``every_batches``).

- `compact`: a current-state table with at least ``compact_min_files`` data files gets them
  rewritten into one (or as many as the target file size makes) in one commit that names the
  files it replaces, summary ``rowbus.maintenance: compact``. A job's commit in between makes
  the compaction's commit fail (its base is stale, or a file it replaces is gone): it begins
  again on the table as it is then, up to `ATTEMPTS` times. A job's commit that a compaction
  beat fails the same way and is tried again by the sink (`iceberg_sink`): nothing is lost or
  written twice, whichever commits first. The change log is not compacted (append-only; its
  files are never rewritten by the job).
- `expire`: snapshots older than the first commit of each job's newest ``keep_batches``
  batches are expired (never the current one, nor a branch's or tag's head). A replay looks
  for its own batch's commits only, and Spark replays only the batch after the last one the
  state database recorded, which is at most the newest committed batch: its commits are
  always kept, so exactly once holds. pyiceberg's expiry removes metadata only.
- `remove_orphans`: files under a local table location that neither a kept snapshot
  (manifest lists, manifests, data files), the current metadata file and its log, nor a
  statistics file references, and older than ``orphan_age_s`` (a writer's files before its
  commit are such files: the age protects them), are deleted. Other file systems: skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from rowbus.spark_apply.iceberg_catalog import marks, sink_tables
from rowbus.spark_apply.iceberg_types import IcebergError
from rowbus.spark_apply.settings import IcebergMaintenanceSettings

log = logging.getLogger(__name__)

MAINTENANCE = "rowbus.maintenance"
"""The snapshot summary property of a compaction's commit (``compact``)."""
ATTEMPTS = 5
"""Tries of one maintenance commit when a job's commits beat it."""


@dataclass(frozen=True, slots=True)
class TableReport:
    """What maintenance did to one table: data files before and after a compaction (None:
    not compacted), snapshots expired, orphan files removed (None: not a local table)."""

    table: str
    compacted: tuple[int, int] | None
    expired: int
    orphans: int | None


class Maintenance:
    """Compaction, expiry and orphan removal on the tables of one catalog; see the module
    docstring."""

    def __init__(
        self,
        catalog: Any,
        settings: IcebergMaintenanceSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._catalog = catalog
        self.settings = settings or IcebergMaintenanceSettings()
        self._clock = clock

    def run(self, tables: Iterable[tuple[str, str]] | None = None) -> list[TableReport]:
        """Maintain `tables` (namespace, name), or every table a rowbus job wrote."""
        idents = sink_tables(self._catalog) if tables is None else list(tables)
        reports = []
        for ident in idents:
            reports.append(
                TableReport(
                    ".".join(ident),
                    self.compact(ident),
                    self.expire(ident),
                    self.remove_orphans(ident),
                )
            )
            log.info("maintained %s", reports[-1])
        return reports

    def compact(
        self, ident: tuple[str, str], min_files: int | None = None
    ) -> tuple[int, int] | None:
        """Rewrite a current-state table's data files into one commit's few; (files before,
        files after), or None when the table is a change log or has fewer files than
        `min_files` (default ``compact_min_files``)."""
        from pyiceberg.exceptions import CommitFailedException, ValidationException
        from pyiceberg.io.pyarrow import _dataframe_to_data_files

        least = self.settings.compact_min_files if min_files is None else min_files
        for attempt in range(1, ATTEMPTS + 1):
            table = self._catalog.load_table(ident)
            if not table.schema().identifier_field_ids or table.current_snapshot() is None:
                return None
            scan = table.scan()
            tasks = list(scan.plan_files())
            if len(tasks) < least or any(t.delete_files for t in tasks):
                return None  # (the sink writes no delete files: copy-on-write only)
            rows = scan.to_arrow()
            try:
                with table.transaction() as tx:
                    update = tx.update_snapshot(snapshot_properties={MAINTENANCE: "compact"})
                    with update.overwrite() as rewrite:
                        for task in tasks:
                            rewrite.delete_data_file(task.file)
                        written = list(
                            _dataframe_to_data_files(
                                tx.table_metadata, rows, table.io, write_uuid=rewrite.commit_uuid
                            )
                        )
                        for data_file in written:
                            rewrite.append_data_file(data_file)
                return len(tasks), len(written)
            except (CommitFailedException, ValidationException) as exc:
                # A job's commit came first: read the table again and rewrite what it is now.
                if attempt == ATTEMPTS:
                    raise IcebergError(
                        f"{'.'.join(ident)}: the compaction lost its commit {ATTEMPTS} times to "
                        f"other writers ({exc}); run it again when the job is less busy"
                    ) from exc
                log.info("%s: compaction's commit beaten (%s); trying again", ident, exc)
        raise AssertionError("unreachable")

    def expire(self, ident: tuple[str, str]) -> int:
        """Expire the snapshots before the first commit of each job's newest
        ``keep_batches`` batches; returns how many."""
        from pyiceberg.exceptions import CommitFailedException

        for attempt in range(1, ATTEMPTS + 1):
            table = self._catalog.load_table(ident)
            ids = expirable(table, self.settings.keep_batches)
            if not ids:
                return 0
            try:
                table.maintenance.expire_snapshots().by_ids(ids).commit()
                return len(ids)
            except CommitFailedException as exc:
                if attempt == ATTEMPTS:
                    raise IcebergError(
                        f"{'.'.join(ident)}: the expiry lost its commit {ATTEMPTS} times to "
                        f"other writers ({exc})"
                    ) from exc
        raise AssertionError("unreachable")

    def remove_orphans(self, ident: tuple[str, str]) -> int | None:
        """Delete the table's orphan files older than ``orphan_age_s``; how many (None: the
        table is not on the local file system)."""
        table = self._catalog.load_table(ident)
        stray = orphans(table, self._clock() - self.settings.orphan_age_s)
        if stray is None:
            return None
        for path in stray:
            path.unlink(missing_ok=True)
        if stray:
            log.info("%s: %d orphan file(s) removed", ".".join(ident), len(stray))
        return len(stray)


def expirable(table: Any, keep_batches: int) -> list[int]:
    """The ids of `table`'s snapshots older than the first commit of each job's newest
    `keep_batches` batches, less the current one and the heads of branches and tags."""
    snapshots = table.metadata.snapshots
    batches: dict[str, set[int]] = {}
    for snap in snapshots:
        mark = marks(snap)
        if mark is not None:
            batches.setdefault(mark[0], set()).add(mark[1])
    if not batches:
        return []  # not the sink's table: nothing says what a replay needs
    kept = {job: sorted(b)[-keep_batches:][0] for job, b in batches.items()}
    first = next(
        i
        for i, snap in enumerate(snapshots)
        if (mark := marks(snap)) is not None and mark[1] >= kept[mark[0]]
    )
    heads = {ref.snapshot_id for ref in table.metadata.refs.values()}
    return [s.snapshot_id for s in snapshots[:first] if s.snapshot_id not in heads]


def referenced(table: Any) -> set[str]:
    """The local paths of every file `table`'s metadata references (each manifest read once)."""
    meta = table.metadata
    found = {table.metadata_location, *(e.metadata_file for e in meta.metadata_log)}
    found.update(s.statistics_path for s in meta.statistics)
    found.update(s.statistics_path for s in meta.partition_statistics)
    manifests: set[str] = set()
    for snap in meta.snapshots:
        found.add(snap.manifest_list)
        for manifest in snap.manifests(table.io):
            if manifest.manifest_path in manifests:
                continue
            manifests.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                found.add(entry.data_file.file_path)
    return {_local(p) for p in found | manifests}


def orphans(table: Any, older_than: float) -> list[Path] | None:
    """The files under `table`'s location that its metadata does not reference, modified
    before `older_than` (seconds since the epoch); None when the location is not local."""
    location = table.location()
    if urlparse(location).scheme not in ("", "file"):
        return None
    root = Path(_local(location))
    if not root.is_dir():
        return []
    kept = referenced(table)
    return sorted(
        path
        for path in root.rglob("*")
        if path.is_file() and str(path) not in kept and path.stat().st_mtime < older_than
    )


def _local(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri
