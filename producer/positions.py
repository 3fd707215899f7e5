"""Start positions and GTID state.

A start position is used only when the source has no checkpoint yet (`ReaderSettings.start`)::

    earliest                      the oldest binlog file still on the server
    latest                        the server's current end (SHOW MASTER STATUS)
    gtid:<set>                    after the transaction(s) of a GTID set (MariaDB ``0-1-42[,…]``,
                                  MySQL ``uuid:1-42``): located by scanning the binlog
    file:<binlog file>:<pos>      an exact transaction boundary
    timestamp:<unix seconds>      the first transaction committed at or after it (a scan)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rowbus.producer.exceptions import BadStartPositionError

_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")


@dataclass(frozen=True, slots=True)
class StartSpec:
    kind: str  # earliest | latest | gtid | file | timestamp
    file: str | None = None
    pos: int | None = None
    gtid_set: str | None = None
    timestamp: int | None = None


def parse_start(text: str) -> StartSpec:
    """The `StartSpec` of a ``start`` setting; BadStartPositionError naming the forms."""
    forms = "earliest, latest, gtid:<set>, file:<binlog file>:<pos>, timestamp:<unix seconds>"
    value = text.strip()
    if value in ("earliest", "latest"):
        return StartSpec(value)
    kind, _, rest = value.partition(":")
    try:
        if kind == "gtid" and rest:
            return StartSpec("gtid", gtid_set=rest.strip())
        if kind == "file":
            name, _, pos = rest.rpartition(":")
            if name and int(pos) >= 4:
                return StartSpec("file", file=name, pos=int(pos))
        if kind == "timestamp" and rest:
            return StartSpec("timestamp", timestamp=int(float(rest)))
    except ValueError:
        pass
    raise BadStartPositionError(f"start position {text!r} is not one of: {forms}")


def is_mariadb_gtid(gtid: str) -> bool:
    return _MARIADB_GTID.match(gtid) is not None


class GtidState:
    """A MariaDB GTID state (last GTID per domain), or the last MySQL GTID seen.

    `str()` is what a checkpoint stores as ``gtid_set``: ``0-1-42,1-2-7`` for MariaDB.
    """

    def __init__(self, text: str | None = None) -> None:
        self._domains: dict[int, str] = {}
        self._other: str | None = None
        for part in (text or "").split(","):
            if part.strip():
                self.add(part.strip())

    def add(self, gtid: str) -> None:
        m = _MARIADB_GTID.match(gtid)
        if m is None:
            self._other = gtid
        else:
            self._domains[int(m.group(1))] = gtid

    def copy(self) -> GtidState:
        other = GtidState()
        other._domains = dict(self._domains)
        other._other = self._other
        return other

    def contains(self, gtid: str) -> bool:
        """Whether `gtid` (MariaDB form) is at or before this state in its domain."""
        m = _MARIADB_GTID.match(gtid)
        if m is None:
            return gtid == self._other
        last = self._domains.get(int(m.group(1)))
        return last is not None and int(last.rsplit("-", 1)[1]) >= int(m.group(3))

    def __str__(self) -> str:
        parts = [self._domains[d] for d in sorted(self._domains)]
        if self._other:
            parts.append(self._other)
        return ",".join(parts)

    def __bool__(self) -> bool:
        return bool(self._domains) or self._other is not None
