"""The estimate as one flat JSON object: the CLI's stable contract, also the dashboard's download."""

from __future__ import annotations

from .engine.estimate import Estimate
from .engine.uncertainty import kv_band, verdict


def estimate_summary(result: Estimate) -> dict[str, object]:
    """Every figure of one estimate (per GPU/rank unless the name says otherwise)."""

    kv_low, kv_high, tokens_low, tokens_high = kv_band(result)
    return {
        "model": result.model.model_id,
        "num_params": result.model.num_params,
        "checkpoint_num_params": result.model.checkpoint_num_params,
        "gpu": result.gpu.name if result.gpu else None,
        "gpu_memory_bytes": result.budget.total_bytes,
        "tensor_parallel_size": result.settings.tensor_parallel_size,
        "pipeline_parallel_size": result.settings.pipeline_parallel_size,
        "dtype": result.settings.dtype,
        "kv_cache_dtype": result.settings.kv_cache_dtype,
        "quantization": result.settings.quantization,
        "gpu_memory_utilization": result.settings.gpu_memory_utilization,
        "weights_bytes": result.budget.weights_bytes,
        "activation_bytes": result.budget.activation_bytes,
        "non_torch_bytes": result.budget.non_torch_bytes,
        "cudagraph_bytes": result.budget.cudagraph_bytes,
        "cuda_context_bytes": result.budget.context_bytes,
        "kv_cache_bytes": result.kv_cache_bytes,
        "kv_cache_bytes_low": kv_low,
        "kv_cache_bytes_high": kv_high,
        "kv_bytes_per_token": result.layout.kv_bytes_per_token,
        "bytes_per_block": result.layout.bytes_per_block,
        "block_size": result.layout.block_size,
        "num_kv_cache_groups": len(result.layout.groups),
        "num_gpu_blocks": result.capacity.num_gpu_blocks,
        "kv_cache_tokens": result.capacity.kv_cache_tokens,
        "kv_cache_tokens_low": tokens_low,
        "kv_cache_tokens_high": tokens_high,
        "max_concurrency": result.capacity.max_concurrency,
        "max_model_len": result.settings.max_model_len,
        "max_num_seqs": result.settings.max_num_seqs,
        "max_num_batched_tokens": result.settings.max_num_batched_tokens,
        "max_fitting_model_len": result.max_fitting_model_len,
        "fits": result.fits,
        "verdict": verdict(result),
        "error": result.error,
        "refusal": result.refusal,
        "vllm_version": str(result.rules.version),
        "vllm_era": result.rules.era,
        "log_lines": list(result.log_lines()),
        "warnings": list(result.warnings),
    }
