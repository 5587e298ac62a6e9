"""The peers' published speed methods, implemented from their formulas (shared/data/vllm-benchmarks/README.md).

* ridgepoint (Isk4R1oT/ridgepoint src/core.rs@2495fc4): one-request roofline. Decode tok/s = summed bandwidth x
  MBU 0.61 / (active weight bytes + KV bytes at the context); TTFT = 2 x params x prompt / (summed FLOPS x MFU 0.40).
  It has no batching model; we extend it as its ridge point suggests: per-user speed holds up to the ridge batch
  B* = (FLOPS / bandwidth) x weight bytes / (2 x params) and is shared beyond it.
* llm-optimizer (BentoML ``estimate_llm_performance``, used by llm-d's GPU recommender): prefill FLOPs x
  concurrency / (summed TFLOPS x 0.45), or bytes / bandwidth if that is larger; decode step = (weights + KV of
  input_len + 1 for every request + activations) / summed bandwidth at 100 %, or FLOPs / (TFLOPS x 0.30) if
  larger; output tok/s = concurrency / ITL; E2E = TTFT + output_len x ITL.

Neither models a request rate, so records measured under ``--request-rate R`` get no peer prediction; under
``--request-rate inf`` the peers are given the concurrency the engine ran at (``max_num_seqs`` when printed).
"""

from __future__ import annotations

from calculator.engine.estimate import Estimate
from calculator.speed.costs import forward_costs
from calculator.speed.hardware import gpu_rates

from benchmarks import speed_replay as replay

RIDGEPOINT_MBU = 0.61
RIDGEPOINT_MFU = 0.40
LLM_OPTIMIZER_MFU_PREFILL = 0.45
LLM_OPTIMIZER_MFU_DECODE = 0.30


def _facts(result: Estimate) -> dict[str, float]:
    """Whole-deployment figures both peers start from: summed rates, model bytes, parameters, KV per token."""
    rates = gpu_rates(result.gpu, result.quantization)
    costs = forward_costs(result)
    gpus = result.num_gpus
    tp = result.settings.tensor_parallel_size
    total_params = result.model.num_params
    active_flops_per_token = costs.linear_flops_per_token * tp * result.settings.pipeline_parallel_size
    weight_bytes = sum(result.weights_by_role.values()) * gpus  # every rank's copy (replicated pieces too)
    active_share = 1.0
    if result.model.moe:
        moe = result.model.moe
        expert = result.weights_by_role.get("expert", 0) * gpus
        active_share = 1 - expert / weight_bytes * (1 - moe.experts_per_token / moe.num_experts)
    return {"bandwidth": rates.memory_bandwidth_bytes_s * gpus, "flops": rates.peak_flops * gpus,
            "weight_bytes": weight_bytes, "active_weight_bytes": weight_bytes * active_share,
            "params": total_params, "active_params": active_flops_per_token / 2,
            "kv_bytes_per_token": result.layout.kv_bytes_per_token * gpus
            / max(1, result.settings.pipeline_parallel_size),
            "hidden": result.model.hidden_size, "layers": result.model.num_hidden_layers}


def _load(record: dict) -> int | None:
    run = replay.run_for(record)
    if run.mode == "rate":
        return None
    if run.mode == "rate_inf":
        return min(int(record["num_prompts"]), run.settings.get("max_num_seqs") or int(record["num_prompts"]))
    return int(record["concurrency"] or record["num_prompts"])  # an offline burst: every prompt at once


def ridgepoint(record: dict) -> dict[str, float] | None:
    concurrency = _load(record)
    if concurrency is None:
        return None
    f = _facts(replay.deployment(record["id"]))
    prompt, output = replay.lengths(record)
    context = prompt + output / 2
    single_tok_s = f["bandwidth"] * RIDGEPOINT_MBU / (f["active_weight_bytes"] + f["kv_bytes_per_token"] * context)
    ridge = f["flops"] / f["bandwidth"] * f["weight_bytes"] / (2 * f["params"])
    per_user = single_tok_s * min(1.0, ridge / concurrency)
    ttft_s = 2 * f["active_params"] * prompt / (f["flops"] * RIDGEPOINT_MFU)
    e2e_s = ttft_s + output / per_user
    return {"ttft_ms": ttft_s * 1e3, "tpot_ms": 1e3 / per_user, "output_tok_s": concurrency * per_user,
            "request_per_s": concurrency / e2e_s, "e2e_ms": e2e_s * 1e3}


def llm_optimizer(record: dict) -> dict[str, float] | None:
    concurrency = _load(record)
    if concurrency is None:
        return None
    f = _facts(replay.deployment(record["id"]))
    prompt, output = replay.lengths(record)
    attention_flops = 4 * f["layers"] * f["hidden"] * prompt * prompt / 2  # QK^T and PV over the causal prompt
    prefill_flops = (2 * f["active_params"] * prompt + attention_flops) * concurrency
    prefill_bytes = f["weight_bytes"] + f["kv_bytes_per_token"] * prompt * concurrency
    ttft_s = max(prefill_flops / (f["flops"] * LLM_OPTIMIZER_MFU_PREFILL), prefill_bytes / f["bandwidth"])
    activations = 2 * f["hidden"] * f["layers"] * concurrency * 2
    decode_bytes = f["weight_bytes"] + f["kv_bytes_per_token"] * (prompt + 1) * concurrency + activations
    decode_flops = 2 * f["active_params"] * concurrency
    itl_s = max(decode_bytes / f["bandwidth"], decode_flops / (f["flops"] * LLM_OPTIMIZER_MFU_DECODE))
    e2e_s = ttft_s + output * itl_s
    return {"ttft_ms": ttft_s * 1e3, "tpot_ms": itl_s * 1e3, "output_tok_s": concurrency / itl_s,
            "request_per_s": concurrency / e2e_s, "e2e_ms": e2e_s * 1e3}
