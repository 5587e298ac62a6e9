"""The JSON contract names how many requests run at once and which limit binds."""

from __future__ import annotations

from calculator import Scenario, Workload, estimate
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
