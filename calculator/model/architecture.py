"""config.json -> ModelSpec: the model facts vLLM's sizing depends on, read the way vLLM reads them.

Pure: takes an already-parsed config dict. Loading (presets, files, the Hub) lives in ``model_source.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ValidationError

from ..errors import InvalidConfig, UnsupportedArchitecture, one_line_validation_error
from ..limits import MAX_CONTEXT_TOKENS
from .config_json import check_config
from .inventory import checkpoint_num_params, generic_decoder_tensors, is_known_architecture, weight_tensors
from .inventory._config import CLASS_DEFAULTS, TEXT_CONFIG_TYPE_DEFAULTS
from .inventory.deepseek import indexer_layers
from .inventory.gemma4 import gemma4_layers
from .inventory.hybrid import STATELESS_LAYER, hybrid_layer_types
from .quantization import quantization_from_config
from .spec import LayerAttention, MlaSpec, ModelSpec, MoeSpec

_BEHAVIOURAL_DEFAULTS = frozenset({"tie_word_embeddings", "sliding_window_pattern", "head_dim"})
# vLLM's ModelConfig.get_total_num_kv_heads looks at these attributes, in this order.
_KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")
# vLLM's _get_and_verify_max_len takes the minimum of these.
_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_sequence_length", "max_seq_length", "seq_len")
# Models whose config-level sliding_window applies to every layer when layer_types is absent.
_UNIFORM_SLIDING_WINDOW_TYPES = frozenset({"mistral", "mixtral", "phi3", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
                                           "starcoder2", "seed_oss"})


def text_config_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's config: ``text_config`` for multimodal checkpoints, else the top level, completed with
    the transformers class defaults (multimodal text_configs list only overrides). An explicit null stays null."""
    text = config.get("text_config")
    if isinstance(text, Mapping):
        values = dict(text)
        values.setdefault("model_type", TEXT_CONFIG_TYPE_DEFAULTS.get(str(config.get("model_type") or ""), ""))
        for key in ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings"):
            if key not in values and key in config:
                values[key] = config[key]
        defaults = CLASS_DEFAULTS.get(str(values.get("model_type") or ""), {})
    else:
        # NOTE: published top-level configs spell every size out (a missing one is a malformed config); only
        # behavioural defaults such as Gemma's tied embeddings are left to the config class.
        values = dict(config)
        defaults = {k: v for k, v in CLASS_DEFAULTS.get(str(values.get("model_type") or ""), {}).items()
                    if k in _BEHAVIOURAL_DEFAULTS}
    return {**defaults, **{k: v for k, v in values.items() if v is not None or k not in defaults}}


def build_model_spec(config: Mapping[str, Any], model_id: str) -> ModelSpec:
    """Read one config.json dict into a validated ``ModelSpec``; raises ``InvalidConfig`` naming the bad field."""
    if not isinstance(config, Mapping):
        raise InvalidConfig(f"{model_id}: config.json must be a JSON object")
    check_config(config, model_id)
    try:
        return _build_model_spec(config, model_id).model_copy(update={"hf_config": dict(config)})
    except InvalidConfig as exc:
        if str(exc).startswith(model_id):
            raise
        raise InvalidConfig(f"{model_id}: {exc}") from exc  # the weight inventories name only the field
    except ValidationError as exc:
        raise InvalidConfig(f"{model_id}: config.json describes an impossible model: "
                            f"{one_line_validation_error(exc)}") from exc
    except (ArithmeticError, TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        # NOTE: check_config bounds and types every field we read; this net keeps an unforeseen combination of
        # fields a one-line refusal rather than a traceback on a shared server.
        raise InvalidConfig(f"{model_id}: config.json fields are inconsistent ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:160] if str(exc) else 'no detail'})") from exc


def _build_model_spec(config: Mapping[str, Any], model_id: str) -> ModelSpec:
    text = text_config_of(config)
    architectures = config.get("architectures") or text.get("architectures") or ["unknown"]
    architecture = str(architectures[0])
    model_type = str(config.get("model_type") or text.get("model_type") or "unknown")
    if any(marker in architecture for marker in ("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification")):
        raise UnsupportedArchitecture(f"{model_id}: {architecture} is not a generative decoder; vLLM serves it as a "
                                      "pooling model, which this planner does not size")
    known = is_known_architecture(config)
    warnings: list[str] = []
    hidden = _required_int(text, "hidden_size", model_id, aliases=("d_model", "n_embd"))
    num_layers = _required_int(text, "num_hidden_layers", model_id, aliases=("n_layer", "num_layers"))
    num_heads = _required_int(text, "num_attention_heads", model_id, aliases=("n_head", "num_heads"))
    vocab = _required_int(text, "vocab_size", model_id)
    num_kv_heads = next((int(text[k]) for k in _KV_HEAD_KEYS if text.get(k)), num_heads)
    if num_heads % num_kv_heads:
        # NOTE: vLLM's attention asserts it; each KV head serves an equal group of query heads (GQA).
        raise InvalidConfig(f"{model_id}: num_attention_heads ({num_heads}) is not a multiple of the "
                            f"{num_kv_heads} KV heads; grouped-query attention gives every KV head an equal group "
                            "of query heads")
    _check_layer_types(text, model_id)
    head_dim = int(text.get("head_dim") or hidden // num_heads)
    if head_dim < 1:
        raise InvalidConfig(f"{model_id}: hidden_size ({hidden}) is smaller than num_attention_heads ({num_heads}), "
                            "so head_dim would be 0; a config like this sets head_dim")
    intermediate = int(text.get("intermediate_size") or text.get("ffn_dim") or text.get("n_inner") or 4 * hidden)
    _check_vision_feature_layers(config, model_id)
    mla = _mla_spec(text)
    layers = _layer_attention(text, model_type, num_layers, num_kv_heads, head_dim, mla)
    if known:
        tensors = weight_tensors(config)
    else:
        tensors, assumptions = generic_decoder_tensors(config)
        warnings.append(f"Unknown architecture {architecture} (model_type {model_type!r}): estimated as a generic "
                        "decoder. Assumptions: " + "; ".join(assumptions))
    if model_type == "gemma4" and isinstance(config.get("audio_config"), Mapping):
        warnings.append("Gemma 4's audio tower (audio_config) is not in the weight estimate; it adds a few hundred "
                        "million parameters (E2B, E4B)")
    if unplaced := _unplaced_recurrent_layers(text, layers):
        warnings.append(unplaced)
    moe = _moe_spec(text, num_layers, intermediate)
    if moe is not None and moe.experts_per_token > moe.num_experts:
        raise InvalidConfig(f"{model_id}: num_experts_per_tok ({moe.experts_per_token}) exceeds the number of "
                            f"experts ({moe.num_experts})")
    derived_len = derived_max_model_len(text, model_type)
    if derived_len > MAX_CONTEXT_TOKENS:
        raise InvalidConfig(f"{model_id}: the context length the config implies ({derived_len:,} tokens, RoPE "
                            f"scaling included) is beyond any real model's; the limit is {MAX_CONTEXT_TOKENS:,}")
    return ModelSpec(
        model_id=model_id,
        architecture=architecture,
        model_type=model_type,
        known_architecture=known,
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=head_dim,
        layers=layers,
        mla=mla,
        moe=moe,
        tie_word_embeddings=bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))),
        max_position_embeddings=_max_positions(text),
        derived_max_model_len=derived_len,
        config_dtype=_config_dtype(config, text),
        quantization=quantization_from_config(config),
        weights=tensors,
        checkpoint_num_params=checkpoint_num_params(config, tensors, model_id=model_id),
        is_multimodal="vision_config" in config,
        warnings=tuple(warnings),
    )


def _check_vision_feature_layers(config: Mapping[str, Any], model_id: str) -> None:
    """``vision_feature_layer`` must name a layer of the vision tower (vLLM builds the tower up to it)."""
    vision, wanted = config.get("vision_config"), config.get("vision_feature_layer")
    if wanted is None or not isinstance(vision, Mapping):
        return
    depth = vision.get("num_hidden_layers") or CLASS_DEFAULTS.get(str(vision.get("model_type") or ""), {}).get(
        "num_hidden_layers")
    for index in wanted if isinstance(wanted, list) else [wanted]:
        if depth and not (-depth <= index <= -1 or 1 <= index <= depth):
            raise InvalidConfig(f"{model_id}: vision_feature_layer = {index} names no layer of the {depth}-layer "
                                f"vision tower (use 1 to {depth}, or -{depth} to -1 from the end)")


def _required_int(text: Mapping[str, Any], key: str, model_id: str, aliases: tuple[str, ...] = ()) -> int:
    for name in (key, *aliases):
        value = text.get(name)
        if isinstance(value, bool):
            break
        if isinstance(value, int) and value > 0:
            return value
    raise InvalidConfig(f"{model_id}: config.json lacks a positive integer {key!r}; a decoder config needs "
                        "hidden_size, num_hidden_layers, num_attention_heads and vocab_size")


def _mla_spec(text: Mapping[str, Any]) -> MlaSpec | None:
    if text.get("kv_lora_rank") is None or text.get("qk_rope_head_dim") is None:
        return None
    return MlaSpec(kv_lora_rank=int(text["kv_lora_rank"]), qk_rope_head_dim=int(text["qk_rope_head_dim"]),
                   qk_nope_head_dim=int(text.get("qk_nope_head_dim") or 0),
                   v_head_dim=int(text.get("v_head_dim") or 0),
                   q_lora_rank=text.get("q_lora_rank"), index_topk=text.get("index_topk"),
                   index_n_heads=int(text.get("index_n_heads") or 0),
                   index_head_dim=int(text.get("index_head_dim") or 0))


def _sliding_flags(text: Mapping[str, Any], model_type: str, num_layers: int) -> list[bool]:
    """Which layers use a sliding window, following transformers' layer_types and vLLM's model code."""
    window = text.get("sliding_window")
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) >= num_layers:
        return [str(kind) == "sliding_attention" for kind in layer_types[:num_layers]]
    if not window:
        return [False] * num_layers
    if model_type == "gemma2":
        return [i % 2 == 0 for i in range(num_layers)]  # even layers slide (Gemma2Attention)
    if model_type in ("gemma3", "gemma3_text"):
        pattern = int(text.get("sliding_window_pattern") or 6)
        return [(i + 1) % pattern != 0 for i in range(num_layers)]  # every pattern-th layer is global
    if model_type in _UNIFORM_SLIDING_WINDOW_TYPES:
        # NOTE: vLLM ignores Qwen2's window unless use_sliding_window is true (ModelConfig.get_sliding_window);
        # transformers then applies it from max_window_layers on.
        if "use_sliding_window" in text and not text.get("use_sliding_window"):
            return [False] * num_layers
        first = int(text.get("max_window_layers") or 0) if model_type.startswith("qwen") else 0
        return [i >= first for i in range(num_layers)]
    return [False] * num_layers


def _layer_attention(text: Mapping[str, Any], model_type: str, num_layers: int, num_kv_heads: int, head_dim: int,
                     mla: MlaSpec | None) -> tuple[LayerAttention, ...]:
    if str(text.get("model_type")) == "gemma4_text":
        return gemma4_layer_attention(text)
    if mla is not None:
        # NOTE: MLA caches one latent per token (kv_lora_rank + rope), shared by all heads, never split by TP.
        latent = LayerAttention(kind="mla", num_kv_heads=1, head_size=mla.latent_size, head_size_v=0)
        indexer = indexer_bytes_per_token(text)
        if (kda := _kda_layers(text, num_layers)) is not None:
            state = _recurrent_state(text)
            return tuple(state if linear and state is not None else latent for linear in kda)
        if not indexer:
            return (latent,) * num_layers
        indexed = latent.model_copy(update={"indexer_bytes_per_token": indexer})
        return tuple(indexed if built else latent for built in indexer_layers(text))
    window = text.get("sliding_window")
    chunk = text.get("attention_chunk_size")
    layer_types = hybrid_layer_types(text, num_layers)
    full = LayerAttention(kind="full", num_kv_heads=num_kv_heads, head_size=head_dim, head_size_v=head_dim)
    recurrent = _recurrent_state(text)
    if str(text.get("model_type")) == "falcon_h1" and recurrent is not None:
        # NOTE: FalconH1ParallelHybrid: every layer runs attention and a Mamba2 mixer side by side, each with a cache.
        return (full.model_copy(update={"parallel_state": recurrent}),) * num_layers
    result: list[LayerAttention] = []
    for index, sliding in enumerate(_sliding_flags(text, model_type, num_layers)):
        kind = str(layer_types[index]) if layer_types and index < len(layer_types) else ""
        if kind in _RECURRENT_LAYER_TYPES:
            if recurrent is None:
                raise InvalidConfig(f"layer {index} is {kind!r} but the config lacks the fields of its state "
                                    "(linear_num_value_heads, ... mamba_n_heads, ... or conv_L_cache)")
            result.append(recurrent)
        elif kind == STATELESS_LAYER:
            result.append(full.model_copy(update={"stateless": True}))
        elif kind == "chunked_attention" and chunk:
            result.append(full.model_copy(update={"kind": "chunked_local", "attention_chunk_size": int(chunk)}))
        elif sliding and window:
            result.append(full.model_copy(update={"kind": "sliding_window", "sliding_window": int(window)}))
        else:
            result.append(full)
    return tuple(result)


# DeepSeek-V3.2's indexer quantizes its keys to fp8 in blocks of 128 with one fp32 scale each (Indexer.quant_block_size).
_INDEXER_QUANT_BLOCK = 128


def indexer_bytes_per_token(text: Mapping[str, Any]) -> int:
    """Bytes per token and layer of a sparse-attention (DSA) indexer cache; 0 without ``index_topk``.

    vLLM's ``DeepseekV32IndexerCache``: ``head_dim = index_head_dim + index_head_dim // 128 * 4`` uint8 elements, one
    head, replicated on every TP rank (DeepSeek-V3.2, GLM-5's ``glm_moe_dsa``)."""
    if not text.get("index_topk") or not text.get("index_head_dim"):
        return 0
    head_dim = int(text["index_head_dim"])
    return head_dim + head_dim // _INDEXER_QUANT_BLOCK * 4


def gemma4_layer_attention(text: Mapping[str, Any]) -> tuple[LayerAttention, ...]:
    """Gemma 4's layers: sliding layers at head_dim, full layers at global_head_dim (K = V heads where
    attention_k_eq_v), the KV-shared tail reading an earlier layer's cache."""
    window = int(text.get("sliding_window") or 0) or None
    return tuple(LayerAttention(kind="sliding_window" if layer.sliding and window else "full",
                                num_kv_heads=layer.num_kv_heads, head_size=layer.head_dim,
                                head_size_v=layer.head_dim, sliding_window=window if layer.sliding else None,
                                kv_sharing_target=layer.kv_sharing_target)
                 for layer in gemma4_layers(text))


_RECURRENT_LAYER_TYPES = frozenset({"linear_attention", "mamba", "mamba2", "conv"})
# transformers' ALLOWED_LAYER_TYPES (configuration_utils, 5.x), its legacy spellings ("mamba", "attention") and
# "mamba2": PreTrainedConfig.validate_layer_type refuses any other entry, so no checkpoint vLLM loads has one.
KNOWN_LAYER_TYPES = frozenset({
    "full_attention", "sliding_attention", "chunked_attention", "compressed_sparse_attention",
    "heavily_compressed_attention", "minimax_m3_sparse", "conv", "sparse", "dense", "hybrid", "hybrid_sliding", "moe",
    "deepseek_sparse_attention", "linear_attention", "attention", "mamba", "mamba2"})


def _check_layer_types(text: Mapping[str, Any], model_id: str) -> None:
    layer_types = text.get("layer_types")
    if not isinstance(layer_types, list):
        return
    unknown = sorted({str(kind) for kind in layer_types} - KNOWN_LAYER_TYPES)
    if unknown:
        raise InvalidConfig(f"{model_id}: layer_types lists {', '.join(map(repr, unknown[:3]))}, not a layer type "
                            f"transformers knows ({', '.join(sorted(KNOWN_LAYER_TYPES)[:4])}, ...)")


def _kda_layers(text: Mapping[str, Any], num_layers: int) -> list[bool] | None:
    """Kimi-Linear: which layers are KDA linear attention (``linear_attn_config["kda_layers"]``, 1-based, as the
    config's ``is_kda_layer`` reads it); the others are MLA."""
    linear = text.get("linear_attn_config")
    if not isinstance(linear, Mapping) or not isinstance(linear.get("kda_layers"), list):
        return None
    kda = {int(index) for index in linear["kda_layers"] if isinstance(index, int) and not isinstance(index, bool)}
    return [i + 1 in kda for i in range(num_layers)]


_GATED_DELTA_NET_FIELDS = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                           "linear_value_head_dim")


def _recurrent_state(text: Mapping[str, Any]) -> LayerAttention | None:
    """The per-request state of a recurrent layer, as vLLM's ``get_mamba_state_shape_from_config`` (0.32) sizes it
    with ``MambaStateShapeCalculator``: gated delta net, Mamba2, a short convolution or Kimi's KDA."""
    linear = text.get("linear_attn_config")
    if isinstance(linear, Mapping) and linear.get("num_heads") and linear.get("head_dim"):
        # NOTE: kda_state_shape: q, k and v convolved (3 x heads x head_dim channels), a head_dim x head_dim state per
        # head kept in float32 unless --mamba-ssm-cache-dtype says otherwise (kda_state_dtype).
        heads, head_dim = int(linear["num_heads"]), int(linear["head_dim"])
        return LayerAttention(kind="mamba", num_kv_heads=0, head_size=0, head_size_v=0,
                              mamba_conv_dim=3 * heads * head_dim,
                              mamba_conv_len=int(linear.get("short_conv_kernel_size") or 4) - 1,
                              mamba_temporal_shape=(heads, head_dim, head_dim), mamba_ssm_dtype="float32")
    if text.get("linear_num_value_heads"):  # gated delta net (Qwen3-Next, Qwen3.5 / 3.6)
        for key in _GATED_DELTA_NET_FIELDS:
            value = text.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidConfig(f"config.json has linear_num_value_heads (gated delta net layers) but lacks a "
                                    f"positive integer {key!r}, which sizes their state")
        k_heads, v_heads = int(text["linear_num_key_heads"]), int(text["linear_num_value_heads"])
        k_dim, v_dim = int(text["linear_key_head_dim"]), int(text["linear_value_head_dim"])
        # NOTE: Qwen3.5's config sets mamba_ssm_dtype (float32); Qwen3_5ForConditionalGenerationConfig makes it the
        # mamba_ssm_cache_dtype when that is "auto". Qwen3-Next has none: its state follows the model dtype.
        return LayerAttention(kind="mamba", num_kv_heads=0, head_size=0, head_size_v=0,
                              mamba_conv_dim=k_dim * k_heads * 2 + v_dim * v_heads,
                              mamba_conv_len=int(text.get("linear_conv_kernel_dim") or 4) - 1,
                              mamba_temporal_shape=(v_heads, v_dim, k_dim),
                              mamba_ssm_dtype=_ssm_dtype(text.get("mamba_ssm_dtype")))
    if text.get("mamba_n_heads") or text.get("mamba_num_heads"):  # Mamba2 mixers (Nemotron-H, Granite 4, Bamba, ...)
        heads = int(text.get("mamba_n_heads") or text["mamba_num_heads"])
        head_dim = int(text.get("mamba_d_head") or text.get("mamba_head_dim") or 64)
        state = int(text.get("ssm_state_size") or text.get("mamba_d_state") or 128)
        groups = int(text.get("n_groups") or text.get("mamba_n_groups") or 1)
        # NOTE: NemotronH sizes the mixer as heads x head_dim; Granite 4 and Falcon-H1 as mamba_expand x hidden_size
        # (or Falcon-H1's mamba_d_ssm).
        nemotron = str(text.get("model_type")) == "nemotron_h"
        expand = text.get("mamba_expand")
        by_expand = isinstance(expand, (int, float)) and not isinstance(expand, bool) and expand > 0 and not nemotron
        inner = int(text.get("mamba_d_ssm") or (expand * int(text["hidden_size"]) if by_expand else heads * head_dim))
        # NOTE: NemotronHForCausalLMConfig turns mamba_ssm_cache_dtype "auto" into the config's own value, else
        # float32 ("only float32 is known to have no accuracy issues").
        ssm = _ssm_dtype(text.get("mamba_ssm_cache_dtype") or "float32") if nemotron else None
        return LayerAttention(kind="mamba", num_kv_heads=0, head_size=0, head_size_v=0,
                              mamba_conv_dim=inner + 2 * groups * state,
                              mamba_conv_len=int(text.get("conv_kernel") or text.get("mamba_d_conv") or 4) - 1,
                              mamba_temporal_shape=(heads, head_dim, state), mamba_n_groups=groups,
                              mamba_ssm_dtype=ssm)
    if text.get("conv_L_cache"):  # LFM2's short convolutions: a conv state only (ShortConv)
        # NOTE: Lfm2ForCausalLM sizes it by conv_dim, Lfm2MoeForCausalLM by hidden_size.
        width = int(text.get("conv_dim") or text["hidden_size"]) if str(text.get("model_type")) == "lfm2" \
            else int(text["hidden_size"])
        return LayerAttention(kind="mamba", num_kv_heads=0, head_size=0, head_size_v=0, mamba_conv_dim=width,
                              mamba_conv_len=int(text["conv_L_cache"]) - 1)
    return None


def _unplaced_recurrent_layers(text: Mapping[str, Any], layers: tuple[LayerAttention, ...]) -> str | None:
    """A config with recurrent-state fields whose layers none are placed as recurrent (a model type whose layout
    this module does not know, such as Bamba's attn_layer_indices)."""
    if any(layer.kind == "mamba" or layer.parallel_state is not None for layer in layers):
        return None
    if _recurrent_state(text) is None and not isinstance(text.get("linear_attn_config"), Mapping):
        return None
    return (f"model_type {text.get('model_type')!r} has recurrent (Mamba / linear-attention) layers this planner "
            "does not place: their per-sequence state is missing from the KV-cache estimate, and every layer is "
            "sized as attention")


def _ssm_dtype(value: object) -> Literal["float32", "bfloat16", "float16"] | None:
    name = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "half": "float16", "fp16": "float16"}.get(
        str(value), str(value))
    return name if name in ("float32", "bfloat16", "float16") else None  # type: ignore[return-value]


def _moe_spec(text: Mapping[str, Any], num_layers: int, intermediate: int) -> MoeSpec | None:
    num_experts = text.get("num_local_experts") or text.get("n_routed_experts") or text.get("num_experts")
    if not num_experts:
        return None
    top_k = int(text.get("num_experts_per_tok") or text.get("experts_per_token") or text.get("top_k_experts")
                or text.get("num_experts_per_token") or 1)  # NOTE: the last is Kimi-Linear's spelling
    expert_size = int(text.get("moe_intermediate_size") or intermediate)
    shared = int(text.get("n_shared_experts") or text.get("num_shared_experts") or 0)
    shared_size = expert_size * shared
    if text.get("shared_expert_intermediate_size"):
        shared, shared_size = 1, int(text["shared_expert_intermediate_size"])
    if text.get("moe_shared_expert_intermediate_size"):  # NOTE: Nemotron-H's spelling, the width of each shared one
        shared_size = int(text["moe_shared_expert_intermediate_size"]) * shared
    first_dense = int(text.get("first_k_dense_replace") or text.get("num_dense_layers") or 0)  # the last: LFM2-MoE
    frequency = int(text.get("moe_layer_freq") or text.get("decoder_sparse_step") or 1)
    dense_only = set(text.get("mlp_only_layers") or [])
    moe_layers = sum(1 for i in range(num_layers)
                     if i >= first_dense and i % frequency == 0 and i not in dense_only)
    if text.get("decoder_sparse_step"):
        moe_layers = sum(1 for i in range(num_layers) if (i + 1) % frequency == 0 and i not in dense_only)
    if isinstance(text.get("hybrid_override_pattern"), str):  # Nemotron-H: "E" marks its MoE layers
        moe_layers = text["hybrid_override_pattern"].count("E")
    return MoeSpec(num_experts=int(num_experts), experts_per_token=top_k, expert_intermediate_size=expert_size,
                   num_shared_experts=shared, shared_expert_intermediate_size=shared_size, num_moe_layers=moe_layers)


def _max_positions(text: Mapping[str, Any]) -> int | None:
    values = [int(text[k]) for k in _MAX_LEN_KEYS if isinstance(text.get(k), int) and not isinstance(text[k], bool)]
    return min(values) if values else None


def derived_max_model_len(text: Mapping[str, Any], model_type: str) -> int:
    """The context length vLLM derives from the config (``_get_and_verify_max_len``), rope scaling included."""
    derived = _max_positions(text) or 2048  # NOTE: vLLM's fallback when no length key exists is 2048
    rope = text.get("rope_scaling") or text.get("rope_parameters")
    if isinstance(rope, Mapping) and "gemma3" not in model_type:
        rope_type = rope.get("rope_type", rope.get("type"))
        # NOTE: su/longrope/llama3 already publish the scaled length in max_position_embeddings.
        if rope_type not in (None, "default", "su", "longrope", "llama3", "mrope") and "factor" in rope:
            if rope_type == "yarn" and rope.get("original_max_position_embeddings"):
                derived = int(rope["original_max_position_embeddings"])
            derived = int(derived * float(rope["factor"]))
    return derived


def _config_dtype(config: Mapping[str, Any], text: Mapping[str, Any]) -> str | None:
    for source in (config, text, config.get("vision_config") or {}):
        value = source.get("dtype") or source.get("torch_dtype")
        if isinstance(value, str):
            return value.replace("torch.", "")
    return None
