"""How far a speed estimate may be off: the held-out residuals of the measured runs, by load regime, widened where
the deployment lies outside what those runs cover.

The factors and the coverage live in ``calibration.py`` (``benchmarks/speed_accuracy.py`` measures them): a band
holds 80 % of the values measured on runs whose whole source was left out of the fit, in the same regime.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ..engine.estimate import Estimate
from .calibration import COVERAGE, DOMAIN_WIDENING, REGIME_BAND_FACTOR, Coverage
from .predict import MS, Band, SpeedEstimate

Regime = Literal["one request", "below the knee", "saturated"]
REGIMES: tuple[Regime, ...] = ("one request", "below the knee", "saturated")
EngineGeneration = Literal["V0", "V1", "V1 async"]
# NOTE: under a Poisson rate the queue wait takes over TTFT well before utilisation reaches 1.
SATURATION_UTILISATION = 0.8


class SpeedBands(BaseModel):
    """Low and high values of the figures users plan on, the regime they were drawn from, and why they are wide."""

    model_config = ConfigDict(frozen=True)
    regime: Regime
    outside: tuple[str, ...]  # one sentence per way the deployment lies outside the measured runs
    ttft_ms: Band
    ttft_p95_ms: Band
    tpot_ms: Band
    output_throughput_tok_s: Band

    @property
    def widened(self) -> bool:
        return bool(self.outside)

    @property
    def per_user_tok_s(self) -> Band:
        """Tokens/s per user from the ITL band (a slower token is fewer tokens per second)."""
        return Band(low=MS / self.tpot_ms.high, high=MS / self.tpot_ms.low)


def band_factor(log_errors: Sequence[float], share: float = 0.8) -> float:
    """The smallest factor f such that ``share`` of the errors (log(predicted / measured)) lie within x/÷ f."""
    ordered = sorted(abs(e) for e in log_errors)
    if not ordered:
        raise ValueError("a band needs at least one error")
    return math.exp(ordered[max(0, math.ceil(share * len(ordered) - 1e-9) - 1)])


def regime_of(speed: SpeedEstimate) -> Regime:
    """One request in the engine, a batch below the knee, or saturated: requests queue for a slot (more users than
    the engine runs at once, or a rate near its capacity) or the decode batch is past the batch where compute
    overtakes memory traffic."""
    queued = speed.saturated or speed.queue_wait_ms > 0 or (
        speed.traffic.request_rate is not None and speed.utilisation >= SATURATION_UTILISATION)
    if queued:
        return "saturated"
    if speed.running_requests <= 1:
        return "one request"
    knee = speed.compute_bound_from_batch
    return "saturated" if knee is not None and speed.running_requests >= knee else "below the knee"


def engine_generation(result: Estimate) -> EngineGeneration:
    """The engine that serves the deployment: V0, V1 scheduling synchronously, or V1 with async scheduling."""
    if result.settings.engine == "v0":
        return "V0"
    return "V1 async" if result.settings.async_scheduling else "V1"


def outside_domain(result: Estimate, speed: SpeedEstimate, coverage: Coverage = COVERAGE) -> tuple[str, ...]:
    """Each way ``result`` under ``speed``'s load lies outside the measured runs behind the bands, in words."""
    out = []
    family = result.gpu.family if result.gpu else None
    if family not in coverage.gpu_families:
        shown = f"the {family} generation" if family else "a custom GPU"
        out.append(f"No measured run on {shown}: the band is widened.")
    engine = engine_generation(result)
    if engine not in coverage.engines:
        out.append(f"No measured run on the {engine} engine: the band is widened.")
    kind = "MoE" if result.model.moe else "dense"
    if kind not in coverage.model_kinds:
        out.append(f"No measured run of a {kind} model: the band is widened.")
    if speed.running_requests > coverage.max_running_requests:
        out.append(f"{speed.running_requests:,.0f} requests in the engine at once is beyond the measured runs "
                   f"(up to {coverage.max_running_requests:,}): the band is widened.")
    return tuple(out)


def bench_regime(max_concurrency: int | None, mean_queue_ms: float) -> Regime:
    """The regime of a simulated ``vllm bench serve`` run: one client at a time, requests that waited in the
    engine's queue (a burst or a rate the engine cannot take in at once), or a batch below the knee."""
    if max_concurrency == 1:
        return "one request"
    return "saturated" if mean_queue_ms > 0 else "below the knee"


def ttft_band(value_ms: float, regime: Regime, widened: bool) -> Band:
    """The TTFT band of ``regime`` around ``value_ms``, widened as ``speed_bands`` widens it."""
    factor = REGIME_BAND_FACTOR[regime]["ttft"] ** (DOMAIN_WIDENING if widened else 1.0)
    return Band(low=value_ms / factor, high=value_ms * factor)


def speed_bands(result: Estimate, speed: SpeedEstimate) -> SpeedBands:
    """The bands of ``speed`` (an estimate of ``result``'s deployment): its regime's measured spread, its log-width
    multiplied by ``DOMAIN_WIDENING`` when the deployment lies outside the measured runs."""
    regime = regime_of(speed)
    outside = outside_domain(result, speed)
    factors = REGIME_BAND_FACTOR[regime]
    widen = DOMAIN_WIDENING if outside else 1.0

    def band(value: float, metric: str) -> Band:
        factor = factors[metric] ** widen
        return Band(low=value / factor, high=value * factor)

    return SpeedBands(regime=regime, outside=outside, ttft_ms=band(speed.ttft_ms, "ttft"),
                      ttft_p95_ms=band(speed.ttft_p95_ms, "ttft"), tpot_ms=band(speed.tpot_ms, "tpot"),
                      output_throughput_tok_s=band(speed.output_throughput_tok_s, "throughput"))


__all__ = ["REGIMES", "Regime", "SpeedBands", "band_factor", "bench_regime", "engine_generation", "outside_domain",
           "regime_of", "speed_bands", "ttft_band"]
