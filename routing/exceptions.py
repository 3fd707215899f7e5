"""Errors of routing (a `SubscriberError`, see `rowbus.merge.exceptions`)."""

from __future__ import annotations

from rowbus.merge.exceptions import SubscriberError

__all__ = ["RoutingError"]


class RoutingError(SubscriberError):
    """A routing rule that cannot be applied to a table (no match under ``unrouted: error``, a
    key column filtered out, a rename onto an existing name); the caller adds the position."""
