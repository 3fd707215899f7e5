"""``python -m benchmarks.fuzz build | unit [pytest args] | run [--seconds N] [--target T]``
(see the package's docstring)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from benchmarks.fuzz import build as building
from benchmarks.fuzz import run as running

UNIT_SUITES = ["tests/unit/producer", "tests/unit/spark_apply", "tests/unit/native"]
"""The fast-path and fidelity unit suites of the three extensions (the result-set reader's unit
tests are in tests/unit/native; its fidelity tests need MySQL: tests/integration/snapshot)."""


def unit(extra: list[str]) -> int:
    """pytest over `UNIT_SUITES` (or the given paths) in a process on the sanitized build."""
    building.build()
    args = extra or UNIT_SUITES
    # --capture=sys: a sanitizer's report goes to fd 2 as the process dies; pytest's default
    # fd capture would swallow it with the process.
    cmd = [sys.executable, "-m", "pytest", "-p", "benchmarks.fuzz.sanitized", "--capture=sys",
           "-q", *args]  # fmt: skip
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(
        cmd, env=building.environment(), cwd=building.ROOT, check=False
    ).returncode


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fuzz", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="compile the sanitized extensions into .fuzz/build")
    b.add_argument("--force", action="store_true", help="rebuild even if up to date")
    u = sub.add_parser("unit", help="the unit suites against the sanitized build")
    u.add_argument("pytest_args", nargs=argparse.REMAINDER)
    r = sub.add_parser("run", help="fuzz each target against the sanitized build")
    r.add_argument("--seconds", type=int, default=20, help="per target (default 20)")
    r.add_argument("--target", action="append", choices=running.TARGETS, help="default: all")
    r.add_argument("--jobs", type=int, default=1, help="targets run at once (default 1)")
    args = parser.parse_args()
    if args.command == "build":
        building.build(force=args.force)
        for ext in building.EXTENSIONS:
            print(ext.target())
        return 0
    if args.command == "unit":
        return unit(args.pytest_args)
    results = running.run_all(args.target or list(running.TARGETS), args.seconds, args.jobs)
    for line in running.report(results):
        print(line)
    return 1 if any(r.crashed for r in results) else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
