"""A checkpoint in a local file."""

from __future__ import annotations

import os
from pathlib import Path

from rowbus.consumers.stores.base import CheckpointStore
from rowbus.merge.checkpoint import Checkpoint
from rowbus.merge.exceptions import CheckpointError


class FileCheckpointStore(CheckpointStore):
    """The checkpoint as JSON in `path`, replaced atomically (write, fsync, rename) on save.

    Guarantee: at least once — a crash after handling a transaction and before `save`
    delivers it again; nothing at or before the saved checkpoint is delivered again.
    """

    def __init__(self, path: Path | str) -> None:
        super().__init__()
        self.path = Path(path)

    def _load(self) -> Checkpoint | None:
        try:
            return Checkpoint.from_json(self.path.read_bytes())
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {exc.strerror}") from exc

    def _save(self, checkpoint: Checkpoint) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tmp.open("w", encoding="utf-8") as f:
                f.write(checkpoint.to_json())
                f.flush()
                os.fsync(f.fileno())
            tmp.replace(self.path)
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise CheckpointError(f"cannot write checkpoint {self.path}: {exc.strerror}") from exc
