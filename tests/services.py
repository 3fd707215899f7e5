"""Real services for integration and e2e tests, started once per pytest session.

With a Docker engine: testcontainers (apache/kafka in KRaft mode, three mysql:8, zookeeper). Without
one: the embedded local stack on its own ports and state folder (``.rowbus-test``), so tests never
touch a developer's `rowbus local up` stack. Either way tests receive a `Settings` pointing at
the services, and create uniquely named topics and databases through the factories in conftest.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rowbus.config import Settings, load_settings
from rowbus.local.stack import LocalStack

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
# ROWBUS_TEST_PORT_OFFSET shifts every port, so two checkouts can run their suites side by side.
_OFFSET = int(os.environ.get("ROWBUS_TEST_PORT_OFFSET", "0"))
TEST_PORTS = {
    name: port + _OFFSET
    for name, port in {
        "kafka": 29092,
        "zookeeper": 22181,
        "source1": 23306,
        "source2": 23307,
        "sink": 23308,
    }.items()
}


def docker_answers() -> bool:
    if os.environ.get("ROWBUS_TEST_BACKEND") == "local":
        return False
    try:
        import docker

        docker.from_env(timeout=3).ping()
    except Exception:
        return False
    return True


@contextlib.contextmanager
def local_services() -> Iterator[Settings]:
    """The embedded stack on test ports, shared by concurrent pytest sessions.

    Each session holds a shared lock while it runs; the last one out (the one that can take the
    lock exclusively) stops the stack, unless ROWBUS_TEST_KEEP_STACK is set.
    """
    # One state folder per port offset: two offsets in one checkout are two stacks.
    state_dir = ROOT / (f".rowbus-test-{_OFFSET}" if _OFFSET else ".rowbus-test")
    settings = load_settings(None, local={"state_dir": str(state_dir), "ports": TEST_PORTS})
    stack = LocalStack(settings)
    state_dir.mkdir(parents=True, exist_ok=True)
    with (state_dir / ".sessions").open("w") as users:
        fcntl.flock(users, fcntl.LOCK_SH)
        report = stack.up()
        log.info(
            "local test stack: started %s, already running %s (%.1fs)",
            report.started,
            report.already_running,
            report.seconds,
        )
        try:
            yield settings
        finally:
            if not os.environ.get("ROWBUS_TEST_KEEP_STACK"):
                try:
                    fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    log.info("another test session still uses the stack; leaving it up")
                else:
                    stack.down()


@contextlib.contextmanager
def container_services() -> Iterator[Settings]:
    """Real Apache Kafka, MySQL 8 and ZooKeeper images through testcontainers."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.kafka import KafkaContainer
    from testcontainers.mysql import MySqlContainer

    mysql_args = (
        "--log-bin=binlog --binlog-format=ROW --binlog-row-image=FULL "
        "--binlog-row-metadata=FULL --gtid-mode=ON --enforce-gtid-consistency=ON"
    )
    with contextlib.ExitStack() as stack:
        kafka = stack.enter_context(KafkaContainer("apache/kafka:3.8.0").with_kraft())
        mysqls: list[Any] = []
        for server_id in (1, 2, 100):
            container = MySqlContainer("mysql:8.0", username="rowbus", password="rowbus")
            container.with_command(f"{mysql_args} --server-id={server_id}")
            mysqls.append(stack.enter_context(container))
        zk = stack.enter_context(DockerContainer("zookeeper:3.8").with_exposed_ports(2181))
        for container in mysqls:
            # Tests create databases and read the binlog as this user.
            container.exec(
                [
                    "mysql",
                    "-uroot",
                    f"-p{container.root_password}",
                    "-e",
                    "GRANT ALL ON *.* TO 'rowbus'@'%' WITH GRANT OPTION",
                ]
            )

        def server(container: Any) -> dict[str, Any]:
            return {
                "host": container.get_container_host_ip(),
                "port": int(container.get_exposed_port(3306)),
                "user": "rowbus",
                "password": "rowbus",
            }

        yield load_settings(
            None,
            kafka={"bootstrap_servers": kafka.get_bootstrap_server()},
            zookeeper={"hosts": f"{zk.get_container_host_ip()}:{zk.get_exposed_port(2181)}"},
            sources=[
                {"name": "source1", **server(mysqls[0])},
                {"name": "source2", **server(mysqls[1])},
            ],
            sink=server(mysqls[2]),
        )


def session_services() -> contextlib.AbstractContextManager[Settings]:
    return container_services() if docker_answers() else local_services()
