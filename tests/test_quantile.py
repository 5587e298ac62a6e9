"""Quantiles a histogram can vouch for: PromQL's interpolation kept within what the buckets, count and sum allow.
Every expected value is worked out by hand from the hand-made histogram beside it."""

from __future__ import annotations

import math

import pytest

from calculator.observe.metrics import Histogram
from calculator.observe.quantile import bounded_quantile

INF = math.inf


def test_sixteen_outputs_of_exactly_200_tokens_read_200_not_the_interpolated_150_and_195() -> None:
    # vLLM's length buckets ... 100, 200, 500: all 16 in (100, 200] with sum 3,200, a mean of 200 = the bound
    outputs = Histogram(buckets=((100.0, 0.0), (200.0, 16.0), (500.0, 16.0), (INF, 16.0)), sum=3200.0, count=16.0)
    assert (outputs.quantile(0.5), outputs.quantile(0.95)) == (150.0, 195.0)  # PromQL's artefact
    p50, p95 = outputs.bounded_quantile(0.5), outputs.bounded_quantile(0.95)
    assert (p50.value, p95.value) == (200.0, 200.0) and p50.exact and p95.exact


def test_a_queue_that_sums_to_nearly_nothing_is_below_the_first_bucket_and_at_most_what_its_sum_allows() -> None:
    # The reading: 9 queue times in (0, 300 ms] summing to 0.145888 ms. PromQL says p50 150 ms, p95 285
    # ms. Half of them at or above p50 sum to at most 0.145888 ms, so p50 <= 0.145888 / 4.5 = 0.0324196 ms; the
    # top 5 % (0.45 of a request) at or above p95: p95 <= 0.145888 / 0.45 = 0.324196 ms.
    queue = Histogram(buckets=((0.3, 9.0), (0.5, 9.0), (INF, 9.0)), sum=0.000145888, count=9.0)
    assert (queue.quantile(0.5), queue.quantile(0.95)) == (pytest.approx(0.15), pytest.approx(0.285))
    p50, p95 = queue.bounded_quantile(0.5), queue.bounded_quantile(0.95)
    assert p50.first_bucket and not p50.exact and (p50.low, p50.high) == (0.0, pytest.approx(0.000145888 / 4.5))
    assert p50.value == pytest.approx(0.000145888 / 4.5) and p95.high == pytest.approx(0.000145888 / 0.45)


def test_a_quantile_never_contradicts_the_mean_across_buckets() -> None:
    # 10 values: 5 in (0, 1], 5 in (1, 10], sum 10 (mean 1). PromQL: p95 rank 9.5 -> 1 + 9 x 4.5/5 = 9.1. The five
    # at most 1 sum to at least 0; 4.5 of the upper bucket's mass sits at >= 1; the 0.5 at or above p95 >= p95:
    # 10 >= 4.5 x 1 + 0.5 x p95 -> p95 <= 11, so 9.1 stands. With sum 6 instead: p95 <= (6 - 4.5) / 0.5 = 3.
    assert bounded_quantile(((1.0, 5.0), (10.0, 10.0), (INF, 10.0)), 10.0, 10.0, 0.95).value == pytest.approx(9.1)
    tight = bounded_quantile(((1.0, 5.0), (10.0, 10.0), (INF, 10.0)), 6.0, 10.0, 0.95)
    assert (tight.value, tight.low, tight.high) == (pytest.approx(3.0), 1.0, pytest.approx(3.0))
    # Sum 95 cannot be held (5 x 1 + 5 x 10 = 55 at most): a broken exporter's sum is ignored, the bucket stands
    broken = bounded_quantile(((1.0, 5.0), (10.0, 10.0), (INF, 10.0)), 95.0, 10.0, 0.5)
    assert (broken.low, broken.high) == (0.0, 1.0)


def test_the_sum_lifts_a_quantile_to_the_upper_bound_it_must_reach() -> None:
    # 4 values in (1, 2], sum 7.6 (mean 1.9). p50 = x: the 2 at or below x are at most x, the 2 above at most 2:
    # 7.6 <= 2x + 2 x 2 -> x >= 1.8. PromQL's 1.5 contradicts the mean; 1.8 is the least the sum allows.
    p50 = bounded_quantile(((1.0, 0.0), (2.0, 4.0), (INF, 4.0)), 7.6, 4.0, 0.5)
    assert (p50.value, p50.low, p50.high) == (pytest.approx(1.8), pytest.approx(1.8), 2.0)


def test_the_inf_bucket_is_bounded_by_the_sum() -> None:
    # 4 values above 2 summing to 40: p50 = x with 2 values >= x: 40 >= 2 x 2 + 2x -> x <= 18; at least 2.
    p50 = bounded_quantile(((1.0, 0.0), (2.0, 0.0), (INF, 4.0)), 40.0, 4.0, 0.5)
    assert (p50.value, p50.low, p50.high) == (2.0, 2.0, 18.0)
    assert bounded_quantile(((1.0, 0.0), (INF, 0.0)), 0.0, 0.0, 0.5) is None


def test_a_prefill_p50_never_reads_above_the_ttft_that_contains_it() -> None:
    # The reading: TTFT p50 19 ms beside a prefill p50 of 150 ms. 16 requests whose TTFT was 19 ms each
    # spent at most that in prefill: all 16 in vLLM's first prefill bucket (0, 300 ms], summing to 304 ms at most.
    # PromQL interpolates 150 ms; the 8 at or above p50 sum to at most 304 ms, so p50 <= 304 / 8 = 38 ms, an upper
    # bound shown as "below the first bucket", which a 19 ms TTFT does not contradict.
    prefill = Histogram(buckets=((0.3, 16.0), (0.5, 16.0), (INF, 16.0)), sum=0.304, count=16.0)
    assert prefill.quantile(0.5) == pytest.approx(0.15)
    p50 = prefill.bounded_quantile(0.5)
    assert p50.first_bucket and (p50.low, p50.high) == (0.0, pytest.approx(0.038))
