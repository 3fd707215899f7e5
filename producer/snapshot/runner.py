"""Reads the pending tables of a snapshot in chunks on parallel read views: primary-key ranges,
or for a table without a primary key, cuts of one streaming scan.

Bounded: one worker thread per read view takes whole tables from a shared list (a table's
chunks are read in key order by one worker, since each chunk starts after the previous one's
last key), and hands chunks to the caller through a queue of two chunks per worker; a worker
blocked on the queue re-checks `closed` every 0.2 s. Chunks are consumed in the caller's thread
(`chunks()`), which publishes them; a worker's error is raised there.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from rowbus.producer.snapshot.source import ReadView
from rowbus.protocol.events import TableSchema
from rowbus.protocol.values import Value

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Chunk:
    """Rows of `table` in key order; `last`: no row of the table comes after them."""

    table: TableSchema
    rows: list[tuple[Value, ...]]
    last: bool

    @property
    def last_key(self) -> tuple[Value, ...] | None:
        if not self.rows:
            return None
        row = self.rows[-1]
        return tuple(row[i] for i in self.table.pk_indexes)


class _Done:
    pass


_DONE = _Done()


class ChunkReader:
    """Construct with the read views and the tables (each with the key to start after), then
    iterate `chunks()`; `close()` stops the workers and releases the views.

    `cut_keyless`: a keyless table in chunks of `chunk_rows` cut from one scan, which only a
    consumer of the snapshot markers can take (a restart reads it again from its start, and
    the new `snapshot_begin` discards the first attempt's rows, PROTOCOL.md §9.7); else whole
    in one chunk, all or none, as protocol 1.4 has it."""

    def __init__(
        self,
        views: list[ReadView],
        tables: list[tuple[TableSchema, tuple[Value, ...] | None]],
        chunk_rows: int,
        cut_keyless: bool = True,
    ) -> None:
        self._views = views
        self._tables = list(tables)
        self._chunk_rows = chunk_rows
        self._cut_keyless = cut_keyless
        self._lock = threading.Lock()
        self._out: queue.Queue[Chunk | BaseException | _Done] = queue.Queue(2 * len(views))
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []

    def _take(self) -> tuple[TableSchema, tuple[Value, ...] | None] | None:
        with self._lock:
            return self._tables.pop(0) if self._tables else None

    def _put(self, item: Chunk | BaseException | _Done) -> bool:
        while not self._closed.is_set():
            try:
                self._out.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _work(self, view: ReadView) -> None:
        try:
            while not self._closed.is_set():
                job = self._take()
                if job is None:
                    break
                table, after = job
                if not table.primary_key and self._cut_keyless:
                    if not self._keyless(view, table):
                        return
                    continue
                for _ in range(10**9):  # bounded by the table: each chunk moves past its keys
                    if self._closed.is_set():
                        return
                    rows = view.read_chunk(table, after, self._chunk_rows)
                    # Keyless and not cut: the whole table in one chunk.
                    last = len(rows) < self._chunk_rows or not table.primary_key
                    chunk = Chunk(table, rows, last)
                    if not self._put(chunk):
                        return
                    if chunk.last:
                        break
                    after = chunk.last_key
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            self._put(exc)
        finally:
            self._put(_DONE)

    def _keyless(self, view: ReadView, table: TableSchema) -> bool:
        """A keyless table's chunks, cut from one scan (bounded: at most the queue's chunks
        and the one being cut are held); False when closed first."""
        scan = view.keyless_chunks(table, self._chunk_rows)
        try:
            for rows, last in scan:
                if self._closed.is_set() or not self._put(Chunk(table, rows, last)):
                    return False
            return True
        finally:
            scan.close()

    def chunks(self) -> Iterator[Chunk]:
        """Chunks as they are read, tables interleaved, each table's in key order."""
        for n, view in enumerate(self._views):
            t = threading.Thread(target=self._work, args=(view,), name=f"snapshot-{n}", daemon=True)
            self._threads.append(t)
            t.start()
        running = len(self._threads)
        while running:
            item = self._out.get()
            if isinstance(item, _Done):
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item

    def close(self) -> None:
        self._closed.set()
        for t in self._threads:
            t.join(30)
        for v in self._views:
            with contextlib.suppress(Exception):
                v.close()
