"""A binlog stream's tables: table maps turned into schemas, converters and native plans, and
the decoders of their rows events.

`StreamTables` keeps, per table id of the stream, what its last table map made of the table
(None: not read — filtered out, or a sequence), built once per layout (`tablemaps` shares the
library's column lists between the maps of one layout, so the layout key is not rebuilt per
transaction). It refuses rows events whose images lack columns (`require_whole`). The
decoders turn a rows event into image pairs: natively (`rowbus.producer.fastrows`) when the
table has a plan, else through the pure path's converter.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from rowbus.producer import fastrows
from rowbus.producer.exceptions import ServerMisconfiguredError
from rowbus.producer.tables import (
    Converter,
    MissingMetadataError,
    TableFilter,
    converter_for,
    table_schema_from_map,
)
from rowbus.producer.tracker import PositionKey, SchemaTracker
from rowbus.producer.values import UnsupportedCharsetError, reader_for
from rowbus.protocol.events import BinlogPosition, Op, TableSchema

log = logging.getLogger(__name__)

PARTIAL_IMAGE_REFUSED = (
    "the row's {missing}: the writing session ran with binlog_row_image="
    "MINIMAL or NOBLOB, so the values a consumer needs are not in the binlog; set "
    "binlog_row_image=FULL globally and for every session (SET SESSION overrides it), then "
    "add {table} to reader.exclude_tables for one restart and take it out again: it is "
    "snapshotted anew (README: Row images)"
)
SEQUENCE_COLUMNS = (
    "next_not_cached_value",
    "minimum_value",
    "maximum_value",
    "start_value",
    "increment",
    "cache_size",
    "cycle_option",
    "cycle_count",
)
"""The fixed columns of a MariaDB sequence's table (the table map does not flag one)."""
_LIMIT = 10_000
"""Layouts remembered at most (the caches start again beyond)."""

Table = tuple[TableSchema, Converter, fastrows.Plan | None]
"""A wanted table's schema, the pure path's converter, and its native plan (None: pure)."""
ImagePairs = list[tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]]
_MODES = {WriteRowsEvent: 0, DeleteRowsEvent: 1, UpdateRowsEvent: 2, PartialUpdateRowsEvent: 2}
OPS = {
    WriteRowsEvent: Op.INSERT,
    UpdateRowsEvent: Op.UPDATE,
    DeleteRowsEvent: Op.DELETE,
    # MySQL's binlog_row_value_options=PARTIAL_JSON; made whole by `rowbus.producer.jsondiff`
    PartialUpdateRowsEvent: Op.UPDATE,
}
"""The library's rows event classes -> the change they make."""


def position_at(file: str, end: int) -> PositionKey:
    """The tracker's key of the event ending at `end` in `file`."""
    return (BinlogPosition(file, end).file_number, file, end)


def _is_sequence(cols: Any) -> bool:
    return (
        len(cols) == len(SEQUENCE_COLUMNS)
        and cols[0].name == SEQUENCE_COLUMNS[0]
        and tuple(c.name for c in cols) == SEQUENCE_COLUMNS
        and not any(c.is_primary for c in cols)
    )


class StreamTables:
    """The tables of one binlog stream by table id; `tables` is read on the hot paths."""

    def __init__(
        self, table_filter: TableFilter, tracker: SchemaTracker | None, fast: bool
    ) -> None:
        self._filter = table_filter
        self._tracker = tracker
        self._fast = fast
        self.tables: dict[int, Table | None] = {}
        self.layouts: dict[tuple[Any, ...], Table] = {}
        self._by_columns: dict[int, tuple[list[Any], int, Table]] = {}
        """By the identity of a table map's column list, which `tablemaps` shares between the
        table maps of one layout: the layout key is then not rebuilt per transaction."""
        self._sequences: set[tuple[str, str]] = set()
        self.whole: dict[int, bytes] = {}
        """Column count -> the columns-present bitmap of a whole row image (`require_whole`)."""

    def require_whole(
        self,
        table: TableSchema,
        ncols: int,
        present: bytes,
        after: bytes | None,
        file: str,
        end: int,
    ) -> None:
        """Refuses a rows event whose images lack columns: written as NULL they would overwrite
        the sink's values (NOBLOB's unchanged blobs) or leave the row unfindable (MINIMAL).
        A whole bitmap is remembered by column count, so the check costs one comparison."""
        lacks = []
        for image, bitmap in (("before" if after is not None else "", present), ("after", after)):
            missing = [
                table.columns[i].name if i < len(table.columns) else f"#{i}"
                for i in range(ncols)
                if bitmap is not None and not (bitmap[i >> 3] >> (i & 7)) & 1
            ]
            if missing:
                lacks.append(f"{image} image lacks {', '.join(missing)}".lstrip())
        if lacks:
            what = PARTIAL_IMAGE_REFUSED.format(missing="; ".join(lacks), table=table.qualified)
            raise ServerMisconfiguredError(f"{file}:{end}: {table.qualified}: {what}")
        self.whole[ncols] = present

    def on_table_map(self, event: Any, file: str) -> None:
        """What the table map `event` (read in `file`) says of its table id."""
        schema, name = event.schema, event.table
        if not self._filter.wanted(schema, name):
            self.tables[event.table_id] = None
            return
        if _is_sequence(event.columns):
            # NEXTVAL writes the sequence's one row; that is a counter, not data a consumer
            # could write (a sink refuses rows into a sequence); its CREATE still passes.
            if (schema, name) not in self._sequences:
                self._sequences.add((schema, name))
                log.info("%s.%s is a sequence: its rows are not published", schema, name)
            self.tables[event.table_id] = None
            return
        cols = event.columns
        generation = self._tracker.generation(schema, name) if self._tracker is not None else 0
        quick = self._by_columns.get(id(cols))
        if quick is not None and quick[0] is cols and quick[1] == generation:
            self.tables[event.table_id] = quick[2]
            return
        layout = (
            schema,
            name,
            bytes(event.null_bitmask),
            tuple((c.type, c.name, c.unsigned, c.is_primary, c.collation_name) for c in cols),
            tuple(tuple(c.enum_values or ()) + tuple(c.set_values or ()) for c in cols),
            tuple(
                (
                    getattr(c, "fsp", None),
                    getattr(c, "precision", None),
                    getattr(c, "bits", 0),
                    getattr(c, "max_length", None),
                    getattr(c, "length_size", None),
                )
                for c in cols
            ),
            generation,
        )
        end = event.packet.log_pos
        found = self.layouts.get(layout)
        if found is None:
            try:
                table = table_schema_from_map(event)
            except MissingMetadataError as exc:
                raise ServerMisconfiguredError(
                    f"table map of {schema}.{name} has no column names: set "
                    "binlog_row_metadata=FULL on the source"
                ) from exc
            for col in cols:
                try:
                    col.__dict__["_rowbus_reader"] = reader_for(col)
                except UnsupportedCharsetError as exc:
                    raise ServerMisconfiguredError(
                        f"column {schema}.{name}.{col.name} uses charset {exc}, which rowbus "
                        "cannot convert to Unicode; convert the column to utf8mb4"
                    ) from exc
            if self._tracker is not None:
                table = self._tracker.on_table_map(table, position_at(file, end))
            plan = fastrows.plan_for(cols) if self._fast else None
            found = (table, converter_for(table), plan)
            if len(self.layouts) > _LIMIT:
                self.layouts.clear()
            self.layouts[layout] = found
        if len(self._by_columns) > _LIMIT:
            self._by_columns.clear()
        self._by_columns[id(cols)] = (cols, generation, found)
        self.tables[event.table_id] = found


def decoder(
    event: Any, kind: type, convert: Converter, plan: fastrows.Plan | None
) -> Callable[[], ImagePairs]:
    pure = pure_decoder(event, kind, convert)
    if plan is None or kind is PartialUpdateRowsEvent:  # JSON diffs: the pure path's
        return pure
    mode = _MODES[kind]

    def fast() -> ImagePairs:
        rows = fastrows.decode(event, mode, plan)
        return pure() if rows is None else rows

    return fast


def pure_decoder(event: Any, kind: type, convert: Converter) -> Callable[[], ImagePairs]:
    if kind is WriteRowsEvent:
        return lambda: [(None, convert(r["values"])) for r in event.rows]
    if kind is DeleteRowsEvent:
        return lambda: [(convert(r["values"]), None) for r in event.rows]
    return lambda: [(convert(r["before_values"]), convert(r["after_values"])) for r in event.rows]
