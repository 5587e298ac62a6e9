"""The empirical terms of the speed model, fitted on measured vLLM runs and cited by record id.

The records are ``shared/data/vllm-benchmarks/records.jsonl`` (copied to ``benchmarks/data/speed_records.jsonl``);
``benchmarks/speed_accuracy.py`` refits these terms (``--fit``), replays every record and publishes the residuals
in ``docs/speed-accuracy.md``. Each term has a physical meaning, so it carries over to models and GPUs that are
not in the records: none is a per-model or per-GPU fudge.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SpeedConstants(BaseModel):
    """Efficiencies and fixed costs that turn peak rates into step times."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    bandwidth_efficiency: float = Field(gt=0, le=1)  # achieved / peak HBM bandwidth in a decode step
    compute_efficiency: float = Field(gt=0, le=1)  # achieved / peak dense TFLOPS in prefill-sized GEMMs
    overlap_penalty: float = Field(ge=0, le=1)  # share of the smaller of memory and compute time not hidden
    step_overhead_s: float = Field(ge=0)  # per engine step: scheduler, input preparation, launch
    sequence_overhead_s: float = Field(ge=0)  # per running request per step: sampling, detokenizing, output
    kernel_overhead_s: float = Field(ge=0)  # per kernel per step: launch gap, ramp-up and tail (CUDA graphs)
    eager_kernel_overhead_s: float = Field(ge=0)  # per kernel per step without CUDA graphs: the CPU launch
    all_reduce_latency_s: float = Field(ge=0)  # per all-reduce call at TP > 1
    all_reduce_efficiency: float = Field(gt=0, le=1)  # achieved / link bandwidth for the all-reduce payload
    request_overhead_s: float = Field(ge=0)  # per request, before its first token: HTTP, tokenizer, detokenizer
    fallback_interconnect_bytes_s: float = Field(gt=0)  # TP on a GPU whose link is unknown: PCIe 4.0 x16


# Fitted by ``python benchmarks/speed_accuracy.py --fit`` on all 41 records (benchmarks/speed_fit.py: a robust loss,
# each source weighted equally, a pull towards physical priors as wide as physics leaves each term, eight starting
# points). What pins each term:
# * bandwidth_efficiency 0.85: single-request decode, ridgepoint-{a100,h100}-80g-llama3-8b-c1 (79.3 and 125.1 tok/s),
#   musgrave-a100-40g-llama31-8b-c1 (75 tok/s), wmx-l4-qwen25-0.5b-c1 (168 tok/s) and the batch-50 decode of
#   dbmart-a40-llama31-8b-c50 (TPOT 35.96 ms: weights plus 50 requests' KV).
# * compute_efficiency 0.58: long prefills, qwen3-1536-a100-80g-qwen3-14b-awq-c1-16k (16,000 tokens in 3.35 s),
#   tt356-8xh100-dsr1-0528-awq-c1-isl{1024,4096} and the 50-prompt bursts dbmart-a40-* (TTFT 0.76-1.43 s).
# * overlap_penalty 0.55 (half of the smaller of the memory and compute times of a batched decode step is not
#   hidden by the larger): batch 32-50 against batch 1, ridgepoint-*-c32 (1,894 and 2,936 tok/s), dbmart-a40-*-c50.
# * step_overhead_s 4.7 ms and sequence_overhead_s 28 us, the CPU time of a step (scheduler, input preparation,
#   per-request bookkeeping): paid on top of the GPU time by the synchronous engines of the records from vLLM 0.5-0.9
#   (tt356 and qwen3-1536 on 0.9.0, dbmart on 0.8, vllm-17788 on 0.8.5, vllm-12315 on 0.6.6, pricecompass on 0.5.4),
#   hidden behind the GPU step under async scheduling (wmx and musgrave on 0.23, ridgepoint on 0.28). The offline
#   batches dbmart-rtx4090-* (hundreds of running requests) weigh the per-request part.
# * kernel_overhead_s 6 us per kernel (calculator/speed/costs.py counts the kernels of each layer type): small
#   against large models at batch 1 (wmx L4 0.5B: 240 kernels a step; Llama 8B: 320) and the MLA + MoE layers of
#   tt356-8xh100-dsr1-0528-awq-c1-* (1,501 kernels a step: most of its 16.1 ms TPOT, where streaming the touched
#   experts takes ~1.5 ms). Counting kernels, not fitting a per-MoE-layer term, is what carries DeepSeek's cost over
#   from the dense models when tt356 is held out.
# * eager_kernel_overhead_s 18 us per kernel: qwen3-1536-a100-80g-qwen3-14b-awq-c1-16k (--enforce-eager, TPOT
#   20.63 ms). One source only; held out, its prior (15 us: a PyTorch op dispatched and launched from Python) holds.
# * all_reduce_latency_s 8 us (all_reduce_efficiency kept at its prior 0.7): the TP records tt356-8xh100-* (TP 8),
#   vllm-20710-2xb200-* (TP 2), pricecompass-6-2xa10g (TP 2 over PCIe), vllm-12315-4xa100 (TP 4).
# * request_overhead_s 21 ms: the first token of tiny prefills, wmx-l4-qwen25-0.5b-c1 (27 ms),
#   tt356-8xh100-dsr1-0528-awq-c1-isl128 (47 ms), vllm-20710-2xb200-llama33-70b-fp8-c1 (50 ms).
CUDA = SpeedConstants(
    bandwidth_efficiency=0.852, compute_efficiency=0.577, overlap_penalty=0.551, step_overhead_s=4.74e-3,
    sequence_overhead_s=28.3e-6, kernel_overhead_s=6e-6, eager_kernel_overhead_s=18.0e-6,
    all_reduce_latency_s=8.35e-6, all_reduce_efficiency=0.7, request_overhead_s=21.0e-3,
    fallback_interconnect_bytes_s=32e9,  # PCIe 4.0 x16, per direction
)
# ROCm: the hardware terms refitted on the one ROCm source, oracle-mi300x-llama31-405b-fp8-tp8-bs{1..256}
# (benchmark_latency on a 2024 ROCm stack: 3.53 s at batch 1 to 17.75 s at batch 256). One source: treat with care.
ROCM = CUDA.model_copy(update={"bandwidth_efficiency": 0.757, "compute_efficiency": 0.258,
                               "sequence_overhead_s": 55.3e-6, "all_reduce_latency_s": 9.36e-6})

# The uncertainty band: 80 % of the held-out errors (leave-one-source-out) fall within this factor each way
# (benchmarks/speed_accuracy.py prints them; docs/speed-accuracy.md).
BAND_FACTOR = {"ttft": 1.57, "tpot": 1.23, "throughput": 1.36}


def constants_for(platform: str) -> SpeedConstants:
    """The fitted constants for a platform ("cuda" or "rocm")."""
    return ROCM if platform == "rocm" else CUDA
