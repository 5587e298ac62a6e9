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
    layer_overhead_s: float = Field(ge=0)  # per decoder layer per step: kernel launch and tail floors
    moe_layer_overhead_s: float = Field(ge=0)  # per MoE layer per step: routing, token sorting, grouped GEMM
    eager_layer_overhead_s: float = Field(ge=0)  # per layer per step without CUDA graphs (--enforce-eager)
    all_reduce_latency_s: float = Field(ge=0)  # per all-reduce call at TP > 1
    all_reduce_efficiency: float = Field(gt=0, le=1)  # achieved / link bandwidth for the all-reduce payload
    request_overhead_s: float = Field(ge=0)  # per request, before its first token: HTTP, tokenizer, detokenizer
    fallback_interconnect_bytes_s: float = Field(gt=0)  # TP on a GPU whose link is unknown: PCIe 4.0 x16


CUDA = SpeedConstants(
    bandwidth_efficiency=0.80, compute_efficiency=0.60, overlap_penalty=0.5, step_overhead_s=1.0e-3,
    sequence_overhead_s=50e-6, layer_overhead_s=20e-6, moe_layer_overhead_s=150e-6, eager_layer_overhead_s=200e-6,
    all_reduce_latency_s=8e-6, all_reduce_efficiency=0.7, request_overhead_s=0.010,
    fallback_interconnect_bytes_s=32e9,
)
ROCM = CUDA

# The uncertainty band: the spread of log(measured / predicted) over the records (benchmarks/speed_accuracy.py),
# as a factor each way. Filled by the fit.
BAND_FACTOR = {"ttft": 1.5, "tpot": 1.2, "throughput": 1.2}


def constants_for(platform: str) -> SpeedConstants:
    """The fitted constants for a platform ("cuda" or "rocm")."""
    return ROCM if platform == "rocm" else CUDA
