"""rowbus subscribers: the watermark merger, transaction restore, checkpoint stores and the
`Subscriber` API (``from rowbus.consumers import Subscriber``)."""

from rowbus.consumers.merger import Merger
from rowbus.consumers.subscriber import Subscriber

__all__ = ["Merger", "Subscriber"]
