"""The estimate as one flat JSON object: the CLI's stable contract, also the dashboard's download."""

from __future__ import annotations

import math

from .engine.estimate import Estimate, all2all_bytes, moe_workspace
from .engine.uncertainty import confidence, coverage_notes, kv_band, verdict, verdict_reason
from .engine.workload import Workload, workload_capacity


def requests_at_once(result: Estimate) -> tuple[int, str]:
    """Requests of ``max_model_len`` tokens one engine runs at once, and the limit that binds (``kv_cache`` or
    ``max_num_seqs``): vLLM's "Maximum concurrency" counts KV blocks, but the scheduler never runs more than
    ``max_num_seqs`` sequences."""
    kv_limited = math.floor(result.capacity.max_concurrency)
    seqs = result.settings.max_num_seqs
    return (seqs, "max_num_seqs") if seqs < kv_limited else (kv_limited, "kv_cache")


def estimate_summary(result: Estimate, workload: Workload | None = None) -> dict[str, object]:
    """Every figure of one estimate (per GPU/rank unless the name says otherwise); with a workload, also how
    many of its requests run at once and which limit binds."""
    running, limit = requests_at_once(result)
    extra: dict[str, object] = {}
    if workload is not None:
        capacity = workload_capacity(result, workload)
        extra = {"workload_concurrency": capacity.concurrency_p95,
                 "workload_concurrency_kv_limited": capacity.kv_concurrency_p95,
                 "workload_concurrency_limited_by": "kv_cache" if capacity.limited_by_p95 == "KV cache"
                 else "max_num_seqs",
                 "workload_concurrency_deployment": capacity.deployment_concurrency_p95}

    kv_low, kv_high, tokens_low, tokens_high = kv_band(result)
    return {
        "model": result.model.model_id,
        "num_params": result.model.num_params,
        "checkpoint_num_params": result.model.checkpoint_num_params,
        "gpu": result.gpu.name if result.gpu else None,
        "gpu_memory_bytes": result.budget.total_bytes,
        "tensor_parallel_size": result.settings.tensor_parallel_size,
        "pipeline_parallel_size": result.settings.pipeline_parallel_size,
        "interconnect": result.settings.interconnect,
        "enable_expert_parallel": result.scenario.enable_expert_parallel,
        "enable_eplb": result.scenario.enable_eplb,
        "num_redundant_experts": result.scenario.num_redundant_experts,
        "dtype": result.settings.dtype,
        "kv_cache_dtype": result.settings.kv_cache_dtype,
        "quantization": result.settings.quantization,
        "gpu_memory_utilization": result.settings.gpu_memory_utilization,
        "weights_bytes": result.budget.weights_bytes,
        # EPLB's state and its resident one-layer buffer (engine/eplb.py): part of weights_bytes, as vLLM counts
        # them in "Model loading took"; the redundant experts themselves are in the expert weights.
        "eplb_bytes": result.weights_by_role.get("eplb", 0),
        "lora_bytes": result.budget.lora_bytes,
        "draft_weights_bytes": result.budget.draft_weights_bytes,
        "speculative_method": result.proposer.method if result.proposer else None,
        "num_speculative_tokens": result.proposer.num_speculative_tokens if result.proposer else None,
        "speculative_acceptance_rate": result.proposer.acceptance_rate if result.proposer else None,
        "activation_bytes": result.budget.activation_bytes,
        "non_torch_bytes": result.budget.non_torch_bytes,
        "all2all_buffer_bytes": all2all_bytes(  # part of non_torch_bytes
            result.scenario, result.model, result.rules, result.settings),
        # the fused-MoE workspace (engine/moe_workspace.py): part of activation_bytes, of non_torch_bytes from 0.27
        "moe_workspace_bytes": moe_workspace(result),
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
        "max_running_requests": running,
        "max_running_requests_limited_by": limit,
        "recurrent_state_slots": result.state_slots,
        "data_parallel_size": result.scenario.data_parallel_size,
        "num_gpus_total": result.num_gpus * result.scenario.data_parallel_size,
        "max_model_len": result.settings.max_model_len,
        "max_num_seqs": result.settings.max_num_seqs,
        "max_num_batched_tokens": result.settings.max_num_batched_tokens,
        "max_fitting_model_len": result.max_fitting_model_len,
        "fits": result.fits,
        "verdict": verdict(result),
        "verdict_reason": verdict_reason(result),
        "confidence": confidence(result),
        "coverage_gaps": coverage_notes(result),
        "error": result.error,
        "refusal": result.refusal,
        "vllm_version": str(result.rules.version),
        "vllm_era": result.rules.era,
        "log_lines": list(result.log_lines()),
        "warnings": list(result.warnings),
        **extra,
    }
