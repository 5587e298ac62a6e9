"""Latency per replica across a fleet: p50 and p95 of vLLM's latency histograms over the time range, computed by
Prometheus itself (``histogram_quantile`` on the buckets' increase), one query per latency and quantile."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
import time
from concurrent.futures import ThreadPoolExecutor

from pydantic import BaseModel, ConfigDict

from .fleet import Replica, ReplicaKey, _replica_key
from .fleet_client import PrometheusClient, Sample, _within
from .promql import LATENCY_METRICS, Matcher, TimeRange, latency_quantile_query

QUANTILES = (0.5, 0.95)


class ReplicaLatency(BaseModel):
    """One replica's latency quantiles over the range, seconds by field (``ttft_s``...) and quantile."""

    model_config = ConfigDict(frozen=True)
    quantiles: dict[str, dict[float, float]]

    def get(self, field: str, quantile: float) -> float | None:
        return self.quantiles.get(field, {}).get(quantile)


def latency_by_replica(results: dict[tuple[str, float], Sequence[Sample]]) -> dict[ReplicaKey, ReplicaLatency]:
    """Each query's samples sorted by replica. A sample carrying a metric name is not a histogram_quantile
    result (a misbehaving endpoint): ignored."""
    found: dict[ReplicaKey, dict[str, dict[float, float]]] = {}
    for (field, quantile), samples in results.items():
        for sample in samples:
            if "__name__" in sample.labels:
                continue
            found.setdefault(_replica_key(sample.labels), {}).setdefault(field, {})[quantile] = sample.value
    return {key: ReplicaLatency(quantiles=values) for key, values in found.items()}


def read_latency(client: PrometheusClient, window: TimeRange, matchers: Iterable[Matcher] = (), *,
                 deadline: float | None = None) -> dict[ReplicaKey, ReplicaLatency]:
    """Every latency's p50 and p95 per replica over ``window``, asked at its end, by ``deadline`` (as
    ``read_fleet``'s: pass the same one so the page waits at most one ``deadline_s`` for both)."""
    matchers = tuple(matchers)
    asked = [(field, q) for field in LATENCY_METRICS for q in QUANTILES]
    deadline = deadline if deadline is not None else time.monotonic() + client.deadline_s

    def ask(field: str, quantile: float) -> tuple[Sample, ...]:
        return client.query(latency_quantile_query(field, quantile, window.duration_s, matchers), window.end_s)

    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="fleet-latency") as pool:
        futures = {key: pool.submit(_within, deadline, lambda key=key: ask(*key)) for key in asked}
        results = {key: future.result() for key, future in futures.items()}
    return latency_by_replica(results)


def latency_of(latencies: dict[ReplicaKey, ReplicaLatency], replica: Replica) -> ReplicaLatency | None:
    return latencies.get(_replica_key(replica.labels))
