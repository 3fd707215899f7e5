"""tests/spark_cds.py: the archive's options once it exists, and a JVM that cannot map an
archive runs without it and says nothing (so no process's output changes)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from rowbus.waiting import wait_for
from tests.spark_cds import QUIET, Archive, _key

OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def test_a_jvm_that_cannot_map_the_archive_runs_without_it_silently(tmp_path: Path) -> None:
    garbage = tmp_path / "other.jsa"
    garbage.write_bytes(b"not an archive" * 100)
    # check=True: the JVM starts and ends as without the option.
    quiet = subprocess.run(
        ["java", f"-XX:SharedArchiveFile={garbage}", *QUIET.split(), "-version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "archive" not in quiet.stdout + quiet.stderr
    assert "OpenJDK" in quiet.stderr


def test_an_archive_made_before_is_used_at_once_and_one_of_other_options_is_not(
    tmp_path: Path,
) -> None:
    key = _key(OPTIONS)
    assert key is not None and key != _key(OPTIONS + " -Xmx1g")
    made = tmp_path / f"spark-{key}.jsa"
    made.write_bytes(b"")
    archive = Archive(tmp_path, OPTIONS)
    try:
        options = wait_for(archive.options, timeout=30, what="the archive's options")
    finally:
        archive.close()
    assert options == f"-XX:SharedArchiveFile={made} {QUIET}"
