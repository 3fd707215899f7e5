"""Runs the fuzz targets (`targets.TARGETS`), one libFuzzer process each, and reads back what
each did: ``python -m benchmarks.fuzz run --seconds N``."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from benchmarks.fuzz import build as building
from benchmarks.fuzz import seeds

TARGETS = ("rows", "resultset", "literals")
"""One per extension: _rows.c, _resultset.c, _literals.c (targets.TARGETS)."""
CORPUS = building.OUT / "corpus"
SEEDS = building.OUT / "seeds"
CRASHES = building.OUT / "crashes"
MAX_LEN = 2048
"""Inputs stay small: the bugs are in lengths and counts, which small inputs reach."""
RSS_LIMIT_MB = 3072
"""ASan's quarantine and shadow memory make the process large; the machine has 24 GiB."""


@dataclass
class Result:
    target: str
    seconds: float
    executions: int
    corpus: int
    coverage: int
    returncode: int
    crash_file: Path | None
    log: Path

    @property
    def crashed(self) -> bool:
        return self.returncode != 0


_DONE = re.compile(r"Done (\d+) runs in (\d+) second")
_STATS = re.compile(r"cov: (\d+) ft: \d+ corp: (\d+)/")
_ARTIFACT = re.compile(r"Test unit written to (\S+)")
_EXECS = re.compile(r"^#(\d+)\s", re.MULTILINE)


def write_seeds(target: str) -> Path:
    out = SEEDS / target
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    for i, seed in enumerate(seeds.seeds(target)):
        (out / f"seed-{i:04}").write_bytes(seed)
    return out


def run_target(target: str, seconds: int, work: Path | None = None) -> Result:
    """libFuzzer on `target` for `seconds`. Its corpus, crashing input and log go under `work`
    (a test's own folder) or by default in .fuzz/ (corpus/TARGET, grown run after run;
    crashes/; TARGET.log)."""
    corpus = work / "corpus" if work else CORPUS / target
    crashes = work / "crashes" if work else CRASHES
    log = work / "fuzz.log" if work else building.OUT / f"{target}.log"
    corpus.mkdir(parents=True, exist_ok=True)
    crashes.mkdir(parents=True, exist_ok=True)
    seed_dir = write_seeds(target)
    cmd = [
        sys.executable, "-m", "benchmarks.fuzz.worker", target, str(corpus), str(seed_dir),
        f"-max_total_time={seconds}", f"-max_len={MAX_LEN}", "-timeout=20",
        f"-rss_limit_mb={RSS_LIMIT_MB}", f"-artifact_prefix={crashes}/{target}-",
        "-print_final_stats=1",
    ]  # fmt: skip
    started = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(
            cmd, env=building.environment(), cwd=building.ROOT, stdout=out,
            stderr=subprocess.STDOUT, check=False,
            timeout=seconds + 300,  # loading the seeds and a crash's report take a while
        )  # fmt: skip
    elapsed = time.monotonic() - started
    text = log.read_text(errors="replace")
    executions = 0
    if m := _DONE.search(text):
        executions = int(m.group(1))
    elif execs := _EXECS.findall(text):
        executions = int(execs[-1])
    stats = _STATS.findall(text)
    coverage, corp = (int(stats[-1][0]), int(stats[-1][1])) if stats else (0, 0)
    artifact = _ARTIFACT.search(text)
    crash = Path(artifact.group(1)) if artifact else None
    return Result(target, elapsed, executions, corp, coverage, done.returncode, crash, log)


def run_all(targets: list[str], seconds: int, jobs: int = 1) -> list[Result]:
    building.build()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(lambda t: run_target(t, seconds), targets))


def report(results: list[Result]) -> Iterator[str]:
    for r in results:
        line = (
            f"{r.target:<10} {r.seconds:6.1f} s  {r.executions:>9} execs  "
            f"corpus {r.corpus:>5}  cov {r.coverage:>5}"
        )
        if r.crashed:
            line += f"  CRASH (exit {r.returncode}): input {r.crash_file}, log {r.log}"
        yield line
