"""The checkpoint store boundary."""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum
from typing import ClassVar, Self

from rowbus.merge.checkpoint import Checkpoint


class Guarantee(Enum):
    """What a crash between handling a transaction and saving its checkpoint means."""

    AT_LEAST_ONCE = "at-least-once"
    """The transactions handled since the last save are delivered again after a restart."""
    EXACTLY_ONCE = "exactly-once"
    """The checkpoint is written in the same transaction as the handled data: nothing again."""


class CheckpointStore(ABC):
    """Keeps one subscriber's latest `Checkpoint`.

    Lifecycle: the constructor does no I/O; `open()` connects; `load()` returns the last saved
    checkpoint (None before the first save); `save()` persists one and refuses, with
    `CheckpointError`, a checkpoint that is behind the last one loaded or saved (checkpoints
    never move backwards); `close()` releases the connection. Usable as a context manager.
    `guarantee` says what survives a crash (see `Guarantee`).
    """

    guarantee: ClassVar[Guarantee] = Guarantee.AT_LEAST_ONCE

    def __init__(self) -> None:
        self._last: Checkpoint | None = None

    def open(self) -> None:  # noqa: B027 - a backend without a connection needs nothing
        """Connect."""

    def close(self) -> None:  # noqa: B027
        """Release the connection."""

    def load(self) -> Checkpoint | None:
        """The last saved checkpoint, or None."""
        checkpoint = self._load()
        if checkpoint is not None:
            checkpoint.check_follows(self._last)
        self._last = checkpoint
        return checkpoint

    def save(self, checkpoint: Checkpoint) -> None:
        """Persist `checkpoint`; CheckpointError if it is behind the last one."""
        checkpoint.check_follows(self._last)
        self._save(checkpoint)
        self._last = checkpoint

    @abstractmethod
    def _load(self) -> Checkpoint | None: ...

    @abstractmethod
    def _save(self, checkpoint: Checkpoint) -> None: ...

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class MemoryCheckpointStore(CheckpointStore):
    """A store in memory (tests, and `rowbus tail` without a store): lost on exit."""

    def __init__(self) -> None:
        super().__init__()
        self._value: Checkpoint | None = None

    def _load(self) -> Checkpoint | None:
        return self._value

    def _save(self, checkpoint: Checkpoint) -> None:
        self._value = checkpoint
