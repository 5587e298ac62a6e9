"""Capacity planning: how many replicas a target load needs to meet its SLOs, and what that costs."""

from __future__ import annotations

import math
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, computed_field

from ..engine.estimate import Estimate
from .calibration import SpeedConstants
from .predict import SpeedEstimate, speed_estimate
from .prices import HOURS_PER_MONTH, GpuPrice
from .traffic import Traffic

MAX_REPLICAS = 100_000


class Slo(BaseModel):
    """Service-level objectives; ``None`` means no limit. ``min_tok_s_per_user`` is another way to bound TPOT."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    ttft_p95_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    min_tok_s_per_user: float | None = Field(None, gt=0)
    e2e_s: float | None = Field(None, gt=0)

    @property
    def tpot_limit_ms(self) -> float | None:
        limits = [x for x in (self.tpot_ms, 1e3 / self.min_tok_s_per_user if self.min_tok_s_per_user else None) if x]
        return min(limits) if limits else None


def _seconds(ms: float) -> str:
    return f"{ms / 1e3:.2g} s" if ms >= 1000 else f"{ms:.3g} ms"


def slo_violations(speed: SpeedEstimate, slo: Slo) -> tuple[str, ...]:
    """Each SLO the estimate misses, in words: "TTFT p95 3.1 s > 2 s", "ITL 62 ms > 50 ms"."""
    out = []
    if speed.saturated:
        out.append(f"saturated: {speed.traffic.request_rate:g} req/s is above what one replica serves")
    if slo.ttft_p95_ms is not None and speed.ttft_p95_ms > slo.ttft_p95_ms:
        out.append(f"TTFT p95 {_seconds(speed.ttft_p95_ms)} > {_seconds(slo.ttft_p95_ms)}")
    limit = slo.tpot_limit_ms
    if limit is not None and speed.tpot_ms > limit:
        out.append(f"ITL {_seconds(speed.tpot_ms)} > {_seconds(limit)}")
    if slo.e2e_s is not None and speed.e2e_ms > slo.e2e_s * 1e3:
        out.append(f"end-to-end {_seconds(speed.e2e_ms)} > {_seconds(slo.e2e_s * 1e3)}")
    return tuple(out)


class CapacityPlan(BaseModel):
    """Replicas of one deployment for the whole load, each serving an equal share of it."""

    model_config = ConfigDict(frozen=True)
    replicas: int
    gpus_per_replica: int
    per_replica: SpeedEstimate  # at the planned replica count
    meets_slo: bool
    violations: tuple[str, ...]  # at the planned count (the fewest SLO misses reachable)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cost_per_hour(self) -> float | None:
        price = self.per_replica.gpu_price
        return price.usd_per_gpu_hour * self.gpus if price else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cost_per_month(self) -> float | None:
        return self.cost_per_hour * HOURS_PER_MONTH if self.cost_per_hour is not None else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def output_throughput_tok_s(self) -> float:
        return self.per_replica.output_throughput_tok_s * self.replicas

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cost_per_million_output_tokens(self) -> float | None:
        """Dollars per million generated tokens at the planned load (idle capacity is paid for too)."""
        if self.cost_per_hour is None or self.output_throughput_tok_s <= 0:
            return None
        return self.cost_per_hour / (self.output_throughput_tok_s * 3600) * 1e6


def share(traffic: Traffic, replicas: int) -> Traffic:
    """One replica's share of the load (users rounded up, so no replica is under-planned)."""
    if traffic.concurrency is not None:
        return traffic.replace(concurrency=math.ceil(traffic.concurrency / replicas))
    return traffic.replace(request_rate=traffic.request_rate / replicas)


def capacity_plan(result: Estimate, traffic: Traffic, slo: Slo | None = None, *,
                  prices: Mapping[str, GpuPrice] | None = None, max_replicas: int = MAX_REPLICAS,
                  constants: SpeedConstants | None = None) -> CapacityPlan:
    """The fewest replicas of ``result`` whose share of ``traffic`` meets ``slo``.

    Latency falls as replicas are added (each serves fewer users), down to a floor at one user or a trickle of
    requests per replica; when even the floor misses an SLO, the plan says so with that floor's violations.
    """
    slo = slo or Slo()

    def at(replicas: int) -> CapacityPlan:
        return plan_at(result, replicas, traffic, slo, prices=prices, constants=constants)

    ceiling = max(1, min(max_replicas, traffic.concurrency or MAX_REPLICAS))
    plan = at(1)
    if plan.meets_slo:
        return plan
    low, high = 1, 2
    while True:  # gallop up to a count that meets the SLOs, or to the ceiling
        high = min(high, ceiling)
        plan = at(high)
        if plan.meets_slo or high == ceiling:
            break
        low, high = high, high * 2
    if not plan.meets_slo:
        return plan
    while high - low > 1:
        middle = (low + high) // 2
        candidate = at(middle)
        if candidate.meets_slo:
            high, plan = middle, candidate
        else:
            low = middle
    return plan


def plan_at(result: Estimate, replicas: int, traffic: Traffic, slo: Slo, *,
            prices: Mapping[str, GpuPrice] | None = None, constants: SpeedConstants | None = None) -> CapacityPlan:
    """``replicas`` of ``result`` sharing ``traffic``, checked against ``slo``."""
    speed = speed_estimate(result, share(traffic, replicas), prices=prices, constants=constants)
    missed = slo_violations(speed, slo)
    return CapacityPlan(replicas=replicas, gpus_per_replica=result.num_gpus, per_replica=speed,
                        meets_slo=not missed, violations=missed)
