"""Prometheus figures for ``/metrics``, through ``prometheus_client``.

With several worker processes each process counts its own runs; ``contextstore serve`` sets
``PROMETHEUS_MULTIPROC_DIR`` (a fresh directory) before the workers start, and ``/metrics``
then sums every worker's files, so any worker answers with the whole server's totals.
Without that variable (one process, or the app mounted elsewhere) the figures live in a
registry of this app's own.

Series (``namespace`` is the key's namespace; a scrape needs an admin key, and shows an admin
key only the series of its own namespace, an owner key every namespace's):
``contextstore_runs_total``, ``contextstore_cache_hits_total``,
``contextstore_cache_misses_total``, ``contextstore_run_seconds`` (histogram, wall time of the
engine's run as the service saw it), ``contextstore_redis_faults_total`` (failed Redis
operations, from the stores' fault policies).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from contextstore.interfaces.web.settings import ENV_MULTIPROC

RUN_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CONTENT_TYPE: Final = CONTENT_TYPE_LATEST


@dataclass(frozen=True, slots=True)
class _RunSeries:
    """One namespace's run series (looking a label up costs more than counting)."""

    runs: Counter
    cache_hits: Counter
    cache_misses: Counter
    run_seconds: Histogram


class Telemetry:
    """The service's counters and histogram, and their exposition."""

    def __init__(self) -> None:
        self.multiprocess = bool(os.environ.get(ENV_MULTIPROC))
        # In multiprocess mode values go to files and the collector reads them all back; a
        # registry here would only make a second app in the same process collide.
        own = None if self.multiprocess else CollectorRegistry()
        self._registry = own
        self.runs = Counter("contextstore_runs", "Engine runs served", ["namespace"], registry=own)
        self.cache_hits = Counter(
            "contextstore_cache_hits",
            "Runs answered from the context cache",
            ["namespace"],
            registry=own,
        )
        self.cache_misses = Counter(
            "contextstore_cache_misses",
            "Runs that composed a new context",
            ["namespace"],
            registry=own,
        )
        self.run_seconds = Histogram(
            "contextstore_run_seconds",
            "Wall time of one engine run, seconds",
            ["namespace"],
            buckets=RUN_BUCKETS,
            registry=own,
        )
        self.redis_faults = Counter(
            "contextstore_redis_faults",
            "Redis operations that failed and fell back (cache miss, local windows)",
            ["namespace"],
            registry=own,
        )
        self._run_series: dict[str, _RunSeries] = {}

    def observe_run(self, namespace: str, seconds: float, cache_hit: bool) -> None:
        series = self._run_series.get(namespace)
        if series is None:
            series = _RunSeries(
                self.runs.labels(namespace),
                self.cache_hits.labels(namespace),
                self.cache_misses.labels(namespace),
                self.run_seconds.labels(namespace),
            )
            self._run_series[namespace] = series
        series.runs.inc()
        (series.cache_hits if cache_hit else series.cache_misses).inc()
        series.run_seconds.observe(seconds)

    def add_redis_faults(self, namespace: str, count: int) -> None:
        if count > 0:
            self.redis_faults.labels(namespace).inc(count)

    def exposition(self, namespace: str | None = None) -> bytes:
        """The text exposition: every series, or with ``namespace`` only the series
        labelled with it (the families stay, so a scraper sees the same names)."""
        registry = self._registry
        if registry is None:
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        if namespace is None:
            return generate_latest(registry)
        shown = CollectorRegistry(auto_describe=False)
        shown.register(_OneNamespace(registry, namespace))
        return generate_latest(shown)


class _OneNamespace(Collector):
    """The families of ``source`` with only the samples labelled ``namespace``."""

    def __init__(self, source: CollectorRegistry, namespace: str) -> None:
        self._source = source
        self._namespace = namespace

    def collect(self) -> Iterator[Metric]:
        for family in self._source.collect():
            kept = Metric(family.name, family.documentation, family.type, family.unit)
            kept.samples = [
                sample
                for sample in family.samples
                if sample.labels.get("namespace") == self._namespace
            ]
            yield kept
