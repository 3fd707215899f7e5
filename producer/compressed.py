"""MariaDB's compressed binlog events (``log_bin_compress=ON``) inflated into ordinary ones.

MariaDB compresses a statement or a rows body when it is at least ``log_bin_compress_min_len``
bytes long, and marks the event with a type of its own (sql/log_event.h, 10.2+):

- Query_compressed (165): a Query event whose statement is compressed; everything before the
  statement (post-header, status variables, default schema and its NUL) is as in a Query event.
- Write/Update/Delete_rows_compressed_v1 (166-168): rows events v1 (8-byte post-header: table id,
  flags) whose rows are compressed; the column count and the columns-present bitmap(s) before
  them are not.
- Write/Update/Delete_rows_compressed (169-171): the same with the v2 post-header, that is with
  the extra-data block after the flags (its 2-byte length counts itself). MariaDB's format
  description declares the v2 post-header length for these three, and its own reader turns
  them into types 30-32 only then; 166-168 carry the v1 length and become 23-25.

A compressed part is one header byte (bit 7 set; bits 4-6 the algorithm, 0 = zlib, the only one
MariaDB writes; bits 0-2 how many bytes the uncompressed length takes), that length big-endian,
then a zlib stream (RFC 1950) of exactly that many bytes.

`inflate` turns such an event, as the dump stream delivers it (the packet's OK byte first), into
the bytes of the ordinary event the server would have written uncompressed: the type and the
size in the header changed, the CRC32 checksum (when the stream carries one) computed anew over
the rebuilt event. Its end position (``log_pos``) is the compressed event's, so positions,
checkpoints and resume points stay those of the binlog on the server. Every decoding path
(`rowbus.producer.binlog`: framed, native, pure Python, transaction scan) reads the rebuilt
bytes with the code it reads uncompressed events with; there is no second decoder.

Inflation is bounded: the output is never larger than the declared length, and the declared
length never larger than `LIMIT`; a payload that inflates to more or less than it declares, a
wrong checksum, an unknown algorithm or a truncated body raises `Corrupt`, which the reader turns
into one line at the event's position (it never passes such an event by).
"""

from __future__ import annotations

import zlib

QUERY_COMPRESSED = 165
PLAIN = {165: 2, 166: 23, 167: 24, 168: 25, 169: 30, 170: 31, 171: 32}
"""Compressed type -> the ordinary type its inflated bytes are."""
ROWS = frozenset(c for c in PLAIN if c != QUERY_COMPRESSED)
_UPDATES = frozenset((167, 170))
"""Update rows events: two columns-present bitmaps (before and after image)."""
_V2 = frozenset((169, 170, 171))
LIMIT = 1 << 30
"""The largest uncompressed length accepted: 1 GiB, the most `slave_max_allowed_packet` lets a
MariaDB server send a replica in one event; a larger declared length is a corrupt one."""

_HEADER = 1 + 19
"""The packet's OK byte and the event header before the body."""
_TYPE, _SIZE = 5, 10
"""Offsets in the payload of the header's type code and event size."""
_QUERY_POST_HEADER = 13
"""Thread id (4), time (4), schema length (1), error code (2), status variables' length (2)."""
_ROWS_V1_POST_HEADER = 8
"""Table id (6), flags (2); v2 adds the extra-data block whose 2-byte length counts itself."""


class Corrupt(Exception):  # noqa: N818 - control flow; the reader raises CorruptBinlogError
    """A compressed event that cannot be inflated into the event it stands for."""

    def __init__(self, code: int, end: int, why: str) -> None:
        super().__init__(code, end, why)
        self.code, self.end, self.why = code, end, why


def inflate(payload: bytes, checksum: bool) -> bytes:
    """The ordinary event's payload for a compressed event's `payload` (OK byte, header, body
    and, when `checksum`, the 4 CRC32 bytes). Raises `Corrupt`."""
    code = payload[_TYPE]
    end = int.from_bytes(payload[14:18], "little")
    tail = 4 if checksum else 0
    stop = len(payload) - tail
    if int.from_bytes(payload[_SIZE : _SIZE + 4], "little") != len(payload) - 1:
        raise Corrupt(code, end, "its size in the header is not the size of the packet")
    if checksum and zlib.crc32(payload[1:stop]) != int.from_bytes(payload[stop:], "little"):
        raise Corrupt(code, end, "its CRC32 checksum does not match its bytes")
    start = _compressed_part(payload, code, stop)
    if start is None or start >= stop:
        raise Corrupt(code, end, "the event ends before its compressed part")
    body = _zlib(payload, start, stop, code, end)
    size = start - 1 + len(body) + tail
    rebuilt = bytearray(payload[:start])
    rebuilt[_TYPE] = PLAIN[code]
    rebuilt[_SIZE : _SIZE + 4] = size.to_bytes(4, "little")
    rebuilt += body
    if checksum:
        rebuilt += zlib.crc32(memoryview(rebuilt)[1:]).to_bytes(4, "little")
    return bytes(rebuilt)


def _compressed_part(payload: bytes, code: int, stop: int) -> int | None:
    """Where the compressed part starts: after what the event keeps uncompressed."""
    p = _HEADER
    if code == QUERY_COMPRESSED:
        if p + _QUERY_POST_HEADER > stop:
            return None
        schema = payload[p + 8]
        status = int.from_bytes(payload[p + 11 : p + 13], "little")
        return p + _QUERY_POST_HEADER + status + schema + 1
    p += _ROWS_V1_POST_HEADER
    if code in _V2:
        if p + 2 > stop:
            return None
        extra = int.from_bytes(payload[p : p + 2], "little")
        if extra < 2:
            return None
        p += extra
    if p >= stop:
        return None
    ncols, p = _lenenc(payload, p, stop)
    if ncols is None:
        return None
    return p + ((ncols + 7) >> 3) * (2 if code in _UPDATES else 1)


def _lenenc(data: bytes, p: int, stop: int) -> tuple[int | None, int]:
    first = data[p]
    if first < 251:
        return first, p + 1
    width = {252: 2, 253: 3, 254: 8}.get(first)
    if width is None or p + 1 + width > stop:
        return None, p
    return int.from_bytes(data[p + 1 : p + 1 + width], "little"), p + 1 + width


def _zlib(payload: bytes, start: int, stop: int, code: int, end: int) -> bytes:
    """The compressed part at payload[start:stop] inflated, never to more than it declares."""
    flag = payload[start]
    if flag & 0xF0 != 0x80:
        raise Corrupt(code, end, f"its compressed part's header byte 0x{flag:02x} is not zlib's")
    width = flag & 0x07
    first = start + 1 + width
    if not 1 <= width <= 4 or first > stop:
        raise Corrupt(code, end, f"its compressed part declares a {width}-byte length")
    declared = int.from_bytes(payload[start + 1 : first], "big")
    if not 0 < declared <= LIMIT:
        # 0 is MariaDB's own "bad event" (and would lift zlib's bound below: max_length=0).
        raise Corrupt(code, end, f"it declares {declared} bytes uncompressed (1 to {LIMIT})")
    inflater = zlib.decompressobj()
    try:
        # max_length bounds the output (and what zlib allocates for it) by the declared length.
        body = inflater.decompress(memoryview(payload)[first:stop], declared)
    except zlib.error as exc:
        raise Corrupt(code, end, f"its zlib data is corrupt ({exc})") from None
    if inflater.unconsumed_tail or (not inflater.eof and len(body) == declared):
        raise Corrupt(code, end, f"it inflates to more than the {declared} bytes it declares")
    if not inflater.eof or len(body) != declared:
        raise Corrupt(
            code, end, f"it inflates to {len(body)} bytes, not the {declared} it declares"
        )
    if inflater.unused_data:
        raise Corrupt(code, end, "bytes follow its zlib data")
    return body
