"""Workload concurrency: block rounding, shared prefixes, parallel sampling, paged vs contiguous (hand-computed)."""

from __future__ import annotations

import pytest

from calculator import Scenario, Workload, estimate, workload_capacity
from calculator.units import GIB

# Llama-3.1-8B: 128 KiB per token; block 16 -> 2 MiB per block; 2 GiB -> 1024 blocks, 1023 usable (null block).
RESULT = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", vllm_version="0.32.0", block_size=16,
                           kv_cache_memory_bytes=2 * GIB, max_model_len=4096))


def test_the_pool_is_1024_blocks():
    assert RESULT.capacity.num_gpu_blocks == 1024


def test_requests_round_up_to_whole_blocks():
    # 1000 + 200 tokens -> cdiv(1200, 16) = 75 blocks; 1023 // 75 = 13 requests.
    capacity = workload_capacity(RESULT, Workload(prompt_tokens_mean=1000, output_tokens_mean=200))
    assert capacity.mean.private_blocks == 75
    assert capacity.concurrency_mean == 13


def test_a_shared_prefix_is_stored_once_in_full_blocks():
    # 512-token prefix = 32 shared blocks; each request keeps 75 - 32 = 43; (1023 - 32) // 43 = 23.
    capacity = workload_capacity(RESULT, Workload(prompt_tokens_mean=1000, output_tokens_mean=200,
                                                  shared_prefix_tokens=512))
    assert (capacity.mean.prefix_blocks, capacity.mean.private_blocks) == (32, 43)
    assert capacity.concurrency_mean == 23


def test_parallel_samples_share_full_prompt_blocks_and_copy_the_tail():
    # 62 full prompt blocks shared by the 4 samples; each sample: cdiv(1200,16) - 62 = 13 blocks -> 62 + 52 = 114.
    capacity = workload_capacity(RESULT, Workload(prompt_tokens_mean=1000, output_tokens_mean=200,
                                                  parallel_samples=4))
    assert capacity.mean.private_blocks == 114
    assert capacity.concurrency_mean == 1023 // 114 == 8


def test_contiguous_allocation_reserves_max_model_len_for_every_request():
    capacity = workload_capacity(RESULT, Workload(prompt_tokens_mean=1000, output_tokens_mean=210))
    assert capacity.naive_concurrency == 1023 * 16 // 4096 == 3
    assert capacity.naive_waste_fraction == pytest.approx(1 - 1210 / 4096)
    assert capacity.paged_waste_fraction == pytest.approx(1 - 1210 / (76 * 16))


def test_p95_lengths_decide_the_plan_and_the_replicas():
    capacity = workload_capacity(RESULT, Workload(prompt_tokens_mean=1000, output_tokens_mean=200,
                                                  prompt_tokens_p95=3000, output_tokens_p95=800,
                                                  target_concurrent_requests=20))
    assert capacity.p95.private_blocks == 3800 // 16 + 1 == 238
    assert capacity.concurrency_p95 == 1023 // 238 == 4
    assert not capacity.meets_target and capacity.replicas_for_target == 5


def test_a_prefix_longer_than_the_prompt_is_refused():
    with pytest.raises(ValueError):
        Workload(prompt_tokens_mean=100, shared_prefix_tokens=200)


def test_paged_slots_round_each_request_up_to_whole_blocks():
    from calculator.engine.workload import paged_slots

    assert paged_slots([70, 33, 120, 18], 16) == (5 + 3 + 8 + 2) * 16 == 288


def _with(**changes) -> object:
    return estimate(RESULT.scenario.replace(**changes))


def test_max_num_seqs_caps_the_requests_that_run_at_once():
    # The KV cache holds 13 requests of 1,200 tokens (above); the scheduler runs at most max_num_seqs = 8.
    capacity = workload_capacity(_with(max_num_seqs=8), Workload(prompt_tokens_mean=1000, output_tokens_mean=200))
    assert (capacity.kv_concurrency_mean, capacity.concurrency_mean) == (13, 8)
    assert capacity.limited_by_mean == "max_num_seqs"


def test_each_parallel_sample_is_one_sequence_for_max_num_seqs():
    # n = 4: the KV cache holds 8 requests (above) but max_num_seqs = 8 admits only 8 // 4 = 2 of them.
    capacity = workload_capacity(_with(max_num_seqs=8), Workload(prompt_tokens_mean=1000, output_tokens_mean=200,
                                                                 parallel_samples=4))
    assert (capacity.kv_concurrency_mean, capacity.seqs_concurrency, capacity.concurrency_mean) == (8, 2, 2)


def test_the_kv_cache_binds_when_max_num_seqs_is_larger():
    capacity = workload_capacity(RESULT, Workload(prompt_tokens_mean=1000, output_tokens_mean=200))
    assert capacity.limited_by_mean == "KV cache" and capacity.concurrency_mean == 13


def test_without_prefix_caching_nothing_is_shared_in_v1():
    # V1 fans n = 4 out into 4 requests: without the prefix cache each holds its own 75 blocks -> 300 per request.
    off = _with(enable_prefix_caching=False)
    shared = workload_capacity(off, Workload(prompt_tokens_mean=1000, output_tokens_mean=200,
                                             shared_prefix_tokens=512))
    assert (shared.mean.prefix_blocks, shared.mean.private_blocks, shared.concurrency_mean) == (0, 75, 13)
    samples = workload_capacity(off, Workload(prompt_tokens_mean=1000, output_tokens_mean=200, parallel_samples=4))
    assert samples.mean.private_blocks == 300 and samples.concurrency_mean == 1023 // 300 == 3


def test_data_parallel_engines_multiply_the_deployment():
    capacity = workload_capacity(_with(data_parallel_size=3), Workload(prompt_tokens_mean=1000,
                                                                       output_tokens_mean=200,
                                                                       target_concurrent_requests=39))
    assert capacity.concurrency_p95 == 13 and capacity.deployment_concurrency_p95 == 39 and capacity.meets_target
