"""The budget formula per era, checked against start-ups that printed every term (calibration records)."""

from __future__ import annotations

import pytest

from calculator import Scenario, estimate
from calculator.engine.memory import memory_budget
from calculator.units import GIB


def gib_budget(**terms):
    defaults = dict(formula="v1_sum_of_parts", gpu_memory_utilization=0.9, other_processes_bytes=0,
                    context_bytes=int(0.5 * GIB), weights_bytes=0, activation_bytes=0, non_torch_bytes=0,
                    cudagraph_bytes=0, subtracts_cudagraph=False, has_startup_check=True, platform="cuda")
    merged = {**defaults, **terms}
    for key in ("total_bytes", "weights_bytes", "activation_bytes", "non_torch_bytes", "cudagraph_bytes",
                "context_bytes", "other_processes_bytes"):
        if isinstance(merged.get(key), float):
            merged[key] = int(merged[key] * GIB)
    return memory_budget(**merged)


def test_budget_closes_like_the_llm_d_h100_llama_8b_startup():
    # llmd-h100-llama31-8b (vLLM 0.19): 79.18 GiB x 0.9 - 14.99 weights - 4.76 peak - 0.13 non-torch = 51.38 GiB.
    budget = gib_budget(total_bytes=79.18, weights_bytes=14.99, activation_bytes=4.76, non_torch_bytes=0.13)
    assert budget.kv_cache_bytes / GIB == pytest.approx(51.38, abs=0.01)
    assert budget.startup_error is None


def test_cuda_graphs_come_out_of_the_budget_from_0_20():
    base = dict(total_bytes=80.0, weights_bytes=15.0, activation_bytes=4.0, non_torch_bytes=0.5, cudagraph_bytes=1.0)
    old, new = gib_budget(**base), gib_budget(**base, subtracts_cudagraph=True)
    assert (old.kv_cache_bytes - new.kv_cache_bytes) / GIB == pytest.approx(1.0)
    assert not old.cudagraph_in_budget and new.cudagraph_in_budget


def test_startup_refuses_when_other_processes_leave_less_than_requested():
    budget = gib_budget(total_bytes=80.0, other_processes_bytes=10.0)
    assert budget.startup_error == (
        "Free memory on device cuda:0 (69.50/80.00 GiB) on startup is less than desired GPU memory utilization "
        "(0.9, 72.00 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.")


def test_v1_0_8_charged_other_processes_against_the_budget():
    per_instance = gib_budget(total_bytes=80.0, other_processes_bytes=4.0, weights_bytes=15.0)
    global_ = gib_budget(total_bytes=80.0, other_processes_bytes=4.0, weights_bytes=15.0, formula="v1_global",
                         has_startup_check=False)
    assert (per_instance.kv_cache_bytes - global_.kv_cache_bytes) / GIB == pytest.approx(4.5)


def test_extensible_cache_takes_what_is_free_after_warmup_minus_margin_and_peak():
    # 80 - 0.5 context - (15 + 0.13 + 0.5) = 63.87 free; margin max(1, 0.75 x 4.76) = 3.57; minus the peak 4.76.
    budget = gib_budget(formula="v1_extensible", gpu_memory_utilization=1.0, total_bytes=80.0, weights_bytes=15.0,
                        non_torch_bytes=0.13, cudagraph_bytes=0.5, activation_bytes=4.76)
    assert budget.kv_cache_bytes / GIB == pytest.approx(63.87 - 3.57 - 4.76, abs=1e-6)
    assert sum(s.bytes for s in budget.segments()) == budget.total_bytes


def test_kv_cache_memory_bytes_ignores_utilization():
    budget = gib_budget(total_bytes=80.0, weights_bytes=70.0, kv_cache_memory_bytes=8 * GIB)
    assert budget.kv_cache_bytes == 8 * GIB


def test_segments_stack_to_the_gpu_memory():
    budget = gib_budget(total_bytes=80.0, weights_bytes=15.0, activation_bytes=4.0, non_torch_bytes=0.5,
                        cudagraph_bytes=1.0, other_processes_bytes=2.0, gpu_memory_utilization=0.85)
    assert sum(s.bytes for s in budget.segments()) == budget.total_bytes


@pytest.mark.parametrize(("version", "expected"), [
    ("0.11.0", "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
               "the engine."),
    ("0.13.0", "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
               "the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."),
    ("0.22.0", "No available memory for the cache blocks. HINT See "
               "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."),
])
def test_the_no_memory_error_is_worded_as_each_version_words_it(version, expected):
    # vllm/v1/core/kv_cache_utils.py: the bare sentence to 0.12, the docs link from 0.13, the version's hint from 0.22
    from calculator.engine.memory import no_memory_error
    from calculator.engine.vllm_versions import VllmVersion

    assert no_memory_error(VllmVersion.parse(version), "HINT") == expected


def test_the_utilization_note_says_when_the_slider_changes_nothing_or_means_something_else() -> None:
    """Issue 9 item 6: every reason the gpu_memory_utilization slider does not move the numbers is named."""
    from calculator.engine.advice import utilization_effect

    base = Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb", max_model_len=8192)
    assert utilization_effect(estimate(base.replace(vllm_version="0.32.0", gpu_memory_utilization=0.8))) is None
    assert utilization_effect(estimate(base.replace(vllm_version="0.34.0", gpu_memory_utilization=0.5))) == (
        "vLLM 0.34.0 reinterprets it: with the extensible KV cache it caps weights + peak + KV cache (default 1.0) "
        "instead of reserving that share")
    assert utilization_effect(estimate(base.replace(vllm_version="0.32.0", kv_cache_memory_bytes=8 << 30))) == (
        "ignored: --kv-cache-memory-bytes fixes the KV cache")
    assert utilization_effect(estimate(base.replace(vllm_version="0.32.0", num_gpu_blocks_override=1000))) == (
        "only decides whether vLLM starts: --num-gpu-blocks-override fixes the block count")
    cpu = Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu=None, device="cpu", max_model_len=8192)
    assert utilization_effect(estimate(cpu)) == (
        "the CPU backend ignores it: VLLM_CPU_KVCACHE_SPACE sets the KV cache")
