"""A loopback Kafka endpoint over TLS that speaks just enough of Kafka's wire protocol for a
librdkafka client to connect: ApiVersions (v0-v3), SaslHandshake v1 + SaslAuthenticate v0 with
the PLAIN mechanism (checked against one user and password), and Metadata v0 (itself as the
only broker, no topics).

It exists because the test broker (noida-db 0.2.3) has no TLS listener and accepts any SASL/PLAIN
credentials: TLS and a refused login can only be shown against something else. What it records
(`logins`, `requests`) lets a test see what the client sent inside the TLS session.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path

API_VERSIONS, METADATA, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 3, 17, 36
SUPPORTED = {
    API_VERSIONS: (0, 3),
    METADATA: (0, 0),
    SASL_HANDSHAKE: (0, 1),
    SASL_AUTHENTICATE: (0, 0),
}
UNSUPPORTED_VERSION, SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM = 35, 58, 33


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@dataclass
class TlsKafka:
    """`start()` listens on 127.0.0.1 (an ephemeral port) with `cert`/`key`; `stop()` ends it."""

    cert: Path
    key: Path
    user: str = "rowbus"
    password: str = "hunter2"
    port: int = 0
    logins: list[tuple[str, str, bool]] = field(default_factory=list)
    """(user, password, accepted) of each SASL/PLAIN login."""
    requests: list[tuple[int, int]] = field(default_factory=list)
    """(api key, version) of each request answered, in order."""
    _server: socket.socket | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> TlsKafka:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        raw = socket.create_server(("127.0.0.1", 0))
        raw.settimeout(0.2)
        self.port = raw.getsockname()[1]
        self._server = context.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
        self._spawn(self._accept)
        return self

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(10)
        if self._server is not None:
            self._server.close()

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        assert self._server is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._server.accept()
            except (TimeoutError, ssl.SSLError, OSError):
                continue  # a poll tick, or a client that gave up on our certificate
            self._spawn(self._serve, conn)

    def _serve(self, conn: ssl.SSLSocket) -> None:
        conn.settimeout(0.2)
        with conn:
            try:
                conn.do_handshake()
            except (ssl.SSLError, OSError):
                return  # the client refused the certificate: nothing to answer
            while not self._stopping.is_set():
                try:
                    request = self._read(conn)
                except TimeoutError:
                    continue
                except (ssl.SSLError, OSError, EOFError):
                    return
                reply = self._answer(request)
                if reply is None:
                    return
                conn.sendall(struct.pack(">i", len(reply)) + reply)

    def _read(self, conn: ssl.SSLSocket) -> bytes:
        size = struct.unpack(">i", self._exactly(conn, 4))[0]
        return self._exactly(conn, size)

    def _exactly(self, conn: ssl.SSLSocket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            try:
                chunk = conn.recv(n - len(data))
            except TimeoutError:
                if not data and n == 4:
                    raise
                if self._stopping.is_set():
                    raise EOFError from None
                continue
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def _answer(self, request: bytes) -> bytes | None:
        key, version, correlation = struct.unpack(">hhi", request[:8])
        client_len = struct.unpack(">h", request[8:10])[0]
        body = request[10 + max(client_len, 0) :]
        self.requests.append((key, version))
        head = struct.pack(">i", correlation)
        if key == API_VERSIONS:
            return head + self._api_versions(version)
        if key == SASL_HANDSHAKE:
            mechanism = body[2 : 2 + struct.unpack(">h", body[:2])[0]].decode()
            error = 0 if mechanism == "PLAIN" else UNSUPPORTED_SASL_MECHANISM
            return head + struct.pack(">hi", error, 1) + _string("PLAIN")
        if key == SASL_AUTHENTICATE:
            token = body[4 : 4 + struct.unpack(">i", body[:4])[0]]
            _, user, password = token.decode().split("\0")
            ok = (user, password) == (self.user, self.password)
            self.logins.append((user, password, ok))
            if ok:
                return head + struct.pack(">hhi", 0, -1, 0)
            message = "Authentication failed: invalid credentials"
            return (
                head
                + struct.pack(">h", SASL_AUTHENTICATION_FAILED)
                + _string(message)
                + (struct.pack(">i", 0))
            )
        if key == METADATA:
            broker = struct.pack(">ii", 1, 1) + _string("127.0.0.1") + struct.pack(">i", self.port)
            return head + broker + struct.pack(">i", 0)
        return None  # anything else: hang up, as a broker would on a request it cannot parse

    @staticmethod
    def _api_versions(version: int) -> bytes:
        if version > 3:
            # Kafka's rule: an unknown version is answered in v0 with the versions it knows.
            version, error = 0, UNSUPPORTED_VERSION
        else:
            error = 0
        entries = sorted(SUPPORTED.items())
        if version == 3:  # flexible: compact array, tagged fields
            out = struct.pack(">h", error) + _varint(len(entries) + 1)
            for api, (low, high) in entries:
                out += struct.pack(">hhh", api, low, high) + b"\0"
            return out + struct.pack(">i", 0) + b"\0"
        out = struct.pack(">hi", error, len(entries))
        for api, (low, high) in entries:
            out += struct.pack(">hhh", api, low, high)
        return out + (struct.pack(">i", 0) if version >= 1 else b"")
