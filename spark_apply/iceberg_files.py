"""A step's Iceberg data files written by Spark's executor tasks (issue #34,
``apply.iceberg.writers: executors``).

The driver hands each table's share of a step to tasks as `FileWork` values (the table's
metadata as it is before the commit, its file IO properties, a slice of the step's rows and
the function that turns them into Arrow in the table's schema); one Spark job per step runs
them, in at most the session's default parallelism of tasks. Each task writes its rows as
Parquet data files in the table's data location with pyiceberg's own writer
(`pyiceberg.io.pyarrow.write_file`: column statistics, field ids, the table's write
properties) and returns only their `DataFile` metadata (path, record count, size, column
bounds); the driver commits a table's files of the step in one fast append
(`iceberg_sink.IcebergTables`).

File names: ``rowbus-<job>-b<batch>-s<step>-t<partition>-a<attempt>-<uuid>.parquet``. The uuid
is new for every task attempt, so a retried task, or the replay of a step whose first driver
was killed, never writes over a file; the job, batch, step, task and attempt make a stray file
tell where it came from.

Guarantee: none of its own. A written file is referenced by nothing until the driver's commit
names it; files of a failed attempt, of a step whose driver died before committing, or of a
task whose result the driver never used, are orphans, which maintenance removes
(`iceberg_maintenance.orphans`: any unreferenced file under the table's location older than
``orphan_age_s``). Exactly once stays the driver's commit and its snapshot summary.

Errors: a zero date a task refuses comes back as the task's result and is raised on the
driver as `ZeroDateError` (the same line the driver-written path gives).
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rowbus.spark_apply.iceberg_types import IcebergError, ZeroDateError

PREFIX = "rowbus-"
"""How every data file a task writes is named first."""


@dataclass(frozen=True, slots=True)
class FileWork:
    """One task's share of one table's step: `build(metadata, *args, rows)` gives its `rows`
    as an Arrow table in the table's schema; `name` (job, batch, step) starts its files'
    names. The rows travel pickled on their own (plain `pickle`: about half cloudpickle's cost
    a row, 3-4 against 6 µs for W1; only the build function and its arguments need
    cloudpickle)."""

    metadata: str
    """The table's metadata as JSON, as the driver loaded it before the step's commit."""
    io: dict[str, str]
    name: str
    build: Callable[..., Any]
    args: tuple[Any, ...]
    rows: Sequence[Any] = ()

    def write(self, task: int, attempt: int) -> list[Any]:
        """Write the rows as data files; their `DataFile`s."""
        from pyiceberg.io import load_file_io
        from pyiceberg.io.pyarrow import pyarrow_to_schema, write_file

        meta = _parsed(self.metadata)
        data = self.build(meta, *self.args, self.rows)
        if data.num_rows == 0:
            return []
        schema = pyarrow_to_schema(
            data.schema,
            name_mapping=meta.schema().name_mapping,
            format_version=meta.format_version,
        )
        named = _named_task()(
            write_uuid=uuid.uuid4(),
            task_id=task,
            schema=schema,
            record_batches=data.to_batches(),
            stem=f"{PREFIX}{self.name}-t{task}-a{attempt}",
        )
        return list(write_file(load_file_io(self.io, meta.location), meta, iter([named])))


@functools.lru_cache(maxsize=16)
def _parsed(metadata: str) -> Any:
    """A table's metadata from its JSON, parsed once per worker for the works of a step that
    share it (pydantic parsing of a table with many snapshots is not free)."""
    from pyiceberg.table.metadata import TableMetadataUtil

    return TableMetadataUtil.parse_raw(metadata)


@functools.cache
def _named_task() -> Any:
    """pyiceberg's `WriteTask` naming its file with rowbus's stem (made on first use: pyiceberg
    is imported lazily, as everywhere in the sink)."""
    from pyiceberg.table import WriteTask

    @dataclass(frozen=True)
    class NamedTask(WriteTask):
        stem: str = ""

        def generate_data_file_filename(self, extension: str) -> str:
            return f"{self.stem}-{self.write_uuid}.{extension}"

    return NamedTask


def slices(rows: Sequence[Any], parts: int) -> list[Sequence[Any]]:
    """`rows` cut into at most `parts` contiguous, non-empty slices of near-equal length, in
    order (slice i holds rows before slice i + 1's)."""
    parts = max(1, min(parts, len(rows)))
    size, extra = divmod(len(rows), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(rows[start:end])
        start = end
    return [s for s in out if len(s)]


def _run(blobs: Iterable[tuple[int, bytes, bytes]]) -> Iterator[tuple[int, list[Any] | str]]:
    """The task: each work's files, or a zero date's one-line refusal."""
    from pyspark import TaskContext
    from pyspark.cloudpickle import loads

    ctx = TaskContext.get()
    task, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (0, 0)
    for index, spec, rows in blobs:
        # The blobs are the driver's own, handed over by Spark, never outside input.
        work = dataclasses.replace(loads(spec), rows=pickle.loads(rows))  # noqa: S301
        try:
            yield index, work.write(task, attempt)
        except ZeroDateError as exc:
            yield index, str(exc)


class ExecutorFiles:
    """Runs a step's `FileWork`s as one Spark job on the job's session, in at most the
    session's default parallelism of tasks (a task's fixed cost — a Python worker's call,
    the table's metadata parsed — is paid per task, not per table: a step of 150 tables
    would otherwise start 300 tasks); a table's slices, next to each other in `works`, go to
    different tasks when there are as many tasks as slices."""

    def parallelism(self) -> int:
        """How many tasks a table's rows are cut into: the session's default parallelism."""
        return int(self._context().defaultParallelism)

    def write(self, works: Sequence[FileWork]) -> list[list[Any]]:
        """Each work's `DataFile`s, in the order of `works`."""
        if not works:
            return []
        from pyspark.cloudpickle import dumps

        blobs = [
            (i, dumps(dataclasses.replace(w, rows=())), pickle.dumps(w.rows, protocol=5))  # type: ignore[no-untyped-call]
            for i, w in enumerate(works)
        ]
        tasks = min(len(blobs), self.parallelism())
        # parallelize cuts the list into contiguous runs; interleaving the works first puts a
        # table's slices (neighbours) into different tasks.
        dealt = [blobs[i] for start in range(tasks) for i in range(start, len(blobs), tasks)]
        rdd = self._context().parallelize(dealt, tasks)
        results = rdd.mapPartitions(_run).collect()
        out: list[list[Any]] = [[] for _ in works]
        for index, files in results:
            if isinstance(files, str):
                raise ZeroDateError(files)
            out[index] = files
        return out

    @staticmethod
    def _context() -> Any:
        """The job's SparkContext: the process's active one (the driver's foreachBatch runs on
        a py4j callback thread, where Spark's active session is not always set)."""
        from pyspark import SparkContext

        context = SparkContext._active_spark_context
        if context is None:
            raise IcebergError(
                "apply.iceberg.writers: executors needs the job's Spark context, and none is "
                "active: set apply.iceberg.writers: driver outside the apply job"
            )
        return context
