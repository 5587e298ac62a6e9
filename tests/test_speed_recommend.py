"""Capacity plans and the recommender: ranking by cost, and a reason for every deployment left out."""

from __future__ import annotations

import pytest

from calculator import (
    GpuPrice,
    Scenario,
    Slo,
    Traffic,
    capacity_plan,
    estimate,
    find_gpu,
    load_model_spec,
    recommend,
    slo_violations,
    speed_estimate,
)
from calculator.speed.plan import share
from calculator.speed.recommend import Deployment, _evaluate, candidates, workload_model_len

TRAFFIC = Traffic(input_tokens=512, output_tokens=128, concurrency=32)
PRICES = {"h100-sxm-80gb": 3.0, "a100-sxm-80gb": 1.3, "l4-24gb": 0.5, "t4-16gb": 0.3}
GPUS = list(PRICES)


def _prices() -> dict[str, GpuPrice]:
    return {key: GpuPrice(usd_per_gpu_hour=value, source="test") for key, value in PRICES.items()}


@pytest.fixture(scope="module")
def llama8() -> object:
    return load_model_spec("meta-llama/Llama-3.1-8B-Instruct")


def test_slo_violations_read_like_a_sentence() -> None:
    speed = speed_estimate(estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", max_model_len=4096)),
                           TRAFFIC, prices={})
    slow = speed.model_copy(update={"ttft_p95_ms": 3100.0, "tpot_ms": 62.0, "e2e_ms": 12_000.0})
    assert slo_violations(slow, Slo(ttft_p95_ms=2000, tpot_ms=50, e2e_s=10)) == (
        "TTFT p95 3.1 s > 2 s", "ITL 62 ms > 50 ms", "end-to-end 12 s > 10 s")
    assert slo_violations(slow, Slo(min_tok_s_per_user=20)) == ("ITL 62 ms > 50 ms",)  # 20 tok/s = 50 ms
    assert slo_violations(slow, Slo()) == ()


def test_capacity_plan_is_the_fewest_replicas_that_meet_the_slo() -> None:
    result = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="l4-24gb", max_model_len=4096))
    load = Traffic(input_tokens=512, output_tokens=128, concurrency=400)
    slo = Slo(tpot_ms=80)  # a single request on an L4 decodes at ~64 ms per token
    plan = capacity_plan(result, load, slo, prices=_prices())
    assert plan.meets_slo and plan.replicas > 1
    fewer = speed_estimate(result, share(load, plan.replicas - 1), prices=_prices())
    assert slo_violations(fewer, slo)  # one replica fewer misses
    assert plan.gpus == plan.replicas and plan.cost_per_hour == pytest.approx(0.5 * plan.replicas)
    assert plan.cost_per_month == pytest.approx(0.5 * plan.replicas * 730)
    expected = plan.cost_per_hour / (plan.per_replica.output_throughput_tok_s * plan.replicas * 3600) * 1e6
    assert plan.cost_per_million_output_tokens == pytest.approx(expected)


def test_an_unreachable_slo_is_reported_with_its_floor() -> None:
    result = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="l4-24gb", max_model_len=4096))
    plan = capacity_plan(result, Traffic(input_tokens=512, output_tokens=128, concurrency=4), Slo(tpot_ms=1),
                         prices=_prices())
    assert not plan.meets_slo and plan.replicas == 4  # one user per replica is the floor
    assert plan.violations[0].startswith("ITL ") and plan.violations[0].endswith(" > 1 ms")


def test_recommendations_are_ranked_by_cost(llama8) -> None:
    result = recommend(llama8, TRAFFIC, gpus=GPUS, prices=_prices())
    hourly = [o.plan.cost_per_hour for o in result.by_cost_per_hour]
    per_token = [o.plan.cost_per_million_output_tokens for o in result.by_cost_per_million_tokens]
    assert hourly == sorted(hourly) and per_token == sorted(per_token)
    cheapest = result.by_cost_per_hour[0]
    assert (cheapest.deployment.gpu, cheapest.plan.gpus, cheapest.plan.cost_per_hour) == ("l4-24gb", 1, 0.5)
    assert result.max_model_len == 1024  # 512 + 128 rounded up to a power of two
    assert len(result.by_cost_per_hour) + len(result.rejected) == len(candidates(llama8, [find_gpu(g) for g in GPUS]))


def test_every_deployment_left_out_says_why(llama8) -> None:
    result = recommend(llama8, TRAFFIC, gpus=GPUS, prices=_prices())
    reasons = {(o.deployment.gpu, o.deployment.tensor_parallel_size, o.deployment.quantization,
                o.deployment.kv_cache_dtype): o.reason for o in result.rejected}
    assert reasons[("t4-16gb", 1, None, "auto")] == "weights exceed memory"  # 16.06 GB of bf16 on 14.74 GiB
    assert reasons[("t4-16gb", 1, "fp8", "auto")] == "FP8 weights need Ampere or newer (T4 16GB is turing)"
    assert reasons[("a100-sxm-80gb", 1, None, "fp8")] == (
        "FP8 KV cache needs FP8 hardware (Ada, Hopper, Blackwell, MI300+); A100 SXM 80GB has none")
    assert all(o.reason for o in result.rejected)


def test_tensor_parallel_must_divide_the_heads() -> None:
    spec = load_model_spec("Qwen/Qwen2.5-1.5B-Instruct")  # 12 attention heads
    reasons = {d.tensor_parallel_size: r for d, r in candidates(spec, [find_gpu("h100")], quantizations=[None],
                                                                 kv_cache_dtypes=["auto"])}
    assert reasons[8] == "TP 8 does not divide the 12 attention heads"
    assert reasons[4] is None and reasons[2] is None


def test_a_one_gpu_box_is_not_searched_as_a_multi_gpu_server() -> None:
    # A DGX Spark holds one GB10: TP 4 of them, or DP 8 x EP, would be four or eight boxes linked over 200 GbE,
    # which the recommender used to offer as one server
    spec = load_model_spec("deepseek-ai/DeepSeek-V3")
    reasons = {(d.tensor_parallel_size, d.data_parallel_size): r
               for d, r in candidates(spec, [find_gpu("gb10")], quantizations=[None], kv_cache_dtypes=["auto"])}
    assert reasons[(1, 1)] is None
    assert reasons[(4, 1)] == ("4 GPUs in one server, and a GB10 (DGX Spark) node holds 1: layouts across nodes "
                               "are not searched")
    assert reasons[(1, 8)] == ("8 GPUs in one server, and a GB10 (DGX Spark) node holds 1: layouts across nodes "
                               "are not searched")
    h100 = {(d.tensor_parallel_size, d.data_parallel_size): r
            for d, r in candidates(spec, [find_gpu("h100")], quantizations=[None], kv_cache_dtypes=["auto"])}
    assert h100[(8, 1)] is None and h100[(1, 8)] is None  # eight to a server


def test_slo_gpu_count_and_budget_limits_give_reasons(llama8) -> None:
    tight = recommend(llama8, TRAFFIC, Slo(tpot_ms=1), gpus=["h100-sxm-80gb"], prices=_prices(),
                      quantizations=[None], kv_cache_dtypes=["auto"])
    assert not tight.by_cost_per_hour
    assert all(o.reason.startswith("ITL ") and o.reason.endswith("> 1 ms") for o in tight.rejected)
    capped = recommend(llama8, TRAFFIC, gpus=["h100-sxm-80gb"], prices=_prices(), max_gpus=1,
                       quantizations=[None], kv_cache_dtypes=["auto"])
    reasons = {o.deployment.tensor_parallel_size: o.reason for o in capped.rejected}
    assert reasons[2] == "needs 2 GPUs > 1 allowed" and reasons[8] == "needs 8 GPUs > 1 allowed"
    poor = recommend(llama8, TRAFFIC, gpus=["h100-sxm-80gb"], prices=_prices(), budget_per_hour=4,
                     quantizations=[None], kv_cache_dtypes=["auto"])
    assert {o.reason for o in poor.rejected} == {"costs $6.00/h > budget $4.00/h", "costs $12.00/h > budget $4.00/h",
                                                 "costs $24.00/h > budget $4.00/h"}


def test_a_memory_mode_variant_is_ranked_only_on_request(llama8) -> None:
    prices = {"gh200-96gb": GpuPrice(usd_per_gpu_hour=1.5, source="test")}
    plain = recommend(llama8, TRAFFIC, prices=prices, quantizations=[None], kv_cache_dtypes=["auto"])
    assert "gh200-96gb-numa" not in {o.deployment.gpu for o in (*plain.by_cost_per_hour, *plain.rejected)}
    asked = recommend(llama8, TRAFFIC, gpus=["GH200 NUMA mode"], prices=prices, quantizations=[None],
                      kv_cache_dtypes=["auto"])
    cheapest = asked.by_cost_per_hour[0]
    assert (cheapest.deployment.gpu, cheapest.plan.cost_per_hour) == ("gh200-96gb-numa", 1.5)  # the hardware's price


def test_a_gpu_without_a_price_is_not_ranked(llama8) -> None:
    deployment = Deployment(gpu="l4-24gb", gpu_name="L4 24GB", tensor_parallel_size=1, pipeline_parallel_size=1,
                            quantization=None, kv_cache_dtype="auto")
    option = _evaluate(llama8, deployment, TRAFFIC, Slo(), {}, "0.34.0", 1024)
    assert option.reason == "no price for L4 24GB (give one to rank it)"


def test_a_model_too_big_for_one_node_gets_a_pipeline() -> None:
    spec = load_model_spec("meta-llama/Llama-3.1-405B-Instruct")  # 811 GB of bf16 weights
    result = recommend(spec, Traffic(input_tokens=512, output_tokens=128, concurrency=8), gpus=["a100-sxm-80gb"],
                       prices=_prices(), quantizations=[None], kv_cache_dtypes=["auto"])
    staged = [o for o in result.by_cost_per_hour if o.deployment.pipeline_parallel_size > 1]
    assert staged and staged[0].deployment.tensor_parallel_size == 8  # 8 x 80 GB cannot hold 811 GB; 16 can
    assert staged[0].plan.gpus_per_replica == 16


def test_planning_length_follows_the_workload(llama8) -> None:
    assert workload_model_len(llama8, Traffic(input_tokens=3000, output_tokens=500, concurrency=1)) == 4096
    assert workload_model_len(llama8, Traffic(input_tokens=200_000, output_tokens=500, concurrency=1)) == 131072


def test_one_providers_price_set_prices_each_gpu_from_its_own_listing() -> None:
    # RunPod Serverless' "Active cost per second" (docs.runpod.io/serverless/pricing), x 3,600 s: H100 PRO
    # $0.00093/s = $3.348/h for both H100 80GB cards (the class names neither), A100 80GB $0.00060/s = $2.16/h,
    # L40S $0.00037/s = $1.332/h; the provider does not rent T4s.
    from calculator.speed.prices import price_table

    table = price_table(set_key="runpod-serverless-active")
    assert {key: table[key].usd_per_gpu_hour for key in ("h100-sxm-80gb", "h100-pcie-80gb", "a100-sxm-80gb",
                                                          "l40s-48gb")} == {
        "h100-sxm-80gb": 3.348, "h100-pcie-80gb": 3.348, "a100-sxm-80gb": 2.16, "l40s-48gb": 1.332}
    assert "t4-16gb" not in table and "docs.runpod.io" in table["h100-sxm-80gb"].source


def test_ranking_on_a_price_set_leaves_its_unlisted_gpus_out_and_says_so(llama8) -> None:
    result = recommend(llama8, TRAFFIC, Slo(), gpus=["h100-sxm-80gb", "t4-16gb"],
                       price_set="runpod-serverless-active")
    assert result.price_set == "runpod-serverless-active"
    assert {o.deployment.gpu for o in result.by_cost_per_hour} == {"h100-sxm-80gb"}
    cheapest = result.by_cost_per_hour[0].plan
    assert cheapest.cost_per_hour == pytest.approx(cheapest.gpus * 3.348)
    assert any(o.reason == "no price for T4 16GB (give one to rank it)" for o in result.rejected)
    own = recommend(llama8, TRAFFIC, Slo(), gpus=["t4-16gb"], price_set="runpod-serverless-active",
                    prices={"t4-16gb": GpuPrice(usd_per_gpu_hour=0.3, source="test")})
    assert own.by_cost_per_hour  # a user's own price ranks a GPU the set does not list


def test_an_unknown_price_set_is_refused_by_name() -> None:
    from calculator.errors import InvalidInput
    from calculator.speed.prices import price_table

    with pytest.raises(InvalidInput, match="no price set 'cheapest'; choose one of runpod-serverless-active"):
        price_table(set_key="cheapest")


def test_a_row_opened_in_plan_carries_the_sets_price(llama8) -> None:
    from calculator import Workload
    from calculator.speed.inputs import RecommendRequest, SpeedInputs

    request = RecommendRequest(model="meta-llama/Llama-3.1-8B-Instruct", gpus=("a100-sxm-80gb",),
                               price_set="runpod-serverless-active")
    result = request.run(llama8, Workload(prompt_tokens_mean=512, output_tokens_mean=128,
                                          target_concurrent_requests=32), SpeedInputs())
    _, speed = request.plan_inputs(result.by_cost_per_hour[0], result.max_model_len, SpeedInputs())
    assert speed.usd_per_gpu_hour == 2.16


@pytest.mark.parametrize(("redundant", "ep_refusal"), [
    (8, None),  # (128 + 8) / 8 = 17 experts on each of the 8 EP ranks
    (2, "EPLB currently only supports even distribution of experts across ranks. Got 130 experts and 8 EP ranks."),
])
def test_eplb_applies_to_the_expert_parallel_layouts_only(redundant, ep_refusal) -> None:
    # vLLM refuses --enable-eplb without --enable-expert-parallel, so the TP layouts the recommender also tries run
    # without it; Qwen3-30B-A3B's 128 experts plus the redundant ones must split evenly over the 8 DP x EP ranks.
    result = recommend(load_model_spec("Qwen/Qwen3-30B-A3B"), Traffic(input_tokens=1000, output_tokens=200,
                                                                      concurrency=8),
                       gpus=["h100-sxm-80gb"], prices=_prices(), data_parallel_size=8,
                       features={"enable_eplb": True, "num_redundant_experts": redundant})
    options = [*result.by_cost_per_hour, *result.rejected]
    tp_only = [o for o in options if not o.deployment.enable_expert_parallel]
    ep = [o for o in options if o.deployment.enable_expert_parallel and o.deployment.data_parallel_size == 8]
    assert tp_only and all("EPLB" not in (o.reason or "") for o in tp_only)
    assert ep and all(o.reason == ep_refusal for o in ep)
