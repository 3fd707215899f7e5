"""The embedded services: how each is prepared, started, probed and stopped.

Every service keeps its data under ``<state_dir>/<name>/`` and is recognised by that folder in
its command line (see `procs.is_ours`).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import signal
import socket
import subprocess
from abc import ABC, abstractmethod
from pathlib import Path

import pymysql

from rowbus.clients import kafka, mysql
from rowbus.exceptions import LocalStackError
from rowbus.local import install
from rowbus.local.procs import ProcessRecord, stop

log = logging.getLogger(__name__)

LOCAL_USER = "rowbus"
LOCAL_PASSWORD = "rowbus"  # noqa: S105 - a loopback-only development account, documented


class Service(ABC):
    """One embedded server. Lifecycle: `prepare()` once, `command()` launched, `ready()` polled,
    `after_ready()` once, `shutdown()` to stop; all idempotent."""

    startup_timeout: float = 60.0

    def __init__(self, name: str, port: int, setting: str, state_dir: Path) -> None:
        self.name = name
        self.port = port
        self.setting = setting
        self.home = state_dir.resolve() / name

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def marker(self) -> str:
        return str(self.home)

    @property
    def log_file(self) -> Path:
        return self.home / f"{self.name}.log"

    def prepare(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)

    @abstractmethod
    def command(self) -> list[str]: ...

    @abstractmethod
    def ready(self) -> bool: ...

    def after_ready(self) -> None:
        return None

    def shutdown(self, record: ProcessRecord) -> None:
        stop(record, signal.SIGTERM, grace=20)


class MariaDB(Service):
    """A private MariaDB server; sources write a ROW binlog with full metadata and GTIDs."""

    def __init__(
        self,
        name: str,
        port: int,
        setting: str,
        state_dir: Path,
        server_id: int,
        binlog: bool,
        extra: tuple[str, ...] = (),
    ) -> None:
        super().__init__(name, port, setting, state_dir)
        self.server_id = server_id
        self.binlog = binlog
        self.extra = extra
        """More server options (a replica's, in tests)."""

    @property
    def socket_path(self) -> Path:
        return self.home / "mysqld.sock"

    def prepare(self) -> None:
        super().prepare()
        (self.home / "binlog").mkdir(exist_ok=True)
        datadir = self.home / "data"
        if (datadir / "mysql").is_dir():
            return
        if datadir.exists():
            # A half-initialised datadir from an interrupted install: start over.
            shutil.rmtree(datadir)
        # One retry: on a busy machine the bootstrap has been seen to abort once and then pass.
        for attempt in (1, 2):
            proc = subprocess.run(
                [
                    "mariadb-install-db",
                    "--no-defaults",
                    f"--datadir={datadir}",
                    "--user=root",
                    "--skip-test-db",
                    "--auth-root-authentication-method=socket",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode == 0:
                return
            output = f"{proc.stdout}\n{proc.stderr}"
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            with self.log_file.open("a") as out:
                out.write(f"--- mariadb-install-db attempt {attempt} (exit {proc.returncode})\n")
                out.write(output)
            shutil.rmtree(datadir, ignore_errors=True)
        # The server's own error lines, not just its last one (often a bare "Aborting").
        errors = [ln.strip() for ln in output.splitlines() if "[ERROR]" in ln or "ERROR" in ln]
        cause = "; ".join(errors[-5:]) or (output.strip().splitlines() or ["no output"])[-1]
        raise LocalStackError(
            f"{self.name}: mariadb-install-db failed twice (exit {proc.returncode}): {cause} "
            f"(full output in {self.log_file})"
        )

    def command(self) -> list[str]:
        binary = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
        args = [
            binary,
            "--no-defaults",
            "--user=root",
            f"--datadir={self.home / 'data'}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.socket_path}",
            f"--pid-file={self.home / 'mysqld.pid'}",
            f"--log-error={self.log_file}",
            f"--server-id={self.server_id}",
            f"--gtid-domain-id={self.server_id}",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci",
            # Development speed: a crash of this private server is not a case we test.
            "--innodb-flush-log-at-trx-commit=2",
            "--sync-binlog=0",
            "--innodb-buffer-pool-size=256M",
            "--max-connections=300",
            # A row is written as one statement of literals (up to twice its bytes): the
            # sink, like any replica, needs the largest packet the server allows.
            "--max-allowed-packet=1G",
        ]
        if self.binlog:
            args += [
                f"--log-bin={self.home / 'binlog' / 'binlog'}",
                "--binlog-format=ROW",
                "--binlog-row-image=FULL",
                "--binlog-row-metadata=FULL",
                "--gtid-strict-mode=1",
            ]
        return [*args, *self.extra]

    def ready(self) -> bool:
        with self._root() as conn, conn.cursor() as cur:
            cur.execute("SELECT 1")
            return bool(cur.fetchone() == (1,))

    def after_ready(self) -> None:
        # Over the socket, OS root is MariaDB root; clients use a password account over TCP.
        with self._root() as conn, conn.cursor() as cur:
            cur.execute(
                f"CREATE USER IF NOT EXISTS '{LOCAL_USER}'@'%' IDENTIFIED BY '{LOCAL_PASSWORD}'"
            )
            cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{LOCAL_USER}'@'%' WITH GRANT OPTION")

    def shutdown(self, record: ProcessRecord) -> None:
        try:
            with self._root() as conn, conn.cursor() as cur:
                cur.execute("SHUTDOWN")
        except pymysql.MySQLError as exc:
            log.info("%s: SHUTDOWN over the socket failed (%s); signalling", self.name, exc)
        stop(record, signal.SIGTERM, grace=30)

    def _root(self) -> pymysql.connections.Connection[pymysql.cursors.Cursor]:
        return mysql.connect(
            unix_socket=str(self.socket_path), user="root", connect_timeout=2, autocommit=True
        )


class ZooKeeper(Service):
    startup_timeout = 45.0

    def prepare(self) -> None:
        super().prepare()
        conf = self.home / "conf"
        conf.mkdir(exist_ok=True)
        (self.home / "data").mkdir(exist_ok=True)
        (conf / "zoo.cfg").write_text(
            "\n".join(
                [
                    "tickTime=500",
                    "initLimit=10",
                    "syncLimit=5",
                    f"dataDir={self.home / 'data'}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,stat,mntr,envi",
                    "minSessionTimeout=1000",
                    "maxSessionTimeout=60000",
                    "",
                ]
            ),
            encoding="utf-8",
        )
        (conf / "log4j.properties").write_text(
            "log4j.rootLogger=WARN, CONSOLE\n"
            "log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.CONSOLE.layout.ConversionPattern=%d %p [%t] %c: %m%n\n",
            encoding="utf-8",
        )

    def command(self) -> list[str]:
        java = shutil.which("java") or "java"
        # zookeeper.jar's manifest names the rest of its Debian classpath.
        jars = ["zookeeper.jar", "slf4j-log4j12.jar", "log4j-1.2.jar"]
        classpath = ":".join([str(self.home / "conf"), *(f"/usr/share/java/{j}" for j in jars)])
        return [
            java,
            "-Xmx256m",
            "-cp",
            classpath,
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(self.home / "conf" / "zoo.cfg"),
        ]

    def ready(self) -> bool:
        # `ruok` answers before the server serves; `srvr` reports Mode: only once it does.
        return "Mode:" in four_letter_word("127.0.0.1", self.port, "srvr")


class Noida(Service):
    """noida-db with only its Kafka protocol enabled."""

    startup_timeout = 30.0

    def command(self) -> list[str]:
        return [
            str(install.noida_binary()),
            "start",
            "--only",
            "kafka",
            "--kafka-port",
            str(self.port),
            "--host",
            "127.0.0.1",
            "--data-dir",
            str(self.home / "data"),
        ]

    def ready(self) -> bool:
        return kafka_answers(self.address)

    def shutdown(self, record: ProcessRecord) -> None:
        # SIGINT makes it flush its data file before exiting.
        stop(record, signal.SIGINT, grace=20)


class Tansu(Service):
    """Tansu with memory storage: fast, not Kafka-correct (see `rowbus doctor`)."""

    startup_timeout = 30.0

    @property
    def marker(self) -> str:
        return "rowbus-" + hashlib.sha256(str(self.home).encode()).hexdigest()[:12]

    def command(self) -> list[str]:
        url = f"tcp://127.0.0.1:{self.port}"
        return [
            str(install.tansu_binary()),
            "broker",
            "--cluster-id",
            self.marker,
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    def ready(self) -> bool:
        return kafka_answers(self.address)


def kafka_answers(bootstrap: str) -> bool:
    admin = kafka.admin({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000})
    failure = None
    try:
        return bool(admin.list_topics(timeout=2).brokers)
    except Exception as exc:  # noqa: BLE001 - re-raised below, without its traceback
        failure = f"{bootstrap}: {exc}"
    finally:
        del admin
    # The client's error holds a traceback through the client's own frames, and a waiter keeps
    # its last error: raised as it is, it kept the client alive, reconnecting and logging for
    # as long as the error lived. A new error (outside the except block: no context) does not.
    raise ConnectionError(failure)


def four_letter_word(host: str, port: int, word: str) -> str:
    with socket.create_connection((host, port), timeout=2) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")
