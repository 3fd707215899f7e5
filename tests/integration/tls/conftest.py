"""One private MariaDB with TLS on for every TLS test: certificates made with `openssl` (a CA, a
server certificate for 127.0.0.1 and localhost, a client certificate; and a second CA that signed
nothing of this server), the server started once per session and stopped by its pid."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rowbus.clients.settings import SourceConnection, TlsSettings
from rowbus.local.procs import ProcessRecord, launch, port_is_free
from rowbus.local.services import LOCAL_PASSWORD, LOCAL_USER, MariaDB
from rowbus.waiting import wait_for
from tests.integration.producer.test_upstream_switch import _free_port

PORT = 23999 + int(os.environ.get("ROWBUS_TEST_PORT_OFFSET", "0"))


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    """A CA that signed nothing this server shows."""


@dataclass(frozen=True)
class TlsServer:
    port: int
    certs: Certificates
    server: MariaDB

    def source(self, user: str = LOCAL_USER, **tls: Any) -> SourceConnection:
        """The server as a source reached as `user` (password ``pw-<user>``, or the local
        stack's user); `tls` as given (default: required, verified against the test CA)."""
        settings = tls or {"mode": "required", "ca": self.certs.ca}
        return SourceConnection(
            name="tls",
            host="127.0.0.1",
            port=self.port,
            user=user,
            password=LOCAL_PASSWORD if user == LOCAL_USER else f"pw-{user}",
            tls=TlsSettings(**settings),
        )

    def root(self) -> Any:
        """A root connection over the server's socket (grants, users)."""
        return self.server._root()


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def _sign(folder: Path, name: str, subject: str, ca: str, extensions: str | None) -> None:
    key, csr, cert = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.pem"
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", subject)
    ext: list[str | Path] = []
    if extensions is not None:
        (folder / f"{name}.ext").write_text(extensions)
        ext = ["-extfile", folder / f"{name}.ext"]
    _openssl(
        "x509", "-req", "-in", csr, "-CA", folder / f"{ca}.pem", "-CAkey", folder / f"{ca}.key",
        "-CAcreateserial", "-days", "2", "-sha256", "-out", cert, *ext,
    )  # fmt: skip


def make_certificates(folder: Path) -> Certificates:
    for ca in ("ca", "other-ca"):
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", folder / f"{ca}.key", "-out", folder / f"{ca}.pem",
            "-subj", f"/CN=rowbus test {ca}",
        )  # fmt: skip
    _sign(folder, "server", "/CN=127.0.0.1", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _sign(folder, "client", "/CN=rowbus-client", "ca", None)
    return Certificates(
        ca=folder / "ca.pem",
        server_cert=folder / "server.pem",
        server_key=folder / "server.key",
        client_cert=folder / "client.pem",
        client_key=folder / "client.key",
        other_ca=folder / "other-ca.pem",
    )


@pytest.fixture(scope="session")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    home = tmp_path_factory.mktemp("tls")
    certs = make_certificates(home)
    port = PORT if port_is_free(PORT) else _free_port()
    server = MariaDB(
        "tls",
        port,
        "test.tls",
        home / "server",
        server_id=94,
        binlog=True,
        extra=(
            f"--ssl-ca={certs.ca}",
            f"--ssl-cert={certs.server_cert}",
            f"--ssl-key={certs.server_key}",
        ),
    )
    server.prepare()
    record = ProcessRecord(
        server.name, launch(server.command(), server.log_file), server.marker, server.address
    )
    try:
        wait_for(server.ready, timeout=120, what=f"the TLS MariaDB on port {port} to start")
        server.after_ready()
        yield TlsServer(port, certs, server)
    finally:
        server.shutdown(record)
