from __future__ import annotations

import pytest

from rowbus.consumers.exceptions import RoutingError
from rowbus.routing.routes import Router, RouteSettings, Target
from tests.unit.spark_apply.events import table


def test_identity_when_nothing_matches() -> None:
    r = Router([])
    p = r.projection(table("shop", "orders"))
    assert p is not None
    assert p.target == Target("shop", "orders")
    assert p.columns == ("id", "v")


def test_shards_merge_into_one_target_with_column_filters() -> None:
    route = RouteSettings(
        match="shop_*.orders_*", target="all.orders", exclude=("secret",), rename={"v": "value"}
    )
    r = Router([route], unrouted="skip")
    p = r.projection(table("shop_1", "orders_7", ("id", "v", "secret")))
    assert p is not None
    assert p.target == Target("all", "orders")
    assert p.columns == ("id", "value")
    assert p.values((1, "a", "pw")) == (1, "a")
    assert p.key((1, "a", "pw")) == (1,)
    assert r.projection(table("other", "t")) is None


def test_template_targets() -> None:
    r = Router([RouteSettings(match="src.*", target="dst_{schema}.{table}_copy")])
    assert r.target("src", "t") == Target("dst_src", "t_copy")


def test_bad_routing_is_an_error() -> None:
    with pytest.raises(RoutingError, match="key columns"):
        Router([RouteSettings(match="*.*", exclude=("id",))]).projection(table())
    with pytest.raises(RoutingError, match="does not have"):
        Router([RouteSettings(match="*.*", include=("nope",))]).projection(table())
    with pytest.raises(RoutingError, match="no route"):
        Router([], unrouted="error").projection(table())
