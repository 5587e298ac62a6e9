"""Weight quantization: ``quantization_config`` / ``--quantization`` -> ``QuantizationSpec``, and how each
format stores one quantized tensor, which ``weights.py`` and the checkpoint count both use.

``QuantizationSpec.method`` is the checkpoint's format in vLLM's words (awq, gptq, fp8, fbgemm_fp8,
compressed-tensors, mxfp4, modelopt, modelopt_fp4, bitsandbytes). Its fields describe what stays *resident*
after vLLM's ``process_weights_after_loading``. One quantized ``out x in`` matrix keeps:

=============  =======================================================================================
awq, gptq      4-bit values packed in int32 (1/2 B each) + fp16 scales per 128 inputs and output;
               int32 zero points per group (AWQ; GPTQ only if asymmetric: Marlin frees symmetric ones);
               int32 g_idx + sort indices per input channel with GPTQ act-order (desc_act)
fp8            1 B + fp32 scales per tensor (online, modelopt), per output row (fbgemm_fp8,
               compressed-tensors) or per 128 x 128 block (``weight_block_size``)
mxfp4          1/2 B + one e8m0 byte per 32 inputs; MoE experts only (gpt-oss), laid out by the MoE kernel
               vLLM picks (``ExpertStorage``: padding, swizzled scale copies, bias dtype)
nvfp4          1/2 B + one fp8 byte per 16 inputs + fp32 global and input scales (modelopt_fp4)
bitsandbytes   NF4: 1/2 B + fp32 absmax per 64 (1 B with double quantization); int8: 1 B + fp32 per row
=============  =======================================================================================

Embeddings, lm_head, norms, routers and vision towers are never converted (``WeightTensor.quantizable``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from ..errors import InvalidConfig, InvalidInput
from .spec import ModelSpec, QuantizationSpec, WeightTensor

ScaleGranularity = Literal["tensor", "channel", "block", "group", "none"]
FP32_BYTES = 4
INT32_BITS = 32
# NOTE: ``--quantization`` names accepted here; the Marlin names select the same storage as their format.
SUPPORTED_FLAGS = ("awq", "awq_marlin", "bitsandbytes", "compressed-tensors", "fbgemm_fp8", "fp8",
                   "fp8_per_block", "fp8_per_channel", "fp8_per_tensor", "gptq", "gptq_marlin", "modelopt",
                   "modelopt_fp4", "mxfp4")
_FLAG_TO_METHOD = {"awq_marlin": "awq", "auto_awq": "awq", "gptq_marlin": "gptq", "auto_gptq": "gptq",
                   "fp8_per_block": "fp8", "fp8_per_channel": "fp8", "fp8_per_tensor": "fp8"}
# NOTE: vLLM turns modelopt checkpoints with quant_algo NVFP4 into modelopt_fp4; both flags accept either.
_SAME_FORMAT = {frozenset({"modelopt", "modelopt_fp4"})}
FP8_BLOCK = (128, 128)  # DeepSeek-V3 / Qwen3-FP8 weight_block_size, and vLLM's online fp8_per_block
NVFP4_GROUP = 16  # values per fp8 (e4m3) block scale
MXFP4_GROUP = 32  # values per e8m0 scale (OCP MX)
BNB_4BIT_BLOCK = 64  # bitsandbytes 4-bit blocksize: one fp32 absmax per 64 values
# vllm/model_executor/layers/quantization/mxfp4.py (0.10-0.19) and fused_moe/oracle/mxfp4.py (0.20+):
# ``round_up(intermediate_size_per_partition, 64)``, the generic CUDA tile when no kernel asks for more.
MXFP4_INTERMEDIATE_ALIGNMENT = 64


@dataclass(frozen=True)
class ExpertStorage:
    """How a fused-MoE kernel holds packed (MXFP4) experts once ``process_weights_after_loading`` has run.

    ``engine/quant_kernels.py`` decides it from the vLLM version and the GPU; ``weights.py`` counts it.
    ``scale_copies``: one ``(rows, columns)`` alignment per resident copy of the e8m0 scales of one expert
    matrix (``out`` rows x ``in / 32`` columns). The Triton kernels on Hopper swizzle the scales into a padded
    copy and, before 0.25, also kept the checkpoint's copy. The fused w13 (gate and up) has ``2 x I`` rows;
    rounding them up to ``R`` is rounding each part up to ``R / 2``, which is how the parts are counted.
    """

    backend: str
    intermediate_align: int = MXFP4_INTERMEDIATE_ALIGNMENT  # per-rank intermediate size rounded up to this
    hidden_align: int = 1  # hidden size (w13 input, w2 output) rounded up to this
    scale_copies: tuple[tuple[int, int], ...] = ((1, 1),)
    bias_bytes: int | None = None  # expert biases: None = the model dtype; 4 where the kernel wants fp32


GENERIC_EXPERT_STORAGE = ExpertStorage(backend="generic")


@dataclass(frozen=True)
class Storage:
    """What a format adds around the packed weights that ``QuantizationSpec``'s fields do not say."""

    container_bits: int = 8  # the stored element the Hub counts: int32 words (AWQ/GPTQ) or bytes
    experts_only: bool = False  # vLLM quantizes only FusedMoE experts; dense linears stay 16-bit
    fp32_scalars: int = 0  # per-tensor fp32 scales kept per quantized tensor (NVFP4 global + input scale)
    g_idx_arrays: int = 2  # int32 arrays per input channel with act-order (Marlin: g_idx + sort indices)
    checkpoint_zeros: bool = False  # qzeros stored in the checkpoint even when not resident
    checkpoint_g_idx: bool = False  # g_idx stored in the checkpoint even without act-order
    hub_counts_logical: bool = False  # the Hub's parameter figure counts logical weights (see NOTE below)


# NOTE: gpt-oss-20b's Hub figure 20,914,757,184 equals its logical parameter count exactly; its U8 MXFP4
# blocks would count half the expert weights and the e8m0 scales would add 1/32 more, so the figure counts
# logical elements, not stored bytes. Per-tensor fp32 scalars are counted per logical tensor (q, k, v ...);
# vLLM keeps one per fused module (qkv_proj, gate_up_proj), a few bytes per layer fewer.
STORAGE: dict[str, Storage] = {
    "awq": Storage(container_bits=INT32_BITS, checkpoint_zeros=True),
    "gptq": Storage(container_bits=INT32_BITS, checkpoint_zeros=True, checkpoint_g_idx=True),
    "fp8": Storage(),
    "fbgemm_fp8": Storage(fp32_scalars=1),  # input_scale_ub
    "compressed-tensors": Storage(),
    "compressed-tensors-int": Storage(container_bits=INT32_BITS),
    "compressed-tensors-nvfp4": Storage(fp32_scalars=2),  # weight_global_scale, input_global_scale
    "mxfp4": Storage(experts_only=True, hub_counts_logical=True),
    "modelopt": Storage(fp32_scalars=1),  # input_scale beside the per-tensor weight_scale
    "modelopt_fp4": Storage(fp32_scalars=2),  # weight_scale_2, input_scale
    "bitsandbytes": Storage(),
}


_NO_EXTRAS = Storage()


def storage_of(quant: QuantizationSpec) -> Storage:
    if quant.method == "compressed-tensors" and quant.weight_bits < 8:
        is_nvfp4 = quant.group_size == NVFP4_GROUP and quant.scale_bytes == 1
        return STORAGE["compressed-tensors-nvfp4" if is_nvfp4 else "compressed-tensors-int"]
    return STORAGE.get(quant.method, _NO_EXTRAS)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def scale_count(quant: QuantizationSpec, out_features: int, in_features: int) -> int:
    """Scale elements of one ``out x in`` quantized matrix."""
    granularity = quant.scale_granularity
    if granularity == "tensor":
        return 1
    if granularity == "channel":
        return out_features
    if granularity == "block":
        block_out, block_in = quant.weight_block_size or FP8_BLOCK
        return _cdiv(out_features, block_out) * _cdiv(in_features, block_in)
    if granularity == "group":
        return out_features * _cdiv(in_features, quant.group_size or in_features)
    return 0


def _groups(quant: QuantizationSpec, in_features: int) -> int:
    return _cdiv(in_features, quant.group_size or in_features)


def resident_bytes(quant: QuantizationSpec, out_features: int, in_features: int, *,
                   scale_in_features: int | None = None) -> int:
    """Bytes vLLM keeps for one quantized ``out x in`` matrix (one TP shard) after loading.

    ``scale_in_features``: input width the scales cover when it differs from the shard (GPTQ act-order keeps
    the full row-parallel scales on every rank).
    """
    storage = storage_of(quant)
    scale_in = scale_in_features or in_features
    total = _cdiv(round(out_features * in_features * quant.weight_bits), 8)
    total += scale_count(quant, out_features, scale_in) * quant.scale_bytes
    if quant.has_zeros:
        total += _groups(quant, scale_in) * _cdiv(out_features * int(quant.weight_bits), INT32_BITS) * 4
    if quant.has_g_idx:
        total += in_features * 4 * storage.g_idx_arrays
    return total + storage.fp32_scalars * FP32_BYTES


def checkpoint_elements(quant: QuantizationSpec, out_features: int, in_features: int) -> int:
    """Elements the Hub counts for one quantized matrix as the checkpoint stores it (weights + scales)."""
    storage = storage_of(quant)
    logical = out_features * in_features
    if storage.hub_counts_logical or not quant.from_checkpoint:
        return logical
    per_container = max(1, int(storage.container_bits // quant.weight_bits))
    total = _cdiv(logical, per_container) + scale_count(quant, out_features, in_features)
    if quant.has_zeros or storage.checkpoint_zeros:
        total += _groups(quant, in_features) * _cdiv(out_features * int(quant.weight_bits), INT32_BITS)
    if quant.has_g_idx or storage.checkpoint_g_idx:
        total += in_features
    return total + storage.fp32_scalars


@lru_cache(maxsize=4096)
def is_excluded(name: str, patterns: tuple[str, ...]) -> bool:
    """Does a ``modules_to_not_convert``/``ignore`` entry cover the tensor ``name``?

    Entries match whole dotted components (``model.layers.1`` covers ``model.layers.1.mlp`` but not
    ``model.layers.12``), may use ``*`` globs (gpt-oss) or vLLM's ``re:`` prefix, and a fused name
    (``qkv_proj``, ``gate_up_proj``) covers its parts.
    """
    dotted = f".{name}."
    for pattern in patterns:
        for candidate in _unfused(pattern.removeprefix("model.language_model.").removeprefix("language_model.")):
            if candidate.startswith("re:"):
                if _regex_matches(candidate[3:], name):
                    return True
            elif "*" in candidate:
                if fnmatch.fnmatchcase(name, candidate) or fnmatch.fnmatchcase(name, f"{candidate}.*"):
                    return True
            elif f".{candidate}." in dotted:
                return True
    return False


def _unfused(pattern: str) -> tuple[str, ...]:
    for fused, parts in (("qkv_proj", ("q_proj", "k_proj", "v_proj")), ("gate_up_proj", ("gate_proj", "up_proj"))):
        if pattern.endswith(fused):
            stem = pattern[: -len(fused)]
            return (pattern, *(stem + part for part in parts))
    return (pattern,)


def _regex_matches(expression: str, name: str) -> bool:
    return re.search(expression, name) is not None


# ---- reading quantization_config -------------------------------------------------------------------------


def quantization_from_config(config: Mapping[str, Any]) -> QuantizationSpec | None:
    """The checkpoint's own quantization (``quantization_config`` at the top or in ``text_config``)."""
    raw = config.get("quantization_config")
    if raw is None and isinstance(config.get("text_config"), Mapping):
        raw = config["text_config"].get("quantization_config")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise InvalidConfig("config.json quantization_config must be an object")
    method = str(raw.get("quant_method") or "").lower()
    reader = _READERS.get(method)
    if reader is None:
        raise InvalidConfig(f"config.json uses quant_method {method!r}, which this planner cannot size; "
                            f"supported: {', '.join(sorted(_READERS))}")
    return reader(raw)


def _modules(raw: Mapping[str, Any], *keys: str) -> tuple[str, ...]:
    found: list[str] = []
    for key in keys:
        value = raw.get(key)
        if isinstance(value, list):
            found += [str(v) for v in value]
    return tuple(found)


# vLLM's own refusals (AWQConfig, GPTQConfig): "Currently, only 4-bit weight quantization is supported for AWQ".
AWQ_BITS = (4,)
GPTQ_BITS = (2, 3, 4, 8)
COMPRESSED_TENSORS_MAX_BITS = 8  # its schemes: W4A16, W8A16, W8A8, NVFP4 (and 2- or 3-bit WNA16 packings)


def _bits(bits: int, allowed: tuple[int, ...], method: str) -> int:
    if bits not in allowed:
        widths = " or ".join(filter(None, (", ".join(map(str, allowed[:-1])), str(allowed[-1]))))
        raise InvalidConfig(f"quantization_config.bits = {bits}: vLLM's {method} takes {widths}-bit weights only")
    return bits


def _awq(raw: Mapping[str, Any]) -> QuantizationSpec:
    return QuantizationSpec(method="awq", weight_bits=_bits(int(raw.get("bits") or raw.get("w_bit") or 4), AWQ_BITS,
                                                            "AWQ"),
                            group_size=_group(raw.get("group_size") or raw.get("q_group_size") or 128),
                            has_zeros=bool(raw.get("zero_point", True)), scale_granularity="group", scale_bytes=2,
                            modules_to_not_convert=_modules(raw, "modules_to_not_convert"))


def _group(value: Any) -> int | None:
    group = int(value)
    return None if group <= 0 else group  # -1 = one group per output channel


def _gptq(raw: Mapping[str, Any]) -> QuantizationSpec:
    group = _group(raw.get("group_size", 128))
    # NOTE: vLLM runs symmetric GPTQ through Marlin, which frees qzeros after loading; act-order (desc_act)
    # keeps g_idx and its sort indices (a no-op, and dropped, with one group per channel).
    return QuantizationSpec(method="gptq", weight_bits=_bits(int(raw.get("bits", 4)), GPTQ_BITS, "GPTQ"),
                            group_size=group,
                            has_zeros=not bool(raw.get("sym", True)),
                            has_g_idx=bool(raw.get("desc_act")) and group is not None,
                            scale_granularity="group" if group else "channel", scale_bytes=2,
                            modules_to_not_convert=_modules(raw, "modules_to_not_convert"))


def _fp8(raw: Mapping[str, Any]) -> QuantizationSpec:
    block = raw.get("weight_block_size")
    return QuantizationSpec(method="fp8", weight_bits=8, scale_granularity="block" if block else "tensor",
                            weight_block_size=tuple(block) if block else None, scale_bytes=FP32_BYTES,
                            modules_to_not_convert=_modules(raw, "modules_to_not_convert", "ignored_layers"))


def _fbgemm_fp8(raw: Mapping[str, Any]) -> QuantizationSpec:
    return QuantizationSpec(method="fbgemm_fp8", weight_bits=8, scale_granularity="channel", scale_bytes=FP32_BYTES,
                            modules_to_not_convert=_modules(raw, "modules_to_not_convert"))


def _compressed_tensors(raw: Mapping[str, Any]) -> QuantizationSpec:
    groups = raw.get("config_groups") or {}
    weights = next((g.get("weights") for g in groups.values() if isinstance(g, Mapping) and g.get("weights")), None)
    if not isinstance(weights, Mapping):
        raise InvalidConfig("compressed-tensors quantization_config has no config_groups[*].weights scheme")
    bits, kind = int(weights.get("num_bits", 8)), str(weights.get("type", "int"))
    if bits > COMPRESSED_TENSORS_MAX_BITS:
        raise InvalidConfig(f"quantization_config weights num_bits = {bits}: compressed-tensors stores weights in "
                            f"at most {COMPRESSED_TENSORS_MAX_BITS} bits")
    strategy = str(weights.get("strategy", "tensor"))
    ignore = _modules(raw, "ignore")
    if kind == "float" and bits == 4:  # NVFP4: fp8 scale per 16 values + global scales
        return QuantizationSpec(method="compressed-tensors", weight_bits=4, group_size=NVFP4_GROUP,
                                scale_granularity="group", scale_bytes=1, modules_to_not_convert=ignore)
    if bits == 8:  # FP8 or INT8 W8A8: fp32 scales per tensor, channel or block
        block = weights.get("block_structure")
        granularity: ScaleGranularity = ("channel" if strategy == "channel"
                                         else "block" if strategy == "block" or block else "tensor")
        return QuantizationSpec(method="compressed-tensors", weight_bits=8, scale_granularity=granularity,
                                weight_block_size=tuple(block) if block else None, scale_bytes=FP32_BYTES,
                                modules_to_not_convert=ignore)
    group = _group(weights.get("group_size") or -1) if strategy == "group" else None
    return QuantizationSpec(method="compressed-tensors", weight_bits=bits, group_size=group,
                            has_zeros=not bool(weights.get("symmetric", True)),
                            has_g_idx=str(weights.get("actorder")) == "group",
                            scale_granularity="group" if group else "channel", scale_bytes=2,
                            modules_to_not_convert=ignore)


def _mxfp4(raw: Mapping[str, Any]) -> QuantizationSpec:
    return QuantizationSpec(method="mxfp4", weight_bits=4, group_size=MXFP4_GROUP, scale_granularity="group",
                            scale_bytes=1, modules_to_not_convert=_modules(raw, "modules_to_not_convert"))


def _modelopt(raw: Mapping[str, Any]) -> QuantizationSpec:
    nested = raw.get("quantization")
    inner: Mapping[str, Any] = nested if isinstance(nested, Mapping) else raw
    algo = str(inner.get("quant_algo") or "").upper()
    excluded = _modules(inner, "exclude_modules", "ignore")
    if "FP4" in algo:
        return QuantizationSpec(method="modelopt_fp4", weight_bits=4, group_size=int(inner.get("group_size") or 16),
                                scale_granularity="group", scale_bytes=1, modules_to_not_convert=excluded)
    if algo == "FP8":
        return QuantizationSpec(method="modelopt", weight_bits=8, scale_granularity="tensor", scale_bytes=FP32_BYTES,
                                modules_to_not_convert=excluded)
    raise InvalidConfig(f"modelopt quant_algo {algo!r} is not sized by this planner; supported: FP8, NVFP4")


def _bitsandbytes(raw: Mapping[str, Any]) -> QuantizationSpec:
    skipped = _modules(raw, "llm_int8_skip_modules")
    if raw.get("load_in_8bit"):
        # NOTE: LLM.int8 keeps an fp32 scale (SCB) per output row.
        return QuantizationSpec(method="bitsandbytes", weight_bits=8, scale_granularity="channel",
                                scale_bytes=FP32_BYTES, modules_to_not_convert=skipped)
    # NOTE: double quantization stores the absmax as 8-bit (plus one fp32 per 256 absmax, left out here).
    absmax_bytes = 1 if raw.get("bnb_4bit_use_double_quant") else FP32_BYTES
    return QuantizationSpec(method="bitsandbytes", weight_bits=4, group_size=BNB_4BIT_BLOCK, scale_granularity="group",
                            scale_bytes=absmax_bytes, modules_to_not_convert=skipped)


_READERS = {
    "awq": _awq, "gptq": _gptq, "fp8": _fp8, "fbgemm_fp8": _fbgemm_fp8, "compressed-tensors": _compressed_tensors,
    "mxfp4": _mxfp4, "modelopt": _modelopt, "modelopt_fp4": _modelopt, "bitsandbytes": _bitsandbytes,
}

# ---- --quantization ----------------------------------------------------------------------------------------

# NOTE: formats vLLM can apply while loading a 16-bit checkpoint ("online"); the rest need a checkpoint.
_ONLINE: dict[str, QuantizationSpec] = {
    "fp8": QuantizationSpec(method="fp8", weight_bits=8, scale_granularity="tensor", scale_bytes=FP32_BYTES,
                            from_checkpoint=False),
    "fp8_per_tensor": QuantizationSpec(method="fp8", weight_bits=8, scale_granularity="tensor",
                                       scale_bytes=FP32_BYTES, from_checkpoint=False),
    "fp8_per_channel": QuantizationSpec(method="fp8", weight_bits=8, scale_granularity="channel",
                                        scale_bytes=FP32_BYTES, from_checkpoint=False),
    "fp8_per_block": QuantizationSpec(method="fp8", weight_bits=8, scale_granularity="block",
                                      weight_block_size=FP8_BLOCK, scale_bytes=FP32_BYTES, from_checkpoint=False),
    "bitsandbytes": QuantizationSpec(method="bitsandbytes", weight_bits=4, group_size=BNB_4BIT_BLOCK,
                                     scale_granularity="group", scale_bytes=FP32_BYTES, from_checkpoint=False),
}


def quantization_from_flag(name: str | None, source: ModelSpec | Mapping[str, Any]) -> QuantizationSpec | None:
    """What ``--quantization name`` loads for a checkpoint (a ``ModelSpec`` or its raw config).

    ``None``/``"none"`` keeps the checkpoint's own quantization, as vLLM does without the flag. A flag that
    contradicts the checkpoint's format, or needs a quantized checkpoint it does not have, is ``InvalidInput``.
    """
    checkpoint = source.quantization if isinstance(source, ModelSpec) else quantization_from_config(source)
    if name is None or str(name).lower() in ("", "none"):
        return checkpoint
    flag = str(name).lower()
    if flag not in SUPPORTED_FLAGS:
        raise InvalidInput(f"Unknown --quantization {name!r}; supported: {', '.join(SUPPORTED_FLAGS)}")
    method = _FLAG_TO_METHOD.get(flag, flag)
    if checkpoint is not None:
        if method == checkpoint.method or frozenset({method, checkpoint.method}) in _SAME_FORMAT:
            return checkpoint
        raise InvalidInput(f"Quantization method specified in the model config ({checkpoint.method}) does not "
                           f"match the quantization method specified in the `quantization` argument ({flag}).")
    if flag in _ONLINE:
        return _ONLINE[flag]
    raise InvalidInput(f"--quantization {flag} needs a checkpoint quantized with {method}; this one is not "
                       f"quantized. Formats applied while loading a 16-bit checkpoint: {', '.join(_ONLINE)}")


# ---- which tensors a method converts -----------------------------------------------------------------------


def converts(quant: QuantizationSpec, tensor: WeightTensor) -> bool:
    """Does ``quant`` convert this kind of tensor at all, before its exclusion list?"""
    return tensor.quantizable and (tensor.role == "expert" or not storage_of(quant).experts_only)


def layer_tensor_name(name: str, layer: int) -> str:
    return f"model.layers.{layer}.{name}"


@lru_cache(maxsize=4096)
def excluded_layers(name: str, layers: tuple[int, int] | None, patterns: tuple[str, ...]) -> frozenset[int]:
    """Layers whose copy of a tensor the exclusion ``patterns`` keep 16-bit ({-1} for a non-layer tensor)."""
    if not patterns:
        return frozenset()
    if layers is None:
        return frozenset({-1}) if is_excluded(name, patterns) else frozenset()
    return frozenset(i for i in range(*layers) if is_excluded(layer_tensor_name(name, i), patterns))
