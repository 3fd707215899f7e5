"""A fake MySQL 8 server on a loopback socket, speaking only what a connection needs: the
HandshakeV10 packet offering caching_sha2_password, the client's HandshakeResponse41 checked
against the documented fast-auth scramble, the AuthMoreData replies (fast auth succeeded,
or full authentication required and the RSA public key request), OK/ERR, and a one-column
text result set for any SELECT (MySQL client/server protocol, "Connection Phase" and
"caching_sha2_password" pages). Pure protocol logic, for tests."""

from __future__ import annotations

import hashlib
import socket
import struct
import threading
from dataclasses import dataclass, field

CAPS = 0x1 | 0x8 | 0x200 | 0x2000 | 0x8000 | 0x80000  # long pw, db, 4.1, txn, secure, plugin
PLUGIN = b"caching_sha2_password"


def scramble(password: bytes, nonce: bytes) -> bytes:
    """XOR(SHA256(password), SHA256(SHA256(SHA256(password)), nonce)): the fast-auth reply."""
    p1 = hashlib.sha256(password).digest()
    p3 = hashlib.sha256(hashlib.sha256(p1).digest() + nonce).digest()
    return bytes(a ^ b for a, b in zip(p1, p3, strict=True))


def _lenenc(data: bytes) -> bytes:
    assert len(data) < 251
    return bytes([len(data)]) + data


@dataclass
class FakeServer:
    password: bytes
    cached: bool = True
    """True: the password is in the server's cache (fast auth); False: full auth required."""
    version: bytes = b"8.4.3-fake"
    nonce: bytes = bytes(range(65, 85))
    port: int = 0
    seen: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._sock.close()
        self._thread.join(5)

    def _serve(self) -> None:
        self._sock.settimeout(10)
        try:
            conn, _ = self._sock.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(10)
            try:
                self._session(_Packets(conn))
            except (OSError, EOFError):
                return

    def _session(self, io: _Packets) -> None:
        io.send(self._handshake())
        response = io.recv()
        user, auth = self._parse_response(response)
        self.seen.append(f"login {user}")
        if auth != scramble(self.password, self.nonce):
            io.send(b"\xff" + struct.pack("<H", 1045) + b"#28000Access denied for user")
            return
        if self.cached:
            io.send(b"\x01\x03")  # fast auth succeeded
        else:
            io.send(b"\x01\x04")  # perform full authentication
            request = io.recv()
            self.seen.append(f"full auth {request[:1].hex()}")
            if request == b"\x02":  # the client asks for the RSA public key
                io.send(b"\x01-----BEGIN PUBLIC KEY-----\nfake\n-----END PUBLIC KEY-----\n")
                io.recv()  # the encrypted password (never valid here)
            io.send(b"\xff" + struct.pack("<H", 1045) + b"#28000Access denied for user")
            return
        io.send(b"\x00\x00\x00\x02\x00\x00\x00")  # OK
        while True:
            command = io.recv()
            if command[:1] == b"\x01":  # COM_QUIT
                return
            text = command[1:].decode()
            self.seen.append(text)
            if text.upper().startswith("SELECT"):
                self._result(io, text[7:].strip().encode(), self.version)
            else:
                io.send(b"\x00\x00\x00\x02\x00\x00\x00")

    def _handshake(self) -> bytes:
        return (
            b"\x0a"
            + self.version
            + b"\x00"
            + struct.pack("<I", 7)
            + self.nonce[:8]
            + b"\x00"
            + struct.pack("<H", CAPS & 0xFFFF)
            + b"\xff"  # utf8mb4_0900_ai_ci
            + struct.pack("<H", 2)
            + struct.pack("<H", CAPS >> 16)
            + bytes([21])
            + b"\x00" * 10
            + self.nonce[8:]
            + b"\x00"
            + PLUGIN
            + b"\x00"
        )

    @staticmethod
    def _parse_response(data: bytes) -> tuple[str, bytes]:
        caps = struct.unpack("<I", data[:4])[0]
        assert caps & 0x200, "a 4.1 client"
        rest = data[32:]
        user, _, rest = rest.partition(b"\x00")
        n = rest[0]
        return user.decode(), rest[1 : 1 + n]

    @staticmethod
    def _result(io: _Packets, name: bytes, value: bytes) -> None:
        io.send(b"\x01")
        column = (
            _lenenc(b"def")
            + _lenenc(b"")
            + _lenenc(b"")
            + _lenenc(b"")
            + _lenenc(name)
            + _lenenc(b"")
            + b"\x0c"
            + struct.pack("<HIBHB", 255, 256, 0xFD, 0, 0)
            + b"\x00\x00"
        )
        io.send(column)
        io.send(b"\xfe\x00\x00\x02\x00")  # EOF
        io.send(_lenenc(value))
        io.send(b"\xfe\x00\x00\x02\x00")


class _Packets:
    """MySQL packets: 3-byte length, 1-byte sequence id, payload."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.seq = 0

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.conn.recv(n - len(out))
            if not chunk:
                raise EOFError
            out += chunk
        return out

    def recv(self) -> bytes:
        head = self._read(4)
        size = int.from_bytes(head[:3], "little")
        self.seq = head[3] + 1
        return self._read(size)

    def send(self, payload: bytes) -> None:
        self.conn.sendall(len(payload).to_bytes(3, "little") + bytes([self.seq & 0xFF]) + payload)
        self.seq += 1
