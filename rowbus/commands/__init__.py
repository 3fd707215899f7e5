"""CLI commands: each module exposes `register(subparsers)` and sets `func(args, settings)`.

To add a command, write a module here, list it in `COMMANDS` (one per line) and below:

- `local`, `doctor`, `config`, `verify`, `demo`, `status`: `rowbus local | doctor | config |
  verify | demo | status`;
- `reader`: `rowbus reader run | node | nodes | move | drain`;
- `apply`: `rowbus apply` (the Spark job);
- `ddl_locks`: `rowbus ddl-locks`;
- `tail`: `rowbus tail`;
- `snapshot`: `rowbus snapshot` (an incremental snapshot);
- `iceberg`: `rowbus iceberg maintain` (an Iceberg sink's compaction, expiry, orphans);
- `common`: the flags every long-running command offers alike (`--metrics-port`).
"""

from __future__ import annotations

__all__ = ["COMMANDS"]

COMMANDS = [
    "rowbus.commands.local",
    "rowbus.commands.doctor",
    "rowbus.commands.config",
    "rowbus.commands.verify",
    "rowbus.commands.demo",
    "rowbus.commands.status",
    "rowbus.commands.reader",
    "rowbus.commands.apply",
    "rowbus.commands.ddl_locks",
    "rowbus.commands.tail",
    "rowbus.commands.snapshot",
    "rowbus.commands.iceberg",
]
