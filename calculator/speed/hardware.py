"""Which tensor-core path a deployment's matmuls take, and the peak and achievable rates of that path on its GPU.

vLLM picks the GEMM kernel from the weight format and the GPU: FP8 checkpoints run W8A8 on FP8 tensor cores
(Ada, Hopper, Blackwell, CDNA3+) and W8A16 Marlin elsewhere; AWQ/GPTQ/bitsandbytes int4 are W4A16 (16-bit math
on dequantized weights); NVFP4/MXFP4 use FP4 tensor cores only where the GPU has them (Blackwell, CDNA4).

The speed model divides FLOPs by the achievable rate, the best matmul measured on the card (the catalog's
``measured_*_tflops``), not by the datasheet's peak: the two differ by GPU from 0.51 (MI300X) to 1.14 (RTX 5090),
so one fitted efficiency over datasheets cannot fit a GeForce card and an H100 at once, while over measured
ceilings it is one figure (about 0.7 on both). A GPU nobody measured gets its datasheet peak times
``UNMEASURED_CEILING_RATIO``, and says so. Bytes alike: a step's bytes are divided by the rate vLLM's decode GEMMs
stream weights at on the card (the catalog's ``measured_bandwidth_gb_s``, 0.79-0.89 of the datasheet), or the
datasheet times ``UNMEASURED_STREAMING_RATIO`` where nobody timed it. On the FP8 and FP4 paths the ceiling is the
BF16 one times the speedup vLLM's FP8 or NVFP4 linear layers were timed at over its BF16 ones on the card
(``measured_fp8_speedup``, ``measured_fp4_speedup``), which the best FP8 matmul and the datasheet's FP4 rate
overstate (a B200's FP4 tensor cores are rated 4x its BF16 ones; vLLM's NVFP4 layer runs 2.17x its BF16 layer).
A card whose own layers were not timed takes the speedups of a timed card of its chip (``speedups_timed_on``: the
RTX 5090 those of the RTX PRO 6000 Blackwell, both GB202), since vLLM runs the same kernels on both.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from ..errors import InvalidInput
from ..gpus import GpuSpec, find_gpu
from ..model.spec import QuantizationSpec

ComputePath = Literal["bf16", "fp8", "int8", "fp4"]
_FP8_METHODS = frozenset({"fp8", "fbgemm_fp8", "modelopt", "ptpc_fp8"})
_FP4_METHODS = frozenset({"mxfp4", "modelopt_fp4", "nvfp4"})
# NOTE: the median of measured / datasheet BF16 matmul over the catalog's 29 measured entries (0.51-1.14; H100 SXM
# 0.80, A100 SXM 0.87, L4 0.59, RTX 4090 1.00): calculator/data/gpus.json, measured_compute_source
UNMEASURED_CEILING_RATIO = 0.80
# NOTE: the median of measured streaming / datasheet bandwidth over the catalog's 7 measured cards (0.79-0.89; B200
# 0.79, A100 SXM 0.82, H200 0.84, H100 SXM 0.89): calculator/data/gpus.json, measured_linear_source
UNMEASURED_STREAMING_RATIO = 0.82


class GpuRates(BaseModel):
    """Peak and achievable rates of one GPU for the deployment's matmul path (dense, no sparsity)."""

    model_config = ConfigDict(frozen=True)
    gpu_name: str
    compute_path: ComputePath
    memory_bandwidth_bytes_s: float  # the datasheet's
    # what a step's bytes are divided by: the rate vLLM's decode GEMMs stream weights at on the card
    streaming_bandwidth_bytes_s: float
    bandwidth_measured: bool  # False: nobody timed this card's streaming (or its bandwidth was given), datasheet x 0.82
    peak_flops: float  # of the compute path, the datasheet's
    achievable_flops: float  # of the compute path: the best matmul measured on the card (see the module's note)
    bf16_achievable_flops: float  # the BF16 path's, where the linear layers a checkpoint leaves 16-bit run
    ceiling_measured: bool  # False: no measurement of this card (or its rates were given), the datasheet x 0.80
    # the FP8 or FP4 ceiling is the BF16 one times this (vLLM's FP8 or NVFP4 GEMMs timed on the card); None elsewhere
    speedup_over_bf16: float | None = None
    speedup_timed_on: str | None = None  # the card of the same chip the speedup was timed on, when not this one
    interconnect_bytes_s: float | None  # per direction; None: unknown (TP > 1 then needs it)
    platform: Literal["cuda", "rocm"]

    def share_of_ceiling(self, flops_per_s: float) -> float:
        """FLOPs achieved per second over the achievable rate: the compute efficiency the speed model divides by."""
        return flops_per_s / self.achievable_flops

    def share_of_streaming(self, bytes_per_s: float) -> float:
        """Bytes read per second over the streaming rate: the bandwidth efficiency the speed model divides by."""
        return bytes_per_s / self.streaming_bandwidth_bytes_s


def compute_path(gpu: GpuSpec, quantization: QuantizationSpec | None) -> ComputePath:
    """The tensor-core path vLLM's linear layers take for this weight format on this GPU."""
    if quantization is None:
        return "bf16"
    method, bits = quantization.method, quantization.weight_bits
    if method in _FP4_METHODS or (method == "compressed-tensors" and bits == 4 and quantization.scale_bytes == 1):
        return "fp4" if gpu.fp4_dense_tflops else "bf16"
    if bits == 8 and (method in _FP8_METHODS or method == "compressed-tensors"):
        if gpu.fp8_dense_tflops:
            return "fp8"
        # NOTE: compressed-tensors W8A8 int8 checkpoints use int8 tensor cores where there are no FP8 ones.
        return "int8" if method == "compressed-tensors" and gpu.int8_dense_tops else "bf16"
    return "bf16"  # W4A16 (AWQ, GPTQ, bitsandbytes), W8A16 Marlin: 16-bit math on dequantized weights


def gpu_rates(gpu: GpuSpec, quantization: QuantizationSpec | None) -> GpuRates:
    """The peak rates the speed model divides by; ``InvalidInput`` when the GPU lacks bandwidth or TFLOPS."""
    if not gpu.memory_bandwidth_gb_s or not gpu.bf16_dense_tflops:
        raise InvalidInput(f"{gpu.name} has no memory bandwidth or BF16 TFLOPS: the speed model needs both "
                           "(give them for a custom GPU)")
    path = compute_path(gpu, quantization)
    tflops = {"bf16": gpu.bf16_dense_tflops, "fp8": gpu.fp8_dense_tflops, "int8": gpu.int8_dense_tops,
              "fp4": gpu.fp4_dense_tflops}[path] or gpu.bf16_dense_tflops
    link = gpu.interconnect_gb_s * 1e9 if gpu.interconnect_gb_s else None
    achievable, measured = achievable_tflops(gpu, path, tflops)
    streamed_gb_s = gpu.measured_bandwidth_gb_s or gpu.memory_bandwidth_gb_s * UNMEASURED_STREAMING_RATIO
    speedup, donor = measured_speedup(gpu, path), _speedup_donor(gpu, path)
    return GpuRates(gpu_name=gpu.name, compute_path=path, memory_bandwidth_bytes_s=gpu.memory_bandwidth_gb_s * 1e9,
                    streaming_bandwidth_bytes_s=streamed_gb_s * 1e9,
                    bandwidth_measured=gpu.measured_bandwidth_gb_s is not None,
                    peak_flops=tflops * 1e12, achievable_flops=achievable * 1e12, ceiling_measured=measured,
                    bf16_achievable_flops=achievable_tflops(gpu, "bf16", gpu.bf16_dense_tflops)[0] * 1e12,
                    speedup_over_bf16=speedup, speedup_timed_on=donor.name if speedup and donor is not gpu else None,
                    interconnect_bytes_s=link, platform=gpu.platform)


def measured_speedup(gpu: GpuSpec, path: ComputePath) -> float | None:
    """How much faster vLLM's linear layers of ``path`` (FP8 or FP4) ran than its BF16 ones at prefill shapes on
    ``gpu``, where both the speedup and the BF16 ceiling were measured; None elsewhere."""
    # NOTE: an MXFP4 checkpoint (gpt-oss) takes the NVFP4 layer's speedup: its quantized layers are its experts alone,
    # whose measured share of the ceiling (expert_kernels.py) was taken against that same NVFP4 rate
    speedup = _timed_speedup(_speedup_donor(gpu, path), path)
    return speedup if speedup and gpu.measured_bf16_tflops else None


def _timed_speedup(gpu: GpuSpec, path: ComputePath) -> float | None:
    return {"fp8": gpu.measured_fp8_speedup, "fp4": gpu.measured_fp4_speedup}.get(path)


def _speedup_donor(gpu: GpuSpec, path: ComputePath) -> GpuSpec:
    """The card whose timed speedup ``gpu`` takes on ``path``: itself where timed, else the card of its chip that was
    (``speedups_timed_on``)."""
    if _timed_speedup(gpu, path) is None and gpu.speedups_timed_on:
        return find_gpu(gpu.speedups_timed_on)
    return gpu


def achievable_tflops(gpu: GpuSpec, path: ComputePath, peak_tflops: float) -> tuple[float, bool]:
    """The best dense matmul rate of ``path`` on ``gpu`` and whether it was measured. On the FP8 and FP4 paths: the
    BF16 ceiling times the speedup vLLM's FP8 or NVFP4 linear layer was timed at over its BF16 one on the card, else
    (FP8) the best FP8 matmul measured on it. Otherwise the measured BF16 rate's share of the BF16 peak applied to the
    path's peak (the clock that a dense load holds caps every path alike), else ``UNMEASURED_CEILING_RATIO`` of the
    peak."""
    if speedup := measured_speedup(gpu, path):
        # NOTE: the best FP8 matmul (MAMF: 1.77x BF16 on an H100) and the datasheet's FP4 rate (4x BF16 on a B200)
        # are what vLLM's FP8 and NVFP4 GEMMs do not reach at a model's shapes (1.15x and 2.17x there,
        # benchmarks/linear_layer_rates.py), where its BF16 ones run at the BF16 best
        return gpu.measured_bf16_tflops * speedup, True
    if path == "fp8" and gpu.measured_fp8_tflops:
        return gpu.measured_fp8_tflops, True
    if gpu.measured_bf16_tflops and gpu.bf16_dense_tflops:
        return peak_tflops * gpu.measured_bf16_tflops / gpu.bf16_dense_tflops, True
    return peak_tflops * UNMEASURED_CEILING_RATIO, False
