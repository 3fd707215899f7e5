"""The seam between the sink's bookkeeping and a kind of sink: `SinkKind` and `Sink`.

A kind of sink (`sink.MySQLRows`: rows as SQL in the sink; `iceberg_sink.IcebergRows`: rows
into Iceberg tables) implements `SinkKind`: it writes a step's rows, its part of a snapshot
marker and a DDL. `Sink` composes a kind with the `ledger.Ledger` (head, checkpoints, state,
gates in the state database) and runs a batch's plan step by step; it is what the job calls
(`previous_state`, `check_offsets`, `stored_gates`, `spill_for`, `apply`).

Exactly once, as `Sink.apply` runs a plan: a committed batch is skipped; a half-applied one
(its head names it) resumes after its last committed part. Each step's rows end with
`StepWrite.finish`: the step's checkpoint row, the head moved from the head read before it
(a precondition: another driver's move fails it) and, for the last step, the state — in the
transaction the kind's rows are in when it writes them into the state database's server (the
MySQL sink), or right after its own commit (Iceberg, whose commits carry the step so a replay
skips them). A marker's seen-set statements and the head's move share one transaction; a
DDL runs at its barrier, then the head moves past it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, Self

from pymysql.connections import Connection

from rowbus.protocol.events import DdlChange, SnapshotBegin, SnapshotEnd
from rowbus.routing.routes import Target
from rowbus.spark_apply import apply_faults
from rowbus.spark_apply.exceptions import CheckpointConflictError
from rowbus.spark_apply.ledger import Checkpoint, Head, Ledger, offsets_json
from rowbus.spark_apply.planner import Envelope, Plan, PlannerState, Step
from rowbus.spark_apply.rendered import Wire
from rowbus.spark_apply.sink_conn import db_errors
from rowbus.spark_apply.sink_spill import PieceSpill
from rowbus.spark_apply.snapshots import SeenSets

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StepWrite:
    """One step of a batch for a kind of sink to write, and how its write ends."""

    batch_id: int
    index: int
    step: Step
    checkpoint: Checkpoint
    finish: Callable[[Connection[Any], int | None], None]
    """Checkpoint row of `rows` (None: the kind's shards wrote their own), head, state of a
    last step and the commit, on a connection of the state database's server; call it again
    (within `sink_conn.retry_conflicts`) when the sink rolls it back."""


class SinkKind(Protocol):
    """What a kind of sink implements; `Sink` does the bookkeeping around it."""

    def start(self, ledger: Ledger) -> None:
        """Connect (the ledger is started) and refuse, in one line, what it cannot write."""

    def close(self) -> None: ...

    def write_rows(self, step: StepWrite) -> None:
        """Write the step's rows, ending with `step.finish`; a replay of a step whose rows
        were written but whose checkpoint was not must not write them twice."""

    def marker(
        self, cur: Any, marker: SnapshotBegin | SnapshotEnd, target: Target | None
    ) -> Callable[[], None] | None:
        """The kind's part of a snapshot marker, on `cur` in the transaction that moves the
        head past it; returns what to do once that transaction committed (or None)."""

    def ddl(self, env: Envelope, batch_id: int, index: int) -> None:
        """A DDL at its barrier (step `index` of the batch), exactly once across replays."""

    def batch_done(self, batch_id: int) -> None:
        """After `Sink.apply` of batch `batch_id` (applied or skipped as committed)."""


class Sink:
    """A kind of sink composed with the ledger; see the module docstring. The constructor
    does no I/O; `start()` connects; `close()`."""

    def __init__(self, ledger: Ledger, kind: SinkKind, seen: SeenSets) -> None:
        self.ledger = ledger
        self.kind = kind
        self.seen = seen
        """The snapshots running in the sink (PROTOCOL.md §9.7, `rowbus.spark_apply.snapshots`)."""
        self.job = ledger.job
        self.fault = apply_faults.armed()
        """The kill -9 at a step's commit a test asks for (`apply_faults`); None outside tests."""

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
        try:
            self.ledger.start(self.seen)
            self.kind.start(self.ledger)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        self.kind.close()
        self.ledger.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what a batch builds on ------------------------------------------------------------

    def head(self) -> Head | None:
        return self.ledger.head()

    def previous_state(self, batch_id: int) -> PlannerState | None:
        """The state `batch_id` builds on; None if the batch is already committed."""
        head = self.ledger.head()
        if head is None:
            if batch_id > 0:
                log.warning(
                    "job %s: no checkpoint in the sink; batch %d starts fresh", self.job, batch_id
                )
            return PlannerState()
        if head.batch_id > batch_id or (head.batch_id == batch_id and head.complete):
            return None
        if not (head.batch_id == batch_id or (head.batch_id == batch_id - 1 and head.complete)):
            raise CheckpointConflictError(
                f"job {self.job}: batch {batch_id} cannot build on the sink's head "
                f"(batch {head.batch_id} step {head.step}, complete={head.complete}); is the "
                "Spark checkpoint folder the one of this sink?"
            )
        return self.ledger.load_state(batch_id - 1)

    def stored_gates(self, batch_id: int) -> tuple[tuple[str, bool], ...] | None:
        return self.ledger.stored_gates(batch_id)

    def spill_for(self, batch_id: int, wire: Wire | None = None) -> PieceSpill:
        return self.ledger.spill_for(batch_id, wire)

    def committed_offsets(self, batch_id: int) -> dict[tuple[str, int], int] | None:
        return self.ledger.committed_offsets(batch_id)

    def committed_batches(self) -> list[tuple[int, int, int]]:
        return self.ledger.committed_batches()

    def check_offsets(
        self,
        batch_id: int,
        ranges: dict[tuple[str, int], tuple[int, int]],
        previous: PlannerState | None,
    ) -> None:
        """Refuse a batch whose offsets (first, last per partition, as Spark proposes them)
        do not fit the sink: a batch the sink committed must be the same records (a replay),
        and a new one must start after what the sink holds. CheckpointConflictError names
        both positions."""
        if not ranges:
            return
        if previous is None:  # committed: Spark replays a batch the sink has
            stored = self.ledger.committed_offsets(batch_id)
            if stored is None:
                return  # no checkpoint row of that batch (state cleared by hand): no claim
            for (topic, part), (_first, last) in sorted(ranges.items()):
                if stored.get((topic, part)) != last + 1:
                    raise CheckpointConflictError(
                        f"job {self.job}: Spark proposes batch {batch_id} as "
                        f"{topic}[{part}]@{_first}..{last}, but the sink committed batch "
                        f"{batch_id} up to {topic}[{part}]@{stored.get((topic, part), 0)} "
                        f"(sink head: batch {self.ledger.head_text()}); the Spark checkpoint "
                        "folder is lost, reset or another job's: restore it (or clear the sink's "
                        "state to apply everything again) instead of skipping batches"
                    )
            return
        for (topic, part), (first, _last) in sorted(ranges.items()):
            held = previous.offsets.get((topic, part), 0)
            if first < held:
                raise CheckpointConflictError(
                    f"job {self.job}: Spark proposes batch {batch_id} from {topic}[{part}]@"
                    f"{first}, but the sink already applied up to {topic}[{part}]@{held} "
                    f"(sink head: batch {self.ledger.head_text()}): either the Spark checkpoint "
                    "folder is not the one of this sink (restore it), or the topic lost records "
                    "or was recreated so its offsets start over (a broker that came back without "
                    "its data): then apply everything again under a new apply.job, or with the "
                    "sink's state cleared, once the readers published again"
                )

    # -- applying --------------------------------------------------------------------------

    def apply(self, batch_id: int, plan: Plan) -> int:
        """Commit `plan` as batch `batch_id` (resuming a half-applied one); rows applied."""
        applied = self._apply(batch_id, plan)
        self.kind.batch_done(batch_id)
        return applied

    def _apply(self, batch_id: int, plan: Plan) -> int:
        ledger = self.ledger
        head = ledger.head()
        if head is not None and (
            head.batch_id > batch_id or (head.batch_id == batch_id and head.complete)
        ):
            log.info("job %s: batch %d is already committed; skipped", self.job, batch_id)
            return 0
        start_step, ddl_only = 0, False
        if plan.gates:
            ledger.store_gates(batch_id, plan)
        if head is not None and head.batch_id == batch_id:
            start_step = head.step + (1 if head.phase == "done" else 0)
            ddl_only = head.phase == "rows"
        applied = 0
        last = len(plan.steps) - 1
        for index in range(start_step, len(plan.steps)):
            step = plan.steps[index]
            if not (ddl_only and index == start_step):
                applied += self._rows(batch_id, index, index == last, step, plan, head)
                head = ledger.head()
            if step.ddl is not None and isinstance(step.ddl.event, SnapshotBegin | SnapshotEnd):
                head = self._marker(step.ddl.event, head, Head(batch_id, index, "done", False))
            elif step.ddl is not None:
                self.kind.ddl(step.ddl, batch_id, index)
                head = ledger.advance(ledger.conn, head, Head(batch_id, index, "done", False))
                ledger.conn.commit()
        return applied

    def _rows(
        self, batch_id: int, index: int, final: bool, step: Step, plan: Plan, head: Head | None
    ) -> int:
        ledger = self.ledger
        new_head = Head(batch_id, index, "done" if step.ddl is None else "rows", final)
        ddl = (
            step.ddl.event.statement if step.ddl and isinstance(step.ddl.event, DdlChange) else None
        )
        checkpoint = (batch_id, index, offsets_json(plan.state), plan.bound, ddl)

        def finish(conn: Connection[Any], rows: int | None) -> None:
            if rows is not None:
                ledger.checkpoint(conn, checkpoint, 0, rows)
            ledger.advance(conn, head, new_head)
            if final:
                ledger.save_state(conn, batch_id, plan)
            if self.fault is not None:
                self.fault.at_commit(batch_id, index, False)
            ledger.commit(conn)
            if self.fault is not None:
                self.fault.at_commit(batch_id, index, True)

        self.kind.write_rows(StepWrite(batch_id, index, step, checkpoint, finish))
        return len(step.rows)

    def _marker(self, marker: SnapshotBegin | SnapshotEnd, head: Head | None, new: Head) -> Head:
        """A snapshot marker, with the head moved past it in the same sink transaction (a
        replayed one does again what its first attempt did not commit)."""
        conn = self.ledger.conn
        target = self.seen.target(marker)
        with db_errors(f"applying a {type(marker).__name__}"), conn.cursor() as cur:
            after = self.kind.marker(cur, marker, target)
            head = self.ledger.advance(conn, head, new)
            conn.commit()
            if after is not None:
                after()
        log.info("job %s: %s of %s applied", self.job, type(marker).__name__, target)
        return head
