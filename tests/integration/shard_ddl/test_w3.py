"""W3 end to end: 2 sources x 4 shard tables -> 1 target, three DDLs on every shard at different
moments while writes run, through the real readers, Kafka, the Spark apply job (a process) with
the shard-DDL hook, ZooKeeper and the sink.

- lock #1 is half-way (5 of 8 shards reported) when the apply job is killed with SIGKILL; the
  remaining shards run the DDL while it is down; the restarted job resumes and completes it;
- lock #2 widens a column the writer then fills with values only the wide type holds;
- lock #3 conflicts (one shard adds a wider column), shows up in `rowbus ddl-locks list` with its
  cause and is resolved with `rowbus ddl-locks unlock --use-shard`;
- the target's schema changes once per lock (one DONE each, one marker row each) and its data
  equals the union of the shards (`rowbus verify`); lock latencies are printed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from rowbus.cli import main as rowbus_main
from rowbus.config import MySQLSettings, Settings
from rowbus.protocol.events import ControlKind, ControlRecord
from rowbus.routing.routes import RouteSettings
from rowbus.shard_ddl.control import ControlLog
from rowbus.shard_ddl.locks import LockState, LockTable
from rowbus.spark_apply.settings import ApplySettings, JobConfig, SinkConnection
from rowbus.verify import verify
from rowbus.waiting import wait_for
from tests import proclogs
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, reader_thread
from tests.integration.shard_ddl.helpers import columns, readers_ready

ROOT = Path(__file__).resolve().parents[3]
SHARDS = 4
TABLE_DDL = "CREATE TABLE orders_{k} (id BIGINT PRIMARY KEY, qty INT, label VARCHAR(32))"


class WriterError(Exception):
    """The writer thread died."""


class Upstream:
    """The 8 shard tables and a writer that keeps inserting, updating and deleting in them.

    `ddl` runs a statement on one shard between two writes; from then on the writer fills the
    columns the shard has (note, a wide qty, tag)."""

    def __init__(self, servers: list[MySQLSettings], dbs: list[str]) -> None:
        self.servers, self.dbs = servers, dbs
        self.shards = [(s, k) for s in range(len(dbs)) for k in range(1, SHARDS + 1)]
        self.features: dict[tuple[int, int], set[str]] = {sh: set() for sh in self.shards}
        self.ids: dict[tuple[int, int], list[int]] = {sh: [] for sh in self.shards}
        self.mutex = threading.Lock()
        self.stop = threading.Event()
        self.writes = 0
        self.limit: int | None = None
        """The writer pauses once it made this many writes, until it is raised (None: never)."""
        self.error: BaseException | None = None
        self.rng = random.Random(3)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def create(self) -> None:
        for server, db in zip(self.servers, self.dbs, strict=True):
            with connect(server, db) as conn, conn.cursor() as cur:
                for k in range(1, SHARDS + 1):
                    cur.execute(TABLE_DDL.format(k=k))

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        self.stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error

    def wrote(self, more: int) -> Callable[[], bool]:
        """A condition: `more` writes after now (raises the writer's error if it died)."""
        target = self.writes + more

        def check() -> bool:
            if self.error is not None:
                raise WriterError(str(self.error)) from self.error
            return self.writes >= target

        return check

    def ddl(self, shard: tuple[int, int], statement: str, feature: str) -> None:
        s, k = shard
        with self.mutex, connect(self.servers[s], self.dbs[s]) as conn, conn.cursor() as cur:
            cur.execute(statement.format(t=f"orders_{k}", db=self.dbs[s]))
            self.features[shard].add(feature)

    def _run(self) -> None:
        conns = [connect(srv, db) for srv, db in zip(self.servers, self.dbs, strict=True)]
        try:
            for n in range(1, 200_000):
                # pacing of the workload, not a wait for a condition
                if self.stop.wait(0.01):
                    return
                if self.limit is not None and self.writes >= self.limit:
                    continue
                with self.mutex:
                    self._one(conns, n)
                    self.writes += 1
        except BaseException as exc:
            self.error = exc
        finally:
            for c in conns:
                c.close()

    def _one(self, conns: list[Any], n: int) -> None:
        shard = self.rng.choice(self.shards)
        s, k = shard
        feats = self.features[shard]
        qty = (2**40 + n) if "wide" in feats else n
        cols = {"qty": qty, "label": f"l{n}"}
        if "note" in feats:
            cols["note"] = f"n{n}"
        if "tag" in feats:
            cols["tag"] = f"t{n % 1000}"
        ids = self.ids[shard]
        roll = self.rng.random()
        with conns[s].cursor() as cur:
            if roll < 0.5 or len(ids) < 5:
                ids.append((s * SHARDS + k) * 1_000_000 + n)
                names = ", ".join(["id", *cols])
                marks = ", ".join(["%s"] * (len(cols) + 1))
                cur.execute(
                    f"INSERT INTO orders_{k} ({names}) VALUES ({marks})", (ids[-1], *cols.values())
                )
            elif roll < 0.85:
                sets = ", ".join(f"{c}=%s" for c in cols)
                cur.execute(
                    f"UPDATE orders_{k} SET {sets} WHERE id=%s",
                    (*cols.values(), self.rng.choice(ids)),
                )
            else:
                victim = ids.pop(self.rng.randrange(len(ids)))
                cur.execute(f"DELETE FROM orders_{k} WHERE id=%s", (victim,))


class Observer:
    """Follows the control topic from the test's side."""

    def __init__(self, services: Settings, topic: str) -> None:
        self.log = ControlLog(services.kafka.client_config(), topic)
        self.table = LockTable()
        self.records: list[ControlRecord] = []

    def __enter__(self) -> Observer:
        self.log.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.log.close()

    def refresh(self) -> LockTable:
        for record in self.log.poll(0.2):
            self.records.append(record)
            self.table = self.table.apply(record)
        return self.table

    def until(self, lock: str, test: Callable[[Any], bool], timeout: float, what: str) -> Any:
        def check() -> Any:
            found = self.refresh().get(lock)
            return found if found is not None and test(found) else None

        return wait_for(check, timeout=timeout, what=f"lock {lock}: {what}")


@contextmanager
def apply_process(args: dict[str, Any], path: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    path.write_text(json.dumps(args))
    env = dict(os.environ)
    proclogs.keep(log, "the apply job")
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.shard_ddl.apply_job", str(path)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def kill9(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the job and its JVM (its own process group)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def test_w3_shard_merge_with_three_ddls_a_crash_and_a_conflict(
    services: Settings, make_topic, make_database, unique, tmp_path: Path, capsys, monkeypatch
) -> None:
    servers = list(services.sources[:2])
    dbs = [make_database(srv) for srv in servers]
    target_db = make_database(services.resolved_sink)
    target = f"{target_db}.orders"
    with connect(services.resolved_sink, target_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id BIGINT PRIMARY KEY, qty INT, label VARCHAR(32))")
    topics = [make_topic("w3src", 3) for _ in servers]
    schemas_topic = make_topic("schemas", 1, **{"cleanup.policy": "compact"})
    control = make_topic("control", 1)
    up = Upstream(servers, dbs)
    up.create()
    job = unique("w3job")
    state_ddl = unique("rowbus_ddl")
    sink = services.resolved_sink
    config = JobConfig(
        apply=ApplySettings(
            job=job,
            sources=tuple(topics),
            topic_template="{source}",
            schemas_topic=schemas_topic,
            routes=tuple(
                RouteSettings(match=f"{db}.orders_*", target=target, sharded=True) for db in dbs
            ),
            unrouted="skip",
            checkpoint_location=tmp_path / "cp",
            state_database=f"state_{job}",
            max_offsets_per_trigger=5000,
            master="local[1]",
        ),
        kafka=services.kafka.client_config(),
        sink=SinkConnection(host=sink.host, port=sink.port, user=sink.user, password=sink.password),
    )
    args = {
        "config": json.loads(config.dump()),
        "tables": [[topics[s], dbs[s], f"orders_{k}"] for s, k in up.shards],
        "control_topic": control,
        "zookeeper": services.zookeeper.hosts,
        "election": job,
        "actor": f"{job}-apply",
        "state_database": state_ddl,
    }
    setups = [
        ReaderSetup(
            services=services,
            server=srv,
            source=topic,
            database=db,
            data_topic=topic,
            checkpoints_topic=make_topic("ckpt", 1, **{"cleanup.policy": "compact"}),
            schemas_topic=schemas_topic,
        )
        for srv, db, topic in zip(servers, dbs, topics, strict=True)
    ]
    ddl1 = [
        "ALTER TABLE {t} ADD COLUMN note VARCHAR(16) NULL",
        "alter table `{db}`.`{t}` add column `note` varchar(16) null",
    ]
    ddl2 = ["ALTER TABLE {t} MODIFY qty BIGINT", "ALTER  TABLE `{t}`  MODIFY  `qty`  bigint"]
    ddl3 = "ALTER TABLE {t} ADD COLUMN tag VARCHAR(16) NULL"
    odd = (1, 3)
    with ExitStack() as stack, Observer(services, control) as obs:
        for setup in setups:
            stack.enter_context(reader_thread(setup, heartbeat_interval_s=0.3))
        readers_ready(services, topics)
        job_a = stack.enter_context(apply_process(args, tmp_path / "a.json", tmp_path / "a.log"))
        up.start()
        wait_for(up.wrote(100), timeout=30, what="the writer to get going", stop_on=(WriterError,))

        # lock 1: five shards, then kill -9 while the lock is half-way
        order = list(up.shards)
        random.Random(1).shuffle(order)
        for shard in order[:5]:
            up.ddl(shard, ddl1[shard[0]], "note")
        obs.until(
            f"{target}#1",
            lambda lk: len(lk.arrived) == 5,
            150,
            "5 shards reported (the apply job is up)",
        )
        assert job_a.poll() is None
        kill9(job_a)
        for shard in order[5:]:
            up.ddl(shard, ddl1[shard[0]], "note")
        assert obs.refresh().get(f"{target}#1").state is LockState.WAITING  # type: ignore[union-attr]
        stack.enter_context(apply_process(args, tmp_path / "b.json", tmp_path / "b.log"))
        obs.until(
            f"{target}#1", lambda lk: lk.state is LockState.DONE, 150, "DONE after the restart"
        )

        # lock 2: widen qty, shard by shard with writes in between
        random.Random(2).shuffle(order)
        for i, shard in enumerate(order):
            up.ddl(shard, ddl2[shard[0]], "wide")
            if i in (1, 4):
                wait_for(up.wrote(20), timeout=30, what="more writes", stop_on=(WriterError,))
        obs.until(f"{target}#2", lambda lk: lk.state is LockState.DONE, 90, "DONE")

        # lock 3: one shard adds a wider column: a conflict for the operator
        for shard in order:
            stmt = ddl3.replace("16", "24") if shard == odd else ddl3
            up.ddl(shard, stmt, "tag")
        obs.until(f"{target}#3", lambda lk: lk.state is LockState.CONFLICT, 90, "CONFLICT")
        monkeypatch.setenv("ROWBUS_KAFKA__BOOTSTRAP_SERVERS", services.kafka.bootstrap_servers)
        capsys.readouterr()
        assert rowbus_main(["ddl-locks", "--topic", control, "list"]) == 0
        listed = capsys.readouterr().out
        print(listed)
        assert f"{target}#3" in listed
        assert "CONFLICT" in listed
        assert "VARCHAR(24)" in listed
        odd_shard = f"{topics[odd[0]]}/{dbs[odd[0]]}.orders_{odd[1]}"
        assert (
            rowbus_main(
                [
                    "ddl-locks",
                    "--topic",
                    control,
                    "unlock",
                    f"{target}#3",
                    "--use-shard",
                    odd_shard,
                    "--reason",
                    "the wider one",
                ]
            )
            == 0
        )
        obs.until(f"{target}#3", lambda lk: lk.state is LockState.DONE, 90, "DONE after unlock")

        wait_for(up.wrote(50), timeout=30, what="writes after the last DDL", stop_on=(WriterError,))
        up.finish()
        routes = [RouteSettings(match=f"{db}.orders_*", target=target) for db in dbs]

        def equal() -> bool:
            diffs = verify(services, routes, dbs)
            return len(diffs) == 1 and diffs[0].equal

        wait_for(equal, timeout=120, what="the target to equal the union of its 8 shards")

    assert columns(sink, target_db, "orders") == [
        ("id", "bigint(20)"),
        ("qty", "bigint(20)"),
        ("label", "varchar(32)"),
        ("note", "varchar(16)"),
        ("tag", "varchar(24)"),
    ]
    done = [r for r in obs.records if r.kind is ControlKind.DONE]
    assert sorted(r.lock_id for r in done) == [f"{target}#{i}" for i in (1, 2, 3)]
    with connect(sink) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT lock_id, state FROM `{state_ddl}`.shard_ddl_applied ORDER BY lock_id")
        assert cur.fetchall() == tuple((f"{target}#{i}", "done") for i in (1, 2, 3))
        cur.execute(f"DROP DATABASE `{state_ddl}`")
        cur.execute(f"DROP DATABASE IF EXISTS `state_{job}`")
    print(
        f"\nW3: {up.writes} upstream writes; lock latency (last shard's report -> DONE) and "
        "(last shard's DDL upstream -> DONE):"
    )
    for lock in obs.table:
        print(
            f"  {lock.lock_id}: {lock.latency_ms} ms, {lock.ddl_latency_ms} ms "
            f"({'operator unlock' if lock.forced else 'all shards'})"
        )
