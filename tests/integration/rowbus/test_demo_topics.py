"""`rowbus demo` deletes the topics of its earlier runs before it creates its own (the local
broker rewrites every retained record to disk as it changes: old runs' topics slowed each
later demo), and no topic outside its family."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from rowbus.config import Settings
from rowbus.demo import TOPIC_FAMILY, delete_earlier_runs
from rowbus.waiting import wait_for


def test_a_demo_run_deletes_earlier_runs_topics_and_no_other(
    services: Settings, make_topic: Callable[..., str]
) -> None:
    admin = AdminClient(services.kafka.client_config())
    run = f"{TOPIC_FAMILY}{uuid.uuid4().hex[:8]}"
    earlier = [f"{run}.source1", f"{run}.checkpoints"]
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in earlier]).values():
        future.result(15)
    other = make_topic("not.a.demo", partitions=1)

    assert set(earlier) <= set(delete_earlier_runs(admin))

    def gone() -> bool:
        topics = admin.list_topics(timeout=10).topics
        return not set(earlier) & set(topics)

    wait_for(gone, timeout=30, what="the earlier run's topics to be deleted")
    assert other in admin.list_topics(timeout=10).topics
    assert delete_earlier_runs(admin) == []
