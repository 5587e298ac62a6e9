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
