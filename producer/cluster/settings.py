"""Settings of the reader cluster (``reader.cluster`` in the rowbus configuration)."""

from __future__ import annotations

from pydantic import Field

from rowbus.clients.settings import StrictModel


class ClusterSettings(StrictModel):
    node_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    """This node's name in ZooKeeper (default: host-pid); `rowbus reader move/drain` use it."""
    session_timeout_s: float = Field(1.5, ge=1.0)
    """A node's ZooKeeper session: how long a node killed with -9 keeps its sources. It bounds
    the failover time (ZooKeeper expires a dead session after this plus up to one tick);
    ZooKeeper clamps it to [2, 20] ticks."""
    balance: bool = True
    """Move sources between nodes to balance their counts and measured loads."""
    load_window_s: float = Field(10.0, gt=0)
    """Each source's load (rows/s) is measured over this window before the balancer uses it."""
    load_min_gap: float = Field(200.0, ge=0)
    """Rows/s: nodes whose loads differ by less are not rebalanced by load."""
    resync_s: float = Field(1.0, gt=0)
    """Re-read the cluster state at least this often even when no watch fired."""
