"""How vLLM's kernels hold quantized weights once loaded, per version and GPU: what the checkpoint bytes become.

**FP8 on GPUs without FP8 tensor cores** (compute capability < 8.9: A100, A10, A40, RTX 3090): ``Fp8LinearMethod``
and the FP8 MoE run weight-only through Marlin (``use_marlin = not has_device_capability(89)``, 0.10-0.34), and
``prepare_fp8_layer_for_marlin`` (``quantization/utils/marlin_utils_fp8.py``) turns the scales into the model dtype:
per-tensor and per-channel scales into one per output channel, 128 x 128 block scales into one per output channel
and 128-input group (``repeat_interleave(block_n)``): 64 times the elements, half the bytes each. The FP8 values
keep their bytes. ``resident_quantization`` rewrites the spec accordingly.

**MXFP4 experts.** The checkpoint's MXFP4 experts (gpt-oss) are not what stays resident: each kernel pads the expert dimensions
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
NATIVE_FP8_CAPABILITY = (8, 9)  # has_device_capability(89): Ada, Hopper, Blackwell
MARLIN_FP8_METHODS = frozenset({"fp8", "fbgemm_fp8"})  # Fp8LinearMethod / Fp8MoEMethod and FBGEMM's FP8 linear
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


def resident_quantization(quantization: QuantizationSpec | None, gpu: GpuSpec | None, device: Device,
                          dtype_bytes: int) -> QuantizationSpec | None:
    """The quantization as the kernels keep it on ``gpu`` (FP8 through Marlin below compute capability 8.9)."""
    if (quantization is None or quantization.method not in MARLIN_FP8_METHODS or device != "cuda" or gpu is None
            or gpu.compute_capability is None or gpu.compute_capability >= NATIVE_FP8_CAPABILITY):
        return quantization
    if quantization.scale_granularity == "block":
        group = (quantization.weight_block_size or (128, 128))[1]
        return quantization.model_copy(update={"scale_granularity": "group", "group_size": group,
                                               "weight_block_size": None, "scale_bytes": dtype_bytes})
    return quantization.model_copy(update={"scale_granularity": "channel", "scale_bytes": dtype_bytes})


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
