"""V0 turns chunked prefill on by itself past 32K tokens (vLLM 0.7.2 engine/arg_utils.py ``create_engine_config``)
and then batches 2,048 tokens (0.7 config.py ``SchedulerConfig``), 512 in 0.6 (a 0.6.4 log prints "Chunked prefill is
enabled with max_num_batched_tokens=512."); otherwise V0 must fit a whole prompt in one batch."""

from __future__ import annotations

import pytest

from calculator.engine.estimate import estimate
from calculator.scenario import Scenario

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.mark.parametrize(("version", "max_model_len", "device", "batched"), [
    ("0.7.2", 131072, None, 2048),  # long context on CUDA: chunked prefill, 2,048 tokens
    ("0.6.6", 131072, None, 512),  # the 0.6 releases' chunked-prefill budget
    ("0.7.2", 32768, None, 32768),  # not past 32K: the whole prompt in one batch
    ("0.7.2", 131072, "rocm", 131072),  # not on ROCm (arg_utils: ``not current_platform.is_rocm()``)
])
def test_v0_long_context_chunked_prefill(version, max_model_len, device, batched):
    scenario = Scenario(model=LLAMA, gpu="a100-sxm-80gb", vllm_version=version, max_model_len=max_model_len,
                        device=device)
    assert estimate(scenario).settings.max_num_batched_tokens == batched


def test_lora_keeps_the_whole_prompt_batch():
    scenario = Scenario(model=LLAMA, gpu="a100-sxm-80gb", vllm_version="0.7.2", max_model_len=131072,
                        enable_lora=True)
    assert estimate(scenario).settings.max_num_batched_tokens == 131072


DEEPSEEK = "deepseek-ai/DeepSeek-V3"


@pytest.mark.parametrize(("version", "max_model_len", "gpu", "capped"), [
    ("0.7.3", None, "h200-141gb", True),  # 163,840 tokens on CUDA: 2,048 batched, then chunking forced off
    ("0.7.1", None, "h200-141gb", True),
    ("0.7.3", 32768, "h200-141gb", False),  # not past 32K: the whole prompt fits the batch
    ("0.7.3", None, "mi300x-192gb", False),  # ROCm never chunked: 163,840 batched
    ("0.8.0", None, "h200-141gb", False),  # 0.8 forces it off on non-GPU platforms only
    ("0.6.6", None, "h200-141gb", False),  # before MLA (0.7.1) the model ran plain attention
])
def test_mla_in_0_7_turns_chunking_off_after_the_batch_was_sized_so_long_prompts_are_refused(version, max_model_len,
                                                                                             gpu, capped):
    # vLLM 0.7.1-0.7.3 VllmConfig.__post_init__: "MLA is enabled; forcing chunked prefill and prefix caching to be
    # disabled." after SchedulerConfig took 2,048 tokens; the V0 scheduler then caps a prompt at
    # min(max_model_len, max_num_batched_tokens) ("Input prompt (32889 tokens) is too long and exceeds limit of
    # 2048", vllm#13209 on 0.7.2).
    result = estimate(Scenario(model=DEEPSEEK, gpu=gpu, vllm_version=version, tensor_parallel_size=8,
                               max_model_len=max_model_len))
    warnings = [w for w in result.warnings if "exceeds limit of" in w]
    assert bool(warnings) is capped
    if capped:
        assert result.settings.max_num_batched_tokens == 2048 and "exceeds limit of 2048" in warnings[0]
        assert "--max-num-batched-tokens 163840" in warnings[0]


def test_mla_in_0_7_turns_prefix_caching_off_whatever_the_flag_says():
    from calculator.engine.workload import prefix_caching_enabled

    asked = estimate(Scenario(model=DEEPSEEK, gpu="h200-141gb", vllm_version="0.7.3", tensor_parallel_size=8,
                              max_model_len=32768, enable_prefix_caching=True))
    assert not prefix_caching_enabled(asked)
    assert any("--enable-prefix-caching has no effect" in w for w in asked.warnings)
    llama = estimate(Scenario(model=LLAMA, gpu="a100-sxm-80gb", vllm_version="0.7.3", enable_prefix_caching=True))
    assert prefix_caching_enabled(llama)  # not an MLA model
