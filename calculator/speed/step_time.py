"""The roofline time of one engine step: on the GPU, the larger of streaming the bytes and doing the FLOPs, plus
the tensor-parallel all-reduces, a fixed latency per kernel and per MoE layer; on the CPU, scheduling the step. The
two add up when vLLM schedules synchronously, and overlap under async scheduling (0.14+), where the step takes the
longer. The latency per kernel depends on how vLLM replays the step: one full CUDA graph (a decode-only step of V0,
and of V1 from 0.11) runs its kernels back to back; piecewise graphs (V1 before 0.11, and any step with prompt
tokens after) also break at every layer's attention; without graphs (``--enforce-eager``) the CPU launches each.

A step is what vLLM's scheduler hands the model runner once: some decode tokens (one per running request) and,
with chunked prefill, some prompt tokens, all in one forward pass over the same weights. LoRA adds the adapters'
A and B (streamed once per adapter in the batch) and a shrink and an expand matmul on every wrapped module.
Speculative decoding verifies k proposals per decoding request in the same pass (k + 1 query tokens each) after k
proposal passes of the drafter; the tokens it yields per step are ``ForwardCosts.tokens_per_decode_step``. At high
concurrency the step turns compute-bound and the k extra tokens per request cost more than they save.
With ``--data-parallel-size`` > 1 on an MoE model every MoE layer works on all engines' tokens (vLLM keeps the DP
engines in lockstep, so each runs a step of the same size) and dispatches and combines them over the link
(``moe_dispatch.py``).
Expert GEMMs that dequantize their weights inside the K loop (MXFP4 experts on CDNA3, ``costs.py``) take at least a
measured floor per call at decode, above the time their bytes take. The routed experts' FLOPs run at a measured
share of the dense GEMM rate (vLLM's fused-MoE kernels as timed on the card, ``expert_kernels.py``), which slows the
steps that are compute-bound: prefill and large batches of an MoE model.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, computed_field

from .calibration import SpeedConstants
from .costs import TP_ALL_REDUCES_PER_LAYER, ForwardCosts
from .hardware import GpuRates
from .mla_kernels import excess_at
from .moe_dispatch import moe_dispatch_s


class StepTime(BaseModel):
    """One step on the busiest rank, split into its parts (seconds)."""

    model_config = ConfigDict(frozen=True)
    memory_s: float  # bytes / (HBM bandwidth x efficiency), and expert GEMM floors above their bytes (costs.py)
    compute_s: float  # FLOPs / (the achievable matmul rate of the compute path x efficiency)
    communication_s: float  # TP all-reduces (0 at TP = 1) and the MoE layers' DP dispatch and combine
    overhead_s: float  # on the GPU: the fixed latency of every kernel the step launches and every graph break
    overlap_penalty: float = 0.0  # share of the smaller of memory and compute time that does not overlap
    host_s: float = 0.0  # on the CPU: scheduling the step, preparing inputs, per-request bookkeeping
    host_overlapped: bool = False  # async scheduling: the CPU prepares step n+1 while the GPU runs step n

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_s(self) -> float:
        roofline = max(self.memory_s, self.compute_s) + self.overlap_penalty * min(self.memory_s, self.compute_s)
        device = roofline + self.communication_s + self.overhead_s
        return max(device, self.host_s) if self.host_overlapped else device + self.host_s

    @computed_field  # type: ignore[prop-decorator]
    @property
    def bound(self) -> Literal["memory", "compute"]:
        return "memory" if self.memory_s >= self.compute_s else "compute"


def step_time(costs: ForwardCosts, rates: GpuRates, constants: SpeedConstants, *, decode_tokens: float,
              decode_context_tokens: float, prefill_tokens: float = 0.0, prefill_start_tokens: float = 0.0,
              prefill_prompts: float = 1.0, requests: float | None = None, prompt_step_share: float | None = None,
              with_overheads: bool = True) -> StepTime:
    """Time of one step with ``decode_tokens`` running requests at a mean context and ``prefill_tokens`` of
    prompt, split into ``prefill_prompts`` equal chunks that each start after ``prefill_start_tokens``.

    ``requests`` (default: the decode tokens, plus the prompts when a chunk is present) carry recurrent state.
    ``prompt_step_share``: for an average over many steps, the share of them that carry prompt tokens and so run
    as piecewise graphs (default: all of them when ``prefill_tokens`` is set, none otherwise).
    ``with_overheads=False`` returns just ``(memory_s, compute_s)`` (searches that only compare the two).
    """
    k = costs.speculative_tokens
    # NOTE: with speculative decoding each decoding request verifies its k proposals and its own token in one pass.
    tokens = decode_tokens * (k + 1) + prefill_tokens
    if requests is None:
        requests = decode_tokens + (prefill_prompts if prefill_tokens else 0)
    moe_tokens = tokens * costs.moe_token_ranks
    streamed = (costs.dense_weight_bytes + costs.expert_weight_bytes * costs.touched_expert_fraction(moe_tokens)
                + decode_tokens * costs.kv_read_bytes(decode_context_tokens)
                + (costs.kv_read_bytes(prefill_start_tokens) if prefill_tokens else 0.0)
                + tokens * costs.activation_bytes_per_token
                + requests * costs.recurrent_state_bytes_per_request
                + min(costs.lora_slots, requests) * costs.lora_slot_bytes
                + k * (costs.draft_weight_bytes
                       + decode_tokens * costs.draft_kv_bytes_per_context_token * decode_context_tokens))
    # NOTE: one logits row per request in the step: each decode's tokens (k + 1 with speculation) and the last token
    # of each prompt chunk (vLLM computes a partial prefill's and discards its sample).
    logits_rows = decode_tokens * (k + 1) + (prefill_prompts if prefill_tokens else 0.0)
    # NOTE: the routed experts' FLOPs are counted at the dense rate's ``expert_gemm_share`` (expert_kernels.py).
    expert_surcharge = 1.0 / costs.expert_gemm_share - 1.0
    flops = (tokens * (costs.linear_flops_per_token - costs.lm_head_flops_per_token + costs.lora_flops_per_token
                       + costs.expert_flops_per_token * expert_surcharge)
             + logits_rows * costs.lm_head_flops_per_token
             + decode_tokens * (k + 1) * costs.decode_attention_flops(decode_context_tokens)
             + prefill_prompts * costs.prefill_attention_flops(prefill_tokens / prefill_prompts, prefill_start_tokens)
             + k * decode_tokens * costs.draft_flops_per_token)
    bandwidth = rates.streaming_bandwidth_bytes_s * constants.bandwidth_efficiency
    memory_s = streamed / bandwidth
    if costs.expert_gemm_floor_s and moe_tokens:
        # NOTE: expert GEMMs that dequantize in their K loop (MXFP4 on CDNA3, costs.py) take the longer of
        # streaming the touched experts and their per-call floor; the floor is in the memory-side time, so a
        # compute-bound step (long prefills) still hides it.
        expert_s = costs.expert_weight_bytes * costs.touched_expert_fraction(moe_tokens) / bandwidth
        memory_s += max(0.0, costs.moe_layers * costs.expert_gemm_floor_s - expert_s)
    # NOTE: the linear layers a quantized checkpoint leaves 16-bit run vLLM's BF16 GEMMs (UnquantizedLinearMethod):
    # gpt-oss's attention and LM head beside its MXFP4 experts, a checkpoint's exclusion list, an LM head that no
    # method quantizes. Attention's own FLOPs stay at the path's ceiling, as fitted (at the BF16 one, rescored with
    # each fold's constants, Qwen3-235B FP8 on 4 x B200 went from -10 to -13 % on throughput).
    bf16_flops = (tokens * (costs.bf16_linear_flops_per_token - costs.bf16_lm_head_flops_per_token)
                  + logits_rows * costs.bf16_lm_head_flops_per_token)
    compute_s = ((flops - bf16_flops) / rates.achievable_flops
                 + bf16_flops / rates.bf16_achievable_flops) / constants.compute_efficiency
    if not with_overheads:
        return memory_s, compute_s  # type: ignore[return-value]
    launched = costs.kernels_per_step + costs.lora_kernels + k * costs.draft_kernels
    if not costs.cuda_graphs:
        kernels = launched * (constants.kernel_overhead_s + constants.eager_kernel_overhead_s)
    else:
        pieces = launched * constants.kernel_overhead_s + costs.layers * constants.piecewise_layer_overhead_s
        share = (1.0 if prefill_tokens else 0.0) if prompt_step_share is None else prompt_step_share
        if not costs.full_decode_graphs:
            share = 1.0
        kernels = share * pieces + (1.0 - share) * launched * constants.full_graph_kernel_overhead_s
    kernels += costs.moe_layers * constants.moe_layer_overhead_s
    if costs.mla_decode_excess is not None and decode_tokens:
        # NOTE: the MLA block's measured latency beyond its bytes was timed in one full CUDA graph, whose kernel gaps
        # the line above already counts; what it exceeds them by is the block's own (mla_kernels.py).
        beyond = (excess_at(costs.mla_decode_excess, decode_tokens * (k + 1))
                  - costs.mla_kernels_per_layer * constants.full_graph_kernel_overhead_s)
        kernels += costs.mla_layers * max(0.0, beyond)
    host = constants.step_overhead_s + constants.sequence_overhead_s * requests
    # NOTE: model_construct skips validation: every field is a float computed above (this runs ~10^4 times per
    # recommender call).
    return StepTime.model_construct(memory_s=memory_s, compute_s=compute_s, overlap_penalty=constants.overlap_penalty,
                                    communication_s=(all_reduce_s(costs, rates, constants, tokens)
                                                     + moe_dispatch_s(costs, rates, constants, tokens)),
                                    overhead_s=kernels,
                                    host_s=host, host_overlapped=costs.async_scheduling)


def all_reduce_s(costs: ForwardCosts, rates: GpuRates, constants: SpeedConstants, tokens: float) -> float:
    """Two ring all-reduces per layer of ``tokens x hidden`` activations: 2(tp-1)/tp of the payload crosses each
    GPU's link, plus a fixed latency per call (launch and synchronisation)."""
    tp = costs.tensor_parallel_size
    if tp == 1:
        return 0.0
    link = rates.interconnect_bytes_s or constants.fallback_interconnect_bytes_s
    payload = tokens * costs.all_reduce_bytes_per_token
    one = constants.all_reduce_latency_s + 2 * (tp - 1) / tp * payload / (link * constants.all_reduce_efficiency)
    return TP_ALL_REDUCES_PER_LAYER * costs.layers * one
