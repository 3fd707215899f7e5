"""The real reader against a MySQL 8.4 primary (`tests.mysql8`, no MySQL 8 server installs
here): its connection and caching_sha2_password authentication, start-up checks, dump and
decoding of MySQL's event formats, publishing to the test stack's Kafka. The fidelity corpus
as MySQL 8 binlog bytes must give the values the MariaDB path gives (the same rows read from
the real MariaDB source), on the framed, native and pure-Python decoding paths."""

from __future__ import annotations

import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rowbus.config import MySQLSettings, Settings
from rowbus.producer import binlog as binlog_module
from rowbus.producer import fastrows
from rowbus.producer.reader import Reader
from rowbus.producer.settings import ReaderSettings
from rowbus.protocol.events import Record, RowChange
from rowbus.waiting import wait_for
from tests.integration.fidelity.corpus import ALL_TYPES, from_source, same
from tests.integration.mysql8.corpus import (
    MIXED,
    Corpus,
    Values,
    build,
    mysql8_cases,
    values_from_mariadb,
)
from tests.integration.producer.helpers import ReaderSetup, TopicReader, start_reader_process
from tests.mysql8.binlog import Binlog
from tests.mysql8.payload import compressing
from tests.mysql8.primary import Primary
from tests.mysql8.rows import charsets, column

PATHS = {"framed": (True, True), "native": (True, False), "pure": (False, False)}


@pytest.fixture(scope="module")
def mariadb_values(services: Settings) -> dict[str, Values]:
    return values_from_mariadb(services.sources[0], mysql8_cases())


@pytest.fixture
def primary(
    mariadb_values: dict[str, Values],
) -> Iterator[tuple[Primary, Corpus]]:
    log = Binlog()
    corpus = build(log, f"m8_{uuid.uuid4().hex[:6]}", mariadb_values)
    with Primary(log) as server:
        yield server, corpus


@pytest.fixture
def compressed_primary(
    mariadb_values: dict[str, Values],
) -> Iterator[tuple[Primary, Corpus]]:
    """The same corpus with binlog_transaction_compression=ON: every transaction of row
    changes is its GTID event and one Transaction_payload (zstd)."""
    log = Binlog(compression=compressing())
    corpus = build(log, f"m8z_{uuid.uuid4().hex[:6]}", mariadb_values)
    variables = {"binlog_transaction_compression": "ON"}
    with Primary(log, variables=variables) as server:
        yield server, corpus


def setup_for(
    services: Settings,
    server: Primary,
    database: str,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
) -> ReaderSetup:
    compact = {"cleanup.policy": "compact"}
    account = next(iter(server.accounts.values()))
    return ReaderSetup(
        services=services,
        server=MySQLSettings(
            host="127.0.0.1", port=server.port, user=account.user, password=account.password
        ),
        source=unique("m8"),
        database=database,
        data_topic=make_topic("m8data", partitions=3),
        checkpoints_topic=make_topic("m8ckpt", partitions=1, **compact),
        schemas_topic=make_topic("m8schemas", partitions=1, **compact),
    )


class ReaderThread:
    """The real reader in a thread; `error` is what ended it."""

    def __init__(self, setup: ReaderSetup, **overrides: object) -> None:
        settings = ReaderSettings(**setup.reader_settings(election=False, **overrides))
        self.reader = Reader(setup.source_connection(), settings, setup.services_for_reader())
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"reader-{setup.source}")

    def _run(self) -> None:
        try:
            self.reader.run(self.stop)
        except BaseException as exc:  # examined by the test
            self.error = exc

    def __enter__(self) -> ReaderThread:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "reader thread did not stop within 30 s"


def read_all(setup: ReaderSetup, expected: int, **overrides: object) -> list[Record]:
    """Runs the reader from the binlog's start until it has published `expected` row changes,
    then reads them back. The consumer opens after the reader's commits (one opened before
    waits for noida-db's read_committed view to catch up: ENVIRONMENT.md)."""
    with ReaderThread(setup, start="file:binlog.000001:4", snapshot="never", **overrides) as r:
        wait_for(
            lambda: r.reader.metrics.rows >= expected or r.error is not None,
            timeout=60,
            what=f"{expected} row changes published from the MySQL 8 primary",
        )
    assert r.error is None, r.error
    topic = TopicReader(setup.services, setup.data_topic)
    try:
        topic.until(
            lambda rs: sum(isinstance(x, RowChange) for x in rs) >= expected,
            timeout=60,
            what=f"{expected} row changes on {setup.data_topic}",
        )
        return [rec for _, _, _, rec in topic.records]
    finally:
        topic.close()


def check_corpus(records: list[Record], corpus: Corpus) -> None:
    """Every table rebuilt from its row changes equals the MariaDB path's values, types
    included, the `MIXED` tables' columns too; each update's before image is the row as it
    was; the tagged transactions' records carry their ``uuid:fix:N``."""
    tagged = {r.position.gtid for r in records if isinstance(r, RowChange)}
    assert len({g for g in tagged if g and ":fix:" in g}) == (len(corpus.cases) + 2) // 3
    tables: dict[str, dict[int, Any]] = {}
    for r in records:
        if not isinstance(r, RowChange) or r.schema != corpus.database:
            continue
        rows = tables.setdefault(r.table, {})
        if r.before is not None:
            assert int(r.before[0]) in rows, f"{r.table}: before image of a row never written"
            assert rows.pop(int(r.before[0])) == r.before[1]  # type: ignore[arg-type]
        if r.after is not None:
            rows[int(r.after[0])] = r.after[1]  # type: ignore[arg-type]
    wrong = []
    for case in corpus.cases:
        got = tables.get(case.table, {})
        want = corpus.final[case.table]
        if sorted(got) != [i for i, _ in want]:
            wrong.append(f"{case.name}: ids {sorted(got)} != {[i for i, _ in want]}")
            continue
        for i, value in want:
            expected = from_source(case, value)
            if not same(case, got[i], expected):
                wrong.append(f"{case.name} id {i}: MariaDB path {expected!r}, MySQL 8 {got[i]!r}")
    for name, mixed in corpus.mixed.items():
        rows = {
            int(r.after[0]): r.after[1:]  # type: ignore[arg-type]
            for r in records
            if isinstance(r, RowChange) and r.table == name and r.after is not None
        }
        if sorted(rows) != sorted(mixed.rows):
            wrong.append(f"{name}: ids {sorted(rows)} != {sorted(mixed.rows)}")
            continue
        for i, want_row in mixed.rows.items():
            for case, got_value, value in zip(mixed.cases, rows[i], want_row, strict=True):
                expected = from_source(case, value)
                if not same(case, got_value, expected):
                    wrong.append(
                        f"{name}.c_{case.name} id {i}: MariaDB path {expected!r}, "
                        f"MySQL 8 {got_value!r}"
                    )
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", list(PATHS))
def test_the_reader_reads_the_corpus_from_a_mysql8_primary_as_from_mariadb(
    primary: tuple[Primary, Corpus],
    services: Settings,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    path: str,
) -> None:
    server, corpus = primary
    fast, framed = PATHS[path]
    monkeypatch.setattr(binlog_module, "FRAMED", framed)
    if not fast:
        monkeypatch.setattr(fastrows, "AVAILABLE", False)
    setup = setup_for(services, server, corpus.database, make_topic, unique)
    records = read_all(setup, corpus.changes)
    assert not server.seen.unanswered, server.seen.unanswered
    check_corpus(records, corpus)
    rows = [r for r in records if isinstance(r, RowChange)]
    assert len(rows) == corpus.changes
    # The DDL interpreter reads each CREATE as MySQL means it (JSON is a type of its own, not
    # MariaDB's LONGTEXT; YEAR unsigned though MySQL gives it no signedness bit).
    disagreements = [m for m in caplog.messages if "differs from its table map" in m]
    assert not disagreements, disagreements
    # The first login ran the RSA exchange (the password was not cached yet), later ones the
    # fast path.
    assert server.seen.logins[0] == "repl rsa", server.seen.logins
    assert set(server.seen.logins[1:]) == {"repl fast"}, server.seen.logins


@pytest.mark.parametrize("path", list(PATHS))
def test_compressed_transactions_give_the_values_of_plain_ones(
    compressed_primary: tuple[Primary, Corpus],
    services: Settings,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    path: str,
) -> None:
    """Transaction_payload events (zstd) read on every path: the records' values equal the
    MariaDB path's, as the uncompressed binlog's do (the test above), and each transaction's
    records carry the payload's end as their position (no position inside a payload)."""
    server, corpus = compressed_primary
    fast, framed = PATHS[path]
    monkeypatch.setattr(binlog_module, "FRAMED", framed)
    if not fast:
        monkeypatch.setattr(fastrows, "AVAILABLE", False)
    kinds = server.binlog.kinds()
    # Per case, its inserts, then its changes; per mixed table, its inserts.
    assert kinds.get(40, 0) == 2 * len(corpus.cases) + len(corpus.mixed), kinds
    assert not {19, 30, 31, 32, 16} & set(kinds), kinds  # no table map, rows or Xid outside
    payloads = server.binlog.written
    setup = setup_for(services, server, corpus.database, make_topic, unique)
    records = read_all(setup, corpus.changes)
    check_corpus(records, corpus)
    ends = {w.end for w in payloads}
    rows = [r for r in records if isinstance(r, RowChange)]
    assert rows and all(r.position.offset in ends for r in rows)


def test_the_mixed_tables_carry_both_of_mysqls_charset_forms() -> None:
    """What `MIXED` is for (no service needed): f_mixed_columns's table map lists every
    column's collation (COLUMN_CHARSET, ENUM_AND_SET_COLUMN_CHARSET), f_mixed_default's gives
    a default and at least one exception (DEFAULT_CHARSET, ENUM_AND_SET_DEFAULT_CHARSET)."""
    forms = {}
    for name, names in MIXED.items():
        cols = [column(n, ALL_TYPES[n].type) for n in names]
        plain = [c.collation for c in cols if c.collation is not None and not c.members]
        listed = [c.collation for c in cols if c.members and c.collation is not None]
        forms[name] = (charsets(plain, 2, 3), charsets(listed, 10, 11))
    (kind, _), (enum_kind, _) = forms["f_mixed_columns"]
    assert (kind, enum_kind) == (3, 11)
    (kind, body), (enum_kind, enum_body) = forms["f_mixed_default"]
    assert (kind, enum_kind) == (2, 10)
    assert body[0] == enum_body[0] == 8  # latin1 the most used, then the exceptions
    assert len(body) > 1 and len(enum_body) > 1


def test_rowbus_reader_run_reads_the_compressed_corpus_from_the_primary(
    compressed_primary: tuple[Primary, Corpus],
    services: Settings,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """The command a user runs (`rowbus reader run`, its own process, default paths) against
    the MySQL 8.4 primary over its socket, binlog_transaction_compression=ON: the corpus's
    records equal the MariaDB path's, and SIGTERM ends the process cleanly."""
    server, corpus = compressed_primary
    setup = setup_for(services, server, corpus.database, make_topic, unique)
    config = setup.write_config(
        tmp_path / "rowbus.yaml", start="file:binlog.000001:4", snapshot="never"
    )
    reader = start_reader_process(config, setup.source, "reader-m8", tmp_path / "reader.log")
    topic = TopicReader(services, setup.data_topic)
    try:
        topic.until(
            lambda rs: (
                sum(isinstance(x, RowChange) for x in rs) >= corpus.changes
                or reader.poll() is not None
            ),
            timeout=120,
            what=f"{corpus.changes} row changes from `rowbus reader run`",
        )
        assert reader.poll() is None, (tmp_path / "reader.log").read_text()[-2000:]
        reader.send_signal(signal.SIGTERM)
        assert reader.wait(60) == 0, (tmp_path / "reader.log").read_text()[-2000:]
        records = [rec for _, _, _, rec in topic.records]
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait(30)
        topic.close()
    check_corpus(records, corpus)
    assert sum(isinstance(r, RowChange) for r in records) == corpus.changes
    assert not server.seen.unanswered, server.seen.unanswered
