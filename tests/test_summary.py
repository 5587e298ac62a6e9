"""The JSON contract names how many requests run at once and which limit binds."""

from __future__ import annotations

from calculator import Scenario, Workload, estimate
from calculator.explain import explanation
from calculator.summary import estimate_summary
from calculator.units import GIB

# Llama-3.1-8B, 2 GiB of KV at block 16: 1,024 blocks of 2 MiB; 4,096 tokens per request = 256 blocks -> 4.00x.
BASE = Scenario(model="meta-llama/Llama-3.1-8B-Instruct", vllm_version="0.32.0", block_size=16,
                kv_cache_memory_bytes=2 * GIB, max_model_len=4096)


def test_the_kv_cache_binds_at_max_model_len():
    summary = estimate_summary(estimate(BASE))
    assert (summary["max_running_requests"], summary["max_running_requests_limited_by"]) == (4, "kv_cache")


def test_max_num_seqs_binds_when_lower():
    summary = estimate_summary(estimate(BASE.replace(max_num_seqs=3)))
    assert (summary["max_running_requests"], summary["max_running_requests_limited_by"]) == (3, "max_num_seqs")


def test_with_a_workload_the_json_carries_its_concurrency_and_limit():
    # 1,200-token requests need 75 blocks: 1,023 usable blocks hold 13; max_num_seqs 8 lets 8 run.
    summary = estimate_summary(estimate(BASE.replace(max_num_seqs=8, data_parallel_size=2)),
                               Workload(prompt_tokens_mean=1000, output_tokens_mean=200))
    assert summary["workload_concurrency"] == 8 and summary["workload_concurrency_kv_limited"] == 13
    assert summary["workload_concurrency_limited_by"] == "max_num_seqs"
    assert summary["workload_concurrency_deployment"] == 16 and summary["num_gpus_total"] == 2


def test_a_borderline_verdict_carries_its_reason():
    # vllm-project/vllm#33155: gpt-oss-120b on one H100 with vLLM 0.14.1 fails at max_model_len 5120, one sequence,
    # utilization 0.97, though the budget leaves room: the JSON says "borderline" and names the report.
    result = estimate(Scenario(model="openai/gpt-oss-120b", gpu="h100-sxm-80gb", vllm_version="0.14.1",
                               max_model_len=5120, max_num_seqs=1, gpu_memory_utilization=0.97))
    summary = estimate_summary(result)
    assert result.fits and summary["verdict"] == "borderline"
    assert "runs out of memory starting gpt-oss-120b" in summary["verdict_reason"]
    assert "vllm-project/vllm#33155" in summary["verdict_reason"]


def test_a_clear_fit_has_no_verdict_reason():
    summary = estimate_summary(estimate(BASE))
    assert summary["verdict"] == "fits with margin" and summary["verdict_reason"] is None


def test_the_explanation_says_why_cuda_graphs_are_or_are_not_in_the_budget():
    def graphs(version: str) -> str:
        return dict(explanation(estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", vllm_version=version))))[
            "CUDA graphs"]
    assert graphs("0.32.0").endswith("estimated during profiling and subtracted from the KV budget (vLLM 0.20+).")
    # cudagraph_budget.py: the profiler's estimate exists from 0.18 but its env default is 0 until 0.20.
    assert "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 0 before 0.20" in graphs("0.19.0")
