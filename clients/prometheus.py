"""The seam around prometheus-client: every long-running process exports its counters here.

Components keep plain counters (`ReaderMetrics`, the merger's stats, `ApplyMetrics`) and know
nothing of Prometheus; a process registers a `read` function per component (its counters'
readings) and calls `serve(port)`. At each scrape the readings become metric families:

- a number named ``*_total`` becomes a counter, any other number a gauge;
- a `LatencyHistogram` becomes a histogram (seconds);
- a mapping ``{label value: number}`` under a key becomes one series per label value, the label
  named by `labels` (e.g. ``watermark_ts`` by ``lane``, ``errors_total`` by ``kind``).

Every series carries the process's own labels (`static`, e.g. ``source="source1"``).
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

# Kafka and sink commits take milliseconds to seconds; the buckets span that.
BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

Readings = Mapping[str, "float | int | LatencyHistogram | Mapping[str, float | int]"]
"""A component's counters as read at one moment (what a scrape exports)."""


@dataclass
class LatencyHistogram:
    """Cumulative latency histogram (no Prometheus import: components keep one freely)."""

    bounds: tuple[float, ...] = BUCKETS_S
    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS_S) + 1))
    total_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def observe(self, seconds: float) -> None:
        with self._lock:
            self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
            self.total_s += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def quantile(self, q: float) -> float:
        """An upper bound of the `q` quantile (the bucket edge it falls in)."""
        n = self.count
        if n == 0:
            return 0.0
        seen = 0
        for i, c in enumerate(self.counts):
            seen += c
            if seen >= q * n:
                return self.bounds[i] if i < len(self.bounds) else float("inf")
        return float("inf")

    def buckets(self) -> list[tuple[str, int]]:
        out, seen = [], 0
        for bound, c in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            seen += c
            out.append((bound, seen))
        return out


@dataclass
class _Source:
    prefix: str
    read: Callable[[], Iterable[tuple[Mapping[str, str], Readings]]]
    """Each component's own labels and counters, read at a scrape."""
    labels: Mapping[str, str]


class Exporter:
    """The metrics of one process: register each component's `read`, then `serve`."""

    def __init__(self) -> None:
        self._sources: list[_Source] = []
        self._server: Any = None
        self._registry: Any = None

    def register(
        self,
        prefix: str,
        read: Callable[[], Readings],
        *,
        labels: Mapping[str, str] | None = None,
        static: Mapping[str, str] | None = None,
    ) -> None:
        """Export `read()` under ``rowbus_<prefix>_<key>``; `labels` names the label of a
        keyed mapping (key → label name), `static` labels every series."""
        fixed = dict(static or {})
        self._sources.append(_Source(prefix, lambda: [(fixed, read())], dict(labels or {})))

    def register_each(
        self,
        prefix: str,
        read: Callable[[], Mapping[str, Readings]],
        *,
        label: str,
        labels: Mapping[str, str] | None = None,
        static: Mapping[str, str] | None = None,
    ) -> None:
        """Like `register`, for components that come and go (a reader node's tasks):
        `read()` maps each one's name to its counters, and its series carry the name as
        `label` besides `static`, in the same families as one component's."""
        fixed = dict(static or {})

        def each() -> list[tuple[Mapping[str, str], Readings]]:
            return [({**fixed, label: name}, got) for name, got in read().items()]

        self._sources.append(_Source(prefix, each, dict(labels or {})))

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Start the HTTP endpoint (``/metrics``) in a daemon thread; the bound port."""
        from prometheus_client import CollectorRegistry, start_http_server

        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_Collector(self._sources))
        self._server, thread = start_http_server(port, addr=host, registry=self._registry)
        del thread
        return int(self._server.server_port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server = None

    def text(self) -> str:
        """The exposition text a scrape would get (for tests and `rowbus status`)."""
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self._sources))
        return str(generate_latest(registry).decode())


class _Collector:
    def __init__(self, sources: list[_Source]) -> None:
        self._sources = sources

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        families: dict[str, Any] = {}
        for src in self._sources:
            try:
                parts = list(src.read())
            except Exception as exc:  # noqa: BLE001 - a component mid-start must not break scrapes
                log.debug("metrics of %s unavailable: %s", src.prefix, exc)
                continue
            for static, readings in parts:
                names = list(static)
                values = list(static.values())
                for key, value in readings.items():
                    name = f"rowbus_{src.prefix}_{key}"
                    # One family per name: components of one kind (a node's tasks) share it.
                    fam = families.get(name)
                    if isinstance(value, LatencyHistogram):
                        if fam is None:
                            fam = HistogramMetricFamily(
                                name.removesuffix("_seconds") + "_seconds", key, labels=names
                            )
                        fam.add_metric(values, value.buckets(), value.total_s)
                    elif isinstance(value, Mapping):
                        label = src.labels.get(key, "key")
                        if fam is None:
                            fam = _family(
                                name, key, [*names, label], CounterMetricFamily, GaugeMetricFamily
                            )
                        for k, v in value.items():
                            fam.add_metric([*values, str(k)], float(v))
                    else:
                        if fam is None:
                            fam = _family(name, key, names, CounterMetricFamily, GaugeMetricFamily)
                        fam.add_metric(values, float(value))
                    families[name] = fam
        yield from families.values()


def _family(name: str, doc: str, labels: list[str], counter: Any, gauge: Any) -> Any:
    if name.endswith("_total"):
        return counter(name.removesuffix("_total"), doc, labels=labels)
    return gauge(name, doc, labels=labels)
