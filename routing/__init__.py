"""Routing: upstream schema/table patterns to target tables (shard merges), column filters.

One implementation for every consumer that writes somewhere else than the source's names: the
apply job's sink, `rowbus verify`, shard groups. Imports `rowbus.protocol`, `rowbus.clients`
(quoting, the settings base) and the error root in `rowbus.merge.exceptions`.

- `routes`: `RouteSettings` (the configuration), `Router` (table → `Target`, `Projection`);
- `exceptions`: `RoutingError`.

Depends on: `protocol`, `clients`, `merge`.
"""

from rowbus.routing.exceptions import RoutingError
from rowbus.routing.routes import Projection, Router, RouteSettings, Target

__all__ = ["Projection", "RouteSettings", "Router", "RoutingError", "Target"]
