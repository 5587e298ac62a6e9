"""A histogram quantile that respects the histogram's own sum (pure).

PromQL's ``histogram_quantile`` interpolates linearly inside the bucket that holds the q-th value, whatever the
values really were: 16 outputs of exactly 200 tokens in the bucket (100, 200] read "p50 150, p95 195", and queue
times that sum to nearly nothing in the first bucket (0, 300 ms] read "p50 150 ms". The sum and the count bound
the quantile too: if x is the q-quantile, the values at or below it are at least their buckets' lower bounds and
the rest at least x, so the sum is at least that; likewise at most. Those two bounds, intersected with the bucket,
are what the histogram can vouch for; the interpolated value is clamped into them.

    >>> q = bounded_quantile(((100.0, 0.0), (200.0, 16.0), (math.inf, 16.0)), total=3200.0, count=16.0, q=0.95)
    >>> (q.value, q.exact)
    (200.0, True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

_EXACT = 1e-9  # relative width under which the bounds pin one value


class Quantile(BaseModel):
    """The q-th value as far as a histogram can say: the interpolated value, clamped into ``[low, high]``."""

    model_config = ConfigDict(frozen=True)
    value: float
    low: float
    high: float  # inf: the value lies in the +Inf bucket and the sum does not bound it
    first_bucket: bool  # below the first bucket's bound: the buckets cannot resolve it further

    @property
    def exact(self) -> bool:
        """Whether buckets, count and sum together leave only one value (every observation the same, say)."""
        return self.high - self.low <= _EXACT * max(1.0, abs(self.high))


def bounded_quantile(buckets: Sequence[tuple[float, float]], total: float, count: float,
                     q: float) -> Quantile | None:
    """The q-quantile of a cumulative histogram ``(le, count)`` (ascending, +Inf last) with ``total`` its sum;
    None when it counted nothing."""
    if not count or not buckets:
        return None
    spans, lower, below = [], 0.0, 0.0
    for upper, cumulative in buckets:
        spans.append((lower, upper, max(0.0, cumulative - below)))
        lower, below = upper, max(below, cumulative)
    rank, index, below = q * count, len(spans) - 1, 0.0
    for i, (_, _, n) in enumerate(spans):
        if below + n >= rank:
            index = i
            break
        below += n
    low_b, high_b, inside = spans[index]
    at_or_below = min(inside, max(0.0, rank - below))  # the bucket's values up to the quantile
    above = inside - at_or_below
    interpolated = low_b if math.isinf(high_b) else (
        low_b + (high_b - low_b) * (at_or_below / inside if inside else 1.0))
    others = [span for i, span in enumerate(spans) if i != index]
    least_rest = sum(n * lo for lo, _, n in others)
    most_rest = sum(n * hi for _, hi, n in others if n)
    low, high = low_b, high_b
    if above > 0:  # the sum is at least least_rest + at_or_below x low_b + above x value
        high = min(high, (total - least_rest - at_or_below * low_b) / above)
    if at_or_below > 0 and math.isfinite(most_rest) and math.isfinite(high_b):  # and at most the like
        low = max(low, (total - most_rest - above * high_b) / at_or_below)
    if low > high:  # a sum the buckets cannot hold (rounding, a broken exporter): the bucket alone
        low, high = low_b, high_b
    value = min(max(interpolated, low), high)
    return Quantile(value=value, low=low, high=high, first_bucket=index == 0 and low_b == 0.0)
