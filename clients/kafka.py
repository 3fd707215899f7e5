"""The one seam around confluent-kafka.

Every consumer, producer and admin client is built here (`consumer`, `producer`, `admin`), with
the defaults rowbus relies on rendered at the last moment, and a producer is closed by
`close_producer` (bounded, whatever the broker does); every KafkaException is translated by
`kafka_errors` (also when confluent-kafka hides it behind a SystemError); `KafkaReader` is the
assign-only consumer the subscribers use, and `read_to_end` reads a small system topic
(checkpoints, schemas, control) to its current end.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol

from rowbus.clients.errors import KafkaClientError
from rowbus.protocol.codec import decode
from rowbus.protocol.errors import ProtocolError, RowbusError
from rowbus.protocol.events import Record

TopicPartition = tuple[str, int]

log = logging.getLogger(__name__)

# noida-db ignores fetch size limits, so a consumer must accept whatever one fetch returns.
MAX_MESSAGE_BYTES = 1_000_000_000

_FENCED = {
    "_FENCED",
    "PRODUCER_FENCED",
    "INVALID_PRODUCER_EPOCH",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
}


class Message(Protocol):
    """What rowbus uses of `confluent_kafka.Message` (which tests cannot build)."""

    def error(self) -> Any: ...
    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> list[tuple[str, bytes | None]] | None: ...


@dataclass(frozen=True)
class Failure:
    """One librdkafka error, classified once."""

    text: str
    name: str | None
    retryable: bool
    fenced: bool


def classify(err: Any, what: str) -> Failure:
    """Classify a `KafkaError` (or None when the cause was lost) raised while doing `what`."""
    if err is None or not hasattr(err, "name"):
        return Failure(f"{what} failed", None, False, False)
    name = str(err.name())
    fenced = name in _FENCED
    retryable = (bool(err.retriable()) or bool(err.txn_requires_abort())) and not err.fatal()
    return Failure(f"{what}: {name}: {err.str()}", name, retryable and not fenced, fenced)


def _client_error(failure: Failure) -> RowbusError:
    return KafkaClientError(
        failure.text, failure.name, retryable=failure.retryable, fenced=failure.fenced
    )


def kafka_cause(exc: BaseException) -> Any:
    """The KafkaException behind `exc`: confluent-kafka raises SystemError ("returned a result
    with an exception set") from flush/poll when a fatal error is pending while a callback runs,
    with the KafkaException as its cause."""
    from confluent_kafka import KafkaException

    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, KafkaException):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


@contextmanager
def kafka_errors(
    what: str, into: Callable[[Failure], RowbusError] = _client_error
) -> Iterator[None]:
    """Translate a KafkaException raised inside the block into `into(failure)` (by default a
    `KafkaClientError`); components pass their own `into` to keep their error types."""
    from confluent_kafka import KafkaException

    try:
        yield
    except (KafkaException, SystemError) as exc:
        cause = kafka_cause(exc)
        if cause is None:
            raise
        err = cause.args[0] if cause.args else None
        raise into(classify(err, what)) from exc


def failure_error(err: Any, what: str) -> KafkaClientError:
    """The `KafkaClientError` for a KafkaError a message or callback carries."""
    f = classify(err, what)
    return KafkaClientError(f.text, f.name, retryable=f.retryable, fenced=f.fenced)


# -- secrets -----------------------------------------------------------------------------------

SECRET_KEY = re.compile(r"password|secret|jaas|token|ssl\.key\.pem|ssl_key", re.IGNORECASE)
"""librdkafka keys whose values are secrets (``sasl.password``, ``ssl.key.password``,
``ssl.keystore.password``, ``sasl.oauthbearer.client.secret``, ``sasl.jaas.config``,
``ssl.key.pem``): never shown; a few harmless ones that match are masked too."""
MASK = "**********"


def is_secret(key: str) -> bool:
    """Whether the librdkafka setting `key` holds a secret."""
    return SECRET_KEY.search(key) is not None


def redacted(config: Mapping[str, Any]) -> dict[str, Any]:
    """`config` fit to show: every secret value masked."""
    return {k: MASK if is_secret(k) else v for k, v in config.items()}


def split_secrets(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`config` as (its settings without secrets, its secrets)."""
    public = {k: v for k, v in config.items() if not is_secret(k)}
    return public, {k: v for k, v in config.items() if is_secret(k)}


# -- factories ---------------------------------------------------------------------------------


def consumer(config: Mapping[str, Any], **overrides: Any) -> Any:
    """A `confluent_kafka.Consumer`: read_committed, no auto commit, a private group unless
    ``group.id`` is given, any message size. `overrides` use librdkafka's dotted keys."""
    from confluent_kafka import Consumer

    conf = {
        "group.id": f"rowbus-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "receive.message.max.bytes": MAX_MESSAGE_BYTES,
        **config,
    }
    conf.update(overrides)
    with kafka_errors("cannot create a Kafka consumer"):
        return Consumer(conf)


def producer(config: Mapping[str, Any], **overrides: Any) -> Any:
    """A `confluent_kafka.Producer` (idempotent unless told otherwise)."""
    from confluent_kafka import Producer

    conf = {"enable.idempotence": True, "acks": "all", **config}
    conf.update(overrides)
    with kafka_errors("cannot create a Kafka producer"):
        return Producer(conf)


CLOSE_TIMEOUT_S = 5.0
"""How long closing a producer waits for its queued records before it drops them: librdkafka's
close otherwise waits up to the message timeout (minutes) for a broker that is gone."""


def close_producer(producer: Any, timeout: float = CLOSE_TIMEOUT_S) -> int:
    """Flush `producer` for at most `timeout` seconds, drop what is left, close it; the number of
    records dropped. A closed client refuses further calls (RuntimeError) instead of touching
    freed memory, and its threads and connections end now rather than whenever it is collected.
    Its owner stops the threads that use it first."""
    from confluent_kafka import KafkaException

    left = 0
    try:
        left = int(producer.flush(timeout))
        if left:
            producer.purge(True, True, False)
    except (KafkaException, SystemError, RuntimeError) as exc:
        log.debug("flush on close: %s", exc)
    with contextlib.suppress(KafkaException, SystemError, RuntimeError):
        producer.close()
    return left


def admin(config: Mapping[str, Any]) -> Any:
    """A `confluent_kafka.admin.AdminClient` on the same connection settings. It has no
    ``close()``: its owner drops its one reference when it stops (CPython then destroys it at
    once, threads and connections with it), and keeps it nowhere else."""
    from confluent_kafka.admin import AdminClient

    with kafka_errors("cannot create a Kafka admin client"):
        return AdminClient(dict(config))


def kafka_tp(topic: str, partition: int, offset: int | None = None) -> Any:
    """A `confluent_kafka.TopicPartition`."""
    from confluent_kafka import TopicPartition as KafkaTP

    return KafkaTP(topic, partition) if offset is None else KafkaTP(topic, partition, offset)


# -- the assign-only reader --------------------------------------------------------------------


class KafkaReader:
    """An assign-only consumer; `open()` builds the client, `close()` closes it."""

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        timeout: float = 10.0,
        isolation: str = "read_committed",
    ) -> None:
        self._config = {
            "group.id": "rowbus-subscriber",
            **config,
            "enable.auto.offset.store": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
        self._timeout = timeout
        self._consumer: Any = None

    def open(self) -> None:
        self._consumer = consumer(self._config)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def partitions(self, topic: str) -> list[int]:
        """The partitions of `topic`; KafkaClientError if it does not exist."""
        with kafka_errors(f"cannot read the metadata of {topic}"):
            meta = self._consumer.list_topics(topic, timeout=self._timeout).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise KafkaClientError(f"topic {topic} does not exist")
        return sorted(meta.partitions)

    def bounds(self, tp: TopicPartition) -> tuple[int, int]:
        """(first offset, end offset) of a partition (the end is the LSO under read_committed)."""
        with kafka_errors(f"cannot read the offsets of {tp[0]}[{tp[1]}]"):
            low, high = self._consumer.get_watermark_offsets(
                kafka_tp(*tp), timeout=self._timeout, cached=False
            )
        return int(low), int(high)

    def assign(self, offsets: Mapping[TopicPartition, int]) -> None:
        with kafka_errors("cannot assign partitions"):
            self._consumer.assign([kafka_tp(t, p, o) for (t, p), o in sorted(offsets.items())])

    def unassign(self) -> None:
        with kafka_errors("cannot unassign partitions"):
            self._consumer.unassign()

    def positions(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The next offset the consumer will read per partition (-1001 when none yet)."""
        with kafka_errors("cannot read consumer positions"):
            got = self._consumer.position([kafka_tp(t, p) for t, p in tps])
        return {(tp.topic, tp.partition): tp.offset for tp in got}

    def pause(self, tps: Sequence[TopicPartition]) -> None:
        """Stop fetching `tps`. librdkafka drops what it fetched of them and not yet handed
        over, and `resume` fetches again from the next message to hand over, so nothing is
        skipped or repeated (measured on noida-db: no gap, no duplicate)."""
        if tps:
            with kafka_errors("cannot pause partitions"):
                self._consumer.pause([kafka_tp(t, p) for t, p in tps])

    def resume(self, tps: Sequence[TopicPartition]) -> None:
        """Fetch `tps` again from where `pause` stopped them."""
        if tps:
            with kafka_errors("cannot resume partitions"):
                self._consumer.resume([kafka_tp(t, p) for t, p in tps])

    def consume(self, n: int, timeout: float) -> list[Message]:
        """Up to `n` messages (errors other than end-of-partition raise)."""
        from confluent_kafka import KafkaError

        with kafka_errors("cannot consume"):
            msgs: list[Message] = self._consumer.consume(n, timeout)
        out = []
        for msg in msgs:
            err = msg.error()
            if err is None:
                out.append(msg)
            elif err.code() != KafkaError._PARTITION_EOF:
                raise failure_error(err, "consume failed")
        return out


class TopicTail:
    """Reads a topic incrementally: `catch_up()` returns what was added since the last call, up
    to the end each partition has when the call begins; `poll()` returns what has arrived.
    Positions are kept between calls, so a compacted system topic (schemas, control) is read
    once however often it is consulted. `open()` builds the client, `close()` releases it.

    Between calls the partitions are unassigned (`_fetching`): an assigned consumer
    fetches on in the background, and noida-db answers a fetch at a partition's end at once
    instead of holding it, so an idle tail kept the broker at ~40% of a core (measured
    2026-11-23; the Spark job's schema catalog is such a tail for the job's whole life)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        topic: str,
        *,
        isolation: str = "read_committed",
        timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topic = topic
        self._reader = KafkaReader(config, timeout=timeout, isolation=isolation)
        self._timeout = timeout
        self._clock = clock
        self._next: dict[int, int] = {}
        self._open = False
        self._paused = False

    def open(self) -> bool:
        """Assign every partition from where this tail stopped; False if the topic does not
        exist (yet)."""
        if not self._open:
            self._reader.open()
            self._open = True
        try:
            partitions = self._reader.partitions(self.topic)
        except KafkaClientError:
            return False
        if set(partitions) != set(self._next):
            for p in partitions:
                self._next.setdefault(p, self._reader.bounds((self.topic, p))[0])
            self._reader.assign({(self.topic, p): o for p, o in self._next.items()})
            self._paused = False
        return True

    def _fetching(self, on: bool) -> None:
        # Unassigned and assigned again at the next offset, not paused: librdkafka fetched a
        # resumed partition only after up to a second (its fetch backoff; an assign fetches
        # within ~10 ms, measured 2026-11-27), which each shard-DDL round trip paid.
        if self._paused is on:
            if on:
                self._reader.assign({(self.topic, p): o for p, o in self._next.items()})
            else:
                self._reader.unassign()
            self._paused = not on

    def close(self) -> None:
        if self._open:
            self._reader.close()
            self._open = False
            self._paused = False

    def poll(self, timeout: float = 0.0, max_messages: int = 1000) -> list[Message]:
        """What is on the broker past this tail's position: everything up to each partition's
        end as the call begins (`catch_up`), or else what arrives within `timeout` (at most
        `max_messages`). Stopped again afterwards either way: left fetching, the shard-DDL
        coordinator's control log (polled once a batch) kept noida-db answering ~10,000
        fetches a second for the apply job's whole life (measured 2026-11-27)."""
        got = self.catch_up(self._timeout)
        if got or timeout <= 0:
            return got
        try:
            return self._consume(max_messages, timeout)
        finally:
            self._fetching(False)

    def _consume(self, max_messages: int, timeout: float) -> list[Message]:
        self._fetching(True)
        msgs = self._reader.consume(max_messages, timeout)
        for msg in msgs:
            partition, offset = msg.partition(), msg.offset()
            if partition is not None and offset is not None:
                self._next[partition] = max(self._next.get(partition, 0), offset + 1)
        return msgs

    def catch_up(self, timeout: float = 30.0) -> list[Message]:
        """Everything up to the end every partition has now; [] if the topic does not exist."""
        if not self.open():
            return []
        ends = {p: self._reader.bounds((self.topic, p))[1] for p in self._next}
        todo = {p for p, end in ends.items() if self._next[p] < end}
        out: list[Message] = []
        deadline = self._clock() + timeout
        while todo:
            if self._clock() > deadline:
                raise KafkaClientError(
                    f"timed out after {timeout:.0f}s reading {self.topic} to its end",
                    retryable=True,
                )
            # A short wait: consume returns early only once it has all it asked for.
            out += self._consume(1000, 0.02)
            positions = self._reader.positions([(self.topic, p) for p in todo])
            for (_, p), position in positions.items():
                self._next[p] = max(self._next[p], position)
            todo = {p for p in todo if self._next[p] < ends[p]}
        self._fetching(False)
        return out


def read_messages_to_end(
    config: Mapping[str, Any],
    topic: str,
    *,
    timeout: float = 30.0,
    isolation: str = "read_committed",
    clock: Callable[[], float] = time.monotonic,
) -> list[Message]:
    """Every message of a small system topic up to the end it had when the read began
    ([] if the topic does not exist). Bounded by `timeout`."""
    tail = TopicTail(config, topic, isolation=isolation, timeout=min(timeout, 10.0), clock=clock)
    try:
        return tail.catch_up(timeout)
    finally:
        tail.close()


def read_to_end(
    config: Mapping[str, Any],
    topic: str,
    *,
    timeout: float = 30.0,
    clock: Callable[[], float] = time.monotonic,
) -> list[Record]:
    """The decoded records of a small system topic up to its current end; [] if it does not
    exist. A record that does not decode is left to the topic's owner to report."""
    out: list[Record] = []
    for msg in read_messages_to_end(config, topic, timeout=timeout, clock=clock):
        where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
        with contextlib.suppress(ProtocolError):
            out.append(decode(msg.value(), msg.headers(), where))
    return out


def records_of(records: Sequence[Record], kind: type[Any]) -> list[Any]:
    """The records of one kind, in order."""
    return [r for r in records if isinstance(r, kind)]


# -- topics ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicState:
    """A topic as found (or created): its partition count and what differs from the wanted
    partitions and settings, one readable phrase each."""

    name: str
    partitions: int
    created: bool
    problems: tuple[str, ...] = ()
    max_message_bytes: int | None = None
    """The topic's ``max.message.bytes`` (None: not known)."""


def topic_names(admin: Any, timeout: float = 15.0) -> set[str]:
    """Every topic of the cluster. Metadata is asked for all topics, never by name: a broker
    with auto-creation makes a topic (one partition, default settings) when asked about it."""
    with kafka_errors("listing topics"):
        return set(admin.list_topics(timeout=timeout).topics)


def check_topic(
    admin: Any,
    topic: str,
    partitions: int,
    config: Mapping[str, str],
    timeout: float = 15.0,
    *,
    setting: str = "",
) -> TopicState | None:
    """How `topic` differs from `partitions` and `config`; None if it does not exist."""
    from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

    with kafka_errors(f"describing topic {topic}"):
        meta = admin.list_topics(timeout=timeout).topics.get(topic)
    if meta is None or meta.error is not None:
        return None
    problems = []
    have = len(meta.partitions)
    if have != partitions:
        where = f" ({setting})" if setting else ""
        problems.append(f"has {have} partition(s) where {partitions} are configured{where}")
    try:
        futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
        (entries,) = (f.result(timeout) for f in futures.values())
        actual = {k: v.value for k, v in entries.items()}
    except Exception as exc:  # noqa: BLE001 - a broker without DescribeConfigs: partitions only
        log.debug("cannot describe the settings of %s: %s", topic, exc)
        actual = dict(config)
    for key, want in sorted(config.items()):
        if key in ("min.compaction.lag.ms", "message.timestamp.type", "max.message.bytes"):
            continue  # tuning, not correctness
        if actual.get(key) != want:
            problems.append(f"has {key}={actual.get(key)} where rowbus needs {key}={want}")
    limit = actual.get("max.message.bytes")
    return TopicState(
        topic, have, False, tuple(problems), int(limit) if limit and limit.isdigit() else None
    )


def ensure_topic(
    admin: Any,
    topic: str,
    partitions: int,
    config: Mapping[str, str],
    timeout: float = 15.0,
    *,
    setting: str = "",
    clock: Callable[[], float] = time.monotonic,
) -> TopicState:
    """`topic` with `partitions` and `config`, created if missing; an existing topic is kept as
    it is and its differences reported in `problems`."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    found = check_topic(admin, topic, partitions, config, timeout, setting=setting)
    if found is not None:
        return found
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=dict(config))],
        operation_timeout=timeout,
    )
    try:
        futures[topic].result(timeout)
        log.info("created topic %s with %d partitions", topic, partitions)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
            raise failure_error(err, f"creating topic {topic}") from exc
    deadline = clock() + timeout
    while clock() < deadline:
        state = check_topic(admin, topic, partitions, config, timeout, setting=setting)
        if state is not None and state.partitions:
            return replace(state, created=True)
        time.sleep(0.1)
    raise KafkaClientError(f"topic {topic} did not appear within {timeout:.0f}s", retryable=True)


# -- stable offsets ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Stall:
    """Committed records a read_committed consumer cannot read: the partition's last stable
    offset stays below them (an open or aborted transaction the broker did not resolve)."""

    topic: str
    partition: int
    stable: int
    """The last stable offset: read_committed consumers stop before it."""
    committed: int
    """The offset up to which records are known to be committed."""

    def __str__(self) -> str:
        return (
            f"{self.topic}[{self.partition}]@{self.stable}: read_committed consumers cannot "
            f"read past offset {self.stable} although records up to offset {self.committed} are "
            "committed; an open or aborted transaction holds the partition's last stable offset "
            "(find the producer holding it, or restart the broker so it aborts the transaction)"
        )


def stable_offsets(
    admin: Any, partitions: Sequence[TopicPartition], timeout: float = 10.0
) -> dict[TopicPartition, int]:
    """The last stable offset of each partition (what a read_committed consumer reads up to)."""
    return _latest_offsets(admin, partitions, timeout, committed=True)


def high_watermarks(
    admin: Any, partitions: Sequence[TopicPartition], timeout: float = 10.0
) -> dict[TopicPartition, int]:
    """The high watermark of each partition: the end of the log, open transactions included
    (a read_committed consumer's `get_watermark_offsets` answers the last stable offset)."""
    return _latest_offsets(admin, partitions, timeout, committed=False)


def _latest_offsets(
    admin: Any, partitions: Sequence[TopicPartition], timeout: float, *, committed: bool
) -> dict[TopicPartition, int]:
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    if not partitions:
        return {}
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    with kafka_errors("listing end offsets"):
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        futures = admin.list_offsets(
            {kafka_tp(t, p): latest for t, p in partitions},
            isolation_level=level,
            request_timeout=timeout,
        )
        return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}


def stalls(
    admin: Any, committed: Mapping[TopicPartition, int], timeout: float = 10.0
) -> list[Stall]:
    """The partitions whose last stable offset is below what is known to be committed (e.g. a
    reader's checkpoint offsets, committed in the same transaction as its records)."""
    stable = stable_offsets(admin, sorted(committed), timeout)
    return [
        Stall(t, p, stable[(t, p)], offset)
        for (t, p), offset in sorted(committed.items())
        if stable.get((t, p), offset) < offset
    ]
