"""A prepared XA transaction that stays prepared holds every checkpoint: past a threshold the
reader names it once (XID, binlog position, how long) and exports its age."""

from __future__ import annotations

import logging

import pytest

from rowbus.clients.prometheus import Exporter
from rowbus.producer.assembler import TransactionAssembler
from rowbus.producer.metrics import ReaderMetrics
from rowbus.producer.settings import ReaderSettings
from rowbus.producer.xa_watch import PreparedXaWatch
from tests.unit.producer.test_assembler_shapes import xa_finish, xa_group

PREPARED_AT = 1_700_000_000  # the XA PREPARE's binlog timestamp


def test_a_long_prepared_xa_is_named_once_and_exported(caplog: pytest.LogCaptureFixture) -> None:
    a = TransactionAssembler("bin.000003", 4)
    xa_group(a, "0-1-7", 1000, "X'6a6f62',X'',1", 1, 2)
    [held] = a.held_xa()
    assert held.xid == "X'6a6f62',X'',1"
    assert str(held.hold) == "bin.000003:4"
    assert held.timestamp == 1  # the test events' binlog timestamp
    metrics = ReaderMetrics()
    watch = PreparedXaWatch("src1", 300.0, metrics)
    caplog.set_level(logging.WARNING, logger="rowbus.producer.xa_watch")

    assert watch.check(a.held_xa(), now=1 + 299.0) == []
    assert metrics.xa_prepared == 1 and metrics.xa_prepared_oldest_s == 299.0
    assert not caplog.records

    for now in (1 + 300.0, 1 + 301.0, 1 + 400.0):
        assert [x.xid for x in watch.check(a.held_xa(), now)] == [held.xid]
    [record] = caplog.records  # one warning, not one per check
    text = record.getMessage()
    assert "X'6a6f62',X'',1" in text and "300s" in text
    assert "bin.000003:1220" in text  # where it was prepared
    assert "src1" in text
    assert metrics.xa_prepared_age_s == {held.xid: 400.0}

    # exported under its XID, as the reader command registers it
    exporter = Exporter()
    exporter.register(
        "reader",
        metrics.prometheus,
        labels={"errors_total": "kind", "xa_prepared_age_seconds": "xid"},
    )
    page = exporter.text()
    assert "rowbus_reader_xa_prepared 1.0" in page
    assert "rowbus_reader_xa_prepared_age_seconds{xid=\"X'6a6f62',X'',1\"} 400.0" in page

    # committed: the metrics clear
    xa_finish(a, "0-1-8", 2000, "XA COMMIT X'6a6f62',X'',1")
    assert a.held_xa() == []
    watch.check(a.held_xa(), now=1 + 500.0)
    assert metrics.xa_prepared == 0 and metrics.xa_prepared_age_s == {}


def test_the_threshold_is_a_reader_setting_with_a_default() -> None:
    assert ReaderSettings().xa_prepared_warn_s == 300.0
    assert ReaderSettings(xa_prepared_warn_s=5).xa_prepared_warn_s == 5.0
