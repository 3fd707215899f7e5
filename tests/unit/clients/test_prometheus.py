"""Counters of a component become Prometheus families: counters, gauges, histograms, labels."""

from __future__ import annotations

import urllib.request

from rowbus.clients.prometheus import Exporter, LatencyHistogram


def test_readings_become_metric_families() -> None:
    hist = LatencyHistogram()
    for seconds in (0.003, 0.02, 0.02, 4.0):
        hist.observe(seconds)
    snap = {
        "rows_out_total": 42,
        "lag_ms": 1500,
        "commit_latency_seconds": hist,
        "errors_total": {"FencedError": 2},
        "lane_watermark_ts": {"t[0]/s1": 7, "t[1]/s1": 9},
    }
    exporter = Exporter()
    exporter.register(
        "reader",
        lambda: snap,
        labels={"errors_total": "kind", "lane_watermark_ts": "lane"},
        static={"source": "s1"},
    )
    text = exporter.text()
    assert (
        "rowbus_reader_rows_out_total counter" in text or "rowbus_reader_rows_out counter" in text
    )
    assert "# TYPE rowbus_reader_lag_ms gauge" in text
    assert 'rowbus_reader_rows_out_total{source="s1"} 42.0' in text
    assert 'rowbus_reader_lag_ms{source="s1"} 1500.0' in text
    assert 'rowbus_reader_errors_total{kind="FencedError",source="s1"} 2.0' in text
    assert 'rowbus_reader_lane_watermark_ts{lane="t[1]/s1",source="s1"} 9.0' in text
    assert 'rowbus_reader_commit_latency_seconds_bucket{le="0.005",source="s1"} 1.0' in text
    assert 'rowbus_reader_commit_latency_seconds_bucket{le="0.025",source="s1"} 3.0' in text
    assert 'rowbus_reader_commit_latency_seconds_count{source="s1"} 4.0' in text
    assert hist.quantile(0.5) == 0.025


def test_served_over_http_on_loopback() -> None:
    exporter = Exporter()
    exporter.register("subscriber", lambda: {"rows_out_total": 3})
    port = exporter.serve(0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            body = resp.read().decode()
        assert "rowbus_subscriber_rows_out_total 3.0" in body
    finally:
        exporter.close()


def test_a_failing_read_does_not_break_the_scrape() -> None:
    def broken() -> dict[str, int]:
        raise RuntimeError("not started")

    exporter = Exporter()
    exporter.register("apply", broken)
    exporter.register("reader", lambda: {"rows_out_total": 1})
    assert "rowbus_reader_rows_out_total 1.0" in exporter.text()


def test_components_that_come_and_go_share_their_families() -> None:
    """A reader node's tasks (`register_each`): one family per metric, a series per task
    labelled by its name; a task gone is gone from the next scrape."""
    tasks = {
        "s1": {"rows_out_total": 5, "errors_total": {"FencedError": 1}},
        "s2": {"rows_out_total": 7, "errors_total": {}},
    }
    exporter = Exporter()
    exporter.register_each(
        "reader",
        lambda: dict(tasks),
        label="source",
        labels={"errors_total": "kind"},
        static={"node": "n1"},
    )
    text = exporter.text()
    assert text.count("# TYPE rowbus_reader_rows_out_total counter") == 1, text
    assert 'rowbus_reader_rows_out_total{node="n1",source="s1"} 5.0' in text
    assert 'rowbus_reader_rows_out_total{node="n1",source="s2"} 7.0' in text
    assert 'rowbus_reader_errors_total{kind="FencedError",node="n1",source="s1"} 1.0' in text
    del tasks["s1"]
    text = exporter.text()
    assert 'source="s1"' not in text
    assert 'rowbus_reader_rows_out_total{node="n1",source="s2"} 7.0' in text
