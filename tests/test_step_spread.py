"""The step-time spread (calculator/speed/step_spread.py) and the simulation that draws from it
(calculator/speed/bench.py). Every expected number is worked by hand: from the buckets' counts for the spread, and
from the schedule of a one-at-a-time run with a constant step cost for the simulated figures."""

from __future__ import annotations

from itertools import islice

import pytest

from calculator.speed.bench import BenchLoad, EngineLimits, StepBatch, fit_step_spread, simulate, simulate_spread
from calculator.speed.step_spread import StepSpread, bucket_quantile

BIG = EngineLimits(max_num_seqs=256, max_num_batched_tokens=1000, kv_cache_tokens=1_000_000)
INF = float("inf")


def ten_ms(batch: StepBatch) -> float:
    return 0.010


def test_bucket_quantile_interpolates_inside_the_bucket_like_promql() -> None:
    # 5 gaps under 10 ms and 5 in (10, 30] ms: the 25th % is rank 2.5 of 5 in [0, 10] -> 5 ms; the 75th % is rank
    # 2.5 of 5 in (10, 30] -> 20 ms; a quantile that falls in +Inf is the last finite bound.
    buckets = ((0.01, 5.0), (0.03, 10.0), (INF, 10.0))
    assert bucket_quantile(buckets, 0.25) == pytest.approx(0.005)
    assert bucket_quantile(buckets, 0.75) == pytest.approx(0.020)
    assert bucket_quantile(((0.01, 5.0), (INF, 10.0)), 0.9) == pytest.approx(0.01)


def test_the_spread_is_the_measured_over_the_simulated_quantile_scaled_to_mean_one() -> None:
    # Two strata (q = 25 %, 75 %) of the histogram above: 5 and 20 ms against a simulated 20 ms everywhere, ratios
    # 0.25 and 1.0, mean 0.625 -> factors 0.4 and 1.6.
    buckets = ((0.01, 5.0), (0.03, 10.0), (INF, 10.0))
    spread = StepSpread.from_quantiles(lambda q: bucket_quantile(buckets, q), lambda q: 0.020, strata=2)
    assert spread.factors == pytest.approx((0.4, 1.6))


def test_a_spread_that_moves_the_mean_is_refused() -> None:
    with pytest.raises(ValueError, match="average 1"):
        StepSpread(factors=(0.5, 1.0))


def test_each_pass_over_the_factors_draws_every_factor_once() -> None:
    spread = StepSpread(factors=(0.5, 1.0, 1.5), seed=7)
    draws = list(islice(spread.draws(), 9))
    for start in (0, 3, 6):
        assert sorted(draws[start:start + 3]) == [0.5, 1.0, 1.5]
    assert draws == list(islice(StepSpread(factors=(0.5, 1.0, 1.5), seed=7).draws(), 9))  # seeded: reproducible


def test_each_step_takes_its_cost_times_the_next_factor() -> None:
    # One client, 3 requests of a 10-token prompt and 3 output tokens, 10 ms a step: request k runs steps 3k, 3k+1,
    # 3k+2 (its prompt, then two decodes), so its TTFT is 10 f(3k), its TPOT 10 (f(3k+1) + f(3k+2)) / 2 and its
    # end-to-end latency the sum of its three steps: 30 ms for every request, each taking one pass over the factors.
    spread = StepSpread(factors=(0.5, 1.0, 1.5), seed=3)
    f = list(islice(spread.draws(), 9))
    load = BenchLoad(input_tokens=(10,) * 3, output_tokens=(3,) * 3, max_concurrency=1)
    run = simulate(load, BIG, ten_ms, spread)
    ttft = sorted(10 * f[3 * k] for k in range(3))
    tpot = sorted(10 * (f[3 * k + 1] + f[3 * k + 2]) / 2 for k in range(3))
    assert run.mean_e2el_ms == pytest.approx(30.0) and run.p99_e2el_ms == pytest.approx(30.0)
    assert run.duration_s == pytest.approx(0.090)
    assert run.median_ttft_ms == pytest.approx(ttft[1])
    assert run.p99_ttft_ms == pytest.approx(ttft[1] + 0.98 * (ttft[2] - ttft[1]))  # numpy's linear percentile
    assert run.median_tpot_ms == pytest.approx(tpot[1])
    assert run.mean_itl_ms == pytest.approx(10 * sum(f[3 * k + 1] + f[3 * k + 2] for k in range(3)) / 6)


def test_without_a_spread_every_step_of_a_batch_costs_the_same() -> None:
    load = BenchLoad(input_tokens=(10,) * 3, output_tokens=(3,) * 3, max_concurrency=1)
    run = simulate(load, BIG, ten_ms)
    assert (run.median_ttft_ms, run.p99_ttft_ms, run.p99_tpot_ms) == pytest.approx((10.0, 10.0, 10.0))


def test_the_expected_run_averages_each_figure_over_the_seeds() -> None:
    # Two runs, seeds 3 and 4: the figures are the mean of the two single runs.
    spread = StepSpread(factors=(0.5, 1.0, 1.5), seed=3)
    load = BenchLoad(input_tokens=(10,) * 3, output_tokens=(3,) * 3, max_concurrency=1)
    one, two = simulate(load, BIG, ten_ms, spread), simulate(load, BIG, ten_ms, spread.model_copy(update={"seed": 4}))
    both = simulate_spread(load, BIG, ten_ms, spread, runs=2)
    assert both.p99_ttft_ms == pytest.approx((one.p99_ttft_ms + two.p99_ttft_ms) / 2)
    assert both.completed == 3 and both.duration_s == pytest.approx(0.090)


def test_the_spread_of_a_schedule_that_already_explains_the_histogram_is_flat_around_it() -> None:
    # One client, prompts of 10 tokens and 3 outputs at 10 ms a step: every simulated inter-token gap is 10 ms. A
    # server whose histogram holds all 6 of its gaps in (9, 11] ms has the quantile 9 + 2 q ms, so the factor of the
    # stratum at q ((i + 0.5) / 100) is (9 + 2 q) / 10: 0.901 to 1.099, whose mean is already 1.
    load = BenchLoad(input_tokens=(10,) * 3, output_tokens=(3,) * 3, max_concurrency=1)
    spread = fit_step_spread(load, BIG, ten_ms, ((0.009, 0.0), (0.011, 6.0), (INF, 6.0)))
    assert len(spread.factors) == 100
    assert spread.factors[0] == pytest.approx(0.901) and spread.factors[-1] == pytest.approx(1.099)
    assert spread.factors[37] == pytest.approx((9 + 2 * 0.375) / 10)
