"""Buffered events on disk: append-only segment files of protobuf-encoded events.

The merger moves the in-memory part of its largest buffered runs here when it holds more events
than its limit, so a huge transaction (or a long stall behind a silent source) costs disk, not
memory. A `Chunk` names one written slice; a segment file is deleted once no chunk in it is
referenced any more. Each record is ``>qI`` (Kafka offset, value length) then the value, the
record encoded with `rowbus.protocol.codec` (protobuf), so the format is the protocol's own.

A write the disk refuses (full: ENOSPC; past the process's file-size limit: EFBIG) stops the
subscriber with one `SpillFullError` line naming the folder and the setting; nothing it had
not delivered is lost, since it resumes from its last checkpoint.

A process killed -9 deletes nothing: its folder stays. Folders are named after the host and the
pid that made them, and a store removes, before it makes its own, the folders of processes of
this host that are gone (a Subscriber restarted after each of a series of kills otherwise filled
its spill disk with its predecessors' segments: a test suite left ~20 folders in /tmp a run).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import struct
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from rowbus.merge.exceptions import SpillFullError, SubscriberError
from rowbus.protocol.codec import decode, encode
from rowbus.protocol.events import DdlChange, RowChange, SnapshotBegin, SnapshotEnd

log = logging.getLogger(__name__)

DataEvent = RowChange | DdlChange | SnapshotBegin | SnapshotEnd
"""What a merger buffers and releases: rows, DDLs and (1.5) snapshot markers."""
_HEADER = struct.Struct(">qI")
DEFAULT_SEGMENT_BYTES = 64 << 20
WRITE_BYTES = 1 << 20
"""Bytes encoded before they are written out: a spilled run of 100k events is written in
pieces, never built in memory whole (that would cost as much as the events it frees)."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """`count` events written at `start` (bytes) of segment `segment`, `size` bytes long."""

    segment: int
    start: int
    size: int
    count: int


class Spill(Protocol):
    """Where a merger moves buffered events: `SpillStore` (local files) or another store with
    the same contract (the Spark planner keeps them in the sink, `rowbus.spark_apply.sink_spill`).
    Chunks are plain values, so a merger's state can name them."""

    def write(self, items: Iterable[tuple[int, DataEvent]]) -> Chunk: ...

    def read(self, chunk: Chunk) -> Iterator[tuple[int, DataEvent]]: ...

    def release(self, chunks: Iterable[Chunk]) -> None: ...

    def close(self) -> None: ...


PREFIX = "rowbus-spill-"


def fresh_folder(parent: Path | None) -> Path:
    """A new folder under `parent` (the temporary folder when None) for this process's
    segments, once the folders that gone processes of this host left there are removed."""
    base = Path(tempfile.gettempdir()) if parent is None else parent
    mine = f"{PREFIX}{socket.gethostname()}."
    with contextlib.suppress(OSError):
        for folder in base.iterdir():
            pid = folder.name.removeprefix(mine).partition(".")[0]
            if folder.name.startswith(mine) and pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)
                log.info("removed spill folder %s of process %s, which is gone", folder, pid)
    return Path(tempfile.mkdtemp(prefix=f"{mine}{os.getpid()}.", dir=base))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


class SpillStore:
    """Segment files under `directory` (a fresh temporary folder when None).

    Lifecycle: the constructor touches no disk; the first `write` creates the folder; `close`
    deletes every file it created. Not thread-safe: one merger owns it.
    """

    def __init__(
        self, directory: Path | None = None, segment_bytes: int = DEFAULT_SEGMENT_BYTES
    ) -> None:
        self._parent = directory
        self._dir: Path | None = None
        self._segment_bytes = segment_bytes
        self._active: BinaryIO | None = None
        self._active_id = -1
        self._active_size = 0
        self._refs: dict[int, int] = {}
        self.bytes_written = 0

    def _path(self, segment: int) -> Path:
        assert self._dir is not None
        return self._dir / f"spill-{segment:06d}.bin"

    def _roll(self) -> BinaryIO:
        if self._dir is None:
            if self._parent is not None:
                self._parent.mkdir(parents=True, exist_ok=True)
            self._dir = fresh_folder(self._parent)
        if self._active is not None:
            self._active.close()
            self._drop_if_unused(self._active_id)
        self._active_id += 1
        self._active_size = 0
        self._refs[self._active_id] = 0
        self._active = self._path(self._active_id).open("wb")
        return self._active

    def write(self, items: Iterable[tuple[int, DataEvent]]) -> Chunk:
        """Append events (with their Kafka offsets) and return the chunk that holds them;
        `SpillFullError` when the disk refuses them."""
        try:
            return self._write(items)
        except OSError as exc:
            where = self._dir or self._parent or Path(tempfile.gettempdir())
            raise SpillFullError(
                f"spill folder {where}: {exc.strerror or exc} after {self.bytes_written:,} "
                "bytes spilled; free space there or set subscriber.spill_dir to a folder with "
                "room (the subscriber resumes from its last checkpoint)"
            ) from exc

    def _write(self, items: Iterable[tuple[int, DataEvent]]) -> Chunk:
        out = self._active
        if out is None or self._active_size >= self._segment_bytes:
            out = self._roll()
        start = self._active_size
        buf = bytearray()
        count = size = 0
        for offset, event in items:
            value, _ = encode(event)
            buf += _HEADER.pack(offset, len(value))
            buf += value
            count += 1
            if len(buf) >= WRITE_BYTES:
                out.write(buf)
                size += len(buf)
                buf.clear()
        out.write(buf)
        size += len(buf)
        self._active_size += size
        self.bytes_written += size
        self._refs[self._active_id] += 1
        return Chunk(self._active_id, start, size, count)

    def read(self, chunk: Chunk) -> Iterator[tuple[int, DataEvent]]:
        """The events of `chunk`, in the order written (SubscriberError once closed)."""
        if self._dir is None:
            raise SubscriberError("the spill store was closed; its events are gone")
        if chunk.segment == self._active_id and self._active is not None:
            self._active.flush()
        with self._path(chunk.segment).open("rb") as f:
            f.seek(chunk.start)
            for _ in range(chunk.count):
                offset, length = _HEADER.unpack(f.read(_HEADER.size))
                event = decode(f.read(length), None)
                assert isinstance(event, RowChange | DdlChange | SnapshotBegin | SnapshotEnd)
                yield offset, event

    def release(self, chunks: Iterable[Chunk]) -> None:
        """Forget `chunks`; a segment no chunk refers to any more is deleted."""
        if self._dir is None:
            return  # closed: every file is gone already
        for chunk in chunks:
            self._refs[chunk.segment] -= 1
            self._drop_if_unused(chunk.segment)

    def _drop_if_unused(self, segment: int) -> None:
        if self._refs.get(segment) == 0 and segment != self._active_id:
            del self._refs[segment]
            self._path(segment).unlink(missing_ok=True)

    @property
    def segments(self) -> int:
        """Segment files currently on disk."""
        return len(self._refs)

    def close(self) -> None:
        """Delete every file this store wrote."""
        if self._active is not None:
            # Buffered bytes a full disk refuses again: the folder is deleted below anyway.
            with contextlib.suppress(OSError):
                self._active.close()
            self._active = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            log.debug("removed spill folder %s", self._dir)
            self._dir = None
        self._refs.clear()
