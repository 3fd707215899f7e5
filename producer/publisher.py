"""The reader's transactional producer and topic admin, built by the Kafka seam
(`rowbus.clients.kafka`), whose classification becomes `PublishError` / `FencedError` here.

Lifecycle: construct (no I/O), `start()` (creates the producer and calls ``init_transactions``,
which fences any older producer with the same transactional.id and aborts its open
transaction), then per batch `begin()`, `produce()`…, `flush()` (raises on any delivery error,
returns the offsets written), `produce()` the checkpoint, `commit()`; `abort()` after a failure;
`close()`. Delivery guarantee: exactly once per committed transaction.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from rowbus.clients import kafka as clients_kafka
from rowbus.clients.errors import KafkaClientError
from rowbus.clients.kafka import Failure, classify, kafka_cause
from rowbus.producer.exceptions import FencedError, PublishError
from rowbus.protocol.topics import MAX_RECORD_BYTES

log = logging.getLogger(__name__)


_SMALL = 100_000
"""Records below this size are never checked against a topic's limit."""
_RECORD_OVERHEAD = 4_096
"""What a record batch adds to a value: its key, headers and framing."""
_Record = tuple[str, int | None, bytes | None, bytes | None, Any]
"""(topic, partition or None, key, value (None: a tombstone), headers: a list of (name,
bytes))."""


def _too_large(what: str, topic: str) -> PublishError:
    return PublishError(
        f"{what} is too large for {topic}: raise the topic's max.message.bytes (rowbus creates "
        f"data topics with {MAX_RECORD_BYTES:,}) and, if set lower, the producer's "
        "message.max.bytes (kafka.client)",
        "MSG_SIZE_TOO_LARGE",
        retryable=False,
    )


_PRODUCER_STATE_LOST = frozenset(
    {"OUT_OF_ORDER_SEQUENCE_NUMBER", "UNKNOWN_PRODUCER_ID", "INVALID_PRODUCER_ID_MAPPING"}
)
"""Fatal to this producer only: the broker no longer has its idempotence state (a broker
that came back without its data, a producer id expired). A new producer (the next term)
resumes from the last committed checkpoint; the open transaction never commits."""


def _publish_error(failure: Failure) -> PublishError:
    if failure.fenced:
        return FencedError(f"{failure.text} (another reader took this source over)", failure.name)
    if failure.name in _PRODUCER_STATE_LOST:
        text = f"{failure.text} (the broker lost this producer's state: a new one takes over)"
        return PublishError(text, failure.name, retryable=True)
    return PublishError(failure.text, failure.name, retryable=failure.retryable)


def translate_kafka_error(err: KafkaError | None, what: str) -> PublishError:
    """The `PublishError` for a librdkafka error (FencedError when this producer is a zombie)."""
    return _publish_error(classify(err, what))


def _term_number(claimed: str | None, fence_id: str) -> int:
    """The number in a claimed id ``{fence_id}.w{n}``; 0 when none was claimed (or the claim
    is another form: the next claim then starts over, a fresh id all the same)."""
    if claimed is None or not claimed.startswith(f"{fence_id}.w"):
        return 0
    number = claimed[len(fence_id) + 2 :]
    return int(number) if number.isdigit() else 0


def kafka_errors(what: str) -> contextlib.AbstractContextManager[None]:
    """The seam's translation, into the reader's own errors."""
    return clients_kafka.kafka_errors(what, into=_publish_error)


class KafkaPublisher:
    def __init__(
        self,
        client_config: Mapping[str, Any],
        transactional_id: str,
        transaction_timeout_ms: int = 60_000,
        timeout_s: float | None = None,
    ) -> None:
        self._config = dict(client_config)
        self.fence_id = transactional_id
        """The source's stable transactional.id: `start` fences with it, `rotate` claims with
        it."""
        self.transactional_id = transactional_id
        """The id this publisher writes with: `fence_id` until `rotate`, the term's own after."""
        self._txn_timeout = transaction_timeout_ms
        # Wait for a broker up to the transaction timeout (it aborts the transaction then).
        self._timeout = (
            timeout_s if timeout_s is not None else max(10.0, transaction_timeout_ms / 1000 - 5)
        )
        self._producer: Producer | None = None
        self._admin: Any = None
        self._errors: list[tuple[str, KafkaError]] = []
        self._limits: dict[str, int] = {}
        """Each topic's max.message.bytes, where known: a larger record is refused here, in
        one line, rather than by the broker (whose refusal also aborts the transaction)."""
        self._fatal: KafkaError | None = None
        self._offsets: dict[tuple[str, int], int] = {}
        self._in_txn = False

    def _on_error(self, err: KafkaError) -> None:
        # librdkafka's error callback: remember a fatal error (fencing among them), so a failure
        # that confluent-kafka reports without its cause can still be named.
        if err.fatal():
            self._fatal = err

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """`kafka_errors`, plus: a bare SystemError from confluent-kafka (it loses the cause
        after a fatal error) becomes the fatal error recorded by the error callback."""
        try:
            try:
                with kafka_errors(what):
                    yield
            except SystemError as exc:
                if self._fatal is None and self._producer is not None:
                    # The error callback may not have run yet for the fatal error that made the
                    # call fail (seen after fencing): serve pending callbacks once, then look.
                    with contextlib.suppress(Exception):
                        self._producer.poll(0)
                if self._fatal is None:
                    raise PublishError(f"{what}: the Kafka client failed ({exc})") from exc
                raise translate_kafka_error(self._fatal, what) from exc
        except Exception as exc:
            refused = self._refused_as_too_large()
            if refused is not None:
                raise refused from exc
            raise

    def _refused_as_too_large(self) -> PublishError | None:
        """The one-line error for a record the broker refused as too large, when that is
        what failed the call: the broker's refusal also aborts the transaction, and the
        abort may surface first (as a retryable error, which would retry it for ever)."""
        if self._producer is not None:
            with contextlib.suppress(Exception):
                self._producer.poll(0)
        for where, err in self._errors:
            if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                return _too_large("a record", where)
        return None

    # ---- lifecycle ----------------------------------------------------------------------------

    def prepare(self) -> None:
        """Create the clients (no fencing yet): a standby does this before it is elected."""
        if self._producer is not None:
            return
        with kafka_errors(f"creating producer {self.transactional_id}"):
            self._producer = self._connected(self.transactional_id)
            self._admin = clients_kafka.admin(self._config)

    def _connected(self, transactional_id: str) -> Producer:
        config = {
            # Throughput defaults (benchmarks/reader.py --producer measures others); the
            # client configuration may override them, not the settings after it.
            "linger.ms": 5,
            "queue.buffering.max.messages": 500_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "batch.num.messages": 10_000,
            # One row is one record, however large (librdkafka's default refuses > 1 MB).
            "message.max.bytes": MAX_RECORD_BYTES + 65_536,
            **self._config,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": self._txn_timeout,
            "partitioner": "murmur2_random",
            "error_cb": self._on_error,
        }
        producer: Producer = clients_kafka.producer(config)
        try:
            # Connect now: a fresh producer's init_transactions that finds no broker connection
            # up yet waits for librdkafka's 500 ms coordinator re-query (measured: 0.5 s of a
            # takeover's ~0.6 s on noida-db); a standby pays this before it is elected.
            producer.list_topics(timeout=self._timeout)
        except BaseException:
            clients_kafka.close_producer(producer)
            raise
        return producer

    def start(self) -> None:
        """`prepare`, then ``init_transactions``: fences older producers of this id."""
        self.prepare()
        with self._guard(f"initialising transactions of {self.transactional_id}"):
            self.producer.init_transactions(self._timeout)

    def rotate(self, topic: str, previous: str | None) -> None:
        """After `start`: fence `previous` (the id the last term claimed, from
        `checkpoints.load_writer`; its open transaction is aborted), claim the next id on the
        writers `topic` in a transaction of `fence_id`, and write with that id from now on.

        Why a new id per term: a read_committed fetch that starts past a producer's aborted
        transaction must still return that producer's later commits. noida-db lists aborted
        transactions that ended before the fetched offset, and librdkafka then drops the
        producer's records until an abort marker it never meets (docs/operations.md): with
        one id for ever, every commit after a kill -9 was hidden from such fetches (the apply
        job starts each range where the last ended). A producer id that never writes after its
        abort leaves nothing for that to hide. Fencing stays whole: the claim is committed
        under `fence_id` (whose ``init_transactions`` in `start` ended any claim in flight)
        before the new id writes, so the next term fences exactly this one."""
        if previous is not None:
            self._fence(previous)
        claimed = f"{self.fence_id}.w{_term_number(previous, self.fence_id) + 1}"
        producer = self.producer
        with self._guard(f"claiming {claimed} on {topic}"):
            producer.begin_transaction()
            producer.produce(topic, claimed.encode(), self.fence_id.encode())
            producer.commit_transaction(self._timeout)
        with kafka_errors(f"creating producer {claimed}"):
            writer = self._connected(claimed)
        try:
            with self._guard(f"initialising transactions of {claimed}"):
                writer.init_transactions(self._timeout)
        except BaseException:
            clients_kafka.close_producer(writer)
            raise
        self._producer, self.transactional_id = writer, claimed
        clients_kafka.close_producer(producer)
        log.info("writing with transactional.id %s", claimed)

    def _fence(self, transactional_id: str) -> None:
        """Fence the producers of `transactional_id` and abort their open transaction."""
        with kafka_errors(f"creating producer {transactional_id}"):
            fencer = self._connected(transactional_id)
        try:
            with self._guard(f"fencing {transactional_id}"):
                fencer.init_transactions(self._timeout)
        finally:
            clients_kafka.close_producer(fencer)

    def close(self) -> None:
        """Abort the open transaction, close the producer and drop the admin client, each
        within `CLOSE_TIMEOUT_S`, whatever the broker does: a stop with the broker gone must
        not wait for librdkafka's own timeouts (minutes). The caller has joined every thread
        that uses this publisher (the reader's commit thread) before."""
        producer, self._producer, self._admin = self._producer, None, None
        if producer is None:
            return
        if self._in_txn:
            self._in_txn = False
            try:
                producer.abort_transaction(min(self._timeout, clients_kafka.CLOSE_TIMEOUT_S))
            except (KafkaException, SystemError) as exc:
                # Unfinished, it ends with the transaction timeout or the next term's fencing.
                log.warning(
                    "aborting the Kafka transaction of %s on close failed: %s",
                    self.transactional_id,
                    exc,
                )
        dropped = clients_kafka.close_producer(producer)
        if dropped:
            log.warning(
                "closed producer %s with %d undelivered records dropped (they belong to no "
                "committed transaction)",
                self.transactional_id,
                dropped,
            )

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            raise PublishError("the publisher is not started")
        return self._producer

    # ---- topics -------------------------------------------------------------------------------

    def partitions(
        self, topic: str, create_partitions: int, config: Mapping[str, str], setting: str = ""
    ) -> int:
        """The partition count of `topic`, creating it (with `config`) if it does not exist; an
        existing topic that differs from what is configured is reported, one line each."""
        assert self._admin is not None
        try:
            state = clients_kafka.ensure_topic(
                self._admin, topic, create_partitions, config, self._timeout, setting=setting
            )
        except KafkaClientError as exc:
            raise PublishError(str(exc), str(exc.code), retryable=exc.retryable) from exc
        for problem in state.problems:
            log.warning("topic %s %s", topic, problem)
        if state.max_message_bytes is not None:
            self._limits[topic] = state.max_message_bytes
        return state.partitions

    # ---- transactions -------------------------------------------------------------------------

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (begun, not yet committed or aborted)."""
        return self._in_txn

    def begin(self) -> None:
        self._errors.clear()
        self._offsets.clear()
        with self._guard("begin transaction"):
            self.producer.begin_transaction()
        self._in_txn = True

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        # Runs inside librdkafka's poll/flush: it must never raise.
        if err is not None:
            try:
                where = f"{msg.topic()}[{msg.partition()}]"
            except Exception:  # noqa: BLE001 - a message of a failed producer may be unreadable
                where = "a partition"
            self._errors.append((where, err))
            return
        key = (msg.topic(), msg.partition())
        offset = msg.offset() + 1
        offsets = self._offsets
        if offset > offsets.get(key, -1):
            offsets[key] = offset

    def produce(
        self,
        records: Sequence[_Record],
    ) -> None:
        send = self.producer.produce
        on_delivery = self._delivered
        for record in records:
            topic, partition, key, value, headers = record
            if value is not None and len(value) > _SMALL:
                self._check_size(topic, value)
            try:
                # One call per record, the cheapest form: this loop runs for every row.
                if partition is None:
                    send(topic, value, key, headers=headers, on_delivery=on_delivery)
                else:
                    send(topic, value, key, partition, on_delivery=on_delivery, headers=headers)
            except BufferError:
                self._produce_when_room(record)
            except (KafkaException, SystemError) as exc:
                raise self._produce_error(topic, value or b"", exc) from exc
        if self._errors:
            self._raise_delivery_errors()
        with self._guard("polling delivery reports"):
            self.producer.poll(0)

    def _check_size(self, topic: str, value: bytes) -> None:
        if len(value) + _RECORD_OVERHEAD > self._limits.get(topic, 1 << 62):
            raise _too_large(f"a record of {len(value):,} bytes", topic)

    def _produce_when_room(self, record: _Record) -> None:
        """`record` once the client's queue has room (it serves delivery reports meanwhile)."""
        producer = self.producer
        topic, partition, key, value, headers = record
        for _ in range(1000):
            with self._guard(f"producing to {topic}"):
                producer.poll(0.05)
            if self._errors:
                self._raise_delivery_errors()
            try:
                if partition is None:
                    producer.produce(
                        topic, value, key, headers=headers, on_delivery=self._delivered
                    )
                else:
                    producer.produce(
                        topic, value, key, partition, on_delivery=self._delivered, headers=headers
                    )
                return
            except BufferError:
                continue
            except (KafkaException, SystemError) as exc:
                raise self._produce_error(topic, value or b"", exc) from exc
        raise PublishError(f"the producer queue stayed full while producing to {topic}")

    def _produce_error(self, topic: str, value: bytes, exc: Exception) -> PublishError:
        cause = kafka_cause(exc)
        err = cause.args[0] if cause is not None and cause.args else self._fatal
        if isinstance(err, KafkaError) and err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            return _too_large(f"a record of {len(value):,} bytes", topic)
        refused = self._refused_as_too_large()
        if refused is not None:
            return refused
        return translate_kafka_error(
            err if isinstance(err, KafkaError) else None, f"producing to {topic}"
        )

    def flush(self) -> dict[tuple[str, int], int]:
        """Wait for every record; PublishError if any failed. The next offsets per partition."""
        with self._guard("flush"):
            remaining = self.producer.flush(self._timeout)
        if remaining:
            raise PublishError(f"{remaining} records still undelivered after {self._timeout:.0f}s")
        if self._errors:
            self._raise_delivery_errors()
        return dict(self._offsets)

    def _raise_delivery_errors(self) -> None:
        where, err = self._errors[0]
        if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            raise _too_large("a record", where)
        raise translate_kafka_error(err, f"delivery to {where} ({len(self._errors)} failed)")

    def commit(self) -> None:
        with self._guard("commit transaction"):
            self.producer.commit_transaction(self._timeout)
        self._in_txn = False
        if self._errors:  # pragma: no cover - commit fails first in practice
            self._raise_delivery_errors()

    def abort(self) -> None:
        self._in_txn = False
        try:
            self.producer.abort_transaction(self._timeout)
        except (KafkaException, SystemError) as exc:
            log.warning(
                "aborting the Kafka transaction of %s failed: %s", self.transactional_id, exc
            )
