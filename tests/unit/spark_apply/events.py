"""The apply job's tests build events with the public builders of `rowbus.testing.events`."""

from rowbus.testing.events import ddl, resolved, row, table

__all__ = ["ddl", "resolved", "row", "table"]
