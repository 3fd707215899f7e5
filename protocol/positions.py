"""Positions in a source's history: GTIDs, GTID sets, and the one start-position grammar.

Every command that takes a start position (the reader's ``reader.start``, ``rowbus tail
--from``, the `Subscriber`) reads it with `parse_start`::

    earliest                         the oldest history still available
    latest                           from now on
    timestamp:<when>                 the first transaction committed at or after <when>: unix
                                     seconds (fraction allowed) or an ISO 8601 date-time (UTC
                                     if it has no zone)
    [SOURCE@]gtid:<gtid set>         after the transaction(s) of a GTID set (MariaDB
                                     ``0-1-42[,1-2-7]``, MySQL ``uuid:1-42``, with MySQL
                                     8.3+'s tags ``uuid:1-42:tag:1-5``)
    [SOURCE@]file:<binlog file>:<pos>  an exact binlog transaction boundary

A GTID or binlog position belongs to one source: a reader takes it without a prefix (its own
source), a subscriber of several sources needs ``SOURCE@`` (the other sources start from
earliest).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Literal

_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")
_MYSQL_GTID = re.compile(r"^([0-9a-fA-F-]{36})(?::([A-Za-z_][A-Za-z0-9_]{0,31}))?:(\d+)$")
"""MySQL's ``uuid:N`` and, from 8.3, ``uuid:tag:N`` (a tag: a letter or ``_``, then up to 31
letters, digits or ``_``; MySQL compares tags case-insensitively and prints them lower-case)."""
_TAG = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
_SOURCE = re.compile(r"^[A-Za-z0-9_.-]+$")

START_FORMS = (
    "earliest, latest, timestamp:<unix seconds or ISO date-time>, [SOURCE@]gtid:<gtid set>, "
    "[SOURCE@]file:<binlog file>:<pos>"
)

StartKind = Literal["earliest", "latest", "timestamp", "gtid", "file"]


@dataclass(frozen=True, slots=True)
class StartPosition:
    """A parsed start position; see the module docstring for the grammar."""

    kind: StartKind
    source: str | None = None
    gtid_set: str | None = None
    file: str | None = None
    offset: int | None = None
    timestamp_ms: int | None = None

    @property
    def timestamp_s(self) -> int | None:
        return None if self.timestamp_ms is None else self.timestamp_ms // 1000


def parse_start(text: str) -> StartPosition:
    """The `StartPosition` of `text`; ValueError naming the accepted forms."""
    value = text.strip()
    if value in ("earliest", "latest"):
        return StartPosition(value)  # type: ignore[arg-type]
    source: str | None = None
    head, at, rest = value.partition("@")
    if at and _SOURCE.match(head):
        source, value = head, rest
    kind, _, arg = value.partition(":")
    try:
        parts = [p.strip() for p in arg.split(",") if p.strip()]
        if kind == "gtid" and parts and all(parse_gtid_set(p) for p in parts):
            return StartPosition("gtid", source=source, gtid_set=",".join(parts))
        if kind == "file":
            name, _, pos = arg.rpartition(":")
            if name and int(pos) >= 4:
                return StartPosition("file", source=source, file=name, offset=int(pos))
        if kind == "timestamp" and arg and source is None:
            return StartPosition("timestamp", timestamp_ms=_when_ms(arg.strip()))
    except ValueError:
        pass
    raise ValueError(f"start position {text!r} is not one of: {START_FORMS}")


def _when_ms(text: str) -> int:
    try:
        return int(float(text) * 1000)
    except ValueError:
        when = dt.datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


# -- GTIDs -------------------------------------------------------------------------------------


def is_mariadb_gtid(gtid: str) -> bool:
    return _MARIADB_GTID.match(gtid) is not None


def parse_gtid(gtid: str) -> tuple[str, int]:
    """A GTID as (stream, sequence number): MariaDB ``D-S-N`` → (``D``, N), MySQL ``uuid:N`` →
    (uuid, N), a tagged one ``uuid:tag:N`` → (``uuid:tag``, N). Sequence numbers grow within a
    stream (a MariaDB domain, a MySQL server uuid, a uuid with one tag: each tag numbers its
    own transactions)."""
    if match := _MARIADB_GTID.match(gtid):
        return match.group(1), int(match.group(3))
    if match := _MYSQL_GTID.match(gtid):
        return _stream(match.group(1), match.group(2)), int(match.group(3))
    raise ValueError(
        f"{gtid!r} is neither a MariaDB (D-S-N) nor a MySQL (uuid:N or uuid:tag:N) GTID"
    )


def _stream(uuid: str, tag: str | None) -> str:
    return f"{uuid.lower()}:{tag.lower()}" if tag else uuid.lower()


def parse_gtid_set(text: str | None) -> dict[str, int]:
    """A GTID set as {stream: highest sequence number}: MariaDB ``0-1-42,1-2-7`` or MySQL
    ``uuid:1-42:50-60,uuid2:1-5``, where (MySQL 8.3+) a tag among the ranges applies to the
    ranges after it: ``uuid:1-5:tag:1-3`` is {uuid: 5, ``uuid:tag``: 3}; unparsable parts are
    skipped."""
    out: dict[str, int] = {}
    for raw in (text or "").replace("\n", "").split(","):
        part = raw.strip()
        if not part:
            continue
        if match := _MARIADB_GTID.match(part):
            out[match.group(1)] = max(out.get(match.group(1), 0), int(match.group(3)))
            continue
        uuid, _, ranges = part.partition(":")
        if not uuid:
            continue
        tag: str | None = None
        for item in ranges.split(":"):
            if _TAG.match(item):
                tag = item
                continue
            high = item.rpartition("-")[2]
            if high.isdigit():
                key = _stream(uuid, tag)
                out[key] = max(out.get(key, 0), int(high))
    return out


def format_gtid_set(streams: dict[str, int]) -> str:
    """MySQL {stream: highest} back as a GTID set of ranges from 1 (`parse_gtid_set`'s inverse
    for contiguous histories): one part per uuid, its untagged range first, then each tag with
    its range (``uuid:1-5:tag:1-3``), as MySQL prints gtid_executed."""
    by_uuid: dict[str, list[str]] = {}
    for key, n in sorted(streams.items()):
        uuid, _, tag = key.partition(":")
        if key.isdigit():
            raise ValueError(f"{key!r} is a MariaDB domain: its set is a list of GTIDs")
        span = f"1-{n}" if n > 1 else "1"
        by_uuid.setdefault(uuid, []).append(f"{tag}:{span}" if tag else span)
    return ",".join(f"{u}:{':'.join(p)}" for u, p in by_uuid.items())


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
