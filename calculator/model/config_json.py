"""config.json text -> a checked dict: valid UTF-8 JSON, a sane shape, every dimension within a physical bound.

Everything downstream (``architecture.py``, the weight inventories, the engine) may then assume that the fields it
reads have the types transformers gives them and sizes a real model could have. Each refusal is one
``InvalidConfig`` line that names the field, e.g. ``text_config.num_hidden_layers = 1000000000 is out of range``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidConfig
from ..limits import (
    MAX_CONFIG_BYTES,
    MAX_CONFIG_NESTING,
    MAX_CONTEXT_TOKENS,
    MAX_CONV_KERNEL,
    MAX_EXPERTS,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_IMAGE_PIXELS_PER_SIDE,
    MAX_LAYERS,
    MAX_NAME_CHARS,
    MAX_QUANT_BITS,
    MAX_ROPE_FACTOR,
    MAX_VOCAB,
    MAX_WIDTH,
)


@dataclass(frozen=True)
class _Whole:
    """A field that must be a whole number (JSON integer) within [low, high]."""

    low: int
    high: int
    what: str


def _fields(names: str, bound: _Whole) -> dict[str, _Whole]:
    return dict.fromkeys(names.split(), bound)


# NOTE: keyed by field name wherever it appears (top level, text_config, vision_config, quantization_config):
# the same name means the same kind of size in every block transformers writes.
_WHOLE_FIELDS: dict[str, _Whole] = {
    **_fields("num_hidden_layers n_layer num_layers", _Whole(1, MAX_LAYERS, "a layer count")),
    **_fields("first_k_dense_replace max_window_layers num_nextn_predict_layers",
              _Whole(0, MAX_LAYERS, "a layer index")),
    **_fields("moe_layer_freq decoder_sparse_step sliding_window_pattern full_attention_interval",
              _Whole(1, MAX_LAYERS, "a layer period")),
    **_fields("hidden_size d_model n_embd intermediate_size ffn_dim n_inner moe_intermediate_size kv_lora_rank "
              "q_lora_rank conv_dim mamba_d_ssm", _Whole(1, MAX_WIDTH, "a width")),
    **_fields("shared_expert_intermediate_size shared_intermediate_size moe_shared_expert_intermediate_size "
              "moe_latent_size", _Whole(0, MAX_WIDTH, "a width")),
    **_fields("num_attention_heads n_head num_heads num_key_value_heads n_head_kv num_kv_heads "
              "multi_query_group_num num_attention_groups linear_num_key_heads linear_num_value_heads "
              "mamba_n_heads mamba_num_heads n_groups mamba_n_groups", _Whole(1, MAX_HEADS, "a head count")),
    **_fields("head_dim qk_rope_head_dim linear_key_head_dim linear_value_head_dim mamba_d_head mamba_head_dim "
              "ssm_state_size mamba_d_state", _Whole(1, MAX_HEAD_DIM, "a head size")),
    **_fields("qk_nope_head_dim v_head_dim", _Whole(0, MAX_HEAD_DIM, "a head size")),
    **_fields("conv_kernel mamba_d_conv linear_conv_kernel_dim conv_L_cache", _Whole(1, MAX_CONV_KERNEL, "a convolution width")),
    **_fields("vocab_size", _Whole(1, MAX_VOCAB, "a vocabulary size")),
    **_fields("n_routed_experts num_experts experts_per_token", _Whole(1, MAX_EXPERTS, "an expert count")),
    # NOTE: 0 is how Granite 4.0-H's dense checkpoints (granite-4.0-h-micro, -h-1b, -h-350m) say "no experts".
    **_fields("num_local_experts num_experts_per_tok", _Whole(0, MAX_EXPERTS, "an expert count")),
    **_fields("n_shared_experts", _Whole(0, MAX_EXPERTS, "an expert count")),
    **_fields("max_position_embeddings n_positions max_seq_len seq_length model_max_length max_sequence_length "
              "max_seq_length seq_len original_max_position_embeddings",
              _Whole(1, MAX_CONTEXT_TOKENS, "a context length in tokens")),
    # NOTE: 0 is how some configs (and vLLM) spell "no window".
    **_fields("sliding_window attention_chunk_size", _Whole(0, MAX_CONTEXT_TOKENS, "a window in tokens")),
    **_fields("image_size patch_size", _Whole(1, MAX_IMAGE_PIXELS_PER_SIDE, "a size in pixels")),
    **_fields("num_channels in_chans spatial_merge_size temporal_patch_size",
              _Whole(1, MAX_CONV_KERNEL, "a small vision factor")),
    **_fields("bits w_bit num_bits", _Whole(1, MAX_QUANT_BITS, "a bit width")),
    # NOTE: -1 (and 0 in some exporters) mean one group per output channel.
    **_fields("group_size q_group_size", _Whole(-1, MAX_WIDTH, "a quantization group size")),
}
_OBJECT_FIELDS = frozenset({"text_config", "vision_config", "rope_scaling", "rope_parameters",
                            "quantization_config", "config_groups"})
_NAME_FIELDS = frozenset({"model_type", "torch_dtype", "dtype", "quant_method", "rope_type", "quant_algo",
                          "topk_method", "strategy", "type"})
# Switches that change the weights or the KV cache: a string "false" must not silently read as true.
_SWITCH_FIELDS = frozenset({"tie_word_embeddings", "use_sliding_window", "attention_bias", "mlp_bias", "qkv_bias",
                            "attention_out_bias", "enable_bias", "do_layer_norm_before", "qk_layernorm",
                            "layer_norm_elementwise_affine", "_remove_final_layer_norm", "multimodal_projector_bias",
                            "vision_use_head", "load_in_8bit", "load_in_4bit", "bnb_4bit_use_double_quant", "sym",
                            "symmetric", "desc_act", "zero_point"})
_NAME_LIST_FIELDS = frozenset({"architectures", "layer_types"})
_UNBOUNDED_FIELDS = frozenset({"time_step_limit"})  # a range whose open end is Infinity
_MAX_INTEGER_DIGITS = 30  # 2**64 has 20 digits


class _OversizedNumber(int):
    """A JSON integer literal too long to be any size (Python refuses to parse those of over 4,300 digits)."""

    digits: int


def _parse_int(literal: str) -> int:
    if len(literal) <= _MAX_INTEGER_DIGITS:
        return int(literal)
    oversized = _OversizedNumber(0)
    oversized.digits = len(literal.lstrip("-"))
    return oversized


def parse_config_text(text: str | bytes, origin: str) -> dict[str, Any]:
    """Parse and check config.json text (or raw bytes, which must be UTF-8); ``InvalidConfig`` names the problem."""
    if len(text) > MAX_CONFIG_BYTES:
        raise InvalidConfig(f"{origin}: too large for a config.json ({len(text):,} characters; published ones "
                            f"are under 100 KiB, the limit is {MAX_CONFIG_BYTES >> 20} MiB)")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidConfig(f"{origin}: not UTF-8 text (byte 0x{text[exc.start]:02x} at offset {exc.start}); "
                                "config.json is UTF-8 JSON") from exc
    elif (replaced := text.find("\ufffd")) >= 0:
        # NOTE: text decoded with errors="replace" (an upload) hides bytes that were not UTF-8 behind U+FFFD.
        raise InvalidConfig(f"{origin}: not UTF-8 text (a byte that was not UTF-8 was replaced at character "
                            f"{replaced}); config.json is UTF-8 JSON")
    try:
        config = json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise InvalidConfig(f"{origin}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from exc
    except RecursionError as exc:
        raise InvalidConfig(f"{origin}: JSON nested too deeply (config.json nests a few levels)") from exc
    if not isinstance(config, dict):
        raise InvalidConfig(f"{origin}: config.json must be a JSON object, not {type(config).__name__}")
    check_config(config, origin)
    return config


def check_config(config: Mapping[str, Any], origin: str) -> None:
    """Refuse a config whose shape or sizes no real checkpoint has, naming the first such field."""
    stack: list[tuple[str, Any, int]] = [("", config, 0)]
    while stack:
        path, value, depth = stack.pop()
        if depth > MAX_CONFIG_NESTING:
            raise InvalidConfig(f"{origin}: {_short(path)} is nested {depth} levels deep; config.json nests a few "
                                "levels")
        if isinstance(value, Mapping):
            for key, item in reversed(list(value.items())):
                item_path = f"{path}.{key}" if path else str(key)
                _check_field(str(key), item, item_path, origin)
                stack.append((item_path, item, depth + 1))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item, depth + 1) for i, item in reversed(list(enumerate(value))))
        elif isinstance(value, float) and not math.isfinite(value) and not _unbounded(path, value):
            raise InvalidConfig(f"{origin}: {path} is {value}; a config.json number must be finite")
        elif isinstance(value, _OversizedNumber):
            raise InvalidConfig(f"{origin}: {path} is {_shown(value)}; no config.json size needs that many")


def _unbounded(path: str, value: float) -> bool:
    # NOTE: Mamba2 configs (transformers' default, the Nemotron-H base models on the Hub) write time_step_limit as
    # [0.0, Infinity]: no upper clamp on dt. The planner never reads it, and refusing it refused those checkpoints.
    return value == math.inf and path.rsplit(".", 1)[-1].split("[", 1)[0] in _UNBOUNDED_FIELDS


def _check_field(key: str, value: Any, path: str, origin: str) -> None:
    if value is None:
        return  # transformers' "unset": the config class default applies
    if key in _WHOLE_FIELDS:
        _check_whole(value, _WHOLE_FIELDS[key], path, origin)
    elif key in _OBJECT_FIELDS and not isinstance(value, Mapping):
        raise InvalidConfig(f"{origin}: {path} must be a JSON object, not {_shown(value)}")
    elif key in _NAME_FIELDS:
        _check_name(value, path, origin)
    elif key in _SWITCH_FIELDS and not isinstance(value, bool):
        raise InvalidConfig(f"{origin}: {path} must be true or false, not {_shown(value)}")
    elif key in _NAME_LIST_FIELDS:
        if not isinstance(value, list) or len(value) > MAX_LAYERS:
            raise InvalidConfig(f"{origin}: {path} must be a list of names, not {_shown(value)}")
        for index, item in enumerate(value):
            _check_name(item, f"{path}[{index}]", origin)
    elif key == "mlp_only_layers":
        _check_whole_list(value, _Whole(0, MAX_LAYERS, "a layer index"), path, origin)
    elif key == "vision_feature_layer":
        layer = _Whole(-MAX_LAYERS, MAX_LAYERS, "a layer index")
        if isinstance(value, list):
            _check_whole_list(value, layer, path, origin)
        else:
            _check_whole(value, layer, path, origin)
    elif key == "weight_block_size":
        _check_whole_list(value, _Whole(1, MAX_WIDTH, "a block side"), path, origin)
        if len(value) != 2:
            raise InvalidConfig(f"{origin}: {path} must list two block sides, not {len(value)}")
    elif key == "factor":
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_ROPE_FACTOR:
            raise InvalidConfig(f"{origin}: {path} = {_shown(value)} is out of range: a RoPE scaling factor is a "
                                f"number above 0 and at most {MAX_ROPE_FACTOR:,}")


def _check_whole(value: Any, bound: _Whole, path: str, origin: str) -> None:
    is_whole = isinstance(value, int) and not isinstance(value, bool | _OversizedNumber)
    if not is_whole or not bound.low <= value <= bound.high:
        problem = "is out of range" if is_whole or isinstance(value, _OversizedNumber) else "is not a whole number"
        raise InvalidConfig(f"{origin}: {path} = {_shown(value)} {problem}: {bound.what} is a whole number "
                            f"from {bound.low:,} to {bound.high:,}")


def _check_whole_list(value: Any, bound: _Whole, path: str, origin: str) -> None:
    if not isinstance(value, list) or len(value) > MAX_LAYERS:
        raise InvalidConfig(f"{origin}: {path} must be a list of whole numbers, not {_shown(value)}")
    for index, item in enumerate(value):
        _check_whole(item, bound, f"{path}[{index}]", origin)


def _check_name(value: Any, path: str, origin: str) -> None:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_CHARS:
        raise InvalidConfig(f"{origin}: {path} must be a name (a non-empty string of at most {MAX_NAME_CHARS} "
                            f"characters), not {_shown(value)}")


def _short(path: str) -> str:
    return path if len(path) <= 60 else f"{path[:28]}...{path[-28:]}"


def _shown(value: Any) -> str:
    """A short, one-line rendering of a rejected value (``1e+18``, ``'x'``, ``a list``)."""
    if isinstance(value, _OversizedNumber):
        return f"a {value.digits:,}-digit number"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."
