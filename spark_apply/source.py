"""A Spark streaming data source over Kafka on confluent-kafka: ``format("rowbus_kafka")``.

One Spark input partition per Kafka partition with new records (or, with the ``tasks`` option,
at most that many, each reading several); each range is read exactly as ``[start, end)`` with
``isolation.level=read_committed`` (records of aborted transactions and transaction markers
inside the range are skipped, never waited for). Offsets live in Spark's checkpoint (the offset
log), so a restarted query re-reads exactly the ranges of the batch it re-runs. `read()` decodes
every record (a malformed one fails the query with its position) and yields Arrow batches of
``topic, partition, offset, kind, source, ts, encoding, value, row``: ``row`` is a protobuf
row's header and SQL literals as one text (`rendered.rendered_row`), which the driver orders
and writes without decoding a value.

Options (keys are case-insensitive): ``topics`` (comma-separated), ``kafka`` (JSON of librdkafka
settings without secrets) and ``kafka.secret.<key>`` (each secret setting on its own: the word
``secret`` in the option's name makes Spark's ``spark.redaction.regex`` mask its value wherever
Spark shows options — `kafka_options`), ``startingOffsets`` (``earliest`` or JSON
``{"topic": {"0": 12}}``),
``maxOffsetsPerTrigger``, ``tasks`` (at most this many Spark tasks per batch, each reading
several ranges one after the other: `group_ranges`), ``boundaries`` (a local file keeping the
records below each partition's position across restarts: `boundaries`).
``Trigger.AvailableNow`` is supported.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from rowbus.protocol.codec import decode, kind_name
from rowbus.protocol.events import RowChange
from rowbus.spark_apply.boundaries import Boundaries
from rowbus.spark_apply.consumers_kept import (
    QUEUED_MIN,
    RECENT,
    KeptConsumers,
    from_offset,
    past,
)
from rowbus.spark_apply.exceptions import MissingTopicError
from rowbus.spark_apply.gc_pause import collector_paused
from rowbus.spark_apply.rendered import (
    ROW_COLUMN,
    append_natively,
    encoding_of,
    is_protobuf,
    read_row,
    rendered_row,
)

SCHEMA = (
    "topic STRING, partition INT, offset BIGINT, kind STRING, source STRING, ts BIGINT, "
    f"encoding STRING, value BINARY, {ROW_COLUMN} STRING"
)

_READ_TIMEOUT_S = 120.0
_BROKER_WAIT_S = 60.0
_BROKER_RETRY_S = 0.5
_BROKER_ATTEMPTS = int(_BROKER_WAIT_S / _BROKER_RETRY_S) + 1
_CHUNK = 5000
_POLL_S = 0.01
"""How long one `consume` waits for `_CHUNK` records. A range holds fewer records than
offsets (transaction markers occupy some), so a call asking for more than remain always waits
this long; 0.2 s here was most of a small batch's read (measured: 0.21 s for 100 records,
per partition and batch). Short calls in the bounded loop cost nothing while records flow."""

Offsets = dict[str, dict[str, int]]


class KafkaRange(InputPartition):  # type: ignore[misc,unused-ignore]
    """One Kafka partition's ``[start, end)``."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class KafkaRanges(InputPartition):  # type: ignore[misc,unused-ignore]
    """The ranges one Spark task reads, one after the other."""

    def __init__(self, ranges: tuple[KafkaRange, ...]) -> None:
        super().__init__(tuple(r.value for r in ranges))
        self.ranges = ranges


TASK_RECORDS = 5_000
"""Offsets a read task is given at least (when there are fewer tasks than ranges)."""


def group_ranges(ranges: list[KafkaRange], tasks: int | None) -> list[KafkaRanges]:
    """`ranges` as at most `tasks` groups of equal offsets (±1), cutting a range in two where
    a group is full, and no more groups than `TASK_RECORDS` offsets each pay for (None: one
    group per range).

    A Spark task has a fixed cost (scheduling, a Python worker, a consumer), which for the
    small batches of a steady stream is most of the read: two sources of three partitions
    made six tasks per batch on two cores. Measured (`local[2]`, loaded machine): a batch of
    60 records took 0.4-0.5 s to collect in one task, ~1.0 s in two; a trivial Spark job
    0.25-0.35 s. A batch waits for its slowest task, so groups are cut to equal size: three
    equal partitions on two tasks, whole, made one task twice the other's (measured: 1.0-1.1 s
    against 0.5 s a 50k-record batch). Deterministic (ranges in (topic, partition) order), so a
    re-run batch reads in the same tasks; the grouping only decides which task reads which
    offsets, never which offsets are read (the driver orders a batch by offset itself)."""
    if not tasks:
        return [KafkaRanges((r,)) for r in ranges]
    total = sum(r.end - r.start for r in ranges)
    tasks = max(1, min(tasks, total // TASK_RECORDS))
    size = -(-total // tasks)
    groups: list[KafkaRanges] = []
    group: list[KafkaRange] = []
    room = size
    for r in sorted(ranges, key=lambda r: (r.topic, r.partition, r.start)):
        start = r.start
        while start < r.end:
            take = min(r.end - start, room)
            group.append(KafkaRange(r.topic, r.partition, start, start + take))
            start += take
            room -= take
            if room == 0:
                groups.append(KafkaRanges(tuple(group)))
                group, room = [], size
    if group:
        groups.append(KafkaRanges(tuple(group)))
    return groups


_HIDDEN = "kafka.secret."


def kafka_options(config: dict[str, Any]) -> dict[str, str]:
    """The source's options carrying librdkafka settings `config`: the secrets
    (`rowbus.clients.kafka.is_secret`) each under ``kafka.secret.<key>``, where Spark's
    redaction hides them, the rest as JSON under ``kafka``."""
    from rowbus.clients.kafka import split_secrets

    public, secrets = split_secrets(config)
    return {"kafka": json.dumps(public)} | {
        f"{_HIDDEN}{key}": str(value) for key, value in secrets.items()
    }


def kafka_settings(options: dict[str, str]) -> dict[str, Any]:
    """librdkafka settings back from `kafka_options`' options (keys lower-cased by Spark)."""
    config: dict[str, Any] = json.loads(options.get("kafka", "{}"))
    for key, value in options.items():
        if key.startswith(_HIDDEN):
            config[key[len(_HIDDEN) :]] = value
    return config


class RowbusKafkaSource(DataSource):  # type: ignore[misc,unused-ignore]
    """``spark.readStream.format("rowbus_kafka")``."""

    @classmethod
    def name(cls) -> str:
        return "rowbus_kafka"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> KafkaStreamReader:  # noqa: N802
        return KafkaStreamReader(dict(self.options))


def _consumer(config: dict[str, Any]) -> Any:
    """A read_committed consumer for assigned partitions (no group membership)."""
    from rowbus.clients import kafka

    return kafka.consumer(
        {
            "group.id": f"rowbus-apply-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "isolation.level": "read_committed",
            # A broker that ignores fetch size limits (noida-db) answers with up to a whole
            # partition: a response above this limit is refused and the read stalls. The same
            # limit as the Subscriber's reader.
            "receive.message.max.bytes": 1_000_000_000,
            **config,
        }
    )


_KEPT = KeptConsumers(lambda kafka: _consumer({"queued.min.messages": QUEUED_MIN, **kafka}))
"""This process's consumers kept between `read_range` calls (a Python worker's, mostly)."""


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc,unused-ignore]
    """Offsets are ``{topic: {partition: next offset}}``; see the module docstring."""

    def __init__(self, options: dict[str, str]) -> None:
        opts = {k.lower(): v for k, v in options.items()}
        self.topics = [t.strip() for t in opts["topics"].split(",") if t.strip()]
        self.kafka = kafka_settings(opts)
        self.starting = opts.get("startingoffsets", "earliest")
        limit = opts.get("maxoffsetspertrigger")
        self.max_per_trigger = int(limit) if limit else None
        tasks = opts.get("tasks")
        self.tasks = int(tasks) if tasks else None
        self._cap: Offsets | None = None
        self._client: Any = None
        self._checker: Any = None
        path = opts.get("boundaries")
        self._boundaries = Boundaries(Path(path) if path else None)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None  # a librdkafka handle does not travel to the workers
        state["_checker"] = None
        return state

    def _admin(self) -> Any:
        if self._client is None:
            self._client = _consumer(self.kafka)
        return self._client

    def _ends(self) -> tuple[Offsets, Offsets]:
        """(low, end) offsets of every partition of every topic (end: the last stable offset).
        A broker that is away (restarting: librdkafka answers at once that no broker is up) is
        asked again for `_BROKER_WAIT_S`, as the readers wait for it, before the query fails."""
        from confluent_kafka import KafkaError, KafkaException

        deadline = time.monotonic() + _BROKER_WAIT_S
        for attempt in range(_BROKER_ATTEMPTS):
            try:
                return self._ends_once()
            except KafkaException as exc:
                away = exc.args[0].code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
                if not away or time.monotonic() > deadline or attempt == _BROKER_ATTEMPTS - 1:
                    raise
                # A bounded backoff between attempts (a refused connection fails at once).
                time.sleep(_BROKER_RETRY_S)
        raise AssertionError("unreachable")

    def _ends_once(self) -> tuple[Offsets, Offsets]:
        from confluent_kafka import TopicPartition

        client = self._admin()
        low: Offsets = {}
        high: Offsets = {}
        meta = client.list_topics(timeout=10)
        for topic in self.topics:
            if topic not in meta.topics or meta.topics[topic].error is not None:
                raise MissingTopicError(topic)
            for p in sorted(meta.topics[topic].partitions):
                lo, hi = client.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                low.setdefault(topic, {})[str(p)] = lo
                high.setdefault(topic, {})[str(p)] = hi
        return low, high

    def initialOffset(self) -> Offsets:  # noqa: N802
        low, _ = self._ends()
        if self.starting == "earliest":
            return low
        given: Offsets = json.loads(self.starting)
        return {t: {**parts, **given.get(t, {})} for t, parts in low.items()}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._cap = self._ends()[1]

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:  # noqa: N802
        lows, highs = self._ends()
        out = self._latest(start, self._cap if self._cap is not None else highs, limit)
        self._check_boundaries(start, out, lows, highs)
        return out

    def _check_boundaries(
        self, start: Offsets, out: Offsets, lows: Offsets, highs: Offsets
    ) -> None:
        """Before a range is planned from where the last one ended, that end's records are
        read again and must be unchanged; the new end's are recorded (`boundaries`)."""
        ranges = {
            (topic, int(p)): (start.get(topic, {}).get(p, 0), end)
            for topic, parts in out.items()
            for p, end in parts.items()
            if end > start.get(topic, {}).get(p, 0)
        }
        if ranges:
            if self._checker is None:
                # Every record the log holds, whatever its transaction's outcome: a committed
                # transaction noida-db reports aborted after a restart hides records for
                # read_committed (seen in the nemesis, seed 1) without any new record taking
                # their offsets, which skips nothing; records replaced or added below the
                # position are what `boundaries` stops for.
                self._checker = _consumer({**self.kafka, "isolation.level": "read_uncommitted"})
            self._boundaries.advance(
                self._checker,
                ranges,
                {(t, p): lows[t][str(p)] for t, p in ranges},
                {(t, p): highs[t][str(p)] for t, p in ranges},
            )

    def _latest(self, start: Offsets, ends: Offsets, limit: ReadLimit) -> Offsets:
        out: Offsets = {}
        backlog: list[tuple[str, str, int, int]] = []
        for topic, parts in ends.items():
            for p, end in parts.items():
                begin = start.get(topic, {}).get(p, 0)
                out.setdefault(topic, {})[p] = begin
                if end > begin:
                    backlog.append((topic, p, begin, end))
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if budget is None:
            for topic, p, _, end in backlog:
                out[topic][p] = end
            return out
        # Fair share: each partition gets an equal slice; what one cannot use goes to the rest.
        backlog.sort(key=lambda b: b[3] - b[2])
        for i, (topic, p, begin, end) in enumerate(backlog):
            share = max(1, budget // (len(backlog) - i)) if budget > 0 else 0
            take = min(end - begin, share)
            out[topic][p] = begin + take
            budget -= take
        return out

    def partitions(self, start: Offsets, end: Offsets) -> list[KafkaRanges]:
        ranges = []
        for topic in sorted(end):
            for p in sorted(end[topic], key=int):
                a, b = start.get(topic, {}).get(p, 0), end[topic][p]
                if b > a:
                    ranges.append(KafkaRange(topic, int(p), a, b))
        return group_ranges(ranges, self.tasks)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa

        assert isinstance(partition, KafkaRanges)
        schema = arrow_schema()
        # A chunk's records live until it is yielded; they make no cycles, so one collection
        # at the task's end is enough (one per chunk cost ~9 ms each, 5% of a 25k-record task).
        with collector_paused():
            for r in partition.ranges:
                for cols in read_range(self.kafka, r):
                    yield pa.RecordBatch.from_pydict(cols, schema=schema)

    def commit(self, end: Offsets) -> None:
        pass

    def stop(self) -> None:
        for client in (self._client, self._checker):
            if client is not None:
                client.close()
        self._client = self._checker = None


def arrow_schema() -> Any:
    """`SCHEMA` as pyarrow's."""
    import pyarrow as pa

    return pa.schema(
        [
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("kind", pa.string()),
            ("source", pa.string()),
            ("ts", pa.int64()),
            ("encoding", pa.string()),
            ("value", pa.binary()),
            (ROW_COLUMN, pa.string()),
        ]
    )


def read_range(
    kafka: dict[str, Any], r: KafkaRange, timeout_s: float = _READ_TIMEOUT_S
) -> Iterator[dict[str, list[Any]]]:
    """The records of ``[r.start, r.end)`` as column dicts of at most `_CHUNK` rows, read with
    the process's kept consumer of the partition when it stands at or a little before
    ``r.start`` (`consumers_kept`: the next batch's range continues from what the last one
    fetched), else with a new one; kept again once the range was read whole."""
    from confluent_kafka import TopicPartition

    kept = _KEPT.take(kafka, r.topic, r.partition, r.start)
    consumer = kept.consumer
    deadline = time.monotonic() + timeout_s
    cols: dict[str, list[Any]] = {k: [] for k in _COLUMNS}
    whole = False
    try:
        position = r.start
        msgs, kept.pending = kept.pending, []
        leftover: list[Any] | None = []
        recent: list[Any] = []
        while position < r.end:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{r.topic}[{r.partition}]: read stalled at {position} of "
                    f"[{r.start}, {r.end}) for {timeout_s:.0f}s"
                )
            if not msgs:
                msgs = consumer.consume(_CHUNK, _POLL_S)
            msgs = from_offset(msgs, r.start)
            position = append_messages(cols, r, msgs, position)
            if position < r.end:
                recent.extend(msgs)
            else:
                leftover = past(msgs, r.end)
                recent.extend(msgs[: len(msgs) - len(leftover or ())])
            if len(recent) > 2 * RECENT:
                del recent[:-RECENT]
            msgs = []
            if position < r.end:
                # Markers and aborted records occupy offsets no message is delivered for.
                (now,) = consumer.position([TopicPartition(r.topic, r.partition)])
                if now.offset >= r.end:
                    position = r.end
            if len(cols["offset"]) >= _CHUNK or (position >= r.end and cols["offset"]):
                yield cols
                cols = {k: [] for k in _COLUMNS}
        if leftover is not None:
            kept.position, kept.pending, kept.recent = r.end, leftover, recent[-RECENT:]
            whole = True
    finally:
        if whole:
            _KEPT.give_back(kafka, kept)
        else:
            _KEPT.discard(kept)


def append_messages(
    cols: dict[str, list[Any]], r: KafkaRange, msgs: list[Any], position: int
) -> int:
    """Appends one consume's messages of `r` to `cols`: protobuf rows and watermarks natively
    (`rendered.append_natively`), the rest by `_append`; returns the next offset to read
    (`r.end` once a message at or past it arrives). A message with an error raises."""
    lists = tuple(cols[k] for k in _COLUMNS)
    i = 0
    while i < len(msgs):
        j = append_natively(msgs, i, r.end, lists, r.topic, r.partition)
        if j > i:
            position = msgs[j - 1].offset() + 1
        if j == len(msgs):
            break
        msg = msgs[j]
        if msg.error() is not None:
            raise RuntimeError(f"{r.topic}[{r.partition}]: {msg.error()}")
        offset = msg.offset()
        if offset >= r.end:
            return r.end
        _append(cols, r, msg)
        position = offset + 1
        i = j + 1
    return position


_COLUMNS = (
    "topic",
    "partition",
    "offset",
    "kind",
    "source",
    "ts",
    "encoding",
    "value",
    ROW_COLUMN,
)


def _append(cols: dict[str, list[Any]], r: KafkaRange, msg: Any) -> None:
    value: bytes = msg.value()
    headers = msg.headers() or []
    offset = msg.offset()
    encoding = encoding_of(headers)
    rendered = value is not None and is_protobuf(encoding, value)
    where = f"{r.topic}[{r.partition}]@{offset}"
    event = read_row(value, headers, where) if rendered else decode(value, headers, where)
    kind = kind_name(event)
    source, ts = getattr(event, "source", None), getattr(event, "ts", None)
    # The driver needs a row's header (to order it) and its literals (to write it), not its
    # decoded values; a row it must stash is spilled as these very bytes.
    row = rendered_row(event) if rendered and isinstance(event, RowChange) else None
    cols["topic"].append(r.topic)
    cols["partition"].append(r.partition)
    cols["offset"].append(offset)
    cols["kind"].append(kind)
    cols["source"].append(source)
    cols["ts"].append(ts)
    cols["encoding"].append(encoding)
    cols["value"].append(value)
    cols[ROW_COLUMN].append(row)
