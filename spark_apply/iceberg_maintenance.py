"""Maintenance of the Iceberg sink's tables while the job writes them: compaction, snapshot
expiry, orphan-file removal (spark_apply README "Iceberg maintenance").

Lifecycle: ``Maintenance(catalog, settings)`` does no I/O; each call loads the table it works
on from the catalog afresh and commits at most once per try. It runs beside a running job (from
`rowbus iceberg maintain`) or inside it between two batches (``every_batches``).

- `compact`: a table with at least ``compact_min_files`` data files gets them rewritten into
  one (or as many as the target file size makes) in one commit that names the files it
  replaces, summary ``rowbus.maintenance: compact``. A change log, which grows without end,
  has only its small files rewritten (`small_files`: under half the target file size, about
  one target's worth per commit), each row exactly once, in commit order
  (`iceberg_schema.ORDER`; the order columns are values like the others and are kept as they
  are). A job's commit in between makes
  the compaction's commit fail (its base is stale, or a file it replaces is gone): it begins
  again on the table as it is then, up to `ATTEMPTS` times. A job's commit that a compaction
  beat fails the same way and is tried again by the sink (`iceberg_sink`): nothing is lost or
  written twice, whichever commits first (a change-log step is found by its snapshot
  summary, which a compaction does not touch).
- `expire`: snapshots older than the first commit of each job's newest ``keep_batches``
  batches are expired (never the current one, nor a branch's or tag's head). A replay looks
  for its own batch's commits only, and Spark replays only the batch after the last one the
  state database recorded, which is at most the newest committed batch: its commits are
  always kept, so exactly once holds. pyiceberg's expiry removes metadata only.
- `remove_orphans`: files under a local table location that neither a kept snapshot
  (manifest lists, manifests, data files), the current metadata file and its log, nor a
  statistics file references, and older than ``orphan_age_s`` (a writer's files before its
  commit are such files: the age protects them), are deleted. Other file systems: skipped.
  Files another table of the catalog references are kept: a SQL catalog keeps a renamed
  table's files where they were, and a new table of the old name gets the same folder.
- `purge`: a table dropped from the catalog with every file its metadata references (data
  files, manifests, manifest lists, metadata and statistics files); the sink purges a
  current-state table when the source drops it. A kill between the drop and the deletes
  leaves those files behind (no table names them any more).
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
from rowbus.spark_apply.iceberg_schema import ORDER
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
        self._located: dict[tuple[str, ...], str] | None = None
        """Inside `run`: every table of the catalog and its location, read once."""

    def run(self, tables: Iterable[tuple[str, str]] | None = None) -> list[TableReport]:
        """Maintain `tables` (namespace, name), or every table a rowbus job wrote."""
        idents = sink_tables(self._catalog) if tables is None else list(tables)
        reports = []
        self._located = {}  # filled by the first table that has orphans, kept for this run
        try:
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
        finally:
            self._located = None
        return reports

    def compact(
        self, ident: tuple[str, str], min_files: int | None = None
    ) -> tuple[int, int] | None:
        """Rewrite a table's data files into one commit's few (a change log's rows in commit
        order); (files before, files after), or None when the table has fewer files than
        `min_files` (default ``compact_min_files``) or is neither form of the sink."""
        from pyiceberg.exceptions import CommitFailedException, ValidationException
        from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

        least = self.settings.compact_min_files if min_files is None else min_files
        for attempt in range(1, ATTEMPTS + 1):
            table = self._catalog.load_table(ident)
            names = {f.name for f in table.schema().fields}
            changelog = set(ORDER) <= names
            if table.current_snapshot() is None or not (
                changelog or table.schema().identifier_field_ids
            ):
                return None
            scan = table.scan()
            tasks = list(scan.plan_files())
            if len(tasks) < least or any(t.delete_files for t in tasks):
                return None  # (the sink writes no delete files: copy-on-write only)
            if changelog:
                # It grows without end: only its small files are rewritten, a bounded amount
                # at a time. A scan reads files in no promised order; a stable sort gives
                # the history back in the order it was committed (ties keep their order).
                kept = len(tasks)
                tasks = small_files(table, tasks)
                kept -= len(tasks)
                if len(tasks) < least:
                    return None
                rows = ArrowScan(
                    scan.table_metadata, scan.io, scan.projection(), scan.row_filter
                ).to_table(tasks)
                rows = rows.sort_by([(c, "ascending") for c in ORDER])
            else:
                kept, rows = 0, scan.to_arrow()
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
                return kept + len(tasks), kept + len(written)
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
        """Delete the table's orphan files older than ``orphan_age_s``, less those another
        table of the catalog references; how many (None: the table is not on the local file
        system)."""
        table = self._catalog.load_table(ident)
        stray = orphans(table, self._clock() - self.settings.orphan_age_s)
        if stray is None:
            return None
        if stray:
            located = self._located if self._located else self._locations()
            if self._located is not None:
                self._located.update(located)
            root = _local(table.location()).rstrip("/") + "/"
            for other, location in located.items():
                where = _local(location).rstrip("/") + "/"
                if tuple(other) == tuple(ident) or not (
                    where.startswith(root) or root.startswith(where)
                ):
                    continue
                kept = referenced(self._catalog.load_table(other))
                stray = [p for p in stray if str(p) not in kept]
        for path in stray:
            path.unlink(missing_ok=True)
        if stray:
            log.info("%s: %d orphan file(s) removed", ".".join(ident), len(stray))
        return len(stray)

    def _locations(self) -> dict[tuple[str, ...], str]:
        """Every table of the catalog and its location."""
        found = {}
        for space in self._catalog.list_namespaces():
            for ident in self._catalog.list_tables(space):
                found[tuple(ident)] = self._catalog.load_table(ident).location()
        return found


def purge(catalog: Any, ident: tuple[str, str]) -> int:
    """Drop `ident` from `catalog` and delete every file its metadata references; how many
    files were deleted (a file already gone counts too: a replay of the drop finds no table
    and deletes nothing). NoSuchTableError when it is not there."""
    table = catalog.load_table(ident)
    files = _references(table)
    catalog.drop_table(ident)
    for uri in sorted(files):
        try:
            table.io.delete(uri)
        except FileNotFoundError:
            continue
    log.info("%s: dropped and %d file(s) deleted", ".".join(ident), len(files))
    return len(files)


def small_files(table: Any, tasks: list[Any]) -> list[Any]:
    """The scan tasks of `table`'s files under half its target file size
    (``write.target-file-size-bytes``), smallest first, as many as add up to that target: what
    one change-log compaction rewrites (a compacted file is not read again, and the rows read
    stay near one target file's worth)."""
    from pyiceberg.table import TableProperties

    target = int(
        table.properties.get(
            TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
            TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT,
        )
    )
    picked: list[Any] = []
    total = 0
    for task in sorted(tasks, key=lambda t: t.file.file_size_in_bytes):
        size = task.file.file_size_in_bytes
        if size >= target // 2 or (picked and total + size > target):
            break
        picked.append(task)
        total += size
    return picked


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
    return {_local(p) for p in _references(table)}


def _references(table: Any) -> set[str]:
    """The locations of every file `table`'s metadata references (each manifest read once)."""
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
    return found | manifests


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
