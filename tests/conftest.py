"""Session-wide services and per-test factories with unique names.

Tests under tests/integration and tests/e2e are marked automatically and get real services;
tests under tests/unit must not ask for them.
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import hypothesis
import pymysql
import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]


def _worker_port_offset() -> None:
    """A pytest-xdist worker (`make test` runs two) gets its own stack: the run's port offset
    plus 100 per worker, set before any module reads it (tests.services, the TLS server's port,
    rowbus.testing.spark_cluster), so its services, state folder and standalone cluster are its
    own and its subprocesses inherit it. Sharing one stack would need its start and stop
    coordinated between the workers; a second stack costs its memory (~0.4 GB at the start)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and "ROWBUS_TEST_WORKER_OFFSET" not in os.environ:
        base = int(os.environ.get("ROWBUS_TEST_PORT_OFFSET", "0"))
        offset = base + 100 * (int(worker[2:]) + 1)
        os.environ["ROWBUS_TEST_WORKER_OFFSET"] = os.environ["ROWBUS_TEST_PORT_OFFSET"] = str(
            offset
        )


_worker_port_offset()


def _one_hash_seed() -> None:
    """pytest-xdist's workers must collect the same test ids, and an id may hold a set's
    repr, whose order follows the string hash seed: the run (its controller, before the
    workers start) picks one seed for every worker and subprocess, still a new one per run
    unless PYTHONHASHSEED is set (the header shows it)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        os.environ.setdefault("PYTHONHASHSEED", str(random.randint(1, 2**32 - 1)))


_one_hash_seed()


def pytest_report_header() -> str:
    return f"PYTHONHASHSEED={os.environ.get('PYTHONHASHSEED')}"


from rowbus.config import MySQLSettings, Settings  # noqa: E402 - after the worker's offset
from rowbus.waiting import wait_for  # noqa: E402
from tests import proclogs, spark_cds, termination  # noqa: E402
from tests.services import session_services  # noqa: E402

# Hypothesis measures each example against a wall-clock deadline (200 ms) and a "too slow" health
# check. On CI's shared 2-core machine those measure the machine's load, not the code (a
# test_rendered / test_source_ranges example missed 200 ms once at load 20-31 and passed again):
# the suite's bound on time is pytest-timeout's, per test. Registered here, before any test
# module is imported, so every `@settings(...)` inherits it; HYPOTHESIS_PROFILE=default gives
# Hypothesis's own back for a run on a quiet machine.
hypothesis.settings.register_profile(
    "rowbus",
    deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
)
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "rowbus"))

_HERE = Path(__file__).parent
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""For the short-lived Spark JVMs of the tests (`pytest_configure`)."""


def pytest_configure(config: pytest.Config) -> None:
    # A run stopped by SIGTERM (a CI timeout, `timeout 1500 pytest`) stops like Ctrl-C, so the
    # session fixtures stop the stack they started instead of leaving it running; also when the
    # code under test had its own SIGTERM handler installed (tests/termination.py).
    config.stash[_TERMINATION] = termination.install()
    # Every process a test starts (readers, subscribers, Spark drivers and workers, helpers run
    # with `python -c`) inherits this: a native crash leaves its Python stacks in its log, and
    # the logs that tests register with `proclogs.keep` are in the test's failure report.
    os.environ["PYTHONFAULTHANDLER"] = "1"
    # Every Spark JVM a test starts (drivers through pyspark or spark-submit, standalone
    # daemons) lives seconds to a minute: C1 alone halves its CPU (start-up is mostly JIT
    # compiling on 2 cores: 13.4-14.0 s of JVM CPU against 6.9-7.3 s for the same session and
    # queries), and one GC thread keeps it off the other core. What a test checks is the same
    # code; only the JIT differs. A value already set (even empty) is kept.
    for name in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
        os.environ.setdefault(name, TEST_JVM_OPTIONS)
    # ... and the drivers map Spark's classes from a CDS archive (half their start's CPU),
    # made once per checkout in the background; the tests before it is ready run without.
    if os.environ["SPARK_SUBMIT_OPTS"] == TEST_JVM_OPTIONS and _runs_spark(config):
        config.stash[_SPARK_ARCHIVE] = spark_cds.Archive(
            _HERE.parent / ".rowbus-test-cds", TEST_JVM_OPTIONS
        )


def pytest_unconfigure(config: pytest.Config) -> None:
    archive = config.stash.get(_SPARK_ARCHIVE, None)
    if archive is not None:
        archive.close()  # still being made: its processes end with the run


def _runs_spark(config: pytest.Config) -> bool:
    """Whether the run may start Spark: not when it names only unit tests."""
    args = [a for a in config.args if not a.startswith("-")] or ["."]
    return any("unit" not in Path(a.split("::")[0]).parts for a in args)


_TERMINATION = pytest.StashKey[termination.Termination]()
_SPARK_ARCHIVE = pytest.StashKey[spark_cds.Archive]()


def pytest_runtest_setup(item: pytest.Item) -> None:
    # A test may run code that installs its own handler (a command's, the apply job's main);
    # the run must still stop on SIGTERM whatever ran before.
    item.config.stash[_TERMINATION].reinstall()
    proclogs.clear()
    archive = item.config.stash.get(_SPARK_ARCHIVE, None)
    if archive is not None and (options := archive.options()) is not None:
        # Here, on the main thread between tests: no process is being started meanwhile. The
        # standalone daemons run on the same class path (a JVM that cannot map it runs without).
        for name in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
            if os.environ.get(name) == TEST_JVM_OPTIONS:
                os.environ[name] = f"{TEST_JVM_OPTIONS} {options}"
        del item.config.stash[_SPARK_ARCHIVE]


def pytest_runtest_teardown(item: pytest.Item) -> None:
    # A SIGTERM that a handler of the code under test took (and so raised nothing) ends the run
    # after this test.
    item.config.stash[_TERMINATION].stop_if_terminated(item.session)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.failed:
        report.sections.extend(proclogs.sections())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath))
        if _HERE / "integration" in path.parents:
            item.add_marker(pytest.mark.integration)
        elif _HERE / "e2e" in path.parents:
            item.add_marker(pytest.mark.e2e)


def _stop_spark() -> None:
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext

    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()


@pytest.fixture(scope="session")
def services() -> Iterator[Settings]:
    """Settings pointing at real Kafka, ZooKeeper, two source servers and a sink.

    At the end, before the stack stops, no Kafka client of this process may be left open: one
    left (a test or fixture that never closed it) would go on trying to reach the stopped
    broker until the process exits."""
    with session_services() as settings:
        yield settings
        # The shared Spark session's Python workers are reused between tasks and keep their
        # Kafka consumers cached: stop them before the broker, or each consumer goes on trying
        # to reach it until the process exits.
        _stop_spark()
        # A client in a reference cycle (a callback that refers back to its owner, a frame
        # kept by a stored exception) is destroyed only by the cyclic collector: run it now.
        gc.collect()
        left = librdkafka_threads().count("rdk:main")
        assert not left, (
            f"{left} Kafka client(s) of the test process still open at the end of the session "
            "(librdkafka threads named rdk:main): a test or fixture never closed them"
        )


def librdkafka_threads() -> list[str]:
    """The librdkafka threads of this process (named ``rdk:…``); each client (producer,
    consumer, admin client) runs one ``rdk:main`` until it is closed or destroyed."""
    names = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            name = (task / "comm").read_text().strip()
            if name.startswith("rdk:"):
                names.append(name)
    return names


@pytest.fixture
def unique() -> Callable[[str], str]:
    """`unique("orders")` → ``orders_1a2b3c4d``: a name no other test (or run) uses."""
    return lambda prefix: f"{prefix}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def make_topic(services: Settings, unique: Callable[[str], str]) -> Iterator[Callable[..., str]]:
    # The test item holds `factory` until its teardown is over, which on the last test comes
    # after the services stopped: the client is reached through `clients`, emptied at teardown.
    clients = {"admin": AdminClient(services.kafka.client_config())}
    created: list[str] = []

    def factory(prefix: str = "t", partitions: int = 3, **config: str) -> str:
        admin = clients["admin"]
        name = unique(f"test.{prefix}").replace("_", ".")
        futures = admin.create_topics(
            [
                NewTopic(
                    name,
                    num_partitions=partitions,
                    replication_factor=1,
                    config={"retention.ms": "-1", **config},
                )
            ],
            operation_timeout=15,
        )
        futures[name].result(15)
        wait_for(
            lambda: len(admin.list_topics(name, timeout=2).topics[name].partitions) == partitions,
            timeout=15,
            what=f"topic {name} to have {partitions} partitions",
        )
        created.append(name)
        return name

    yield factory
    admin = clients.pop("admin")
    if created:
        for future in admin.delete_topics(created, operation_timeout=10).values():
            future.result(15)


def connect(
    server: MySQLSettings, database: str | None = None, autocommit: bool = True
) -> pymysql.connections.Connection[pymysql.cursors.Cursor]:
    return pymysql.connect(
        host=server.host,
        port=server.port,
        user=server.user,
        password=server.password.get_secret_value(),
        database=database,
        autocommit=autocommit,
        connect_timeout=5,
    )


@pytest.fixture
def make_database(
    services: Settings, unique: Callable[[str], str]
) -> Iterator[Callable[[MySQLSettings], str]]:
    """`make_database(server)` creates a fresh database there and drops it after the test."""
    created: list[tuple[MySQLSettings, str]] = []

    def factory(server: MySQLSettings) -> str:
        name = unique("db")
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}`")
        created.append((server, name))
        return name

    yield factory
    for server, name in created:
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
