"""A loopback MySQL 8.4 primary for tests: the real protocol over a socket, a `Binlog` served
by COM_BINLOG_DUMP / COM_BINLOG_DUMP_GTID, and answers to the statements a binlog reader and
its start-up checks send.

What it answers (everything else gets MySQL's syntax error, 1064, and is recorded in
`unanswered`, so a test sees a statement it forgot): ``SELECT VERSION()``, ``SELECT @@var``,
``SHOW [GLOBAL] VARIABLES LIKE/WHERE Variable_name IN (...)``, ``SHOW BINARY LOG STATUS``
(``SHOW MASTER STATUS`` is a syntax error, as 8.4 removed it), ``SHOW BINARY LOGS``,
``SHOW GRANTS FOR CURRENT_USER()``, ``SET ...`` (heartbeat period and checksum recorded),
``SHOW CREATE TABLE``, and information_schema reads of the tables it holds as empty results.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import socket
import ssl
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.mysql8 import events
from tests.mysql8.binlog import SERVER_UUID, Binlog
from tests.mysql8.wire import (
    ER_PARSE_ERROR,
    Account,
    Authenticator,
    Packets,
)

log = logging.getLogger(__name__)

COM_QUIT, COM_INIT_DB, COM_QUERY, COM_PING = 0x01, 0x02, 0x03, 0x0E
COM_BINLOG_DUMP, COM_REGISTER_REPLICA, COM_BINLOG_DUMP_GTID = 0x12, 0x15, 0x1E
SESSION_LIMIT_S = 120.0
"""No session lives longer (every loop here is bounded in time)."""
VERSION = "8.4.3"
REMOVED = frozenset({"SHOW MASTER STATUS", "SHOW SLAVE STATUS", "SHOW SLAVE HOSTS"})
"""Statements MySQL 8.4 removed (a syntax error there, as here), not forgotten answers."""
DEFAULT_COLLATIONS = {
    "big5": "big5_chinese_ci",
    "koi8r": "koi8r_general_ci",
    "latin1": "latin1_swedish_ci",
    "latin2": "latin2_general_ci",
    "ascii": "ascii_general_ci",
    "ujis": "ujis_japanese_ci",
    "sjis": "sjis_japanese_ci",
    "hebrew": "hebrew_general_ci",
    "tis620": "tis620_thai_ci",
    "euckr": "euckr_korean_ci",
    "gb2312": "gb2312_chinese_ci",
    "greek": "greek_general_ci",
    "cp1250": "cp1250_general_ci",
    "gbk": "gbk_chinese_ci",
    "utf8mb3": "utf8mb3_general_ci",
    "ucs2": "ucs2_general_ci",
    "utf16": "utf16_general_ci",
    "utf16le": "utf16le_general_ci",
    "utf32": "utf32_general_ci",
    "cp932": "cp932_japanese_ci",
    "gb18030": "gb18030_chinese_ci",
    "utf8mb4": "utf8mb4_0900_ai_ci",
    "binary": "binary",
}
"""MySQL 8.4's default collation of the charsets a test uses (``information_schema.
COLLATIONS`` where IS_DEFAULT; their ids are `tests.mysql8.rows.CHARSETS`')."""


@dataclass
class Seen:
    """What clients did, for tests to assert on."""

    logins: list[str] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)
    dumps: list[tuple[str, int]] = field(default_factory=list)


@functools.cache
def _rsa() -> tuple[Any, bytes]:
    """The server's RSA key pair (one per process: making one takes a good part of a second)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return key, pem


class Primary:
    """Construct (no I/O), `start()` binds 127.0.0.1 on a free port, `close()` stops."""

    def __init__(
        self,
        binlog: Binlog,
        user: str = "repl",
        password: str = "s3cret",
        variables: dict[str, str] | None = None,
        tls: ssl.SSLContext | None = None,
        cached: bool = False,
        grants: str = "REPLICATION SLAVE, REPLICATION CLIENT",
        dump_error: str | None = None,
    ) -> None:
        self.binlog = binlog
        self.dump_error = dump_error
        """A text the dump answers with as MySQL's error 1236 (ER_MASTER_FATAL_ERROR_READING_
        BINLOG) instead of events: what a source that purged the position says."""
        self.accounts = {user: Account(user, password, cached)}
        self.grants = f"GRANT {grants} ON *.* TO `{user}`@`%`"
        self.variables = {
            "version": VERSION,
            "version_comment": "MySQL Community Server - GPL",
            "server_uuid": SERVER_UUID,
            "server_id": "1",
            "log_bin": "ON",
            "binlog_format": "ROW",
            "binlog_row_image": "FULL",
            "binlog_row_metadata": "FULL",
            "binlog_row_value_options": "PARTIAL_JSON" if binlog.partial_json else "",
            "binlog_transaction_compression": "OFF",
            "binlog_checksum": "CRC32",
            "gtid_mode": "ON",
            "enforce_gtid_consistency": "ON",
            "gtid_purged": "",
            "sql_mode": "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
            "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION",
            "time_zone": "SYSTEM",
            "system_time_zone": "UTC",
            "lower_case_table_names": "0",
            "character_set_server": "utf8mb4",
            "collation_server": "utf8mb4_0900_ai_ci",
            "max_allowed_packet": "67108864",
        }
        self.variables.update(variables or {})
        self.creates: dict[tuple[str, str], str] = {}
        """SHOW CREATE TABLE answers, by (schema, table)."""
        self.seen = Seen()
        self._tls = tls
        self._rsa = _rsa()
        self._sock: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._next_id = 8
        self.port = 0

    def start(self) -> Primary:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        thread = threading.Thread(target=self._accept, name="mysql8-primary", daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def close(self) -> None:
        self._stop.set()
        if self._sock is not None:
            self._sock.close()
        for conn in list(self._conns):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(5)

    def __enter__(self) -> Primary:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        assert self._sock is not None
        deadline = time.monotonic() + 3600
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._next_id += 1
            thread = threading.Thread(target=self._session, args=(conn, self._next_id), daemon=True)
            self._conns.append(conn)
            self._threads.append(thread)
            thread.start()

    def _session(self, conn: socket.socket, connection_id: int) -> None:
        conn.settimeout(SESSION_LIMIT_S)
        io = Packets(conn)
        nonce = struct.pack("<Q", connection_id * 0x9E3779B97F4A7C15 % (1 << 64)) * 3
        nonce = bytes((b % 94) + 33 for b in nonce[:20])  # printable, no NUL, as MySQL's
        auth = Authenticator(self.accounts, VERSION, nonce, self._tls, *self._rsa)
        try:
            login = auth.login(io, connection_id)
            self.seen.logins.append("refused" if login is None else f"{login.user} {login.how}")
            if login is None:
                return
            state: dict[str, str] = {}
            if login.tls:
                state["ssl_version"] = str(io.conn.version())
                state["ssl_cipher"] = str(io.conn.cipher()[0])
            deadline = time.monotonic() + SESSION_LIMIT_S
            while not self._stop.is_set() and time.monotonic() < deadline:
                packet = io.recv()
                io.seq = 1
                command = packet[:1]
                if command == bytes([COM_QUIT]):
                    return
                if command in (bytes([COM_PING]), bytes([COM_INIT_DB])):
                    io.ok()
                elif command == bytes([COM_QUERY]):
                    self._query(io, packet[1:].decode("utf-8", "replace"), state)
                elif command == bytes([COM_REGISTER_REPLICA]):
                    io.ok()
                elif command == bytes([COM_BINLOG_DUMP]):
                    pos, flags = struct.unpack_from("<IH", packet, 1)
                    name = packet[11:].decode()
                    self._dump(io, name, pos, bool(flags & 1), state)
                    return
                elif command == bytes([COM_BINLOG_DUMP_GTID]):
                    flags, _, size = struct.unpack_from("<HIi", packet, 1)
                    name = packet[11 : 11 + size].decode()
                    pos = struct.unpack_from("<Q", packet, 11 + size)[0]
                    self._dump(
                        io, name or self.binlog.files()[0][0], pos or 4, bool(flags & 1), state
                    )
                    return
                else:
                    io.error(1047, "08S01", "Unknown command")
        except (OSError, EOFError, ssl.SSLError):
            return
        finally:
            with contextlib.suppress(OSError):
                conn.close()

    # ---- statements -----------------------------------------------------------------------

    def _query(self, io: Packets, sql: str, state: dict[str, str]) -> None:
        self.seen.queries.append(sql)
        text = sql.strip().rstrip(";").strip()
        upper = text.upper()
        if upper.startswith("SET "):
            for name, value in re.findall(r"(@{0,2}[\w.]+)\s*=\s*('[^']*'|[^,\s]+)", text[4:]):
                key = name.lower().lstrip("@").removeprefix("session.")
                state[key] = value.strip("'")
            io.ok()
            return
        answer = self._answer(text, upper, state)
        if answer is None:
            if upper not in REMOVED:
                self.seen.unanswered.append(sql)
            io.error(
                ER_PARSE_ERROR,
                "42000",
                "You have an error in your SQL syntax; check the manual that corresponds to "
                f"your MySQL server version for the right syntax to use near '{text[:40]}'",
            )
            return
        io.result(*answer)

    def _answer(
        self, text: str, upper: str, state: dict[str, str]
    ) -> tuple[list[str], list[tuple[Any, ...]]] | None:
        if upper == "SELECT VERSION()":
            return ["VERSION()"], [(VERSION,)]
        if upper == "SHOW BINARY LOG STATUS":
            name, pos = self.binlog.current
            return (
                ["File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB", "Executed_Gtid_Set"],
                [(name, pos, "", "", self.binlog.executed())],
            )
        if upper == "SHOW BINARY LOGS":
            return (
                ["Log_name", "File_size", "Encrypted"],
                [(n, size, "No") for n, size in self.binlog.files()],
            )
        shown_events = re.fullmatch(
            r"SHOW BINLOG EVENTS IN '([^']+)'(?:\s+FROM\s+(\d+))?", text, re.I
        )
        if shown_events:
            at = int(shown_events.group(2) or 0)
            rows = [r for r in self.binlog.show_events(shown_events.group(1)) if r[1] >= at]
            return ["Log_name", "Pos", "Event_type", "Server_id", "End_log_pos", "Info"], rows
        if re.fullmatch(r"SHOW (SESSION )?STATUS LIKE 'SSL_%'", upper):
            return ["Variable_name", "Value"], [
                ("Ssl_cipher", state.get("ssl_cipher", "")),
                ("Ssl_version", state.get("ssl_version", "")),
            ]
        if upper.startswith("SHOW GRANTS"):
            return ["Grants"], [(self.grants,)]
        selected = re.fullmatch(
            r"SELECT\s+(@@[\w.@]+(?:\s*,\s*@@[\w.@]+)*)(?:\s+AS\s+(\w+))?", text, re.I
        )
        if selected:
            names = [n.strip() for n in selected.group(1).split(",")]
            values = tuple(self._variable(n, state) for n in names)
            return ([selected.group(2)] if selected.group(2) else names), [values]
        shown = re.fullmatch(r"SHOW\s+(?:GLOBAL\s+|SESSION\s+)?VARIABLES\s+(.*)", text, re.I | re.S)
        if shown:
            return ["Variable_name", "Value"], self._variables(shown.group(1))
        database = re.fullmatch(r"SHOW CREATE DATABASE\s+`?(\w+)`?", text, re.I)
        if database:
            name = database.group(1)
            return ["Database", "Create Database"], [
                (
                    name,
                    f"CREATE DATABASE `{name}` /*!40100 DEFAULT CHARACTER SET utf8mb4 COLLATE "
                    "utf8mb4_0900_ai_ci */ /*!80016 DEFAULT ENCRYPTION='N' */",
                )
            ]
        create = re.fullmatch(r"SHOW CREATE TABLE\s+`?(\w+)`?\.`?(\w+)`?", text, re.I)
        if create:
            key = (create.group(1), create.group(2))
            found = self.creates.get(key) or self.binlog.creates.get(key)
            if found:
                return ["Table", "Create Table"], [(key[1], found)]
        if "INFORMATION_SCHEMA.COLLATIONS" in upper and "IS_DEFAULT" in upper:
            return ["CHARACTER_SET_NAME", "COLLATION_NAME"], list(DEFAULT_COLLATIONS.items())
        if "INFORMATION_SCHEMA.SCHEMATA" in upper:
            return ["DEFAULT_COLLATION_NAME"], [("utf8mb4_0900_ai_ci",)]
        if "INFORMATION_SCHEMA" in upper and upper.startswith("SELECT"):
            names = [
                n.split(".")[-1]
                for n in re.findall(r"SELECT\s+(.*?)\s+FROM", text, re.I | re.S)[0].split(",")
            ]
            return [n.strip() for n in names], []
        return None

    def _variable(self, name: str, state: dict[str, str] | None = None) -> Any:
        bare = name.lstrip("@").split(".")[-1].lower()
        if bare == "gtid_executed":
            return self.binlog.executed()
        if state and "global." not in name.lower() and bare in state:
            value = state[bare]
            # sql_mode set as a number (a Query event's bits): 0 is the empty mode.
            return "" if bare == "sql_mode" and value == "0" else value
        return self.variables.get(bare)

    def _variables(self, clause: str) -> list[tuple[Any, ...]]:
        like = re.fullmatch(r"LIKE\s+'([^']*)'", clause.strip(), re.I)
        if like:
            pattern = like.group(1).lower().replace("%", ".*").replace("_", ".")
            chosen = [n for n in self.variables if re.fullmatch(pattern, n)]
        else:
            wanted = {n.lower() for n in re.findall(r"'([^']*)'", clause)}
            chosen = [n for n in self.variables if n in wanted]
        return [(n, self._variable(n, None)) for n in chosen]

    # ---- the dump -------------------------------------------------------------------------

    def _dump(
        self, io: Packets, name: str, pos: int, non_blocking: bool, state: dict[str, str]
    ) -> None:
        """What MySQL's binlog sender does: an artificial Rotate to the start position, the
        file's Format_description (end position 0 when the dump starts past it), then the
        events from `pos`; at a file's end the next file after its Rotate; at the last file's
        end EOF (non-blocking) or heartbeats every period until new events arrive."""
        self.seen.dumps.append((name, pos))
        names = [n for n, _ in self.binlog.files()]
        if self.dump_error is not None:
            io.error(1236, "HY000", self.dump_error)
            return
        if name not in names:
            io.error(
                1236,
                "HY000",
                "Could not find first log file name in binary log index file",
            )
            return
        checksum = state.get("master_binlog_checksum") or state.get("source_binlog_checksum")
        assert checksum, "a replica that reads CRC32 events says so first"
        period_ns = int(
            state.get("master_heartbeat_period") or state.get("source_heartbeat_period") or 0
        )
        period = period_ns / 1e9 if period_ns else 30.0
        io.send(b"\x00" + events.rotate(name, pos, 0, artificial=True))
        fde = self.binlog.read(name, 4)
        size = int.from_bytes(fde[9:13], "little")
        first = fde[:size]
        if pos > 4:
            first = events.with_end(first, 0)
        io.send(b"\x00" + first)
        pos = max(pos, 4 + size)
        deadline = time.monotonic() + SESSION_LIMIT_S
        while not self._stop.is_set() and time.monotonic() < deadline:
            data = self.binlog.read(name, pos)
            at = 0
            while at + 19 <= len(data):
                length = int.from_bytes(data[at + 9 : at + 13], "little")
                io.send(b"\x00" + data[at : at + length])
                at += length
            pos += at
            nxt = self.binlog.next_file(name)
            if nxt is not None and not self.binlog.read(name, pos):
                name, pos = nxt, 4
                fde = self.binlog.read(name, 4)
                size = int.from_bytes(fde[9:13], "little")
                io.send(b"\x00" + fde[:size])
                pos += size
                continue
            if non_blocking:
                io.eof()
                return
            if not self.binlog.wait_past(name, pos, period):
                io.send(b"\x00" + events.heartbeat(name, pos))
