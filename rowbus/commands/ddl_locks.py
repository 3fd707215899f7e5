"""`rowbus ddl-locks list | show | unlock | skip`: shard-DDL locks for operators.

The lock table is rebuilt by reading the control topic to its end, exactly as the apply jobs do.
`unlock` and `skip` are themselves records on the control topic (UNLOCK / SKIP, actor
``operator:<user>@<host>``), so every job sees them and a restarted job replays them.
"""

from __future__ import annotations

import argparse
import getpass
import json
import socket
import time

from rowbus.config import Settings
from rowbus.protocol.events import ControlKind
from rowbus.protocol.topics import CONTROL_TOPIC
from rowbus.shard_ddl import records
from rowbus.shard_ddl.control import ControlLog
from rowbus.shard_ddl.exceptions import LockStateError
from rowbus.shard_ddl.locks import Lock, LockState, LockTable, replay


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser(
        "ddl-locks",
        help="list, show and resolve shard-DDL locks (the control topic's state)",
        description="Shard-DDL locks: one per DDL of a sharded target (schema.table#N). A lock "
        "waits until every shard reported its DDL, then the coordinator executes it once. "
        "A conflict (shards reporting different statements) waits for an operator: unlock "
        "it with the statement to run, or skip it.",
    )
    cmd.add_argument("--topic", default=CONTROL_TOPIC, help=f"control topic ({CONTROL_TOPIC})")
    actions = cmd.add_subparsers(dest="action", required=True, metavar="ACTION")

    ls = actions.add_parser("list", help="unresolved locks with what they wait for or their cause")
    ls.add_argument("--all", action="store_true", help="resolved locks too")
    ls.add_argument("--json", action="store_true", help="one JSON object per lock")
    ls.set_defaults(func=_list)

    show = actions.add_parser("show", help="one lock in full: intents, history, latency (JSON)")
    show.add_argument("lock", help="lock id, schema.table#N")
    show.set_defaults(func=_show)

    unlock = actions.add_parser(
        "unlock",
        help="let the coordinator execute a waiting or conflicting lock now; shards that have "
        "not reported pass when they do",
    )
    unlock.add_argument("lock", help="lock id, schema.table#N")
    which = unlock.add_mutually_exclusive_group()
    which.add_argument("--statement", help="the statement to execute (required for a conflict)")
    which.add_argument("--use-shard", metavar="SHARD", help="execute the statement SHARD reported")
    unlock.add_argument("--reason", default="", help="recorded on the control topic")
    unlock.set_defaults(func=_unlock)

    skip = actions.add_parser(
        "skip", help="resolve a lock without executing anything downstream; shards go on"
    )
    skip.add_argument("lock", help="lock id, schema.table#N")
    skip.add_argument("--reason", default="", help="recorded on the control topic")
    skip.add_argument(
        "--force", action="store_true", help="skip even a READY lock (its owner may be executing)"
    )
    skip.set_defaults(func=_skip)


def _table(settings: Settings, topic: str) -> tuple[ControlLog, LockTable]:
    log = ControlLog(settings.kafka.client_config(), topic).start()
    return log, replay(log.read_to_end())


def _lock(table: LockTable, lock_id: str) -> Lock:
    lock = table.get(lock_id)
    if lock is None:
        known = ", ".join(lk.lock_id for lk in table.unresolved()) or "none unresolved"
        raise LockStateError(f"no lock {lock_id} on the control topic ({known})")
    return lock


def _list(args: argparse.Namespace, settings: Settings) -> int:
    log, table = _table(settings, args.topic)
    log.close()
    locks = list(table) if args.all else table.unresolved()
    if args.json:
        for lock in locks:
            print(json.dumps(lock.describe()))
        return 0
    if not locks:
        print("no unresolved shard-DDL locks" if not args.all else "no shard-DDL locks")
        return 0
    print(f"{'LOCK':<40} {'STATE':<9} {'MODE':<11} {'ARRIVED':<8} WAITING FOR / CAUSE")
    for lock in locks:
        arrived = f"{len(lock.arrived)}/{len(lock.group)}"
        if lock.state is LockState.CONFLICT:
            why = f"CONFLICT: {lock.cause}"
        elif lock.state is LockState.WAITING:
            why = ", ".join(lock.waiting_for)
        elif lock.state is LockState.DONE:
            why = f"done in {lock.latency_ms} ms: {lock.statement}"
        else:
            why = lock.statement or ""
        print(f"{lock.lock_id:<40} {lock.state.value:<9} {lock.mode:<11} {arrived:<8} {why}")
    return 0


def _show(args: argparse.Namespace, settings: Settings) -> int:
    log, table = _table(settings, args.topic)
    log.close()
    print(json.dumps(_lock(table, args.lock).describe(), indent=2))
    return 0


def _actor() -> str:
    return f"operator:{getpass.getuser()}@{socket.gethostname()}"


def _unlock(args: argparse.Namespace, settings: Settings) -> int:
    log, table = _table(settings, args.topic)
    try:
        lock = _lock(table, args.lock)
        if lock.state not in (LockState.WAITING, LockState.CONFLICT):
            raise LockStateError(f"{lock.lock_id} is {lock.state.value}: nothing to unlock")
        statement = args.statement
        if args.use_shard:
            intent = lock.intent_of(args.use_shard)
            if intent is None:
                raise LockStateError(f"{args.use_shard} has not reported {lock.lock_id}")
            statement = intent.executable
        if lock.state is LockState.CONFLICT and not statement:
            raise LockStateError(
                f"{lock.lock_id} is a conflict ({lock.cause}): say which statement to run with "
                "--statement or --use-shard, or skip it"
            )
        log.publish(
            records.action(
                ControlKind.UNLOCK,
                lock.lock_id,
                actor=_actor(),
                at_ms=int(time.time() * 1000),
                statement=statement,
                reason=args.reason,
            )
        )
    finally:
        log.close()
    print(f"{lock.lock_id}: unlocked; the coordinator runs {statement or lock.statement}")
    return 0


def _skip(args: argparse.Namespace, settings: Settings) -> int:
    log, table = _table(settings, args.topic)
    try:
        lock = _lock(table, args.lock)
        if lock.state.final:
            raise LockStateError(f"{lock.lock_id} is already {lock.state.value}")
        if lock.state is LockState.READY and not args.force:
            raise LockStateError(
                f"{lock.lock_id} is ready: its coordinator may be executing it (use --force)"
            )
        log.publish(
            records.action(
                ControlKind.SKIP,
                lock.lock_id,
                actor=_actor(),
                at_ms=int(time.time() * 1000),
                reason=args.reason,
            )
        )
    finally:
        log.close()
    print(f"{lock.lock_id}: skipped; nothing is executed downstream, the shards go on")
    return 0
