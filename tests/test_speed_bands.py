"""Uncertainty bands: sized on held-out residuals by regime, widened off the measured runs, and the SLOs that hold
only towards the optimistic edge marked "at risk"."""

from __future__ import annotations

import math

import pytest

from calculator import GpuPrice, Scenario, Slo, Traffic, estimate, load_model_spec, recommend, speed_estimate
from calculator.speed.bands import band_factor, outside_domain, regime_of, speed_bands
from calculator.speed.calibration import COVERAGE, DOMAIN_WIDENING, REGIME_BAND_FACTOR, Coverage
from calculator.speed.plan import plan_at
from calculator.speed.recommend import Deployment, Option, slo_risks

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def llama8() -> object:
    return load_model_spec(LLAMA)


def _deployment(spec, gpu: str, **settings) -> object:
    return estimate(Scenario(model=LLAMA, gpu=gpu, max_model_len=4096, **settings), spec)


def test_a_band_holds_the_share_of_errors_asked_for() -> None:
    # predicted / measured of five held-out runs: |log| sorted = 0.0953 (1.1), 0.1054 (0.9), 0.2231 (0.8),
    # 0.2231 (1.25), 0.4055 (1.5). 80 % of five is four: the fourth, x/÷ 1.25; 40 % is two: x/÷ 1 / 0.9.
    errors = [math.log(r) for r in (1.1, 0.8, 1.5, 1.25, 0.9)]
    assert band_factor(errors, 0.8) == pytest.approx(1.25)
    assert band_factor(errors, 0.4) == pytest.approx(1 / 0.9)
    assert band_factor([math.log(2.0)], 0.8) == pytest.approx(2.0)  # one run: its own error
    with pytest.raises(ValueError):
        band_factor([], 0.8)


def test_the_regime_follows_the_load(llama8) -> None:
    result = _deployment(llama8, "h100-sxm-80gb", max_num_seqs=16)
    one = speed_estimate(result, Traffic(input_tokens=512, output_tokens=128, concurrency=1), prices={})
    few = speed_estimate(result, Traffic(input_tokens=512, output_tokens=128, concurrency=8), prices={})
    queued = speed_estimate(result, Traffic(input_tokens=512, output_tokens=128, concurrency=64), prices={})
    assert (regime_of(one), regime_of(few)) == ("one request", "below the knee")
    assert queued.queue_wait_ms > 0 and regime_of(queued) == "saturated"  # 64 users for 16 slots: a queue


def test_a_deployment_inside_the_measured_runs_gets_its_regimes_band(llama8) -> None:
    result = _deployment(llama8, "a100-sxm-80gb")
    speed = speed_estimate(result, Traffic(input_tokens=512, output_tokens=128, concurrency=8), prices={})
    bands = speed_bands(result, speed)
    factor = REGIME_BAND_FACTOR[bands.regime]["ttft"]
    assert bands.outside == () and not bands.widened
    assert bands.ttft_p95_ms.high == pytest.approx(speed.ttft_p95_ms * factor)
    assert bands.ttft_p95_ms.low == pytest.approx(speed.ttft_p95_ms / factor)


def test_a_gpu_generation_no_run_measured_gets_the_sentence_and_a_wider_band(llama8) -> None:
    assert "volta" not in COVERAGE.gpu_families
    load = Traffic(input_tokens=512, output_tokens=128, concurrency=8)
    volta = _deployment(llama8, "v100-sxm2-32gb")
    speed = speed_estimate(volta, load, prices={})
    bands = speed_bands(volta, speed)
    assert bands.outside == ("No measured run on the volta generation: the band is widened.",)
    factor = REGIME_BAND_FACTOR[bands.regime]["ttft"] ** DOMAIN_WIDENING  # the log-width doubled: the factor squared
    assert bands.ttft_ms.high / speed.ttft_ms == pytest.approx(factor)
    assert speed.tpot_ms / bands.tpot_ms.low == pytest.approx(REGIME_BAND_FACTOR[bands.regime]["tpot"] ** 2)


def test_more_requests_at_once_than_any_run_had_is_outside(llama8) -> None:
    result = _deployment(llama8, "h100-sxm-80gb")
    speed = speed_estimate(result, Traffic(input_tokens=256, output_tokens=64, concurrency=120), prices={})
    narrow = Coverage(gpu_families=frozenset({"hopper"}), engines=frozenset({"V1 async"}),
                      model_kinds=frozenset({"dense"}), max_running_requests=100)
    assert speed.running_requests == 120
    assert outside_domain(result, speed, narrow) == (
        "120 requests in the engine at once is beyond the measured runs (up to 100): the band is widened.",)
    engines = narrow.model_copy(update={"engines": frozenset({"V0"}), "max_running_requests": 500})
    assert outside_domain(result, speed, engines) == ("No measured run on the V1 async engine: the band is widened.",)


def test_an_slo_met_only_towards_the_optimistic_edge_is_at_risk(llama8) -> None:
    result = _deployment(llama8, "h100-sxm-80gb")
    load = Traffic(input_tokens=512, output_tokens=128, concurrency=8)
    plan = plan_at(result, 1, load, Slo(), prices={})
    bands = speed_bands(result, plan.per_replica)
    point, high = plan.per_replica.ttft_p95_ms, bands.ttft_p95_ms.high
    inside = Slo(ttft_p95_ms=(point + high) / 2)  # met by the estimate, missed at the band's pessimistic edge
    risks = slo_risks(plan, bands, inside)
    assert len(risks) == 1 and risks[0].startswith("TTFT p95 ") and "but its band reaches" in risks[0]
    assert slo_risks(plan, bands, Slo(ttft_p95_ms=high * 1.01)) == ()  # holds even at the pessimistic edge
    assert slo_risks(plan, bands, Slo(ttft_p95_ms=point * 0.99)) == ()  # missed outright: a violation, not a risk
    itl = Slo(tpot_ms=(plan.per_replica.tpot_ms + bands.tpot_ms.high) / 2)
    assert slo_risks(plan, bands, itl)[0].startswith("ITL ")
    deployment = Deployment(gpu="h100-sxm-80gb", gpu_name="H100", tensor_parallel_size=1, pipeline_parallel_size=1,
                            quantization=None, kv_cache_dtype="auto")
    assert Option(deployment=deployment, plan=plan, bands=bands, risks=risks).slo_status == "at risk"
    assert Option(deployment=deployment, plan=plan, bands=bands).slo_status == "met"
    assert Option(deployment=deployment, reason="weights exceed memory").slo_status is None


def test_the_recommender_marks_the_risky_option_and_ranks_on_ttft_p95(llama8) -> None:
    load = Traffic(input_tokens=512, output_tokens=128, concurrency=8)
    point = plan_at(estimate(Scenario(model=LLAMA, gpu="h100-sxm-80gb", max_model_len=1024), llama8), 1, load,
                    Slo(), prices={}).per_replica.ttft_p95_ms
    result = recommend(llama8, load, Slo(ttft_p95_ms=point * 1.05), gpus=["h100-sxm-80gb"], quantizations=[None],
                       kv_cache_dtypes=["auto"], prices={"h100-sxm-80gb": GpuPrice(usd_per_gpu_hour=3, source="t")})
    tp1 = next(o for o in result.by_cost_per_hour if o.deployment.tensor_parallel_size == 1)
    assert tp1.plan.replicas == 1 and tp1.slo_status == "at risk"
    assert [o.plan.per_replica.ttft_p95_ms for o in result.by_ttft_p95] == sorted(
        o.plan.per_replica.ttft_p95_ms for o in result.by_cost_per_hour)
