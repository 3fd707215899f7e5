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

What cannot be followed stops the reader with one line (`OnlineDdlError`) rather than publish
a RENAME that would lose ``T``'s rows downstream: a cut-over whose ghost had no ALTER read by
this reader (it was started after the tool's ALTER, or the statement is not a swap of the two
tables). A tool aborted half-way leaves its tables behind: their rows were never published and
``T``'s were, so nothing is lost; a DROP of a ghost forgets its ALTERs.

The remembered ALTERs are stamped with their binlog positions, so a new stream from an earlier
position (a reconnect) `rewind`s them like the schema tracker.
"""

from __future__ import annotations

import logging
import re
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


@dataclass
class OnlineDdl:
    """The ghost tables' ALTERs read so far, and the cut-over rewrite."""

    _alters: dict[TableName, list[tuple[PositionKey, str]]] = field(default_factory=dict)
    _undo: list[tuple[PositionKey, TableName, list[tuple[PositionKey, str]] | None]] = field(
        default_factory=list
    )

    def on_ddl(self, parsed: ParsedDdl, statement: str, where: str, at: PositionKey) -> str:
        """The statement to carry on for a DDL read at `at` (`where`: its binlog position for
        messages): the cut-over as an ALTER of the real table, any other unchanged (a tool
        table's DDL is then dropped by the table filter)."""
        if parsed.kind is DdlKind.RENAME_TABLE:
            return self._cut_over(parsed, where, at) or statement
        tools = [t for t in parsed.touched if is_tool_table(t.table)]
        if not tools:
            return statement
        if parsed.kind is DdlKind.ALTER_TABLE and not parsed.renames:
            ghost = tools[0]
            if _GHOST.match(ghost.table):
                self._keep(at, ghost, [*self._alters.get(ghost, []), (at, statement)])
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
                if name in self._alters:
                    self._keep(at, name, None)
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
        alters = self._alters.get(ghost)
        if not alters:
            raise OnlineDdlError(
                self._refusal(
                    where,
                    parsed,
                    f"no ALTER of {ghost} was read by this reader (it started after the "
                    "tool's ALTER)",
                )
            )
        self._keep(at, ghost, None)
        specs = []
        for _, text in alters:
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
            "Apply the tool's ALTER to the table's targets, then start the reader past this "
            "position, or set reader.online_ddl: false to publish the tools' tables and "
            "statements as they are"
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
