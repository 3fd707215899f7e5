"""Source failover for the nemesis (`benchmarks.nemesis`, kind ``failover-source``): each source
server of the embedded stack gets a MariaDB replica, and a fault moves the writes to it the way
an operator switches a primary over.

The pair: the stack's server (``source1``) and a private replica (``source1-replica``, same
GTID domain, its own server id), each started with ``log_slave_updates`` so either holds every
transaction in its own binlog under the same GTIDs — what a source's ``replicas`` setting asks
(docs/configuring.md). The readers list both (through a proxy each); the nemesis's load writes
to the one that is primary now.

A failover (`Pairs.failover`): the server's load drains (the application stops writing), the
replica is waited for until it applied every GTID of the primary (``MASTER_GTID_WAIT``), the
primary is shut down (its own SHUTDOWN), the replica promoted (``STOP SLAVE; RESET SLAVE
ALL``) and the load goes on against it. The readers lose their server and continue on the
replica after their checkpoint's GTID set (`rowbus.producer.term`, PROTOCOL.md §9.4) — the
project's failover path, nothing told to them. The heal starts the old primary again as a
replica of the new one, so the next failover of the pair goes back. Nothing the primary
acknowledged is lost (the drain and the wait make it a planned switchover, not a crash).

The account the stack creates on every start (`MariaDB.after_ready`) is written with
``sql_log_bin=0`` on these servers: a restarted replica that wrote it to its binlog would hold
a GTID of its own in the pair's domain, and strict GTID mode would then stop its replication.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pymysql

from rowbus.clients import mysql
from rowbus.config import MySQLSettings, Settings
from rowbus.local.procs import ProcessRecord, launch
from rowbus.local.services import LOCAL_PASSWORD, LOCAL_USER, MariaDB
from rowbus.local.stack import LocalStack
from rowbus.waiting import wait_for

REPLICA_PORT_SHIFT = 20
"""A replica's port: its primary's plus this (the stack's MariaDBs sit on three ports in a
row)."""
REPLICA_SERVER_ID = 10
"""A replica's server id: its primary's plus this (the domain stays the primary's)."""
CATCH_UP_S = 120.0
"""How long a failover waits for the replica to apply what the primary holds."""


class QuietMariaDB(MariaDB):
    """A source server of a failover pair: replicated events go to its own binlog, and the
    development account it (re)creates on start does not (see the module docstring)."""

    def after_ready(self) -> None:
        with self._root() as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(
                f"CREATE USER IF NOT EXISTS '{LOCAL_USER}'@'%' IDENTIFIED BY '{LOCAL_PASSWORD}'"
            )
            cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{LOCAL_USER}'@'%' WITH GRANT OPTION")

    def root(self) -> pymysql.connections.Connection[pymysql.cursors.Cursor]:
        return self._root()


def quiet_sources(stack: LocalStack) -> None:
    """Make the stack's binlogged servers failover-ready (before `stack.up()`): they log what
    they replicate, and their account is not in their binlog."""
    for index, svc in enumerate(stack.services):
        if isinstance(svc, MariaDB) and svc.binlog:
            stack.services[index] = QuietMariaDB(
                svc.name,
                svc.port,
                svc.setting,
                svc.home.parent,
                server_id=svc.server_id,
                binlog=True,
                extra=(*svc.extra, "--log-slave-updates=1"),
            )


@dataclass
class Pair:
    """A stack source server and its replica; `primary` is which of the two takes writes."""

    server: str
    nodes: tuple[QuietMariaDB, QuietMariaDB]
    settings: tuple[MySQLSettings, MySQLSettings]
    primary: int = 0
    record: ProcessRecord | None = None
    """The replica's process (the stack's server is recorded by the stack)."""
    failovers: int = 0

    @property
    def standby(self) -> int:
        return 1 - self.primary


@dataclass
class Pairs:
    """The failover pairs of the stack's source servers. Constructing does no I/O."""

    stack: LocalStack
    settings: Settings
    servers: tuple[str, ...]
    pairs: dict[str, Pair] = field(default_factory=dict)

    def __post_init__(self) -> None:
        by_name = {s.name: s for s in self.stack.services}
        for server in self.servers:
            own = by_name[server]
            assert isinstance(own, QuietMariaDB), "quiet_sources(stack) first"
            replica = QuietMariaDB(
                f"{server}-replica",
                own.port + REPLICA_PORT_SHIFT,
                f"{server} replica",
                self.stack.state_dir,
                server_id=own.server_id + REPLICA_SERVER_ID,
                binlog=True,
                # The primary's domain: a promoted replica continues its sequence.
                extra=("--log-slave-updates=1", f"--gtid-domain-id={own.server_id}"),
            )
            first = self.settings.source(server)
            self.pairs[server] = Pair(
                server,
                (own, replica),
                (first, first.model_copy(update={"port": replica.port})),
            )

    def replica_address(self, server: str) -> tuple[str, int]:
        node = self.pairs[server].nodes[1]
        return ("127.0.0.1", node.port)

    def primary(self, server: str) -> MySQLSettings:
        """Where the writes of `server`'s sources go now."""
        pair = self.pairs[server]
        return pair.settings[pair.primary]

    def start(self) -> None:
        """Start each replica and make it replicate its primary from the primary's binlog
        position now (the nemesis's schemas are created after this)."""
        for pair in self.pairs.values():
            self._start_node(pair, first=True)
            with pair.nodes[0].root() as conn, conn.cursor() as cur:
                cur.execute("SELECT @@gtid_binlog_pos")
                (position,) = cur.fetchone() or ("",)
            with pair.nodes[1].root() as conn, conn.cursor() as cur:
                # Its own account creation out of its binlog: it holds only the primary's.
                cur.execute("RESET MASTER")
                cur.execute("SET GLOBAL gtid_slave_pos = %s", (position,))
            self._follow(pair, replica=1, primary=0)

    def _start_node(self, pair: Pair, first: bool = False) -> None:
        """Start the replica's process (the stack starts its own server)."""
        node = pair.nodes[1]
        if first:
            node.prepare()
        pair.record = ProcessRecord(
            node.name, launch(node.command(), node.log_file), node.marker, node.address
        )
        wait_for(node.ready, timeout=120, what=f"{node.name} to start")
        if first:
            node.after_ready()

    def _follow(self, pair: Pair, replica: int, primary: int) -> None:
        """Make node `replica` replicate node `primary` by GTID from where it is."""
        with pair.nodes[replica].root() as conn, conn.cursor() as cur:
            cur.execute("STOP SLAVE")
            cur.execute(
                "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, MASTER_USER=%s, "
                "MASTER_PASSWORD=%s, MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
                (pair.nodes[primary].port, LOCAL_USER, LOCAL_PASSWORD),
            )
            cur.execute("START SLAVE")

        def running() -> bool:
            with pair.nodes[replica].root() as conn, conn.cursor(pymysql.cursors.DictCursor) as c:
                c.execute("SHOW SLAVE STATUS")
                row: dict[str, Any] = c.fetchone() or {}
            if row.get("Last_SQL_Error") or row.get("Last_IO_Error"):
                raise RuntimeError(
                    f"{pair.nodes[replica].name} replicating {pair.nodes[primary].name}: "
                    f"{row.get('Last_SQL_Error') or row.get('Last_IO_Error')}"
                )
            return row.get("Slave_IO_Running") == "Yes" and row.get("Slave_SQL_Running") == "Yes"

        wait_for(
            running,
            timeout=60,
            what=f"{pair.nodes[replica].name} to replicate",
            stop_on=(RuntimeError,),
        )

    def caught_up(self, server: str, timeout: float = CATCH_UP_S) -> None:
        """Wait until the standby applied every GTID the primary holds; RuntimeError if not."""
        pair = self.pairs[server]
        with mysql.connect(self.primary(server), connect_timeout=10) as conn, conn.cursor() as c:
            c.execute("SELECT @@gtid_binlog_pos")
            (position,) = c.fetchone() or ("",)
        standby = pair.nodes[pair.standby]
        with standby.root() as conn, conn.cursor() as cur:
            cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (position, timeout))
            (waited,) = cur.fetchone() or (-1,)
        if waited != 0:
            raise RuntimeError(
                f"failover of {server}: {standby.name} did not apply {position} in {timeout:.0f} s"
            )

    def failover(
        self,
        server: str,
        shut_stack_server: Callable[[], None],
        start_stack_server: Callable[[], None],
    ) -> tuple[MySQLSettings, Callable[[], None]]:
        """Shut the primary of `server` down and promote its replica (its load drained and
        paused by the caller); return the new primary, and the heal: the old primary started
        again as the new one's replica."""
        pair = self.pairs[server]
        self.caught_up(server)
        old, new = pair.primary, pair.standby
        if old == 0:
            shut_stack_server()
        else:
            assert pair.record is not None
            pair.nodes[1].shutdown(pair.record)
        with pair.nodes[new].root() as conn, conn.cursor() as cur:
            cur.execute("STOP SLAVE")
            cur.execute("RESET SLAVE ALL")
        pair.primary = new
        pair.failovers += 1

        def heal() -> None:
            if old == 0:
                start_stack_server()
            else:
                self._start_node(pair)
            with pair.nodes[old].root() as conn, conn.cursor() as cur:
                cur.execute("SET GLOBAL gtid_slave_pos = @@gtid_binlog_pos")
            self._follow(pair, replica=old, primary=new)

        return pair.settings[new], heal

    def settle(self, timeout: float = CATCH_UP_S) -> list[str]:
        """At the end: each standby caught up with its primary (verify reads the stack's
        servers, whichever role they have); what did not, said in a line each."""
        problems = []
        for server in self.pairs:
            try:
                self.caught_up(server, timeout)
            except Exception as exc:  # noqa: BLE001 - reported by the run
                problems.append(f"failover: {exc}")
        return problems

    def stop(self) -> None:
        for pair in self.pairs.values():
            if pair.record is not None:
                with contextlib.suppress(Exception):
                    pair.nodes[1].shutdown(pair.record)

    def where(self, server: str) -> str:
        pair = self.pairs[server]
        return f"{pair.nodes[pair.primary].name} primary, {pair.nodes[pair.standby].name} replica"
