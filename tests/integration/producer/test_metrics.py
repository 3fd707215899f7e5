"""A running reader process serves Prometheus metrics that follow what it publishes."""

from __future__ import annotations

import re
import signal
import socket
import urllib.request
from pathlib import Path

from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, start_reader_process


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            return str(resp.read().decode())
    except OSError:
        return ""


def value(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    return float(match.group(1)) if match else -1.0


def test_reader_metrics_are_scraped(reader_setup: ReaderSetup, tmp_path: Path) -> None:
    setup = reader_setup
    port = free_port()
    config = setup.write_config(tmp_path / "rowbus.yaml", metrics_port=port)
    proc = start_reader_process(config, setup.source, "m1", tmp_path / "reader.log")
    try:
        wait_for(
            lambda: value(scrape(port), "rowbus_reader_heartbeats_total") >= 1,
            timeout=90,
            what="the reader's metrics endpoint with a first heartbeat",
        )
        with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
            cur.executemany("INSERT INTO t VALUES (%s, 'x')", [(i,) for i in range(25)])
            conn.commit()
        wait_for(
            lambda: value(scrape(port), "rowbus_reader_rows_out_total") >= 25,
            timeout=90,
            what="rows_out_total to count the 25 rows",
        )
        text = scrape(port)
        assert f'source="{setup.source}"' in text
        assert value(text, "rowbus_reader_bytes_out_total") > 0
        assert value(text, "rowbus_reader_watermark_ts") > 0
        assert value(text, "rowbus_reader_commit_latency_seconds_count") >= 1
        assert "rowbus_reader_lag_ms" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
