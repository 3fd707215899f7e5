"""How the reader's Kafka failures are classified: which end the reader, which end only the
term (a new producer resumes from the last committed checkpoint)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from rowbus.producer.exceptions import FencedError
from rowbus.producer.publisher import translate_kafka_error


@pytest.mark.parametrize(
    "code",
    [KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, KafkaError.UNKNOWN_PRODUCER_ID],
)
def test_a_broker_that_lost_the_producers_state_ends_only_the_term(code: int) -> None:
    err = KafkaError(code, "sequence desynchronization with broker 1", fatal=True)
    failure = translate_kafka_error(err, "flush")
    assert failure.retryable
    assert not isinstance(failure, FencedError)
    assert "a new one takes over" in str(failure)


def test_fencing_and_other_fatal_errors_still_end_the_reader() -> None:
    fenced = translate_kafka_error(
        KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True), "commit"
    )
    assert isinstance(fenced, FencedError)
    denied = translate_kafka_error(
        KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "denied", fatal=True),
        "begin transaction",
    )
    assert not denied.retryable


def test_a_retriable_error_is_retried() -> None:
    err = KafkaError(KafkaError._TRANSPORT, "broker down", retriable=True)
    assert translate_kafka_error(err, "flush").retryable
