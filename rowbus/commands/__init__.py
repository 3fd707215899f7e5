"""CLI commands: each module exposes `register(subparsers)` and sets `func(args, settings)`.

To add a command, write a module here and list it in `COMMANDS` (one per line).
"""

from __future__ import annotations

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
