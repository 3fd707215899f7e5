"""`rowbus.producer.tagged`: MySQL 8.3+'s tagged GTID event read (bytes from
`tests.mysql8.events`, whose layout was checked against a Percona Server 8.4 event)."""

from __future__ import annotations

import pytest

from rowbus.producer.tagged import TaggedGtidError, gtid
from tests.mysql8.events import gtid_tagged

U = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


@pytest.mark.parametrize("gno", [1, 63, 64, 8191, 2**40 + 5])
def test_a_tagged_gtid_event_gives_uuid_tag_n(gno: int) -> None:
    event = gtid_tagged(U, "blue_1", gno, 1000, 3, 337, 1_790_000_000_000_000, 1)
    assert gtid(event[19:-4]) == f"{U}:blue_1:{gno}"


def test_a_cut_event_is_refused() -> None:
    event = gtid_tagged(U, "blue", 5, 1000, 3, 337, 1_790_000_000_000_000, 1)
    with pytest.raises(TaggedGtidError):
        gtid(event[19:30])
