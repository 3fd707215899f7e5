"""Encode records to Kafka values + headers, and decode them back (PROTOCOL.md §5-§6).

``encode(record, encoding)`` returns the value bytes and the headers ``rowbus-version``,
``rowbus-encoding`` and ``rowbus-kind``; ``decode(value, headers, position)`` returns the record
or raises `ProtocolError` located at `position` (``topic[partition]@offset``).

- `pb`, `avro`, `jsonc`: the three encodings;
- `image`: row images as columns of kinds, shared by protobuf and Avro;
- `fastpath`: image split/join functions generated per row shape;
- `construct`: fast constructors of the hot records, for decoders.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum

from rowbus.protocol.codec import avro, jsonc, pb
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import (
    ControlRecord,
    DdlChange,
    Heartbeat,
    ReaderCheckpoint,
    Record,
    Resolved,
    RowChange,
    SchemaRecord,
    SnapshotBegin,
    SnapshotEnd,
)

PROTOCOL_VERSION = "1.5"
PROTOCOL_MAJOR = 1
PROTOCOL_MINOR = 5
VERSION_HEADER = "rowbus-version"
ENCODING_HEADER = "rowbus-encoding"
KIND_HEADER = "rowbus-kind"

Headers = Sequence[tuple[str, bytes | None]]


class Encoding(Enum):
    """How a record value is encoded; named by the ``rowbus-encoding`` header."""

    PROTOBUF = "protobuf"
    AVRO = "avro"
    JSON = "json"


KIND_NAMES: dict[type, str] = {
    RowChange: "row",
    DdlChange: "ddl",
    Resolved: "resolved",
    Heartbeat: "heartbeat",
    SchemaRecord: "schema",
    ReaderCheckpoint: "checkpoint",
    ControlRecord: "control",
    SnapshotBegin: "snapshot_begin",
    SnapshotEnd: "snapshot_end",
}
_KNOWN_KINDS = frozenset(KIND_NAMES.values())

DEBEZIUM_ENCODING = "debezium"
"""The ``rowbus-encoding`` of the records a reader writes with ``reader.encoding: debezium``
(`rowbus.protocol.debezium`): for Debezium's consumers, refused by `decode`."""
_DEBEZIUM_START = b'{"schema":{"type":"struct"'
_DEBEZIUM_REFUSED = (
    "a record of the debezium encoding (written with reader.encoding: debezium, or by "
    "Debezium), which only Debezium's consumers read"
)
_DEBEZIUM_FIX = (
    "point rowbus tail, the Subscriber or the apply job at the topics of a reader with a "
    "native encoding (protobuf, avro or json)"
)

# Keyed by the encoding's value: hashing an Enum member runs Python code, a str does not.
_ENCODERS: dict[str, Callable[[Record], bytes]] = {
    Encoding.PROTOBUF.value: pb.encode,
    Encoding.AVRO.value: avro.encode,
    Encoding.JSON.value: jsonc.encode,
}
_DECODERS: dict[str, Callable[[bytes], Record]] = {
    Encoding.PROTOBUF.value: pb.decode,
    Encoding.AVRO.value: avro.decode,
    Encoding.JSON.value: jsonc.decode,
}
# Header lists seen before and found valid -> (encoding, kind); bounded.
_HEADER_CACHE: dict[
    tuple[tuple[str, bytes | None], ...], tuple[Encoding | None, str | None, str | None]
] = {}
_HEADER_CACHE_LIMIT = 256
_VERSION_BYTES = PROTOCOL_VERSION.encode()
_HEADERS: dict[tuple[str, type], list[tuple[str, bytes]]] = {
    (enc.value, cls): [
        (VERSION_HEADER, _VERSION_BYTES),
        (ENCODING_HEADER, enc.value.encode()),
        (KIND_HEADER, kind.encode()),
    ]
    for enc in Encoding
    for cls, kind in KIND_NAMES.items()
}


def kind_name(record: Record) -> str:
    """The ``rowbus-kind`` of `record`: row, ddl, resolved, heartbeat, schema, checkpoint,
    control, snapshot_begin, snapshot_end."""
    try:
        return KIND_NAMES[type(record)]
    except KeyError:
        raise ProtocolError(f"{type(record).__name__} is not a rowbus record") from None


def encode(
    record: Record, encoding: Encoding = Encoding.PROTOBUF
) -> tuple[bytes, list[tuple[str, bytes]]]:
    """The value bytes of `record` and the headers to send with them (a fresh list)."""
    enc = encoding._value_
    try:
        headers = _HEADERS[enc, type(record)]
    except KeyError:
        kind_name(record)  # raises: not a record
        raise
    return _ENCODERS[enc](record), list(headers)


def decode(
    value: bytes | None,
    headers: Headers | None,
    position: str | None = None,
    *,
    image: pb.ImageBuilder | None = None,
) -> Record:
    """The record in a Kafka value; ProtocolError naming `position` if it is not a valid one.

    Without a ``rowbus-encoding`` header the encoding is sniffed: JSON if the value starts with
    ``{``, protobuf otherwise (Avro always needs the header). Without a ``rowbus-version`` header
    the value is read as this major version. `image`: how a protobuf row's images are built
    from their wire columns (`pb.decode`; other encodings decode values).
    """
    try:
        if value is None:
            raise ProtocolError("the record has no value (a tombstone is not a rowbus event)")
        encoding, kind, old_avro = _encoding_of(value, headers)
        if old_avro:
            record = avro.decode(value, old_avro)
        elif image is not None and encoding is Encoding.PROTOBUF:
            record = pb.decode(value, image)
        else:
            record = _DECODERS[encoding._value_](value)
        if kind is not None and KIND_NAMES[type(record)] != kind:
            raise ProtocolError(
                f"header {KIND_HEADER}={kind} but the value holds a {KIND_NAMES[type(record)]}"
            )
    except ProtocolError as exc:
        raise (exc.at(position) if position else exc) from None
    return record


def protobuf_kind(headers: Headers | None) -> str | None:
    """For a native reader of protobuf values: the kind header ("" when there is none) when
    `decode` reads a value under `headers` as protobuf (by its encoding header, or, without
    one, by sniffing a value that does not start with ``{``); None when it reads such values
    otherwise or refuses the headers (then `decode` must read them, and raises what it must)."""
    try:
        encoding, kind, old_avro = _encoding_of(b"\n", headers)
    except ProtocolError:
        return None
    if encoding is not Encoding.PROTOBUF or old_avro is not None:
        return None
    return kind or ""


def _encoding_of(value: bytes, headers: Headers | None) -> tuple[Encoding, str | None, str | None]:
    found: tuple[Encoding | None, str | None, str | None]
    if headers:
        key = tuple(headers)
        found = _HEADER_CACHE.get(key) or _check_headers(headers)
        if len(_HEADER_CACHE) < _HEADER_CACHE_LIMIT:
            _HEADER_CACHE[key] = found  # only valid header lists get here
    else:
        found = None, None, None
    encoding, kind, old_avro = found
    if encoding is None:  # no rowbus-encoding header: sniff
        if value.startswith(_DEBEZIUM_START):
            raise ProtocolError(_DEBEZIUM_REFUSED, fix=_DEBEZIUM_FIX)  # by Debezium itself
        encoding = Encoding.JSON if value[:1] == b"{" else Encoding.PROTOBUF
    return encoding, kind, old_avro


def _check_headers(headers: Headers) -> tuple[Encoding | None, str | None, str | None]:
    version = encoding_name = kind = None
    for name, raw in headers:
        if name == VERSION_HEADER and version is None:
            version = _text(name, raw)
        elif name == ENCODING_HEADER and encoding_name is None:
            encoding_name = _text(name, raw)
        elif name == KIND_HEADER and kind is None:
            kind = _text(name, raw)
    if version is not None:
        check_version(version)
    if kind is not None and kind not in _KNOWN_KINDS:
        raise ProtocolError(f"unknown event kind {kind!r} in header {KIND_HEADER}")
    if encoding_name is None:
        return None, kind, None
    if encoding_name == DEBEZIUM_ENCODING:
        raise ProtocolError(_DEBEZIUM_REFUSED, fix=_DEBEZIUM_FIX)
    try:
        encoding = Encoding(encoding_name)
    except ValueError:
        known = ", ".join(e.value for e in Encoding)
        raise ProtocolError(
            f"unknown encoding {encoding_name!r} in header {ENCODING_HEADER} (known: {known})"
        ) from None
    if encoding is Encoding.AVRO and version is not None and version != PROTOCOL_VERSION:
        # A bare Avro datum needs its writer's schema: read it with that version's schema.
        if version not in avro.WRITER_SCHEMAS:
            raise ProtocolError(
                f"Avro value written by protocol {version}; this decoder has the Avro schemas "
                f"of {', '.join(sorted(avro.WRITER_SCHEMAS))} only"
            )
        return encoding, kind, version
    return encoding, kind, None


def check_version(version: str) -> None:
    """Refuse a protocol version whose major this decoder does not read."""
    major, dot, minor = version.partition(".")
    if not (major.isdigit() and dot and minor.isdigit()):
        raise ProtocolError(f"malformed {VERSION_HEADER} header {version!r} (want MAJOR.MINOR)")
    if int(major) != PROTOCOL_MAJOR:
        raise ProtocolError(
            f"unsupported protocol version {version}: this decoder reads {PROTOCOL_MAJOR}.x",
            fix="upgrade the consumer (or the rowbus package) to read it",
        )


def _text(name: str, raw: bytes | None) -> str:
    if raw is None:
        raise ProtocolError(f"header {name} has no value")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"header {name} is not UTF-8") from None


__all__ = [
    "ENCODING_HEADER",
    "KIND_HEADER",
    "PROTOCOL_VERSION",
    "VERSION_HEADER",
    "Encoding",
    "decode",
    "encode",
    "kind_name",
]
