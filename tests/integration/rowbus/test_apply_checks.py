"""What `rowbus apply` can check is checked before Spark starts, and refused in one line."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rowbus.config import Settings, load_settings
from rowbus.exceptions import ConfigError
from rowbus.jobs import job_config
from tests.conftest import connect


def _settings(services: Settings, **apply: object) -> Settings:
    return load_settings(
        None,
        kafka={"bootstrap_servers": services.kafka.bootstrap_servers},
        zookeeper={"hosts": services.zookeeper.hosts},
        sources=[{"name": s.name, "host": s.host, "port": s.port} for s in services.sources],
        sink={"host": services.resolved_sink.host, "port": services.resolved_sink.port},
        apply=apply,
    )


def test_an_unknown_source_is_one_line_before_spark(services: Settings, tmp_path: Path) -> None:
    path = tmp_path / "rowbus.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": services.kafka.bootstrap_servers},
                "sink": {"port": services.resolved_sink.port},
                "sources": [{"name": s.name, "port": s.port} for s in services.sources],
                "apply": {"sources": ["nosuch"]},
            }
        )
    )
    began = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "rowbus", "-c", str(path), "apply"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines == [
        "rowbus: error: apply.sources names 'nosuch', which is not a configured source; "
        "configured: source1, source2"
    ], out.stderr
    assert time.monotonic() - began < 30, "refused before any Spark start-up"


def test_an_unknown_shard_table_is_refused(services: Settings, make_database) -> None:
    db = make_database(services.sources[0])
    settings = _settings(
        services,
        routes=[{"match": f"{db}.o_*", "target": f"{db}.orders", "sharded": True}],
        shard_ddl={"tables": [f"source1/{db}.o_1", f"source1/{db}.o_2"]},
    )
    with connect(services.sources[0], db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE o_1 (id INT PRIMARY KEY)")
    with pytest.raises(ConfigError, match=rf"'source1/{db}.o_2': source1 .* has no table {db}.o_2"):
        job_config(settings)
    bad_source = _settings(
        services,
        routes=[{"match": f"{db}.o_*", "target": f"{db}.orders", "sharded": True}],
        shard_ddl={"tables": [f"elsewhere/{db}.o_1"]},
    )
    with pytest.raises(ConfigError, match="names source 'elsewhere', which is not configured"):
        job_config(bad_source)


def test_a_missing_sharded_target_is_created_from_the_first_shard(
    services: Settings, make_database, unique
) -> None:
    db = make_database(services.sources[0])
    target_db = unique("target")
    with connect(services.sources[0], db) as conn, conn.cursor() as cur:
        for n in (1, 2):
            cur.execute(
                f"CREATE TABLE o_{n} (id BIGINT PRIMARY KEY, amount DECIMAL(10,2) NOT NULL "
                "DEFAULT 0, note VARCHAR(20), UNIQUE KEY u_note (note))"
            )
    settings = _settings(
        services,
        routes=[{"match": f"{db}.o_*", "target": f"{target_db}.orders", "sharded": True}],
    )
    try:
        config = job_config(settings)
        assert sorted(config.apply.shard_ddl.tables) == [f"source1/{db}.o_1", f"source1/{db}.o_2"]
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            cur.execute(f"SHOW CREATE TABLE `{target_db}`.orders")
            created = cur.fetchone()[1]
        assert "`amount` decimal(10,2) NOT NULL DEFAULT 0.00" in created
        assert "UNIQUE KEY `u_note`" in created
        assert "PRIMARY KEY (`id`)" in created
        job_config(settings)  # the second time it exists: nothing to do
    finally:
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{target_db}`")


def test_a_failure_inside_spark_is_one_line(services: Settings, tmp_path: Path) -> None:
    """A failure only Spark can find (here: the checkpoint folder's parent is a file) ends the
    job with one line naming the cause, not Spark's and py4j's traces; -v brings them back."""
    (tmp_path / "a-file").write_text("")
    path = tmp_path / "rowbus.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": services.kafka.bootstrap_servers},
                "sink": {"port": services.resolved_sink.port},
                "sources": [{"name": s.name, "port": s.port} for s in services.sources],
                "apply": {"checkpoint_location": str(tmp_path / "a-file" / "ckpt")},
            }
        )
    )
    argv = [sys.executable, "-m", "rowbus", "-c", str(path)]
    quiet = subprocess.run(
        [*argv, "apply", "--available-now"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert quiet.returncode == 1, quiet.stderr
    assert "Traceback" not in quiet.stderr and "\tat " not in quiet.stderr, quiet.stderr
    lines = quiet.stderr.strip().splitlines()
    (cause,) = [line for line in lines if "apply failed:" in line]
    assert cause.endswith(
        f"apply failed: ParentNotDirectoryException: Parent path is not a directory: "
        f"file:{tmp_path / 'a-file'} (-v for the trace)"
    ), quiet.stderr
    # Besides the cause: the JVM's start-up notice, at most a warning or two from its exit.
    assert len(lines) <= 4, quiet.stderr
    loud = subprocess.run(
        [*argv, "-v", "apply", "--available-now"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert loud.returncode == 1
    assert "Traceback" in loud.stderr
