"""The empirical terms of the speed model, fitted on measured vLLM runs and cited by record id.

The records are ``shared/data/vllm-benchmarks/records.jsonl`` (copied to ``benchmarks/data/speed_records.jsonl``)
and the runs mined for issue 19 (``benchmarks/data/speed_records_mined.jsonl``);
``benchmarks/speed_accuracy.py`` refits these terms (``--fit``), replays every record and publishes the residuals
in ``docs/speed-accuracy.md``. Each term has a physical meaning, so it carries over to models and GPUs that are
not in the records: none is a per-model or per-GPU fudge.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


# NOTE: bandwidth efficiency is a share of the rate vLLM's decode GEMMs were timed streaming at on the card
# (hardware.py), not of the datasheet: a step may beat that rate a little (small tensors served from L2, a clock the
# timing did not hold), so the bound sits above 1.
MAX_BANDWIDTH_EFFICIENCY = 1.2


class SpeedConstants(BaseModel):
    """Efficiencies and fixed costs that turn peak rates into step times."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    bandwidth_efficiency: float = Field(gt=0, le=MAX_BANDWIDTH_EFFICIENCY)  # achieved / streaming rate, decode step
    compute_efficiency: float = Field(gt=0, le=1)  # achieved / the card's best measured matmul, prefill-sized GEMMs
    overlap_penalty: float = Field(ge=0, le=1)  # share of the smaller of memory and compute time not hidden
    step_overhead_s: float = Field(ge=0)  # per engine step: scheduler, input preparation, launch
    sequence_overhead_s: float = Field(ge=0)  # per running request per step: sampling, detokenizing, output
    kernel_overhead_s: float = Field(ge=0)  # per kernel per step: launch gap, ramp-up and tail (CUDA graphs)
    # per kernel per step replayed as one full CUDA graph (decode-only steps of V0 and of V1 from 0.11): the GPU runs
    # the whole step back to back, with no launch from the CPU between its kernels
    full_graph_kernel_overhead_s: float = Field(ge=0)
    # per MoE layer per step: fused_moe's routing (top-k, align and sort) and grouped GEMMs at a few rows per expert,
    # which do not stream the experts' bytes at the dense GEMV's rate
    moe_layer_overhead_s: float = Field(ge=0)
    eager_kernel_overhead_s: float = Field(ge=0)  # per kernel per step without CUDA graphs: the CPU launch
    # per layer per step run as piecewise CUDA graphs (V1 before 0.11; mixed prefill steps after): the graph breaks
    # at each attention op, whose launch and the next piece's replay the GPU waits for
    piecewise_layer_overhead_s: float = Field(ge=0)
    all_reduce_latency_s: float = Field(ge=0)  # per all-reduce call at TP > 1
    all_reduce_efficiency: float = Field(gt=0, le=1)  # achieved / link bandwidth for the all-reduce payload
    request_overhead_s: float = Field(ge=0)  # per request, before its first token: HTTP, tokenizer, detokenizer
    fallback_interconnect_bytes_s: float = Field(gt=0)  # TP on a GPU whose link is unknown: PCIe 4.0 x16


# Fitted by ``python benchmarks/speed_accuracy.py --fit`` on the 181 scored records of 47 sources (the shared ones and
# ``benchmarks/data/speed_records_mined.jsonl``, 6 Dec 2026; benchmarks/speed_fit.py: a robust loss, each source
# weighted equally, a pull towards physical priors as wide as physics leaves each term, eight starting points; runs
# that send every prompt at once to a V1 engine are scored but not fitted, ``speed_replay.fitted_as_steady_state``),
# refitted the same day with three mechanisms read in vLLM's source (step_time.py, scheduler.py, costs.py): the
# kernel gap of a step replayed as one full CUDA graph apart from a piecewise one (and, in the steady state's
# average step, only the steps that carry a prompt chunk run in pieces), a fixed latency per MoE layer, and the LM
# head run on one row per request rather than on every prompt token.
# Refitted on 7 Dec 2026 with the routed experts' FLOPs at the fused-MoE kernels' measured share of the dense rate
# (expert_kernels.py: a measurement, not a fitted term), every fold and the in-sample fit alike (~1-2 h on two cores;
# ``--fit`` saves each fold as it ends and resumes while no file the fits read changes), and again the same day on
# 198 scored records of 52 sources, with 17 runs of five sources mined since: Qwen2-7B bursts on an A100, Qwen3-8B FP8
# closed loops on an H100, and GPUStack's DeepSeek-R1, DeepSeek-V3.2 and GLM-4.6-FP8 pages at TP 8 on Hopper, which
# the constants before them had predicted 20-62 % fast in TTFT and 12-77 % in TPOT; and on 7 Dec 2026 on 204 records
# of 53 sources, with InferenceX's six gpt-oss-120b runs at TP 4-8 on H100 (predicted within 1-8 % unseen).
# FLOPs are priced against each card's measured matmul ceiling (calculator/speed/hardware.py), not its datasheet, and
# bytes against the rate vLLM's decode GEMMs were timed streaming at on the card (AIConfigurator's tables, 0.79-0.89 of
# the datasheet: B200 0.79, A100 0.82, H200 0.84, H100 0.89; benchmarks/linear_layer_rates.py), the datasheet x 0.82
# where nobody timed it. Refitted with those rates on 7 Dec 2026 (204 records of 53 sources): held out 27.2 / 15.4 /
# 13.3 % -> 25.7 / 15.1 / 12.8 % (TTFT / TPOT / throughput). FP8 FLOPs are priced against the BF16 ceiling times the
# speedup vLLM's FP8 linear layer was timed at over its BF16 one (1.15-1.74, not the best FP8 matmul's ~1.8x):
# rescored with each fold's constants, 25.1 / 14.7 / 12.8 % (refitted with it: 25.7 / 15.0 / 12.7 %, so the constants
# fitted just before it are kept). FP4 FLOPs likewise, over the BF16 ceiling times the speedup vLLM's NVFP4 linear
# layer was timed at (B200 2.17, not the datasheet's 4x), and the linear layers a quantized checkpoint leaves 16-bit
# at the BF16 ceiling: rescored, 24.4 / 14.7 / 12.3 %.
# What pins each term:
# * bandwidth_efficiency 1.07 of the streaming rate (0.95 of an H100's datasheet, 0.88 of an untimed card's): a
#   decode step's kernels, back to back in a CUDA graph, stream a little faster than one GEMM timed alone. Pinned by
#   single-request decode of small dense models on 0.11+ engines, GDDR and HBM alike (tt394-rtx4090-qwen3-4b-*,
#   10.3-10.9 ms a token against an 8.0 ms floor at the datasheet's 1,008 GB/s; gpustackh100-qwen3-8b-sharegpt-c{1,2,
#   4,8}, 7.3-7.7 ms against 4.9; cn4090blog-*-c1, 15.9 ms against 15.1; pegainfer-rtx5090-*), beside the datacenter
#   runs of 0.8-0.10 (ridgepoint-*-c1, musgrave, tt340, tt143-2xh100-*).
# * compute_efficiency 0.62 of the measured ceiling (the LM head no longer priced on every prompt token took it from
#   0.66): long prefills, qwen3-1536-a100-80g-qwen3-14b-awq-c1-16k (16,000 tokens in 3.35 s),
#   tt356-8xh100-dsr1-0528-awq-c1-isl{1024,4096}, the long rows of tt340, tt143, tt394 and tt521, pegainfer-rtx5090-*
#   (4,096-token prefills at ~170 TFLOPS of a 238 ceiling), the 50-prompt bursts dbmart-a40-*.
# * overlap_penalty 0.5, its bound (at most half of the smaller of a step's memory and compute times is not hidden,
#   benchmarks/speed_fit.py BOUNDS): batched and mixed steps, pegainfer's Poisson runs, vllm-23151, recipes165 at
#   1,024 requests, gpuconc-*-c{4,8,16}, mushfiq-rtx4090-*, dbmart-a40-*.
# * step_overhead_s 1.18 ms and sequence_overhead_s 57 us, the CPU time of a step and of each running request in
#   it: paid on top of the GPU time by the synchronous engines (0.5-0.13), hidden behind the GPU step under async
#   scheduling (0.14+). The offline batches dbmart-rtx4090-* and the closed loops at 8-64 requests weigh the
#   per-request part.
# * full_graph_kernel_overhead_s 3.5 us per kernel of a decode-only step that vLLM replays as one full CUDA graph (V0,
#   and V1 from 0.11: FULL_AND_PIECEWISE, vLLM PR #25444): the 0.11+ one-request decodes (tt394, gpustackh100-qwen3-8b,
#   pegainfer), which the piecewise gaps alone had left 18-45 % slow in sample.
# * kernel_overhead_s 6.7 us per kernel and piecewise_layer_overhead_s 11 us per layer, in every step of a V1 engine
#   before 0.11 and in steps with prompt tokens after (the graph breaks at each attention op, whose launch and the
#   next piece's replay the GPU waits for): the 0.9-0.10 one-request decodes (tt340, tt521, gpuconc-*-c1, vllm-20059).
# * moe_layer_overhead_s 18 us per MoE layer per step (fused_moe's routing, align and sort, and grouped GEMMs of a
#   few rows an expert, which do not stream at the dense GEMV's rate): the MoE decodes at one request, tt356
#   (DeepSeek), gpuconc (gpt-oss-20b), tt340 (Qwen3-30B-A3B), gpustack-gptoss120b (gpt-oss-120b), against dense
#   models of like bytes; priced in every graph mode, so it carries over to the 0.11+ engines.
# * eager_kernel_overhead_s 25 us per kernel: qwen3-1536-a100-80g-qwen3-14b-awq-c1-16k (--enforce-eager, TPOT
#   20.63 ms). One source only; held out, its prior (15 us: a PyTorch op dispatched and launched from Python) holds.
# * all_reduce_latency_s 13 us (all_reduce_efficiency kept at its prior 0.7): the TP records tt356-8xh100-* (TP 8),
#   tt143-2xh100-*, vllm-20710-2xb200-*, vllm-23696-8xb200-*, vllm-43232-4xb200-*, recipes41-8xrtx3090-* (TP 8 over
#   PCIe), recipes{58,99,134,240,304}, vllm-{7567,26887,28992}, gpustackh200-glm46-*, pricecompass-6-2xa10g,
#   vllm-12315-4xa100.
# * request_overhead_s 16 ms: the first token of tiny prefills, tt340's and tt394's 128-token rows (11-36 ms),
#   wmx-l4-qwen25-0.5b-c1 (27 ms), tt356-8xh100-dsr1-0528-awq-c1-isl128 (47 ms), gpuconc-*-c1 (39-77 ms), against
#   vllm-20059's 15 ms and cn4090blog-*-c1's 27 ms with `vllm bench serve` (Qwen2.5-1.5B on an A100 and Qwen2.5-7B on
#   an RTX 4090, ~220-token prompts): the harnesses differ. The chat template's parse (calculator/speed/front_end.py,
#   measured, not fitted) takes 12 ms of gpustackh100-qwen3-8b-sharegpt-c{1,2,4,8}'s first token apart from it.
CUDA = SpeedConstants(
    bandwidth_efficiency=1.069, compute_efficiency=0.619, overlap_penalty=0.5, step_overhead_s=1.18e-3,
    sequence_overhead_s=56.5e-6, kernel_overhead_s=6.7e-6, full_graph_kernel_overhead_s=3.54e-6,
    moe_layer_overhead_s=17.8e-6, eager_kernel_overhead_s=24.6e-6, piecewise_layer_overhead_s=11.3e-6,
    all_reduce_latency_s=13.3e-6, all_reduce_efficiency=0.7, request_overhead_s=16.3e-3,
    fallback_interconnect_bytes_s=32e9,  # PCIe 4.0 x16, per direction
)
# ROCm: the hardware terms refitted on the ROCm sources, oracle-mi300x-llama31-405b-fp8-tp8-bs{1..256}
# (benchmark_latency on a 2024 ROCm stack), gpuconc-mi300x-gptoss20b-* (2025), vllm-27323-8xmi300x-* (GLM-4.6, 0.11),
# recipes431-mi300x-* (2026), recipes127-mi355x-* (2025) and vLLM PRs #17530 / #17535 (2025 offline bursts), with the
# MXFP4 expert GEMM floor of vLLM's Triton kernel on CDNA3 (costs.py) in the model.
ROCM = CUDA.model_copy(update={"bandwidth_efficiency": 0.884, "compute_efficiency": 0.639, "step_overhead_s": 4.66e-3,
                               "sequence_overhead_s": 152e-6, "all_reduce_latency_s": 17.8e-6})


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
# errors move together, so 80 % of the pooled errors holds less on a new source.
# ``benchmarks/speed_accuracy.py`` prints them and the coverage (docs/speed-accuracy.md): on 7 Dec 2026 (204 records
# of 53 sources, FLOPs over measured matmul ceilings) every band held 80-86 % of unseen sources' values. The saturated
# TTFT band narrowed from x/÷ 47 to 4.5 when the runs that send every prompt at once were simulated instead of taken
# as a steady state, to 2.35 with the ceilings (the RTX 5090's Poisson runs no longer come out overloaded), to 2.05
# with the API server's chat-template parse and prefix-cached preemption (GPUStack's bursts), and to 1.9 with the
# graph-mode kernel gap, the MoE layer latency and the LM head on sampled rows (second refit of 6 Dec 2026), and to 1.88
# with the measured fused-MoE share (7 Dec 2026, which took the band below the knee from 1.78 to 1.6), 1.91 and 1.64
# once refitted with it (the one-request TTFT band widened to 1.79: the refit moved the step and request overheads);
# 17 runs of five sources mined since (three MoE pages at TP 8 that come out 20-77 % fast) took the saturated TPOT band
# to 1.43 and the pooled one to 1.39 after the refit with them, and the one-request TTFT band back to 1.68; InferenceX's
# gpt-oss-120b at TP 4-8 on H100 (six runs, predicted within 1-8 % before any fit saw them) took the pooled one to 1.36,
# and 1.38 once refitted with them (204 records of 53 sources; TPOT below the knee 1.42, pooled TTFT 1.69); bytes over
# each card's measured streaming rate took TPOT below the knee to 1.30 and the pooled one to 1.36, the saturated TTFT
# band to 1.92; FP8 FLOPs over the speedup vLLM's FP8 GEMMs were timed at (rescored, not refitted) TPOT below the knee
# to 1.25 and the pooled TPOT and throughput bands to 1.35 and 1.31; six runs of two sources mined since (an RTX 5090
# with Qwen3-8B BF16 / NVFP4 and gpt-oss-20b, a B200 pair with Nemotron-3-Nano FP8), predicted by these constants
# before any fit saw them, and the RTX 4090 blog's chat-endpoint run, TPOT below the knee to 1.24 and TTFT to 1.58;
# the MLA block's measured decode latency (mla_kernels.py) and DeepSeek sparse attention read from vLLM's kernels
# (costs.py: absorbed MQA over the top-k latents at FlashMLA's padded heads, the indexer over every token), rescored
# with each fold's constants, the saturated TTFT, TPOT and throughput bands to 1.72, 1.39 and 1.36.
# NOTE: a record's regime comes from the in-sample replay, so the bands are those ``--reuse-held-out`` prints once
# the refitted constants are in this file (the saturated throughput band read 1.51 from the constants before them).
REGIME_BAND_FACTOR: dict[str, dict[str, float]] = {
    "one request": {"ttft": 1.69, "tpot": 1.32, "throughput": 1.29},
    "below the knee": {"ttft": 1.58, "tpot": 1.24, "throughput": 1.23},
    "saturated": {"ttft": 1.72, "tpot": 1.39, "throughput": 1.36},
}
COVERAGE = Coverage(gpu_families=frozenset({"ampere", "ada", "hopper", "blackwell", "blackwell-rtx", "cdna3",
                                            "cdna4"}),
                    engines=frozenset({"V0", "V1", "V1 async"}), model_kinds=frozenset({"dense", "MoE"}),
                    max_running_requests=1024)
# NOTE: outside the measured runs the log-width of a band doubles (factor -> factor^2). A judgement, not a fit: the
# sources overlap in every dimension the coverage names, so held out few values lay outside what the other sources
# cover (6 of 533 on 8 Dec 2026, median |log error| 0.06 against 0.16 inside; 24 of 513 at 0.09 against 0.17 on 7 Dec,
# 24 of 501 at 0.17, 24 of 458 at 0.09 before; 21 of 397 at 0.39 an earlier fit), too few to measure the widening.
DOMAIN_WIDENING = 2.0
# Regime-free bands (the estimate's own band fields), sized on all held-out errors the same way.
BAND_FACTOR = {"ttft": 1.69, "tpot": 1.33, "throughput": 1.31}


def constants_for(platform: str) -> SpeedConstants:
    """The fitted constants for a platform ("cuda" or "rocm")."""
    return ROCM if platform == "rocm" else CUDA
