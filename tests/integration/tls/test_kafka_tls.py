"""Kafka over TLS and SASL/PLAIN through rowbus's settings and Kafka seam, against a loopback TLS
endpoint speaking Kafka's protocol (`kafka_tls_broker`; the test broker has no TLS listener):
a verified certificate and the right login connect, another CA or a wrong password do not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rowbus.clients import kafka
from rowbus.clients.errors import KafkaClientError
from rowbus.config import load_settings
from tests.integration.tls.conftest import Certificates, make_certificates
from tests.integration.tls.kafka_tls_broker import SASL_AUTHENTICATE, TlsKafka


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("kafka-tls"))


@pytest.fixture
def broker(certs: Certificates) -> Iterator[TlsKafka]:
    endpoint = TlsKafka(certs.server_cert, certs.server_key).start()
    yield endpoint
    endpoint.stop()


def _connect(
    tmp_path: Path, broker: TlsKafka, client: str, seen: list[str] | None = None, **files: Path
) -> list[str]:
    # A refusal is never retried into success: 3 s of librdkafka's retries show it.
    timeout = 10.0 if seen is None else 3.0
    """Load a configuration with `client` as ``kafka.client`` (YAML flow mapping) and `files`
    as ``kafka.client_from_file``, ask the broker for metadata through `rowbus.clients.kafka`,
    and return the brokers it names; `KafkaClientError` when it cannot (librdkafka's error
    lines are added to `seen`)."""
    from_file = ", ".join(f"{k.replace('_', '.')}: {v}" for k, v in files.items())
    path = tmp_path / "rowbus.yaml"
    path.write_text(
        f"kafka:\n  bootstrap_servers: 127.0.0.1:{broker.port}\n  client: {{{client}}}\n"
        f"  client_from_file: {{{from_file}}}\n"
    )
    config: dict[str, Any] = load_settings(path).kafka.client_config()
    errors = seen if seen is not None else []
    config["error_cb"] = lambda error: errors.append(str(error))
    admin = kafka.admin(config)
    try:
        with kafka.kafka_errors(f"metadata of 127.0.0.1:{broker.port}"):
            metadata = admin.list_topics(timeout=timeout)
        return [str(b) for b in metadata.brokers.values()]
    finally:
        admin.poll(0.1)  # serves error_cb with the errors queued so far
        del admin


def test_tls_with_a_verified_certificate(
    tmp_path: Path, certs: Certificates, broker: TlsKafka
) -> None:
    brokers = _connect(tmp_path, broker, f"security.protocol: SSL, ssl.ca.location: {certs.ca}")
    assert brokers == [f"127.0.0.1:{broker.port}/1"]
    assert broker.requests[0][0] == 18  # the first thing said inside TLS is ApiVersions


def test_tls_with_a_certificate_of_another_ca_is_refused(
    tmp_path: Path, certs: Certificates, broker: TlsKafka
) -> None:
    seen: list[str] = []
    with pytest.raises(KafkaClientError):
        _connect(
            tmp_path, broker, f"security.protocol: SSL, ssl.ca.location: {certs.other_ca}", seen
        )
    assert any("certificate verify failed" in line for line in seen), seen
    assert broker.requests == []  # nothing was sent to a server that did not verify


def test_sasl_plain_inside_tls_with_the_password_from_a_file(
    tmp_path: Path, certs: Certificates, broker: TlsKafka
) -> None:
    secret = tmp_path / "kafka-password"
    secret.write_text("hunter2\n")
    client = (
        f"security.protocol: SASL_SSL, ssl.ca.location: {certs.ca}, sasl.mechanism: PLAIN, "
        "sasl.username: rowbus"
    )
    assert _connect(tmp_path, broker, client, None, sasl_password=secret)
    # (one login per connection: the bootstrap one and the one to broker 1)
    assert set(broker.logins) == {("rowbus", "hunter2", True)}

    secret.write_text("not-the-password\n")
    seen: list[str] = []
    with pytest.raises(KafkaClientError):
        _connect(tmp_path, broker, client, seen, sasl_password=secret)
    assert any("Authentication failed" in line for line in seen), seen
    assert ("rowbus", "not-the-password", False) in broker.logins
    assert SASL_AUTHENTICATE in {key for key, _ in broker.requests}
