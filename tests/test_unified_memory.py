"""Integrated GPUs (GB10 / DGX Spark): vLLM reads free memory as the host's available memory.

``vllm/utils/mem_utils.py`` replaces cudaMemGetInfo's free memory by ``psutil.virtual_memory().available`` on an
integrated GPU, so the host's own use counts as used at start and its later growth as non-torch memory. The failed
start-up below is ``file-gb10-qwen25-14b-fp8dyn-util015-failed-v0130nv`` (NGC vLLM 0.13.0 on a GB10): its checkpoint
(neuralmagic/Qwen2.5-14B-Instruct-FP8-dynamic) is not bundled, so the test runs the same settings on the
Qwen2.5-14B-Instruct config with vLLM's online per-channel FP8, which stores the same bytes (fp8 + one fp32 scale
per output row: 15.22 GiB here, 15.2227 printed).
"""

from __future__ import annotations

import pytest

from calculator import Scenario, estimate
from calculator.engine.overheads import UMA_HOST_BASELINE_BYTES, UMA_HOST_GROWTH_BYTES
from calculator.engine.uncertainty import verdict, verdict_reason
from calculator.gpus import find_gpu
from calculator.units import GIB

GB10_TOTAL_GIB = 121.69  # "Free memory on cuda:0 (.../121.69 GiB)" on DGX Spark


def gb10_14b(**changes) -> Scenario:
    settings = dict(model="Qwen/Qwen2.5-14B-Instruct", quantization="fp8_per_channel", gpu="NVIDIA GB10",
                    vllm_version="0.13.0", gpu_memory_utilization=0.15, max_model_len=32768,
                    max_num_batched_tokens=2048, kv_cache_dtype="fp8")
    return Scenario(**{**settings, **changes})


def test_the_catalog_knows_the_memory_architectures() -> None:
    gb10 = find_gpu("DGX Spark")
    assert (gb10.key, gb10.memory_gib, gb10.compute_capability) == ("gb10-dgx-spark", GB10_TOTAL_GIB, (12, 1))
    assert gb10.unified_memory and gb10.memory_architecture == "integrated"
    assert find_gpu("GH200").memory_architecture == "coherent" and not find_gpu("GH200").unified_memory
    assert find_gpu("H100").memory_architecture == "discrete"


def test_utilization_0_15_fails_with_no_memory_for_the_cache_blocks_like_the_gb10_record() -> None:
    result = estimate(gb10_14b())
    assert result.budget.weights_bytes / GIB == pytest.approx(15.2227, rel=0.001)
    # vLLM 0.13.0's message, as the record quotes it
    assert result.error == ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                            "initializing the engine. See https://docs.vllm.ai/en/latest/configuration/"
                            "conserving_memory/ for more details.")
    assert verdict(result) == "does not fit" and verdict_reason(result) == result.error
    # the same settings on a discrete GPU of the same size would still hold some KV cache: the host's growth decides
    assert result.budget.kv_cache_bytes + UMA_HOST_GROWTH_BYTES > 0


def test_the_host_counts_as_used_at_start() -> None:
    # free at start = total - what the OS and vLLM's processes use (the record: 119.63 - 112.26 = 7.37 GiB)
    free_gib = GB10_TOTAL_GIB - UMA_HOST_BASELINE_BYTES / GIB
    assert free_gib == pytest.approx(114.32, abs=0.005)
    refused = estimate(gb10_14b(gpu_memory_utilization=0.94))
    assert refused.error == ("Free memory on device cuda:0 (114.32/121.69 GiB) on startup is less than desired GPU "
                             "memory utilization (0.94, 114.39 GiB). Decrease GPU memory utilization or reduce GPU "
                             "memory used by other processes.")


def test_the_default_utilization_starts_on_a_quiet_box_but_not_on_a_busy_one() -> None:
    result = estimate(gb10_14b(gpu_memory_utilization=None))
    assert result.fits and result.settings.gpu_memory_utilization == 0.9
    assert verdict(result) == "borderline"
    assert verdict_reason(result).startswith("GB10 (DGX Spark) counts the host's own memory use as used")
    assert any("shares one memory pool with the host" in warning for warning in result.warnings)


def test_a_discrete_gpu_of_the_same_size_has_neither_term() -> None:
    discrete = estimate(gb10_14b(gpu=None, gpu_memory_gib=GB10_TOTAL_GIB))
    unified = estimate(gb10_14b())
    assert unified.budget.context_bytes - discrete.budget.context_bytes == UMA_HOST_BASELINE_BYTES - int(0.5 * GIB)
    assert unified.budget.non_torch_bytes - discrete.budget.non_torch_bytes == UMA_HOST_GROWTH_BYTES
