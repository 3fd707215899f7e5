"""`rowbus doctor`: which of the platform's guarantees hold on the configured services.

- `kafka`: the broker's semantics rowbus relies on (aborted records, offsets, fencing);
- `topics`: the existing topics against what rowbus needs of them;
- `mysql`: the source servers' binlog and grants (and no more), the sink's grants, the
  connections' encryption;
- `report`: one check's result and how a list of them is printed.
"""

from __future__ import annotations

import sys
from typing import TextIO

from rowbus.config import Settings
from rowbus.doctor.report import Check, print_section


def run_doctor(
    settings: Settings,
    *,
    kafka_only: bool = False,
    mysql_only: bool = False,
    out: TextIO | None = None,
) -> int:
    """Print every check (to `out`, default: the current sys.stdout, looked up at the call:
    a caller may have replaced it); return 1 if a required one failed, else 0."""
    out = out or sys.stdout
    from rowbus.doctor.kafka import KafkaProbe
    from rowbus.doctor.mysql import check_sink, check_source
    from rowbus.doctor.topics import check_topics

    all_checks: list[Check] = []
    if not mysql_only:
        checks = KafkaProbe(settings.kafka).run() + check_topics(settings)
        print_section(f"broker {settings.kafka.bootstrap_servers}", checks, out)
        all_checks += checks
    if not kafka_only:
        for source in settings.sources:
            version, checks = check_source(source)
            print_section(f"source {source.name} {source.address} ({version})", checks, out)
            all_checks += checks
        sink = settings.resolved_sink
        version, checks = check_sink(sink, settings.apply.state_database)
        print_section(f"sink {sink.address} ({version})", checks, out)
        all_checks += checks
    failed = [c for c in all_checks if not c.ok and c.required]
    warned = [c for c in all_checks if not c.ok and not c.required]
    if failed:
        print(
            f"NOT READY: {len(failed)} required check(s) failed, {len(warned)} warning(s); "
            "see 'to change' above",
            file=out,
        )
        return 1
    suffix = f" with {len(warned)} warning(s)" if warned else ""
    print(f"READY: every guarantee rowbus relies on holds{suffix}", file=out)
    return 0


__all__ = ["Check", "run_doctor"]
