"""The empirical terms of the speed model, fitted on measured vLLM runs and cited by record id.

The records are ``shared/data/vllm-benchmarks/records.jsonl`` (copied to ``benchmarks/data/speed_records.jsonl``)
and the runs mined for issue 19 (``benchmarks/data/speed_records_mined.jsonl``);
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


# Fitted by ``python benchmarks/speed_accuracy.py --fit`` on the 83 scored records (the shared ones and
# ``benchmarks/data/speed_records_mined.jsonl``, tt-inference-server's sweeps replayed with the prefixes their earlier
# runs left cached, 5 Dec 2026; benchmarks/speed_fit.py: a robust loss, each source weighted equally, a pull towards
# physical priors as wide as physics leaves each term, eight starting points). What pins
# each term:
# * bandwidth_efficiency 0.80: single-request decode, ridgepoint-{a100,h100}-80g-llama3-8b-c1 (79.3 and 125.1 tok/s),
#   musgrave-a100-40g-llama31-8b-c1, wmx-l4-qwen25-0.5b-c1, the one-request rows of tt340-a100-qwen3-14b-* and the
#   batch-50 decode of dbmart-a40-llama31-8b-c50.
# * compute_efficiency 0.57: long prefills, qwen3-1536-a100-80g-qwen3-14b-awq-c1-16k (16,000 tokens in 3.35 s),
#   tt356-8xh100-dsr1-0528-awq-c1-isl{1024,4096}, tt340-a100-qwen3-14b-isl8192-osl128-c1 and the 50-prompt bursts
#   dbmart-a40-*.
# * overlap_penalty 0.19 (a fifth of the smaller of the memory and compute times of a batched decode step is not
#   hidden): batch 16-64 against batch 1, ridgepoint-*-c32, gpuconc-*-c{4,8,16}, mushfiq-rtx4090-*, dbmart-a40-*.
# * step_overhead_s 1.2 ms and sequence_overhead_s 77 us, the CPU time of a step and of each running request in it:
#   paid on top of the GPU time by the synchronous engines (0.5-0.13: tt356, qwen3-1536, dbmart, gpuconc, tt340,
#   mushfiq, vllm-17788, vllm-12315, pricecompass), hidden behind the GPU step under async scheduling (0.14+: wmx,
#   musgrave, ridgepoint, kvcached, recipes431). The offline batches dbmart-rtx4090-* (hundreds of running requests)
#   and kvcached-h100-qwen3-0.6b-rate-inf (500 at once) weigh the per-request part.
# * kernel_overhead_s 7 us per kernel (calculator/speed/costs.py counts the kernels of each layer type): small
#   against large models at batch 1 and the MoE layers of tt356 (DeepSeek), gpuconc (gpt-oss-20b) and tt340
#   (Qwen3-30B-A3B).
# * eager_kernel_overhead_s 24 us per kernel: qwen3-1536-a100-80g-qwen3-14b-awq-c1-16k (--enforce-eager, TPOT
#   20.63 ms). One source only; held out, its prior (15 us: a PyTorch op dispatched and launched from Python) holds.
# * all_reduce_latency_s 21 us (all_reduce_efficiency kept at its prior 0.7): the TP records tt356-8xh100-* (TP 8),
#   vllm-20710-2xb200-* and vllm-43232-4xb200-* (TP 2 and 4), pricecompass-6-2xa10g (TP 2 over PCIe),
#   vllm-12315-4xa100 (TP 4).
# * request_overhead_s 29 ms: the first token of tiny prefills, wmx-l4-qwen25-0.5b-c1 (27 ms),
#   tt356-8xh100-dsr1-0528-awq-c1-isl128 (47 ms), gpuconc-*-c1 (39-77 ms), kvcached-h100-qwen3-0.6b-rate16 (39 ms).
CUDA = SpeedConstants(
    bandwidth_efficiency=0.800, compute_efficiency=0.566, overlap_penalty=0.185, step_overhead_s=1.17e-3,
    sequence_overhead_s=76.6e-6, kernel_overhead_s=7.23e-6, eager_kernel_overhead_s=24.0e-6,
    all_reduce_latency_s=21.4e-6, all_reduce_efficiency=0.7, request_overhead_s=29.0e-3,
    fallback_interconnect_bytes_s=32e9,  # PCIe 4.0 x16, per direction
)
# ROCm: the hardware terms refitted on the ROCm sources, oracle-mi300x-llama31-405b-fp8-tp8-bs{1..256}
# (benchmark_latency on a 2024 ROCm stack), gpuconc-mi300x-gptoss20b-* (2025) and recipes431-mi300x-* (2026), with
# the MXFP4 expert GEMM floor of vLLM's Triton kernel on CDNA3 (costs.py) in the model.
ROCM = CUDA.model_copy(update={"bandwidth_efficiency": 0.796, "compute_efficiency": 0.398, "step_overhead_s": 4.64e-3,
                               "sequence_overhead_s": 156e-6, "all_reduce_latency_s": 7.59e-6})


class Coverage(BaseModel):
    """What the measured runs behind the bands span; a deployment outside it gets a wider band."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    gpu_families: frozenset[str]
    engines: frozenset[str]  # V0, V1 (synchronous scheduling), V1 async
    model_kinds: frozenset[str]  # dense, MoE
    max_running_requests: int  # the most requests any run had in the engine at once


# The uncertainty bands by load regime (calculator/speed/bands.py), sized to hold 80 % of the held-out values of a
# source they never saw (the factor each way): each is the band of the least share of the held-out errors (leave-one-
# source-out), from 80 % up, for which a band sized on the other sources holds 80 % of a source's values; a source's
# errors move together, so 80 % of the pooled errors held only 50-78 % of unseen sources' one-request values.
# ``benchmarks/speed_accuracy.py`` prints them and the coverage (docs/speed-accuracy.md); where even the widest band
# holds less (one request TTFT 68 %, throughput 76 %), it is the widest held-out error.
REGIME_BAND_FACTOR: dict[str, dict[str, float]] = {
    "one request": {"ttft": 3.27, "tpot": 1.34, "throughput": 1.44},
    "below the knee": {"ttft": 1.84, "tpot": 1.41, "throughput": 1.37},
    # NOTE: two held-out TTFTs and no TPOT measured in this regime: those two take the band of all regimes.
    "saturated": {"ttft": 1.98, "tpot": 1.38, "throughput": 1.85},
}
COVERAGE = Coverage(gpu_families=frozenset({"ampere", "ada", "hopper", "blackwell", "cdna3"}),
                    engines=frozenset({"V0", "V1", "V1 async"}), model_kinds=frozenset({"dense", "MoE"}),
                    max_running_requests=500)
# NOTE: outside the measured runs the log-width of a band doubles (factor -> factor^2). A judgement, not a fit: the
# sources overlap in every dimension the coverage names, so held out only one record lay outside what the others
# cover (kvcached-h100-qwen3-0.6b-rate-inf, 500 requests at once against the others' 256), too few to measure it.
DOMAIN_WIDENING = 2.0
# Regime-free bands (the estimate's own band fields), sized on all held-out errors the same way.
BAND_FACTOR = {"ttft": 1.98, "tpot": 1.38, "throughput": 1.36}


def constants_for(platform: str) -> SpeedConstants:
    """The fitted constants for a platform ("cuda" or "rocm")."""
    return ROCM if platform == "rocm" else CUDA
