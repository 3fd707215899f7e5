"""CLI commands: each module exposes `register(subparsers)` and sets `func(args, settings)`.

To add a command, write a module here and list it in `COMMANDS`.
"""

from __future__ import annotations

COMMANDS = ["rowbus.commands.local", "rowbus.commands.doctor", "rowbus.commands.config"]
