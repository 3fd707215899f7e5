"""A grant revoked on the source while the reader runs (issue #33's bad input): the server
keeps the running binlog dump, and the next one — after a reconnect — is refused; the reader
stops at once with one line naming the source, the binlog position it stopped at and the
grant to give back, and exit status 2 (a supervisor restarting it gets the same line until
the grant is back: no retry loop hides it)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ROOT, ReaderSetup


def test_replication_revoked_under_a_running_reader_stops_it_with_one_line(
    reader_setup: ReaderSetup, unique: Callable[[str], str], tmp_path: Path
) -> None:
    setup = reader_setup
    user = unique("revoked")
    with connect(setup.server) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'")
        cur.execute(f"GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO '{user}'@'%'")
    config = setup.write_config(tmp_path / "rowbus.yaml", snapshot="never")
    data = yaml.safe_load(config.read_text())
    data["sources"][0].update(user=user, password="pw")
    config.write_text(yaml.safe_dump(data))
    err = tmp_path / "stderr"
    with err.open("w") as out:
        reader = subprocess.Popen(
            [sys.executable, "-m", "rowbus", "-c", str(config), "reader", "run",
             "--source", setup.source],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=out,
        )  # fmt: skip
    try:

        def dumping() -> list[int]:
            assert reader.poll() is None, err.read_text()
            with connect(setup.server) as conn, conn.cursor() as cur:
                cur.execute(
                    "SELECT id FROM information_schema.processlist "
                    f"WHERE user = '{user}' AND command LIKE 'Binlog Dump%'"
                )
                return [i for (i,) in cur.fetchall()]

        threads = wait_for(dumping, timeout=90, what="the reader's binlog dump")
        with connect(setup.server) as conn, conn.cursor() as cur:
            cur.execute(f"REVOKE REPLICATION SLAVE ON *.* FROM '{user}'@'%'")
            for thread in threads:  # the running dump keeps its rights: make it reconnect
                cur.execute(f"KILL CONNECTION {thread}")
        assert reader.wait(90) == 2, err.read_text()
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait(30)
        with connect(setup.server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP USER '{user}'@'%'")
    text = err.read_text()
    assert "Traceback" not in text, text
    line = text.strip().splitlines()[-1]
    where = re.escape(f"{setup.source} ({setup.server.host}:{setup.server.port})")
    assert re.fullmatch(
        rf"rowbus: error: binlog stream of {where} at binlog\.\d+:\d+: access denied \(Access "
        r"denied; you need \(at least one of\) the REPLICATION SLAVE privilege\(s\) for this "
        r"operation\); grant the reader's user REPLICATION SLAVE, BINLOG MONITOR \(MySQL: "
        r"REPLICATION CLIENT\)",
        line,
    ), text
