"""`rowbus doctor` against the real brokers: noida-db passes, Tansu's deviations are listed."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from rowbus.config import MySQLSettings, Settings, load_settings
from rowbus.doctor import run_doctor
from rowbus.doctor.mysql import check_sink, check_source
from rowbus.local.procs import ProcessRecord, launch
from rowbus.local.services import Tansu
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.rowbus.test_local_stack import free_ports


def test_doctor_on_the_local_stack_reports_every_guarantee(services: Settings, unique):
    # Topics of its own: the shared test broker may hold default-named topics of other tests.
    reader = services.reader.model_copy(
        update={
            "checkpoints_topic": unique("test.doc.ckpt"),
            "schemas_topic": unique("test.doc.schemas"),
            "topic_template": unique("test.doc.data") + ".{source}",
        }
    )
    settings = services.model_copy(update={"reader": reader})
    out = io.StringIO()
    assert run_doctor(settings, out=out) == 0, out.getvalue()
    text = out.getvalue()
    # noida-db, the local broker, drops later commits past an aborted transaction (issue #33).
    past_abort = "read_committed from past an aborted transaction gets later committed records"
    assert f"WARN  {past_abort}: read 0/3 committed records" in text, text
    # The stack's development account may do anything: each source's reader is warned.
    assert "FAIL" not in text and text.count("WARN") == 3, text
    too_much = "WARN  a binlog reader's user holds no more than it needs: also holds ALL PRIVILEGES"
    assert text.count(too_much) == 2, text
    for check in (
        "read_committed hides aborted records",
        "last stable offset held by an open transaction, released by its end",
        "end offset after a 100-record batch",
        "offsets_for_times",
        "a second producer with the same transactional.id",
        "binlog_format=ROW",
        "binlog_row_image=FULL",
        "binlog_row_metadata=FULL",
        "binlog_row_value_options PARTIAL_JSON or empty",
        "binlog_transaction_compression ON or OFF",
        "log_bin_compress ON or OFF",
        "mysql56_temporal_format=ON",
        "GTID enabled",
        "privileges for a binlog reader",
    ):
        assert f"PASS  {check}" in text
    assert text.count("source ") == 2


def test_doctor_flags_a_source_without_full_row_metadata(services: Settings):
    source = services.sources[0]
    from tests.conftest import connect

    with connect(source) as conn, conn.cursor() as cur:
        cur.execute("SET GLOBAL binlog_row_metadata = 'MINIMAL'")
        try:
            out = io.StringIO()
            assert run_doctor(services, mysql_only=True, out=out) == 1
        finally:
            cur.execute("SET GLOBAL binlog_row_metadata = 'FULL'")
    text = out.getvalue()
    assert "FAIL  binlog_row_metadata=FULL: is MINIMAL" in text
    assert "to change:   set binlog_row_metadata=FULL" in text


def test_doctor_passes_a_source_that_compresses_its_binlog(services: Settings):
    """log_bin_compress=ON is read (its events are inflated): the doctor says so and passes."""
    source = services.sources[0]
    from tests.conftest import connect

    with connect(source) as conn, conn.cursor() as cur:
        cur.execute("SET GLOBAL log_bin_compress = ON")
        try:
            out = io.StringIO()
            assert run_doctor(services, mysql_only=True, out=out) == 0, out.getvalue()
        finally:
            cur.execute("SET GLOBAL log_bin_compress = OFF")
    text = out.getvalue()
    assert "PASS  log_bin_compress ON or OFF: is ON: compressed events are decoded" in text


@pytest.fixture
def tansu(tmp_path: Path) -> Iterator[Settings]:
    service = Tansu("kafka", free_ports(1)[0], "local.ports.kafka", tmp_path)
    service.prepare()
    record = ProcessRecord(
        "kafka", launch(service.command(), service.log_file), service.marker, service.address
    )
    try:
        wait_for(service.ready, timeout=30, what=f"Tansu on {service.address}")
        yield load_settings(None, kafka={"bootstrap_servers": service.address})
    finally:
        service.shutdown(record)


def test_doctor_lists_tansu_deviations(tansu: Settings):
    out = io.StringIO()
    assert run_doctor(tansu, kafka_only=True, out=out) == 1
    text = out.getvalue()
    assert "WARN  read_committed hides aborted records: read 3/3 committed, 3 aborted" in text
    assert "FAIL  end offset after a 100-record batch" in text
    assert "FAIL  offsets_for_times" in text
    assert "NOT READY" in text


def test_doctor_reports_a_topic_that_differs_from_what_rowbus_needs(
    services: Settings, make_topic, unique
):
    checkpoints = make_topic("doc.ckpt", partitions=2)  # neither compacted nor one partition
    data_topic = make_topic("doc.data", partitions=1)  # one topic for every source here
    reader = services.reader.model_copy(
        update={
            "checkpoints_topic": checkpoints,
            "schemas_topic": unique("test.doc.schemas"),
            "topic_template": data_topic,
            "partitions": 3,
        }
    )
    settings = services.model_copy(update={"reader": reader})
    from rowbus.doctor.topics import check_topics

    checks = {c.name: c for c in check_topics(settings)}
    bad = checks[f"topic {checkpoints}"]
    assert not bad.ok and bad.verdict == "WARN"
    assert "has 2 partition(s) where 1 are configured" in bad.detail
    assert "has cleanup.policy=delete where rowbus needs cleanup.policy=compact" in bad.detail
    data_check = checks[f"topic {data_topic}"]
    assert "has 1 partition(s) where 3 are configured (reader.partitions)" in data_check.detail


@pytest.fixture
def account(services: Settings, unique) -> Iterator[Callable[..., MySQLSettings]]:
    """`account(server, grant, …)`: a user of its own on `server` holding the GRANT clauses
    given (``"SELECT ON *.*"``), as settings to connect with; dropped after the test."""
    made: list[tuple[MySQLSettings, str]] = []

    def make(server: MySQLSettings, *grants: str) -> MySQLSettings:
        user, password = unique("doc"), unique("pw")
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
            for grant in grants:
                clause, with_, option = grant.partition(" WITH ")
                cur.execute(f"GRANT {clause} TO '{user}'@'%'{with_}{option}")
        made.append((server, user))
        return server.model_copy(update={"user": user, "password": SecretStr(password)})

    yield make
    for server, user in made:
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")


def test_a_reader_user_with_more_than_it_needs_is_warned(services: Settings, account) -> None:
    """The least a reader needs passes both checks; a user that may also write is warned,
    with what it holds too (the reader still works: a warning, not a failure)."""
    source = services.sources[0]
    least = account(source, "REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.*")
    _version, checks = check_source(least)
    by_name = {c.name: c for c in checks}
    assert by_name["privileges for a binlog reader"].verdict == "PASS"
    excess = by_name["a binlog reader's user holds no more than it needs"]
    assert excess.verdict == "PASS", excess
    more = account(
        source,
        "REPLICATION SLAVE, BINLOG MONITOR, SELECT, INSERT ON *.*",
        "ALL PRIVILEGES ON `shop`.* WITH GRANT OPTION",
    )
    excess = {c.name: c for c in check_source(more)[1]}[excess.name]
    assert (excess.verdict, excess.detail) == (
        "WARN",
        "also holds ALL PRIVILEGES ON SHOP.*, GRANT OPTION ON SHOP.*, INSERT ON *.*",
    )
    assert excess.fix.startswith("give the readers a user of their own with only REPLICATION")


def test_the_sink_user_s_grants_for_the_apply_job_are_checked(services: Settings, account) -> None:
    """On its state database the job needs CREATE, SELECT, INSERT, UPDATE, DELETE (a FAIL
    without them: it would stop at start); on the targets a warning when no grant on *.*
    covers them (a grant per target database may)."""
    sink = services.resolved_sink
    state = "doc_state"
    only_state = account(sink, f"ALL PRIVILEGES ON `{state}`.*")
    checks = {c.name: c for c in check_sink(only_state, state)[1]}
    assert checks[f"privileges for the apply job's state ({state})"].verdict == "PASS"
    targets = checks["privileges for the apply job's targets"]
    assert targets.verdict == "WARN" and targets.detail.startswith(
        "not granted ON *.*: SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, DROP, INDEX"
    )
    reader_only = account(sink, "SELECT ON *.*")
    checks = {c.name: c for c in check_sink(reader_only, state)[1]}
    refused = checks[f"privileges for the apply job's state ({state})"]
    assert (refused.verdict, refused.detail) == ("FAIL", "missing CREATE, INSERT, UPDATE, DELETE")
    assert refused.fix == f"GRANT CREATE, INSERT, UPDATE, DELETE ON `{state}`.* TO the sink's user"
    writer = account(sink, "SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, DROP, INDEX ON *.*")
    assert [c.verdict for c in check_sink(writer, state)[1]] == ["PASS"] * 4
