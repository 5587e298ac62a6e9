"""Which fused-MoE kernel vLLM runs MXFP4 experts with, per version and GPU, and how that kernel stores them.

The checkpoint's MXFP4 experts (gpt-oss) are not what stays resident: each kernel pads the expert dimensions
to its tile, re-lays the e8m0 scales and may keep the biases in fp32. Read from the released wheels:
``vllm/model_executor/layers/quantization/mxfp4.py`` (``get_mxfp4_backend``, ``Mxfp4MoEMethod.create_weights``
and ``process_weights_after_loading``, 0.10-0.19) and ``vllm/model_executor/layers/fused_moe/oracle/mxfp4.py``
(``select_mxfp4_moe_backend``, ``mxfp4_round_up_hidden_size_and_intermediate_size`` and
``convert_gpt_oss_weight_to_mxfp4_moe_kernel_format``, 0.20+):

==============================  =====================================================================================
Hopper (sm90), 0.10.1-0.11      Marlin: the Triton kernels need the separate ``triton_kernels`` package (vendored
                                only from 0.12) and, in 0.10.1, torch >= 2.8. Marlin rounds the intermediate size up
                                to 128 and the hidden size to 256; scales stay e8m0, biases take the model dtype.
Hopper, 0.12-0.24               Triton (``triton_kernels`` vendored, torch >= 2.8.1 so the Hopper swizzle is on):
                                ``_swizzle_mxfp4`` makes a scale copy in ``HopperMXScaleLayout`` (rows padded to
                                ``2 x num_warps x 2 x 8`` = 256, columns to 2) while the checkpoint's
                                ``w13_weight_scale``/``w2_weight_scale`` Parameters stay registered (only the weights
                                are deleted); biases are cast to fp32.
Hopper, 0.25+                   Triton; the checkpoint scales are freed after the swizzle (0.25-0.33 ``del
                                layer.w13_weight_scale``, 0.34 ``store_params_in_triton``).
Blackwell (sm100/103)           FlashInfer TRT-LLM (BF16 activations): intermediate and hidden rounded up to 256
                                (intermediate to 128 from 0.27), weights and scales shuffled in place, fp32 biases.
Ampere, Ada, GeForce/RTX PRO    Marlin (the Triton window is ``(9, 0) <= capability < (11, 0)``).
Blackwell (sm120), GB10
ROCm                            Triton with both sizes rounded up to 256, scales strided, fp32 biases.
==============================  =====================================================================================

Checked on real start-ups: ``llmd-h100-gpt-oss-20b`` prints 13.47 GiB (Triton with the swizzled copy: 13.41),
``vllm-33155-h100-gpt-oss-120b-v0141-oom`` (0.14.1) 64.38 GiB (64.30); the logical MXFP4 bytes are 12.82 and 60.77.
"""

from __future__ import annotations

from ..gpus import GpuSpec
from ..model.quantization import ExpertStorage
from ..model.spec import QuantizationSpec
from .vllm_versions import Device, VersionRules

FP32_BYTES = 4
MARLIN = ExpertStorage(backend="marlin", intermediate_align=128, hidden_align=256)
# HopperMXScaleLayout.swizzle_data: SWIZZLE_ALIGN_M = 2 * num_warps * 2 * 8 with num_warps = 8, SWIZZLE_ALIGN_K = 2.
HOPPER_SWIZZLED_SCALES = (256, 2)
CHECKPOINT_SCALES = (1, 1)
TRITON_HOPPER_BOTH_SCALES = ExpertStorage(backend="triton (Hopper swizzle, checkpoint scales kept)",
                                          scale_copies=(CHECKPOINT_SCALES, HOPPER_SWIZZLED_SCALES),
                                          bias_bytes=FP32_BYTES)
TRITON_HOPPER = ExpertStorage(backend="triton (Hopper swizzle)", scale_copies=(HOPPER_SWIZZLED_SCALES,),
                              bias_bytes=FP32_BYTES)
TRTLLM_0_11 = ExpertStorage(backend="flashinfer-trtllm", intermediate_align=256, hidden_align=256,
                            bias_bytes=FP32_BYTES)
TRTLLM_0_27 = ExpertStorage(backend="flashinfer-trtllm", intermediate_align=128, hidden_align=256,
                            bias_bytes=FP32_BYTES)
TRITON_ROCM = ExpertStorage(backend="triton (ROCm)", intermediate_align=256, hidden_align=256, bias_bytes=FP32_BYTES)


def expert_storage(quantization: QuantizationSpec | None, rules: VersionRules, gpu: GpuSpec | None,
                   device: Device) -> ExpertStorage | None:
    """How vLLM ``rules.version`` stores MXFP4 experts on ``gpu``; ``None`` when nothing is MXFP4 (or on CPU)."""
    if quantization is None or quantization.method != "mxfp4" or device == "cpu":
        return None
    if device == "rocm":
        return TRITON_ROCM
    capability = gpu.compute_capability if gpu else None
    if capability is None:  # NOTE: a custom GPU: we assume a Hopper-class data-centre part
        capability = (9, 0)
    version = rules.version
    if (10, 0) <= capability < (11, 0):
        return TRTLLM_0_27 if version.at_least(27) else TRTLLM_0_11
    if capability[0] != 9 or not version.at_least(12):
        return MARLIN
    return TRITON_HOPPER if version.at_least(25) else TRITON_HOPPER_BOTH_SCALES
