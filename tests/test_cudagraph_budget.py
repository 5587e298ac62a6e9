"""Whether vLLM takes its CUDA-graph estimate out of the KV budget: per version, platform, model runner.

The rules are read from the released wheels (``calculator/engine/cudagraph_budget.py`` cites each); the two
start-ups at the end are what vLLM printed in its memory breakdown.
"""

from __future__ import annotations

import pytest

from calculator import Scenario, estimate
from calculator.engine.cudagraph_budget import subtracts_cudagraph_estimate, uses_model_runner_v2
from calculator.engine.vllm_versions import rules_for
from calculator.model.model_source import load_model_spec
from calculator.model.spec import LayerAttention
from calculator.units import GIB

LLAMA, QWEN3, QWEN3_FP8 = "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B", "Qwen/Qwen3-8B-FP8"
GPT_OSS, QWEN3_MOE, MIXTRAL = "openai/gpt-oss-20b", "Qwen/Qwen3-30B-A3B", "mistralai/Mixtral-8x7B-Instruct-v0.1"


def subtracted(model: str, version: str, *, gpu: str = "h100", enforce_eager: bool = False) -> bool:
    result = estimate(Scenario(model=model, gpu=gpu, vllm_version=version, max_model_len=4096,
                               enforce_eager=enforce_eager))
    return result.budget.cudagraph_in_budget


@pytest.mark.parametrize(("model", "version", "expected"), [
    (LLAMA, "0.17.1", False),  # no estimate before 0.18
    (LLAMA, "0.19.1", False),  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to "0"
    (LLAMA, "0.20.0", True),
    (QWEN3, "0.21.0", True),
    (QWEN3, "0.22.0", False),  # Model Runner V2 by default for Qwen3ForCausalLM, estimating 0
    (QWEN3_FP8, "0.22.0", True),  # quantized: V1 runner in 0.22-0.23
    (LLAMA, "0.22.0", True),
    (LLAMA, "0.23.0", False),
    (QWEN3_MOE, "0.24.0", True),  # Qwen3MoeForCausalLM is not in 0.24's V2 list
    (MIXTRAL, "0.24.0", True),
    (QWEN3_FP8, "0.25.0", False),  # 0.25: every non-MoE, non-hybrid generative model runs V2
    (LLAMA, "0.26.0", False),
    (GPT_OSS, "0.26.0", True),  # MoE and not listed: V1 runner
    (QWEN3, "0.28.0", False),
    (QWEN3, "0.29.0", True),  # V2 measures its graphs from 0.29
    (LLAMA, "0.33.0", True),
])
def test_per_version_and_model_runner(model: str, version: str, expected: bool) -> None:
    assert subtracted(model, version) is expected


def test_enforce_eager_captures_no_graphs() -> None:
    assert not subtracted(LLAMA, "0.21.0", enforce_eager=True)


def test_rocm_is_estimated_from_0_26() -> None:
    assert not subtracted(GPT_OSS, "0.25.0", gpu="mi300x")
    assert subtracted(GPT_OSS, "0.26.0", gpu="mi300x")


def test_a_hybrid_model_stays_on_the_v1_runner_unless_listed() -> None:
    spec = load_model_spec(QWEN3)
    hybrid = spec.model_copy(update={"layers": (*spec.layers[:-1], LayerAttention(
        kind="mamba", num_kv_heads=0, head_size=0, head_size_v=0, mamba_conv_dim=8, mamba_conv_len=4,
        mamba_temporal_shape=(1, 1, 1)))})
    assert uses_model_runner_v2(rules_for("0.28.0"), spec, None)
    assert not uses_model_runner_v2(rules_for("0.28.0"), hybrid, None)
    assert subtracts_cudagraph_estimate(rules_for("0.27.1"), hybrid, None, device="cuda", enforce_eager=False)[0]


def test_the_reason_names_the_model_runner() -> None:
    _, why = subtracts_cudagraph_estimate(rules_for("0.26.0"), load_model_spec(LLAMA), None, device="cuda",
                                          enforce_eager=False)
    assert why == ("Model Runner V2 (vLLM 0.26.0's default for LlamaForCausalLM) estimates 0 before 0.29; the "
                   "graphs use the (1 - util) headroom")


def test_dense_0_26_closes_without_the_graphs_like_the_b300_dspark_startup() -> None:
    # file-b300-dsv4-flash-0731-v0260-dspark (Model Runner V2): 246.27 - 156.32 - 2.99 - 0.23 = 86.73 GiB of KV;
    # the 3.06 GiB graph pool lives outside. A Llama on 0.26 takes the same path: KV = util x total - the parts.
    result = estimate(Scenario(model=LLAMA, gpu="b300", vllm_version="0.26.0", max_model_len=4096))
    b = result.budget
    assert b.kv_cache_bytes == b.requested_bytes - b.weights_bytes - b.activation_bytes - b.non_torch_bytes
    assert b.cudagraph_bytes > 0 and not b.cudagraph_in_budget


def test_a_0_20_budget_takes_the_graphs_out() -> None:
    result = estimate(Scenario(model=LLAMA, gpu="h100", vllm_version="0.20.0", max_model_len=4096))
    b = result.budget
    assert b.kv_cache_bytes == (b.requested_bytes - b.weights_bytes - b.activation_bytes - b.non_torch_bytes
                                - b.cudagraph_bytes)
    assert b.cudagraph_bytes / GIB > 0.1
