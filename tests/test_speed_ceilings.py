"""The plan that counts both ceilings, and the speed model's refusal to predict a CPU deployment."""

from __future__ import annotations

import math

import pytest

from calculator import InvalidInput, Scenario, Workload, estimate, workload_capacity
from calculator.speed.ceilings import plan_both_ceilings
from calculator.speed.inputs import speed_plan
from calculator.speed.inputs import SpeedInputs
from calculator.speed.predict import speed_estimate
from calculator.speed.traffic import Traffic


def test_a_cpu_deployment_is_not_predicted_as_its_gpu() -> None:
    # Regression: with --device cpu the Estimate still names the default GPU; the speed model predicted H100 speed.
    result = estimate(Scenario(device="cpu"))
    with pytest.raises(InvalidInput, match="covers GPUs"):
        speed_estimate(result, Traffic(input_tokens=100, output_tokens=10, concurrency=1))
    with pytest.raises(InvalidInput, match="covers GPUs"):
        speed_plan(result, Workload(), SpeedInputs())


def test_memory_binds_when_the_crowd_outgrows_the_kv_cache() -> None:
    # 480,256 KV tokens on one H100 (Llama-3.1-8B) hold 480,256 // 1,280 = 375 requests of 1,024 + 256 tokens.
    result = estimate(Scenario())
    workload = Workload(target_concurrent_requests=1000)
    plan = plan_both_ceilings(result, workload, SpeedInputs(ttft_p95_ms=None, tpot_ms=None).traffic(workload),
                              SpeedInputs(ttft_p95_ms=None, tpot_ms=None).slo)
    assert (plan.requests_per_replica, plan.memory_replicas, plan.speed_replicas) == (375, 3, 1)
    assert plan.binding == "memory" and plan.plan.replicas == 3 and plan.plan.gpus == 3


def test_under_a_request_rate_only_the_speed_ceiling_counts() -> None:
    result = estimate(Scenario())
    inputs = SpeedInputs(request_rate=2.0)
    plan = plan_both_ceilings(result, Workload(), inputs.traffic(Workload()), inputs.slo)
    assert plan.memory_replicas is None and plan.binding == "speed"


def test_the_recommender_counts_the_memory_ceiling_as_the_plan_page_does() -> None:
    # Regression: without SLOs the recommender planned one replica for 3,000 users (the excess only queues),
    # while the Plan page that its row opens counted the replicas whose KV caches hold them all.
    from calculator.model.model_source import load_model_spec
    from calculator.speed.recommend import recommend

    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    traffic = Traffic(input_tokens=1024, output_tokens=256, concurrency=3000)
    result = recommend(spec, traffic, gpus=["h100"], quantizations=[None], kv_cache_dtypes=["auto"])
    row = next(o for o in result.by_cost_per_hour if o.deployment.tensor_parallel_size == 1)
    deployment = estimate(row.deployment.scenario(spec.model_id, "0.34.0", result.max_model_len), spec)
    held = workload_capacity(deployment, Workload(target_concurrent_requests=3000)).concurrency_p95
    assert row.plan.replicas == math.ceil(3000 / held) > 1
