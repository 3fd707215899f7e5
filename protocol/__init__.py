"""The rowbus open protocol: event model, values, codecs, partitioner and topics.

This package imports no I/O library; see PROTOCOL.md for the specification.
"""

from protocol.errors import ProtocolError, RowbusError

__all__ = ["ProtocolError", "RowbusError"]
