"""The binlog dump stream cut into packets from large buffered reads, not one packet at a time.

mysql-replication reads the stream with pymysql's ``_read_packet``: two reads, a packet object
and a sequence check per packet, then a wrapper object and an event object per event. On
single-row transactions (five events each) that framing, not the rows, is most of the reader's
time. `packets` reads the same socket (the connection's buffered file, after the library has
sent COM_BINLOG_DUMP and read the first event, so nothing the library buffered is lost) in
chunks of `CHUNK` bytes and yields each event packet's payload as one ``bytes``: the OK byte
(0x00), the 19-byte event header, the body and, with ``binlog_checksum=CRC32``, the 4 checksum
bytes. `rowbus.producer.binlog` reads the header and the few events it needs from these bytes
and hands the others to the library, built from the same bytes.

Ends of the stream, as pymysql and the library treat them: an EOF packet ends a non-blocking
dump (the generator returns); an error packet raises pymysql's error for it; a closed socket
raises `EOFError`; a read timeout raises the socket's `OSError`. Packets of 2^24-1 bytes are
continued by the next packet (events over 16 MB), as the MySQL protocol frames them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pymysql

from rowbus.producer import fastrows

CHUNK = 1 << 18
"""Bytes asked per read: one read serves hundreds of small events."""
_MAX_PACKET = 0xFFFFFF


class Stats:
    """Event packets framed here since start (tests and benchmarks)."""

    packets = 0


_OK, _EOF, _ERR = 0x00, 0xFE, 0xFF


def packets(rfile: Any, native: bool = True) -> Iterator[bytes]:
    """Event payloads (OK byte first) from `rfile` (a connection's buffered socket file).
    The whole OK packets of each read are cut natively (`fastrows.packet_splitter`) when built
    and `native`; this loop frames the others (partial, continued, EOF, error)."""
    buf = b""
    pos = 0
    read1 = rfile.read1
    split = fastrows.packet_splitter() if native else None
    while True:
        if split is not None:
            cut, pos = split(buf, pos)
            if cut:
                Stats.packets += len(cut)
                yield from cut
        have = len(buf) - pos
        if have < 4:
            buf = buf[pos:] + _more(read1, CHUNK)
            pos = 0
            continue
        size = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
        end = pos + 4 + size
        if end > len(buf):
            # The rest of a packet larger than what is buffered: one exact read.
            buf = buf[pos:] + _exactly(rfile, end - len(buf))
            pos = 0
            continue
        payload = buf[pos + 4 : end]
        pos = end
        if size == _MAX_PACKET:
            parts = [payload]
            while size == _MAX_PACKET:
                if len(buf) - pos < 4:
                    buf = buf[pos:] + _exactly(rfile, 4 - (len(buf) - pos))
                    pos = 0
                size = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
                buf = buf[pos + 4 :]
                pos = 0
                if len(buf) < size:
                    buf += _exactly(rfile, size - len(buf))
                parts.append(buf[:size])
                pos = size
            payload = b"".join(parts)
        first = payload[0] if payload else -1
        if first == _OK:
            Stats.packets += 1
            yield payload
        elif first == _EOF and len(payload) < 9:
            return
        elif first == _ERR:
            pymysql.err.raise_mysql_exception(payload)
        # Anything else the library would skip too (it yields OK packets only).


def _more(read1: Any, n: int) -> bytes:
    chunk: bytes = read1(n)
    if not chunk:
        raise EOFError("the server closed the binlog stream")
    return chunk


def _exactly(rfile: Any, n: int) -> bytes:
    chunk: bytes = rfile.read(n)
    if len(chunk) < n:
        raise EOFError("the server closed the binlog stream inside a packet")
    return chunk
