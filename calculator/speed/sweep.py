"""Speed across concurrency: where throughput stops growing and latency takes off (the "two ceilings")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from ..engine.estimate import Estimate
from .calibration import SpeedConstants
from .predict import SpeedEstimate, speed_estimate
from .prices import GpuPrice
from .traffic import Traffic


class ConcurrencySweep(BaseModel):
    """Speed estimates of one deployment at increasing concurrency, and the two ceilings it meets."""

    model_config = ConfigDict(frozen=True)
    points: tuple[SpeedEstimate, ...]
    max_num_seqs: int
    kv_cache_concurrency: int  # requests of the workload's lengths whose KV fits together


def default_concurrencies(limit: int, points: int = 24) -> tuple[int, ...]:
    """1, 2, 4, ... up to twice ``limit`` (past a ceiling, so the chart shows what happens beyond it), plus it."""
    values, value = {1, limit, 2 * limit}, 1
    while value < 2 * limit and len(values) < points:
        values.add(value)
        value *= 2
    return tuple(sorted(values))


def concurrency_sweep(result: Estimate, traffic: Traffic, concurrencies: Sequence[int] | None = None, *,
                      prices: Mapping[str, GpuPrice] | None = None,
                      constants: SpeedConstants | None = None) -> ConcurrencySweep:
    """``traffic``'s lengths at each concurrency (closed loop); the default covers up to twice the engine limit."""
    first = speed_estimate(result, traffic.replace(concurrency=1, request_rate=None), prices=prices,
                           constants=constants)
    limits = first.concurrency
    chosen = concurrencies or default_concurrencies(min(limits.max_num_seqs, limits.kv_cache_limit))
    points = tuple(speed_estimate(result, traffic.replace(concurrency=c, request_rate=None), prices=prices,
                                  constants=constants) for c in chosen)
    return ConcurrencySweep(points=points, max_num_seqs=limits.max_num_seqs, kv_cache_concurrency=limits.kv_cache_limit)
