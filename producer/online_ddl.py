"""Online schema changes (gh-ost, pt-online-schema-change) seen as one ALTER of the real table.

Both tools change table ``T`` by building a copy and swapping it in:

- gh-ost: ``CREATE TABLE _T_gho LIKE T``; ``ALTER TABLE _T_gho …``; rows copied and binlog
  changes replayed into ``_T_gho`` (its changelog ``_T_ghc`` and cut-over sentry ``_T_del``
  come and go); cut-over ``RENAME TABLE T TO _T_del, _T_gho TO T``;
- pt-osc: ``CREATE TABLE _T_new LIKE T``; ``ALTER TABLE _T_new …``; triggers on ``T`` write
  ``_T_new`` inside the user's transactions; rows copied in chunks; cut-over ``RENAME TABLE
  T TO _T_old, _T_new TO T``; ``_T_old`` and the triggers dropped.

Published as is, a consumer gets every row twice (once in ``T``, once copied into the ghost)
and, when the ghost table is filtered or routed away, a RENAME that finds no ghost table in the
sink. So, as DM's online-DDL mode does, the reader (``reader.online_ddl``, on by default):

- never publishes the tools' tables (`is_tool_table`: ``_*_gho``, ``_*_ghc``, ``_*_del``,
  ``_*_new``, ``_*_old``): neither their rows nor their DDL;
- remembers each ALTER of a ghost table (`OnlineDdl.on_ddl`), by the ghost's name;
- turns the cut-over RENAME into ``ALTER TABLE T <the ghost's ALTERs>``: that is what the
  schema tracker applies, the DdlChange carries (with the after-schema) and the shard-DDL
  coordinator sees, so ``T``'s routes and shard groups change once, like for a plain ALTER.

The remembered ALTERs are stamped with their binlog positions, so a new stream from an earlier
position (a reconnect) `rewind`s them like the schema tracker. They are not stored with the
checkpoint: a reader started (or restarted) after the tool's ALTER finds them at the cut-over
in the server's own binlog (`binlog_alters`: ``SHOW BINLOG EVENTS``, newest file first, back to
the ghost's CREATE).

What cannot be followed stops the reader with one line (`OnlineDdlError`) rather than publish
a RENAME that would lose ``T``'s rows downstream: a cut-over whose ghost's ALTERs are found
nowhere (its binlog purged), or a RENAME that is not a swap of the two tables. A tool aborted
half-way leaves its tables behind: their rows were never published and ``T``'s were, so nothing
is lost; a DROP of a ghost forgets its ALTERs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from rowbus.producer.exceptions import ReaderError
from rowbus.producer.tracker import PositionKey
from rowbus.protocol.ddl import DdlKind, DdlParseError, ParsedDdl, TableName, parse_ddl, retarget

log = logging.getLogger(__name__)

_GHOST = re.compile(r"^_.+_(?:gho|new)$")
"""The copy a tool alters then swaps in (gh-ost, pt-osc; pt-osc adds leading ``_`` when the
name is taken)."""
_TOOL = re.compile(r"^_.+_(?:gho|ghc|del|new|old)$")
"""Every table the tools create: ghosts, gh-ost's changelog and the old table after a swap."""


class OnlineDdlError(ReaderError):
    """An online schema change the reader cannot turn into one ALTER of the real table."""


def is_tool_table(table: str) -> bool:
    """Whether `table` is named like a gh-ost or pt-osc table (never published)."""
    return _TOOL.match(table) is not None


Statements = Callable[[str, int], list[tuple[str, str]]]
"""(default schema, statement) of every statement event of binlog file `name` that ends before
offset `until` (-1: the whole file), in binlog order."""


def binlog_alters(
    ghost: TableName, files: list[str], statements: Statements, until: int
) -> list[str] | None:
    """The ALTERs of `ghost` since its last CREATE, read back from the binlog whose `files` end
    with the cut-over's file (the cut-over at offset `until`); None when its CREATE is not
    there (purged) or something else happened to it in between."""
    found: list[str] = []
    for n, name in enumerate(reversed(files)):
        for schema, text in reversed(statements(name, until if n == 0 else -1)):
            try:
                parsed = parse_ddl(text, schema)
            except DdlParseError:
                continue
            if ghost not in parsed.touched:
                continue
            if parsed.kind is DdlKind.ALTER_TABLE and not parsed.renames:
                found.append(text)
            elif parsed.kind in (DdlKind.CREATE_TABLE, DdlKind.CREATE_TABLE_LIKE):
                return found[::-1]
            else:
                return None
    return None


def binlog_history(
    files: Callable[[], list[str]], statements: Statements
) -> Callable[[TableName, PositionKey], list[str] | None]:
    """`OnlineDdl.history` over the server's binlog `files` (oldest first) and `statements`."""

    def history(ghost: TableName, at: PositionKey) -> list[str] | None:
        names = files()
        if at[1] not in names:
            return None
        return binlog_alters(ghost, names[: names.index(at[1]) + 1], statements, at[2])

    return history


@dataclass
class OnlineDdl:
    """The ghost tables' ALTERs read so far, and the cut-over rewrite. `history` reads a
    ghost's ALTERs back from the server's binlog (`binlog_alters`) for a cut-over whose ALTERs
    this reader did not read; None: it cannot."""

    history: Callable[[TableName, PositionKey], list[str] | None] | None = None
    _alters: dict[TableName, list[tuple[PositionKey, str]]] = field(default_factory=dict)
    _undo: list[tuple[PositionKey, TableName, list[tuple[PositionKey, str]] | None]] = field(
        default_factory=list
    )

    def on_ddl(self, parsed: ParsedDdl, statement: str, at: PositionKey) -> str:
        """The statement to carry on for a DDL read at `at`: the cut-over as an ALTER of the
        real table, any other unchanged (a tool table's DDL is then dropped by the table
        filter)."""
        where = f"{at[1]}:{at[2]}"
        if parsed.kind is DdlKind.RENAME_TABLE:
            return self._cut_over(parsed, where, at) or statement
        tools = [t for t in parsed.touched if is_tool_table(t.table)]
        if not tools:
            return statement
        if parsed.kind is DdlKind.ALTER_TABLE and not parsed.renames:
            ghost = tools[0]
            # Kept only for a ghost whose CREATE this term read: else some ALTERs may be
            # missing, and the cut-over reads them all back from the binlog.
            if _GHOST.match(ghost.table) and ghost in self._alters:
                self._keep(at, ghost, [*self._alters[ghost], (at, statement)])
        elif parsed.kind in (DdlKind.DROP_TABLE, DdlKind.CREATE_TABLE, DdlKind.CREATE_TABLE_LIKE):
            for name in tools:
                if self._alters.get(name):
                    log.info(
                        "online schema change of %s abandoned at %s: the ALTERs of %s read "
                        "before are forgotten (none was published)",
                        name,
                        where,
                        name,
                    )
                creates = parsed.kind is not DdlKind.DROP_TABLE and _GHOST.match(name.table)
                if creates or name in self._alters:
                    self._keep(at, name, [] if creates else None)
        return statement

    def _cut_over(self, parsed: ParsedDdl, where: str, at: PositionKey) -> str | None:
        ghosts = [(old, new) for old, new in parsed.renames if _GHOST.match(old.table)]
        if not ghosts:
            return None
        pairs = set(parsed.renames)
        if len(ghosts) != 1 or len(parsed.renames) != 2:
            raise OnlineDdlError(self._refusal(where, parsed, "not a swap of two tables"))
        ghost, real = ghosts[0]
        trash = next(new for old, new in pairs if old == real)
        if is_tool_table(real.table) or not is_tool_table(trash.table):
            raise OnlineDdlError(self._refusal(where, parsed, "not a swap of two tables"))
        kept = self._alters.get(ghost)
        alters = [text for _, text in kept or []]
        if kept is None and self.history is not None:
            # Its CREATE was read before this term began (a restart): read back from the binlog.
            alters = self.history(ghost, at) or []
            if alters:
                log.info(
                    "online schema change of %s: the ALTERs of %s were made before this "
                    "reader started; read back from the binlog",
                    real,
                    ghost,
                )
        if not alters:
            raise OnlineDdlError(
                self._refusal(
                    where,
                    parsed,
                    f"no ALTER of {ghost} was read, nor found in the server's binlog (purged)",
                )
            )
        self._keep(at, ghost, None)
        specs = []
        for text in alters:
            alter = parse_ddl(text, ghost.schema)
            head = retarget(alter, lambda name: real if name == ghost else None)
            specs.append(_specs_of(head, real))
        statement = f"ALTER TABLE {real.quoted} {', '.join(specs)}"
        log.info(
            "online schema change of %s cut over at %s: published as %s",
            real,
            where,
            statement[:300],
        )
        return statement

    def _refusal(self, where: str, parsed: ParsedDdl, why: str) -> str:
        names = ", ".join(f"{old} TO {new}" for old, new in parsed.renames)
        return (
            f"binlog {where}: RENAME TABLE {names} looks like an online schema change's "
            f"cut-over, but {why}: published as is it would lose the table's rows downstream. "
            f"Add {', '.join(str(t) for t in parsed.touched if not is_tool_table(t.table))} to "
            "reader.exclude_tables for one restart (the RENAME "
            "passes) and take it out again: the reader then snapshots it alone, as it is now"
        )

    def _keep(
        self, at: PositionKey, name: TableName, alters: list[tuple[PositionKey, str]] | None
    ) -> None:
        self._undo.append((at, name, self._alters.get(name)))
        if alters is None:
            self._alters.pop(name, None)
        else:
            self._alters[name] = alters

    def rewind(self, at: PositionKey) -> None:
        """Undo what was read after `at` (a new stream reads from there again)."""
        while self._undo and self._undo[-1][0] > at:
            _, name, before = self._undo.pop()
            if before is None:
                self._alters.pop(name, None)
            else:
                self._alters[name] = before

    def settled(self, at: PositionKey) -> None:
        """Forget the undo steps up to `at` (a committed position is never read again)."""
        self._undo = [u for u in self._undo if u[0] > at]


def _specs_of(alter: str, real: TableName) -> str:
    """The alter specifications of ``ALTER TABLE <real> …`` (the text after the name)."""
    head = f"ALTER TABLE {real.quoted}"
    if alter.startswith(head):
        return alter[len(head) :].strip()
    # ALTER ONLINE / IGNORE TABLE …: the name's end, as `retarget` wrote it.
    at = alter.find(real.quoted)
    if at < 0:
        raise DdlParseError(f"no table name in {alter[:200]}")
    return alter[at + len(real.quoted) :].strip()
