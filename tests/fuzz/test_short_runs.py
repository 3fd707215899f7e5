"""A short fuzz run of each native extension on the sanitized build (`benchmarks.fuzz`): part
of `make test`, so a crash any target finds within its few seconds fails the build. Each target starts
from its seeds (a fresh corpus), so the run does not depend on what an earlier one kept; the
long runs (`python -m benchmarks.fuzz run --seconds 180`) grow .fuzz/corpus instead.

Not skipped anywhere: gcc's ASan runtime and atheris (the test extra) are what `make setup`
and a Debian machine with gcc provide; without them these tests fail, saying which is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.fuzz import build, run

SECONDS = 8
"""Per target: a smoke run that keeps this file near 40 s of the suite's 30-minute budget (the
long runs are `python -m benchmarks.fuzz run`)."""


@pytest.fixture(scope="module")
def sanitized() -> None:
    build.sanitizer_runtime()  # raises when gcc has no ASan runtime
    build.build()


def _explain(result: run.Result) -> str:
    tail = result.log.read_text(errors="replace")[-6000:]
    return f"{result.target}: exit {result.returncode}, input {result.crash_file}\n{tail}"


@pytest.mark.parametrize("target", run.TARGETS)
def test_a_short_fuzz_run_finds_no_crash(sanitized: None, target: str, tmp_path: Path) -> None:
    result = run.run_target(target, SECONDS, work=tmp_path)
    assert not result.crashed, _explain(result)
    assert result.executions > 100, _explain(result)
    assert result.corpus > 0 and result.coverage > 0, _explain(result)


@pytest.mark.parametrize(
    ("canary", "report"),
    [("canaryASAN", "AddressSanitizer: heap-buffer-overflow"), ("canaryRAISE", "FindingError")],
)
def test_a_crash_is_reported_with_its_input_saved(
    sanitized: None, canary: str, report: str, tmp_path: Path
) -> None:
    """The runner's own check: a memory error (seen only because the sanitizer runtime is
    loaded) and a target's exception each end the run as a crash, the input kept."""
    result = run.run_target(canary, 5, work=tmp_path)
    assert result.crashed
    assert result.crash_file is not None and result.crash_file.read_bytes().startswith(
        canary.removeprefix("canary").encode()
    )
    assert report in result.log.read_text(errors="replace")
