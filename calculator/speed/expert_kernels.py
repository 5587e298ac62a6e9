"""How fast vLLM's fused-MoE kernels do the routed experts' FLOPs: a measured share of the dense GEMM rate.

A dense linear layer is one large GEMM; an MoE layer sorts its tokens by expert, pads each expert's rows to the
kernel's tile, runs one grouped GEMM over all experts (Triton ``fused_moe``, Marlin, OpenAI's ``matmul_ogs`` or
FlashInfer's CUTLASS / TensorRT-LLM kernels, by weight format and GPU) and scatters the results back. Timed on the
card, that op does its FLOPs at a fraction of the dense rate, even at prefill-sized steps: the speed model divides
the routed experts' FLOPs by the card's dense ceiling times this share. At decode an MoE step is bound by streaming
the experts' bytes, so the share moves only steps with many tokens (prefill, large batches).

The shares are AIConfigurator's vLLM kernel tables (PyPI ``aiconfigurator`` 0.12.0: vLLM 0.24 on H100, H200, B200,
GB200, L40S and RTX PRO 6000; vLLM 0.14 on A100, bf16 only), reduced by ``benchmarks/expert_gemm_shares.py`` into
``benchmarks/data/expert_gemm_shares.json``: the median MoE-op rate over 2,048-16,384 tokens spread evenly over the
experts against the median dense GEMM of the speed model's compute path (hardware.py) on the same card (the A100's
table was timed only with skewed routing: scaled by the 1.09 that even routing gains on the same shapes on the other
cards). A test keeps this table equal to that file.
"""

from __future__ import annotations

import statistics
from typing import Literal

from ..model.spec import QuantizationSpec

ExpertFormat = Literal["bf16", "fp8", "int4", "mxfp4", "nvfp4"]

EXPERT_GEMM_SHARE: dict[str, dict[ExpertFormat, float]] = {
    "ampere": {"bf16": 0.36},
    "ada": {"bf16": 0.57, "fp8": 0.54, "int4": 0.80, "mxfp4": 0.74},
    "hopper": {"bf16": 0.56, "fp8": 0.51, "int4": 0.32, "mxfp4": 0.71},
    "blackwell": {"bf16": 0.44, "fp8": 0.40, "int4": 0.17, "mxfp4": 0.16, "nvfp4": 0.60},
    "blackwell-rtx": {"bf16": 0.42, "int4": 0.72, "mxfp4": 0.23, "nvfp4": 0.50},
}

# The tables time only BF16 experts on the A100; Marlin's other formats there run as on Ada (both mma.sync).
SAME_TENSOR_CORE_INSTRUCTIONS = {"ampere": "ada"}


def expert_format(quantization: QuantizationSpec | None) -> ExpertFormat:
    """The expert weight format that picks vLLM's MoE kernel family."""
    if quantization is None:
        return "bf16"
    if quantization.method == "mxfp4":
        return "mxfp4"
    if quantization.method in ("modelopt_fp4", "nvfp4") or (quantization.method == "compressed-tensors"
                                                             and quantization.weight_bits == 4
                                                             and quantization.scale_bytes == 1):
        return "nvfp4"
    # NOTE: GPTQ and AWQ are weight-only: vLLM runs their 4- and 8-bit experts through Marlin's W4A16 / W8A16 MoE
    # kernels (GPTQMarlinMoEMethod, AWQMarlinMoEMethod), the family AIConfigurator times as int4.
    if quantization.method in ("gptq", "awq") or quantization.weight_bits <= 4:
        return "int4"
    return "fp8" if quantization.weight_bits == 8 else "bf16"


def expert_gemm_share(gpu_family: str | None, quantization: QuantizationSpec | None) -> float:
    """The routed experts' FLOP rate over the dense GEMM rate of the same compute path on a GPU of this family.

    A format not timed on the family takes, on Ampere, Ada's figure (FP8, int4 and MXFP4 experts run through Marlin,
    written for sm80's mma.sync, which sm89 runs the same way), elsewhere the family's BF16 share, the nearest figure
    timed on that silicon; a family not timed (Volta, Turing, AMD, a custom GPU) takes the median of the families
    timed for the format."""
    form = expert_format(quantization)
    family = EXPERT_GEMM_SHARE.get(gpu_family or "")
    if family is not None:
        if form in family:
            return family[form]
        proxy = EXPERT_GEMM_SHARE.get(SAME_TENSOR_CORE_INSTRUCTIONS.get(gpu_family or "", ""), {})
        return proxy.get(form, family["bf16"])
    timed = [shares[form] for shares in EXPERT_GEMM_SHARE.values() if form in shares]
    return statistics.median(timed or [shares["bf16"] for shares in EXPERT_GEMM_SHARE.values()])
