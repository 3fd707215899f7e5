"""The server side of the MySQL client/server protocol, as MySQL 8.4 speaks it.

Packets (3-byte length, sequence id, payload), the HandshakeV10 greeting, the client's
HandshakeResponse41 (and its SSL request), ``caching_sha2_password`` — the fast path (the
client's scramble checked against the cached SHA-256 of the password) and the full path (over
TLS the password in clear; over plain TCP the RSA exchange: the client asks for the public key
with 0x02 and sends the password, NUL-terminated and XORed with the nonce, encrypted with
RSA-OAEP) — and OK, ERR, EOF and text result sets. Formats: the MySQL client/server protocol
pages ("Connection Phase", "caching_sha2_password", "Text Resultset").
"""

from __future__ import annotations

import hashlib
import socket
import ssl
import struct
from dataclasses import dataclass
from typing import Any

from tests.mysql8.events import lenenc, lenenc_str

CLIENT_CONNECT_WITH_DB, CLIENT_PROTOCOL_41, CLIENT_SSL = 0x8, 0x200, 0x800
CLIENT_SECURE_CONNECTION, CLIENT_PLUGIN_AUTH, CLIENT_CONNECT_ATTRS = 0x8000, 0x80000, 0x100000
CLIENT_PLUGIN_AUTH_LENENC = 0x200000
CAPABILITIES = (
    0x1
    | 0x2
    | 0x4
    | CLIENT_CONNECT_WITH_DB
    | CLIENT_PROTOCOL_41
    | 0x2000
    | CLIENT_SECURE_CONNECTION
    | 0x10000
    | 0x20000
    | 0x40000
    | CLIENT_PLUGIN_AUTH
    | CLIENT_CONNECT_ATTRS
    | CLIENT_PLUGIN_AUTH_LENENC
)
"""long password, found rows, long flag, connect with db, 4.1, transactions, secure
connection, multi statements/results, ps multi results, plugin auth, attributes, lenenc auth
data (CLIENT_SSL is added when TLS is on; CLIENT_DEPRECATE_EOF is not offered)."""
PLUGIN = b"caching_sha2_password"
FAST_AUTH_SUCCESS, PERFORM_FULL_AUTHENTICATION, REQUEST_PUBLIC_KEY = 3, 4, 2
ER_ACCESS_DENIED, ER_PARSE_ERROR, ER_NO_SUCH_TABLE = 1045, 1064, 1146
VAR_STRING, LONGLONG = 0xFD, 0x08


def scramble(password: bytes, nonce: bytes) -> bytes:
    """XOR(SHA256(password), SHA256(SHA256(SHA256(password)) + nonce))."""
    p1 = hashlib.sha256(password).digest()
    p3 = hashlib.sha256(hashlib.sha256(p1).digest() + nonce).digest()
    return bytes(a ^ b for a, b in zip(p1, p3, strict=True))


class Packets:
    """MySQL packets on one socket (plain or, after the SSL request, TLS)."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn: Any = conn
        self.seq = 0

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.conn.recv(n - len(out))
            if not chunk:
                raise EOFError
            out += chunk
        return bytes(out)

    def recv(self) -> bytes:
        head = self._read(4)
        self.seq = head[3] + 1
        return self._read(int.from_bytes(head[:3], "little"))

    def send(self, payload: bytes) -> None:
        """One packet (split at 2^24-1 bytes, as the protocol continues large ones)."""
        out = bytearray()
        for i in range(0, len(payload) + 1, 0xFFFFFF):
            part = payload[i : i + 0xFFFFFF]
            out += len(part).to_bytes(3, "little") + bytes([self.seq & 0xFF]) + part
            self.seq += 1
            if len(part) < 0xFFFFFF:
                break
        self.conn.sendall(bytes(out))

    def ok(self, status: int = 2) -> None:
        self.send(b"\x00\x00\x00" + struct.pack("<HH", status, 0))

    def error(self, code: int, state: str, message: str) -> None:
        self.send(b"\xff" + struct.pack("<H", code) + b"#" + state.encode() + message.encode())

    def eof(self) -> None:
        self.send(b"\xfe\x00\x00\x02\x00")

    def result(self, names: list[str], rows: list[tuple[Any, ...]]) -> None:
        """A text result set; a column is typed BIGINT when all its values are ints."""
        self.send(lenenc(len(names)))
        for i, name in enumerate(names):
            ints = rows and all(isinstance(r[i], int) for r in rows if r[i] is not None)
            kind, charset = (LONGLONG, 63) if ints else (VAR_STRING, 255)
            self.send(
                lenenc_str(b"def")
                + lenenc_str(b"")
                + lenenc_str(b"")
                + lenenc_str(b"")
                + lenenc_str(name.encode())
                + lenenc_str(name.encode())
                + b"\x0c"
                + struct.pack("<HIBHB", charset, 1024, kind, 0, 0)
                + b"\x00\x00"
            )
        self.eof()
        for row in rows:
            self.send(b"".join(b"\xfb" if v is None else lenenc_str(str(v).encode()) for v in row))
        self.eof()


@dataclass
class Login:
    user: str
    database: str | None
    tls: bool
    how: str
    """"fast" (the cached hash), "rsa" (full, the RSA exchange) or "clear" (full, over TLS)."""


@dataclass
class Account:
    user: str
    password: str
    cached: bool = False
    """Whether the server's cache holds this password's hash (after one full login it does)."""


class Authenticator:
    """The connection phase of one session: greeting, optional TLS, caching_sha2_password."""

    def __init__(
        self,
        accounts: dict[str, Account],
        version: str,
        nonce: bytes,
        tls: ssl.SSLContext | None,
        private_key: Any,
        public_pem: bytes,
    ) -> None:
        self._accounts = accounts
        self._version = version
        self._nonce = nonce
        self._tls = tls
        self._key = private_key
        self._pem = public_pem

    def greeting(self, connection_id: int) -> bytes:
        caps = CAPABILITIES | (CLIENT_SSL if self._tls is not None else 0)
        return (
            b"\x0a"
            + self._version.encode()
            + b"\x00"
            + struct.pack("<I", connection_id)
            + self._nonce[:8]
            + b"\x00"
            + struct.pack("<H", caps & 0xFFFF)
            + bytes([255])  # utf8mb4_0900_ai_ci
            + struct.pack("<H", 2)  # SERVER_STATUS_AUTOCOMMIT
            + struct.pack("<H", caps >> 16)
            + bytes([21])
            + b"\x00" * 10
            + self._nonce[8:]
            + b"\x00"
            + PLUGIN
            + b"\x00"
        )

    def login(self, io: Packets, connection_id: int) -> Login | None:
        """Authenticates the client; None (after the ERR packet) when it is refused."""
        io.send(self.greeting(connection_id))
        response = io.recv()
        caps = struct.unpack_from("<I", response)[0]
        tls = False
        if caps & CLIENT_SSL and len(response) == 32 and self._tls is not None:
            io.conn = self._tls.wrap_socket(io.conn, server_side=True)
            tls = True
            response = io.recv()
        user, auth, database = self._parse(response, caps)
        account = self._accounts.get(user)
        denied = f"Access denied for user '{user}'@'localhost' (using password: YES)"
        if account is None:
            io.error(ER_ACCESS_DENIED, "28000", denied)
            return None
        good = scramble(account.password.encode(), self._nonce) == auth
        if not account.password:
            good = auth == b""
        if good and (account.cached or not account.password):
            io.send(b"\x01" + bytes([FAST_AUTH_SUCCESS]))
            io.ok()
            return Login(user, database, tls, "fast")
        # Not in the cache, or a wrong scramble: full authentication, as MySQL falls back.
        io.send(b"\x01" + bytes([PERFORM_FULL_AUTHENTICATION]))
        reply = io.recv()
        if tls:
            password = reply.rstrip(b"\x00")
        else:
            if reply == bytes([REQUEST_PUBLIC_KEY]):
                io.send(b"\x01" + self._pem)
                reply = io.recv()
            password = self._decrypt(reply)
        if password != account.password.encode():
            io.error(ER_ACCESS_DENIED, "28000", denied)
            return None
        account.cached = True
        io.ok()
        return Login(user, database, tls, "clear" if tls else "rsa")

    def _decrypt(self, data: bytes) -> bytes:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        try:
            plain = self._key.decrypt(
                data,
                padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None),
            )
        except ValueError:
            return b"\x00invalid"
        nonce = self._nonce
        clear = bytes(b ^ nonce[i % len(nonce)] for i, b in enumerate(plain))
        return clear.rstrip(b"\x00")

    @staticmethod
    def _parse(data: bytes, caps: int) -> tuple[str, bytes, str | None]:
        assert caps & CLIENT_PROTOCOL_41, "a 4.1 client"
        rest = data[32:]
        user, _, rest = rest.partition(b"\x00")
        if caps & CLIENT_PLUGIN_AUTH_LENENC:
            n = rest[0]  # under 251 for a 32-byte scramble
            auth, rest = rest[1 : 1 + n], rest[1 + n :]
        else:
            n = rest[0]
            auth, rest = rest[1 : 1 + n], rest[1 + n :]
        database = None
        if caps & CLIENT_CONNECT_WITH_DB:
            raw, _, rest = rest.partition(b"\x00")
            database = raw.decode() or None
        return user.decode(), auth, database
