"""Estimate vs reality on the real saturated capture (vLLM 0.32.0 CPU, tiny Llama, 16-block override)."""

from __future__ import annotations

from pathlib import Path

import pytest

from calculator import Scenario, estimate
from calculator.observe.live import (
    UnusableReading,
    advice,
    compare,
    live_usage,
    preemptions_rising,
    scenario_from_server,
    usage_history,
    with_actual_blocks,
    workload_from_server,
)
from calculator.observe.live_client import ServerModel
from calculator.observe.metrics import EngineMetrics, Histogram, parse_metrics

DATA = Path(__file__).parent / "data"
ENGINE = parse_metrics((DATA / "vllm-metrics" / "vllm-0.32.0-cpu-saturated.txt").read_text()).engine("tiny")
BASE = Scenario(model=str(DATA / "tiny-configs" / "tiny-llama.config.json"), gpu=None, device="cpu",
                dtype="float32")


def server_estimate():
    scenario = scenario_from_server(ENGINE, ServerModel(id="tiny", max_model_len=1024), "0.32.0", BASE)
    return scenario, estimate(scenario)


def test_the_servers_own_settings_become_the_scenario():
    scenario, _ = server_estimate()
    assert (scenario.block_size, scenario.kv_cache_memory_bytes, scenario.num_gpu_blocks_override) == (128, 2**30, 16)
    assert (scenario.max_model_len, scenario.vllm_version, scenario.gpu_memory_utilization) == (1024, "0.32.0", 0.92)


def test_prediction_equals_the_cache_config_of_the_capture():
    _, result = server_estimate()
    rows = {row.quantity: row for row in compare(result, ENGINE)}
    assert (rows["num_gpu_blocks"].actual, rows["KV cache tokens"].actual, rows["max concurrency"].actual) == \
        (16.0, 2048.0, 2.0)
    assert all(row.error_percent == 0 for row in rows.values())


def test_usage_in_tokens_and_bytes():
    _, result = server_estimate()
    usage = live_usage(ENGINE.model_copy(update={"kv_cache_usage": 0.5}), with_actual_blocks(result, 16))
    # 15 usable blocks (block 0 is the null block) x 128 tokens; a block is 2 layers x 128 x 2 heads x 64 x 4 B.
    assert (usage.used_blocks, usage.capacity_tokens, usage.used_tokens) == (7.5, 1920, 960.0)
    assert usage.used_bytes == 7.5 * 131_072 and usage.pool_bytes == 16 * 131_072


def test_the_workload_the_server_saw():
    workload = workload_from_server(ENGINE, None)
    # 9 requests: 36 prompt tokens (mean 4), 6048 generated (mean 672); no prefix hits; n = 1.
    assert (workload.prompt_tokens_mean, workload.output_tokens_mean) == (4, 672)
    assert (workload.shared_prefix_tokens, workload.parallel_samples) == (0, 1)


def test_advice_names_the_knobs():
    full = ENGINE.model_copy(update={"kv_cache_usage": 0.9, "waiting": 3.0, "running": 2.0})
    # the capture's pool: --num-gpu-blocks-override 16 in the 1 GiB of VLLM_CPU_KVCACHE_SPACE
    assert ("More KV memory helps: its pool is fixed at 16 blocks by --num-gpu-blocks-override 16: raise that "
            "override or remove it;") in advice(full, None, False)[0]
    assert "gpu_memory_utilization" not in " ".join(advice(full, None, True, on_cpu=True))
    idle_queue = ENGINE.model_copy(update={"kv_cache_usage": 0.1, "waiting": 3.0, "running": 256.0})
    assert "--max-num-seqs" in advice(idle_queue, None, False)[0]
    assert any(note.startswith("Requests are being preempted now") for note in advice(ENGINE, None, True))


def test_advice_fits_how_the_pool_was_sized():
    config = dict(ENGINE.cache_config, num_gpu_blocks_override="None")
    full = ENGINE.model_copy(update={"kv_cache_usage": 0.9, "waiting": 3.0, "cache_config": config})
    assert ("raise VLLM_CPU_KVCACHE_SPACE (now 1 GiB), which sizes a CPU server's KV cache, or lower "
            "--max-model-len") in advice(full, None, False, on_cpu=True)[0]
    on_gpu = full.model_copy(update={"cache_config": dict(config, kv_cache_memory_bytes="None")})
    assert "raise --gpu-memory-utilization (now 0.92), use --kv-cache-dtype fp8" in advice(on_gpu, None, False)[0]


def test_preemptions_are_rising_only_while_the_counter_grows_now():
    # 8 preemptions during a burst, then two idle reads: the total stays 8, the rate is 0: nothing is said
    before = ENGINE.model_copy(update={"preemptions_total": 2.0})
    points = [(0.0, before), (5.0, ENGINE), (45.0, ENGINE)]
    assert preemptions_rising(points[:2]) and not preemptions_rising(points)
    assert not any("preempted" in note for note in advice(ENGINE, None, preemptions_rising(points)))


def test_history_series_and_preemption_trend():
    later = ENGINE.model_copy(update={"preemptions_total": 9.0, "kv_cache_usage": 0.25, "running": 2.0})
    points = [(10.0, ENGINE), (15.0, later)]
    assert usage_history(points, 1920) == {"times": [10.0, 15.0], "used_tokens": [0.0, 480.0],
                                          "running": [0.0, 2.0], "waiting": [0.0, 0.0]}
    assert preemptions_rising(points) and not preemptions_rising(points[:1]) and not preemptions_rising([])


def test_the_servers_blocks_replace_the_pool_on_every_pipeline_stage():
    # Llama-3.1-8B on 2 stages of 16 layers: a 16-token block costs 16 x 16 layers x 8 KV heads x 128 x 2 x 2 B.
    result = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb",
                               pipeline_parallel_size=2, block_size=16, vllm_version="0.32.0"))
    actual = with_actual_blocks(result, 1000)
    assert [b.kv_cache_bytes for b in actual.budgets_per_stage] == [1000 * 16 * 16 * 8 * 128 * 2 * 2] * 2
    assert actual.budget in actual.budgets_per_stage and actual.budget.kv_cache_bytes == 1000 * 1048576


# --- issue 28: settings and workloads beyond the planner's bounds are one of its errors ----------------------------

INF = float("inf")


@pytest.mark.parametrize(("setting", "says"), [
    ({"block_size": "0"}, "block_size: Input should be greater than or equal to 1 (got 0)"),
    ({"block_size": "5000"}, "block_size: Input should be less than or equal to 4096 (got 5000)"),
    ({"num_gpu_blocks_override": str(2**50)}, "num_gpu_blocks_override: Input should be less than or equal to"),
    ({"kv_cache_memory_bytes": str(2**52)}, "kv_cache_memory_bytes: Input should be less than or equal to"),
])
def test_a_server_setting_beyond_the_scenarios_bounds_is_a_sentence(setting, says):
    engine = EngineMetrics(model_name="tiny", engine="0", cache_config={**ENGINE.cache_config, **setting})
    with pytest.raises(UnusableReading, match="^the server reports " + says.replace("(", r"\(").replace(")", r"\)")):
        scenario_from_server(engine, ServerModel(id="tiny", max_model_len=1024), "0.32.0", BASE)


def test_a_max_model_len_of_2e8_is_a_sentence():
    with pytest.raises(UnusableReading, match=r"max_model_len: Input should be less than or equal to 100000000 "
                                              r"\(got 200000000\): no estimate can take that setting"):
        scenario_from_server(ENGINE, ServerModel(id="tiny", max_model_len=200_000_000), "0.32.0", BASE)


def lengths(prompt: Histogram, output: Histogram, n: Histogram | None = None) -> EngineMetrics:
    histograms = {"prompt_tokens": prompt, "generation_tokens": output, **({"params_n": n} if n else {})}
    return EngineMetrics(model_name="m", engine="0", histograms=histograms)


SHORT = Histogram(buckets=((100.0, 10.0), (INF, 10.0)), sum=500.0, count=10.0)  # ten requests of 50 tokens


@pytest.mark.parametrize(("engine", "says"), [
    # 10 requests summing 2e8 tokens: a mean of 2e7, twice the 1e7 a Workload takes
    (lengths(Histogram(buckets=((1e9, 10.0), (INF, 10.0)), sum=2e8, count=10.0), SHORT),
     "a mean prompt of 2e+07, more than the planner takes (prompt_tokens_mean is at most 10,000,000)"),
    # the 95th of 10 requests lies in the (100, 1e9] bucket, interpolated 9e8; but 5 of them summing to at most
    # 5e7 leave the 0.5 requests above it at most (5e7 - 4.5 x 100) / 0.5 = 99,999,100 (a mean of 5e6 passes)
    (lengths(Histogram(buckets=((100.0, 5.0), (1e9, 10.0), (INF, 10.0)), sum=5e7, count=10.0), SHORT),
     "a p95 prompt of 9.99991e+07, more than the planner takes (prompt_tokens_p95 is at most 10,000,000)"),
    # n: 2 requests, n summing to 4,000: a mean of 2,000 samples per request, above the 1,024 a Workload takes
    (lengths(SHORT, SHORT, Histogram(buckets=((1.0, 1.0), (INF, 2.0)), sum=4000.0, count=2.0)),
     "a mean n (parallel samples) of 2,000, more than the planner takes (parallel_samples is at most 1,024)"),
])
def test_a_workload_beyond_the_planners_bounds_is_a_sentence(engine, says):
    with pytest.raises(UnusableReading) as caught:
        workload_from_server(engine, None)
    assert str(caught.value) == f"the server's request histograms give {says}: its real workload is not used"
