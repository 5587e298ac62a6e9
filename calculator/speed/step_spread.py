"""How a real server's step times scatter around the cost a step model gives them: the tail of stalls.

A fitted step cost (``LinearStepCost``) makes every step of a given batch take the same time, so a simulated run's
p99 has no stalls in it, while a real server's steps now and then wait for a core, the allocator or the Python
collector. vLLM has no step-time histogram, but its ``vllm:inter_token_latency_seconds`` observes, for every
request that gets a token in a step, the time since that request's previous token (``IterationStats``, 0.32), which
for a decoding request is the step it ran in. With ``--custom-histogram-buckets`` (0.32,
vllm/config/observability.py) that histogram can be made fine enough to hold the shape of the step times.

Part of that shape is the schedule's own (a step that also runs a prompt chunk costs more than a decode-only one),
which a simulation already has; the rest is the spread to add. ``StepSpread.from_quantiles`` takes it as the ratio
of the measured to the simulated inter-token latency quantile by quantile (strata of equal probability), scaled to
a mean of 1 so the spread keeps the fitted mean step cost, and the simulation draws one factor for each step.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator

from calculator.observe.metrics import Histogram

SPREAD_STRATA = 100  # equally likely factors: the quantiles at 0.5 %, 1.5 %, ... 99.5 %


class StepSpread(BaseModel):
    """Equally likely factors of mean 1, one drawn (seeded) for each simulated step and multiplied into its cost."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    factors: tuple[float, ...] = Field(min_length=1)
    seed: int = 0

    @field_validator("factors")
    @classmethod
    def _mean_one(cls, factors: tuple[float, ...]) -> tuple[float, ...]:
        if min(factors) < 0:
            raise ValueError("step time factors cannot be negative")
        if not math.isclose(sum(factors) / len(factors), 1.0, rel_tol=1e-9):
            raise ValueError("step time factors must average 1 (the fitted cost is the mean step)")
        return factors

    def draws(self) -> Iterator[float]:
        """The factor of each step in turn: the factors in a seeded shuffle, then shuffled again, so any stretch of
        steps as long as the list draws each factor once (stratified: a short run still sees the tail)."""
        rng = random.Random(self.seed)
        deck = list(self.factors)
        while True:
            rng.shuffle(deck)
            yield from deck

    @classmethod
    def from_quantiles(cls, measured: Callable[[float], float], simulated: Callable[[float], float], *,
                       strata: int = SPREAD_STRATA, seed: int = 0) -> StepSpread:
        """The spread beyond the simulated one: at each stratum's middle quantile q, measured(q) / simulated(q),
        scaled to a mean of 1. ``measured`` and ``simulated`` give the inter-token latency at q (0-1)."""
        ratios = []
        for i in range(strata):
            q = (i + 0.5) / strata
            below = simulated(q)
            ratios.append(measured(q) / below if below > 0 else 1.0)
        mean = sum(ratios) / len(ratios)
        return cls(factors=tuple(r / mean for r in ratios), seed=seed)


def bucket_quantile(buckets: Sequence[tuple[float, float]], q: float) -> float:
    """PromQL's ``histogram_quantile`` of cumulative ``(le, count)`` buckets (+Inf last), as the Live page reads it
    (``Histogram.quantile``): linear inside the bucket that holds the q-th value, from 0 below the first bound; the
    last finite bound when it falls in +Inf."""
    quantile = Histogram(buckets=tuple(buckets), sum=0.0, count=buckets[-1][1]).quantile(q)
    return 0.0 if quantile is None else quantile
