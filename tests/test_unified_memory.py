"""Unified memory (GB10 / DGX Spark, GH200 in NUMA mode): where vLLM reads free memory from, and what it costs.

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
from calculator.engine.free_memory import free_memory_reading
from calculator.engine.overheads import UMA_HOST_BASELINE_BYTES, UMA_HOST_GROWTH_BYTES
from calculator.engine.vllm_versions import rules_for
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
    assert gb10.memory_architecture == "integrated"
    assert find_gpu("GH200").memory_architecture == "coherent"
    numa = find_gpu("GH200 NUMA mode")
    assert (numa.key, numa.memory_architecture, numa.variant_of) == ("gh200-96gb-numa", "coherent-numa", "gh200-96gb")
    assert numa.memory_gib == find_gpu("GH200").memory_gib and numa.compute_capability == (9, 0)
    assert find_gpu("NVIDIA GH200 480GB").key == "gh200-96gb"  # nvidia-smi's name: the default mode
    assert find_gpu("H100").memory_architecture == "discrete"


@pytest.mark.parametrize(("gpu", "version", "reading"), [
    # vllm/utils/__init__.py 0.11.0: torch.cuda.mem_get_info() everywhere
    ("DGX Spark", "0.11.0", "host_free"),
    # vllm/utils/mem_utils.py 0.11.1-0.19: shared_sysmem_device_mem_sms = ((8, 7), (11, 0), (12, 1))
    ("DGX Spark", "0.11.1", "host_available"),
    ("GH200 NUMA mode", "0.19.1", "device_with_os_pages"),  # compute capability 9.0 is not in the tuple
    # 0.20+: current_platform.is_integrated_gpu (vllm#35356)
    ("GH200 NUMA mode", "0.20.0", "host_available"),
    ("DGX Spark", "0.34.0", "host_available"),
    ("GH200", "0.20.0", "device"),
    ("H100", "0.20.0", "device"),
])
def test_where_each_version_reads_free_memory(gpu: str, version: str, reading: str) -> None:
    assert free_memory_reading(find_gpu(gpu), rules_for(version), "cuda") == reading


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


# --- GH200 in NUMA ("unified") mode: the HBM is a NUMA node of the host

GH200_TOTAL_GIB = 95.5771484375
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


def gh200(gpu: str, version: str, **changes) -> Scenario:
    return Scenario(**{"model": LLAMA_8B, "gpu": gpu, "vllm_version": version, **changes})


def test_from_0_20_the_host_pool_passes_the_start_up_check_the_hbm_alone_fails() -> None:
    # util 0.995 asks for ceil(95.577 x 0.995) = 95.10 GiB; the HBM has 95.577 - 0.5 (CUDA context) = 95.08 free
    hbm = estimate(gh200("GH200", "0.20.0", gpu_memory_utilization=0.995))
    assert hbm.error == ("Free memory on device cuda:0 (95.08/95.58 GiB) on startup is less than desired GPU memory "
                         "utilization (0.995, 95.10 GiB). Decrease GPU memory utilization or reduce GPU memory used "
                         "by other processes.")
    numa = estimate(gh200("GH200 NUMA mode", "0.20.0", gpu_memory_utilization=0.995))
    # MemAvailable: 542.6 GiB of LPDDR5X + HBM less the host's 7.37 GiB, less the CUDA context's 0.5 GiB
    assert numa.budget.free_at_start_bytes / GIB == pytest.approx(542.6 - 7.37 - 0.5, abs=1e-6)
    assert numa.fits and numa.budget.startup_error is None


def test_from_0_20_the_host_sides_growth_is_non_torch_memory_on_a_numa_gh200() -> None:
    hbm, numa = estimate(gh200("GH200", "0.20.0")), estimate(gh200("GH200 NUMA mode", "0.20.0"))
    assert numa.budget.non_torch_bytes - hbm.budget.non_torch_bytes == UMA_HOST_GROWTH_BYTES
    assert numa.budget.kv_cache_bytes == hbm.budget.kv_cache_bytes - UMA_HOST_GROWTH_BYTES
    assert numa.budget.context_bytes == hbm.budget.context_bytes == int(0.5 * GIB)
    assert any("reads free memory as the host's available memory" in w for w in numa.warnings)


def test_before_0_20_the_checkpoints_page_cache_on_the_hbm_node_can_fail_the_check() -> None:
    hbm, numa = estimate(gh200("GH200", "0.19.1")), estimate(gh200("GH200 NUMA mode", "0.19.1"))
    assert numa.budget == hbm.budget  # the same arithmetic: cudaMemGetInfo of the HBM
    assert verdict(hbm) == "fits with margin"
    # 95.08 GiB free less the 14.96 GiB checkpoint = 80.1 < ceil(95.577 x 0.9) = 86.02 GiB
    assert verdict(numa) == "borderline"
    assert verdict_reason(numa) == (
        "On GH200 96GB, NUMA mode, vLLM 0.19.1 reads free memory through cudaMemGetInfo, which counts the kernel's "
        "pages on the HBM NUMA node as used (vllm#35313: 74.9 of 142.5 GiB free on a GH200): with the checkpoint's "
        "15.0 GiB cached, less than the 86.02 GiB it asks for can be free at start; drop the page cache before "
        "starting (sync; echo 3 > /proc/sys/vm/drop_caches).")


def test_a_checkpoint_that_fits_in_the_slack_leaves_the_check_safe() -> None:
    # Qwen3-0.6B: 1.11 GiB of weights; 95.08 - 1.11 = 93.97 >= 86.02 GiB
    small = estimate(gh200("GH200 NUMA mode", "0.19.1", model="Qwen/Qwen3-0.6B"))
    assert verdict(small) == "fits with margin"


def test_gb10_before_0_11_1_counts_the_page_cache_too() -> None:
    def gb10(version: str, utilization: float):
        return estimate(Scenario(model="Qwen/Qwen2.5-14B-Instruct", gpu="NVIDIA GB10", vllm_version=version,
                                 gpu_memory_utilization=utilization))

    # 121.69 - 7.37 = 114.32 GiB free; less the 27.51 GiB bf16 checkpoint (14.77e9 x 2 bytes) = 86.81 GiB
    assert verdict(gb10("0.10.2", 0.7)) == "fits with margin"  # ceil(121.69 x 0.70) = 85.18 GiB asked
    tight = gb10("0.10.2", 0.75)  # 91.27 GiB asked
    assert verdict(tight) == "borderline"
    assert verdict_reason(tight) == (
        "On GB10 (DGX Spark), vLLM 0.10.2 reads free memory through cudaMemGetInfo, which counts the host's page "
        "cache as used (it reports MemFree: NVIDIA's CUDA for Tegra app note): with the checkpoint's 27.5 GiB "
        "cached, less than the 91.27 GiB it asks for can be free at start; drop the page cache before starting "
        "(sync; echo 3 > /proc/sys/vm/drop_caches).")
    assert verdict(gb10("0.11.1", 0.75)) == "fits with margin"  # MemAvailable: the cache is available
