"""Snapshot rows carry every value exactly as the binlog path does: the type matrix
(`tests.integration.fidelity.corpus.CASES`) is written before the reader starts, snapshotted,
then copied by ``INSERT … SELECT`` (id + 1000) so the binlog carries the same stored values;
each snapshot value must equal its binlog twin, type included, and the source's value."""

from __future__ import annotations

from collections.abc import Callable

from rowbus.config import Settings
from rowbus.protocol.events import Op, RowChange
from rowbus.protocol.values import Value
from tests.conftest import connect
from tests.integration.fidelity.corpus import CASES, from_source, same, select
from tests.integration.producer.helpers import TopicReader, reader_thread
from tests.integration.snapshot.helpers import snapshot_state
from tests.integration.snapshot.test_initial import _setup

COPY = 1000


def test_snapshot_values_equal_the_binlog_values_of_the_same_rows(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
) -> None:
    setup = _setup(services, make_topic, make_database, unique)
    with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("SET time_zone = '+00:00'")
        for case in CASES:
            cur.execute(case.create())
            for statement in case.inserts():
                cur.execute(statement)
    expected = 0
    source: dict[str, list[tuple[int, Value]]] = {}
    with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        for case in CASES:
            cur.execute(select(case))
            source[case.table] = [(int(i), from_source(case, v)) for i, v in cur.fetchall()]
            expected += len(source[case.table])
    data = TopicReader(services, setup.data_topic)
    index = TopicReader(services, setup.checkpoints_topic)
    with reader_thread(setup, snapshot="initial", snapshot_chunk_rows=3):
        index.until(
            lambda rs: (s := snapshot_state(rs, setup.source)) is not None and s.done,
            timeout=120,
            what="the snapshot to finish",
        )
        with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")
            for case in CASES:
                cur.execute(f"INSERT INTO `{case.table}` SELECT id + {COPY}, v FROM `{case.table}`")

        def rows(records: list[object]) -> list[RowChange]:
            return [r for r in records if isinstance(r, RowChange)]

        data.until(
            lambda rs: len(rows(rs)) >= 2 * expected,
            timeout=120,
            what=f"{expected} snapshot rows and their {expected} binlog copies",
        )
    index.close()
    data.close()
    got = rows([r for *_, r in data.records])
    read = {(r.table, r.image[0]): r.image[1] for r in got if r.op is Op.READ}
    copied = {(r.table, r.image[0]): r.image[1] for r in got if r.op is Op.INSERT}
    assert len(read) == expected
    wrong = []
    for case in CASES:
        for key, want in source[case.table]:
            snap, binlog = read[case.table, key], copied[case.table, key + COPY]
            if type(snap) is not type(binlog) or snap != binlog:
                wrong.append(f"{case.name} id {key}: snapshot {snap!r}, binlog {binlog!r}")
            elif not same(case, snap, want):
                wrong.append(f"{case.name} id {key}: snapshot {snap!r}, source {want!r}")
    assert not wrong, "\n".join(wrong)
