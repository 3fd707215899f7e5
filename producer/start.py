"""The reader's start position (`ReaderSettings.start`, used only when the source has no
checkpoint yet): the one grammar of `rowbus.protocol.positions`, without a source prefix or with
the reader's own source."""

from __future__ import annotations

from rowbus.producer.exceptions import BadStartPositionError
from rowbus.protocol.positions import GtidState, StartPosition, is_mariadb_gtid
from rowbus.protocol.positions import parse_start as parse_any

__all__ = ["GtidState", "StartPosition", "is_mariadb_gtid", "parse_start"]


def parse_start(text: str, source: str | None = None) -> StartPosition:
    """The reader's `StartPosition`; BadStartPositionError naming the forms, or naming the
    source when the position is another source's."""
    try:
        start = parse_any(text)
    except ValueError as exc:
        raise BadStartPositionError(str(exc)) from exc
    if start.source is not None and source is not None and start.source != source:
        raise BadStartPositionError(
            f"start position {text!r} names source {start.source!r}; this reader reads "
            f"{source!r} (drop the prefix or name this source)"
        )
    return start
