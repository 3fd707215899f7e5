"""docs/examples/print_changes.py, the Subscriber SDK's example, runs as the doc says: against a
real reader's topics it prints every row change in commit order, and applying its lines to an
empty table gives the source table; a second run resumes after the first (its position file)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rowbus.config import Settings
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, reader_thread

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "docs" / "examples" / "print_changes.py"


def run_example(setup: ReaderSetup, services: Settings, position: Path, n: int) -> list[Any]:
    out = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE),
            setup.data_topic,
            "--bootstrap",
            str(services.kafka.client_config()["bootstrap.servers"]),
            "--checkpoints-topic",
            setup.checkpoints_topic,
            "--schemas-topic",
            setup.schemas_topic,
            "--position",
            str(position),
            "--max-transactions",
            str(n),
            "--idle-timeout",
            "60",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_the_subscriber_example_prints_the_sources_changes_in_order(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    server = services.sources[0]
    compact = {"cleanup.policy": "compact"}
    setup = ReaderSetup(
        services=services,
        server=server,
        source=unique("src"),
        database=make_database(server),
        data_topic=make_topic("data", partitions=2),
        checkpoints_topic=make_topic("ckpt", partitions=1, **compact),
        schemas_topic=make_topic("schemas", partitions=1, **compact),
    )
    with reader_thread(setup, heartbeat_interval_s=0.3) as reader:
        wait_for(lambda: reader.metrics.heartbeats > 0, timeout=60, what="a first heartbeat")
        with connect(server, setup.database) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
            for i in range(1, 6):
                cur.execute("INSERT INTO t VALUES (%s, %s)", (i, f"v{i}"))
            cur.execute("UPDATE t SET v = 'changed' WHERE id = 2")
            cur.execute("DELETE FROM t WHERE id = 4")
            cur.execute("SELECT id, v FROM t ORDER BY id")
            source = {row[0]: row[1] for row in cur.fetchall()}
        position = tmp_path / "position"
        # the CREATE, then four of the seven row transactions; then the rest, resumed
        first = run_example(setup, services, position, 5)
        rest = run_example(setup, services, position, 3)
    lines = first + rest
    assert lines[0]["ddl"].startswith("CREATE TABLE t")
    table: dict[int, str] = {}
    for line in lines[1:]:
        if line["op"] == "delete":
            del table[line["before"]["id"]]
        else:
            table[line["after"]["id"]] = line["after"]["v"]
    assert table == source
    assert [line["op"] for line in lines[1:]] == ["insert"] * 5 + ["update", "delete"]
