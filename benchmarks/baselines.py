"""The two methods our estimate is compared with, implemented as published (``shared/research/competitors.md``).

* **Seed article** (the simple method this project started from, see ``tests/test_kv_cache.py``): the KV cache
  gets what the weights leave of ``total x gpu_memory_utilization``, and a token costs
  ``2 x layers x hidden_size x bytes`` (K and V of every layer, all heads, no GQA). Weights are
  ``parameters x bytes per parameter``.
* **llm-d capacity planner** (config_explorer / llm-d-planner ``capacity_planner.py``, constants as in
  competitors.md §2): ``allocatable = gpu_memory x util x GPUs - weights - activation - non_torch x GPUs``, with a
  per-architecture activation constant per engine (5.5 GiB dense, 8.0 MoE, 2.5 multimodal; validated profiles
  Llama 4.8 and Qwen2/Qwen3 5.6, the "planner constant" column of llm-d's v0.19.0 accuracy report), non-torch 0.15 GiB
  per GPU at TP=1 and 0.6 GiB at TP>=2, CUDA graphs 0 ("included in activation"); KV per token
  ``layers x 2 x kv_heads x head_dim x bytes`` (MLA: ``layers x (kv_lora_rank + rope) x bytes``) in the config dtype;
  ``max_concurrent_requests = floor(allocatable / (per_token x max_model_len))``.

Both see the same inputs as our estimate (GPU memory, utilization, TP/PP, max_model_len); what they cannot express
they ignore, as they do. Figures are per GPU/rank like vLLM's, except tokens and concurrency (per engine).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from calculator.engine.estimate import Estimate
from calculator.model.weights import weight_bytes_per_rank
from calculator.units import GIB

LLMD_ACTIVATION_GIB = {"dense": 5.5, "moe": 8.0, "multimodal": 2.5}
LLMD_VALIDATED_ACTIVATION_GIB = {"LlamaForCausalLM": 4.8, "Qwen2ForCausalLM": 5.6, "Qwen3ForCausalLM": 5.6}
LLMD_NON_TORCH_TP1_GIB = 0.15
LLMD_NON_TORCH_TPN_GIB = 0.6
LLMD_GPU_MEMORY_UTILIZATION = 0.9  # llm-d's default when the user does not set it
SEED_GPU_MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True)
class Prediction:
    """One method's figures for one deployment (per GPU/rank; tokens and concurrency per engine)."""

    weights_gib: float | None
    available_kv_gib: float | None
    kv_cache_tokens: int | None
    num_gpu_blocks: int | None
    max_concurrency: float | None
    fits: bool | None


def ours(result: Estimate) -> Prediction:
    cap = result.capacity
    return Prediction(weights_gib=result.budget.weights_bytes / GIB,
                      available_kv_gib=result.budget.kv_cache_bytes / GIB, kv_cache_tokens=cap.kv_cache_tokens,
                      num_gpu_blocks=cap.num_gpu_blocks, max_concurrency=cap.max_concurrency, fits=result.fits)


def seed_article(result: Estimate, requested_util: float | None) -> Prediction:
    """KV = total x util - weights; tokens = KV / (2 x layers x hidden x bytes)."""
    s, spec = result.settings, result.model
    gpus = s.tensor_parallel_size * s.pipeline_parallel_size
    util = requested_util or SEED_GPU_MEMORY_UTILIZATION
    bytes_per_param = spec.quantization.weight_bits / 8 if spec.quantization else s.dtype_bytes
    weights = spec.num_params * bytes_per_param / gpus
    kv = s.gpu_memory_bytes * util - weights
    per_token = 2 * spec.num_hidden_layers * spec.hidden_size * _kv_element_bytes(result) / gpus
    tokens = max(int(kv // per_token), 0)
    return Prediction(weights_gib=weights / GIB, available_kv_gib=kv / GIB, kv_cache_tokens=tokens,
                      num_gpu_blocks=tokens // s.block_size, max_concurrency=tokens / s.max_model_len,
                      fits=tokens >= s.max_model_len)


def llm_d(result: Estimate, requested_util: float | None) -> Prediction:
    """llm-d's ``allocatable_kv_cache_memory`` / ``max_concurrent_requests`` with its published constants."""
    s, spec = result.settings, result.model
    tp, pp = s.tensor_parallel_size, s.pipeline_parallel_size
    gpus = tp * pp
    util = requested_util or LLMD_GPU_MEMORY_UTILIZATION
    # NOTE: llm-d reads the checkpoint's stored bytes from the Hub's safetensors headers; offline we count the
    # same tensors (one copy, as stored), which is what those headers sum to.
    model_bytes = weight_bytes_per_rank(spec, dtype_bytes=s.dtype_bytes, tensor_parallel_size=1,
                                        pipeline_parallel_size=1, quantization=spec.quantization).model_bytes
    non_torch_gib = LLMD_NON_TORCH_TPN_GIB if tp >= 2 else LLMD_NON_TORCH_TP1_GIB
    consumed = model_bytes + _llmd_activation_gib(result) * GIB + non_torch_gib * GIB * gpus
    allocatable = max(0.0, s.gpu_memory_bytes * util * gpus - consumed)
    per_token = _llmd_kv_bytes_per_token(result)
    tokens = int(allocatable // per_token)
    concurrency = math.floor(allocatable / (per_token * s.max_model_len))
    return Prediction(weights_gib=model_bytes / gpus / GIB, available_kv_gib=allocatable / gpus / GIB,
                      kv_cache_tokens=tokens, num_gpu_blocks=tokens // s.block_size, max_concurrency=concurrency,
                      fits=concurrency >= 1)


def _llmd_activation_gib(result: Estimate) -> float:
    spec = result.model
    if spec.architecture in LLMD_VALIDATED_ACTIVATION_GIB:
        return LLMD_VALIDATED_ACTIVATION_GIB[spec.architecture]
    if spec.moe is not None:
        return LLMD_ACTIVATION_GIB["moe"]
    return LLMD_ACTIVATION_GIB["multimodal" if spec.is_multimodal else "dense"]


def _llmd_kv_bytes_per_token(result: Estimate) -> float:
    """llm-d's per-token KV: every layer, the config dtype (it takes no --kv-cache-dtype), MLA latent unsplit."""
    spec = result.model
    dtype_bytes = {"float32": 4}.get(spec.config_dtype or "", 2)
    if spec.mla is not None:
        return spec.num_hidden_layers * spec.mla.latent_size * dtype_bytes
    return spec.num_hidden_layers * 2 * spec.num_key_value_heads * spec.head_dim * dtype_bytes


def _kv_element_bytes(result: Estimate) -> float:
    kv = result.settings.kv_cache_dtype
    return 1 if kv.startswith("fp8") else result.settings.dtype_bytes
