"""Gemma 4: per-layer attention shapes, KV-shared layers, per-layer embeddings (PLE), an optional MoE beside the
MLP, and the Gemma 4 vision tower — as vLLM's ``gemma4.py`` / ``gemma4_mm.py`` (0.32) build them.

What differs from Gemma 3, layer by layer (``text_config``):

- full-attention layers use ``global_head_dim`` (512 when absent) and, where ``attention_k_eq_v`` is set,
  ``num_global_key_value_heads`` KV heads whose K projection also serves as V (no ``v_proj``);
- the last ``num_kv_shared_layers`` layers read the cache of the last earlier layer of their type: they keep only
  ``q_proj``/``o_proj``/``q_norm`` and allocate no KV cache (``kv_sharing_target_layer_name``), and with
  ``use_double_wide_mlp`` their MLP is twice as wide;
- every layer stores a ``layer_scalar``; with ``hidden_size_per_layer_input`` > 0 a per-layer embedding table
  feeds each layer through a gate and a projection;
- with ``num_experts`` set, every layer adds a 128-expert MoE (router with a scale vector and per-expert scales,
  three more norms) beside its dense MLP.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..spec import WeightTensor
from ._build import Span, linear, norm, runs, tensor
from ._config import Cfg, text_cfg, vision_cfg
from .decoders import edges, gated_mlp
from .vision import ENCODER, _vision_linear, _vision_norm

_GLOBAL_HEAD_DIM = 512  # Gemma4TextConfig.__post_init__'s default for global_head_dim


@dataclass(frozen=True)
class Gemma4Layer:
    """What one Gemma 4 decoder layer attends with and whose cache it uses."""

    sliding: bool
    head_dim: int
    num_kv_heads: int
    k_eq_v: bool  # K projection reused as V (no v_proj in the checkpoint)
    kv_sharing_target: int | None  # earlier layer whose cache this one reads; None = its own cache


def gemma4_layers(text: Mapping[str, Any]) -> tuple[Gemma4Layer, ...]:
    """Per-layer attention of a Gemma 4 ``text_config`` (Gemma4TextConfig.per_layer_config + vLLM's sharing)."""
    c = Cfg(text, "config.json text_config")
    num_layers = c.int("num_hidden_layers")
    layer_types = list(text.get("layer_types") or [
        "sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(num_layers)])
    layer_types[num_layers - 1] = "full_attention"  # NOTE: transformers forces the last layer to full attention
    k_eq_v = bool(text.get("attention_k_eq_v", False))
    first_shared = num_layers - c.int("num_kv_shared_layers", default=0)
    shapes = _per_layer_shapes(text, c, layer_types[:num_layers])
    result = []
    for index, kind in enumerate(layer_types[:num_layers]):
        sliding = kind == "sliding_attention"
        target = None
        if index >= first_shared:
            earlier = [i for i in range(first_shared) if layer_types[i] == kind]
            target = earlier[-1] if earlier else None
        head_dim, kv_heads = shapes[index]
        result.append(Gemma4Layer(sliding=sliding, num_kv_heads=kv_heads, kv_sharing_target=target, head_dim=head_dim,
                                  k_eq_v=k_eq_v and not sliding and index < first_shared))
    return tuple(result)


def _per_layer_shapes(text: Mapping[str, Any], c: Cfg, layer_types: list[str]) -> list[tuple[int, int]]:
    """(head_dim, KV heads) per layer: ``per_layer_config`` where the config spells it out (transformers 5.19+ saves
    it), else what Gemma4TextConfig.__post_init__ derives — full layers at ``global_head_dim`` with
    ``num_global_key_value_heads`` where ``attention_k_eq_v`` is not false."""
    base = (c.int("head_dim"), c.int("num_key_value_heads"))
    written = text.get("per_layer_config")
    if isinstance(written, Mapping):
        overrides = {int(k): v for k, v in written.items() if str(k).isdigit() and isinstance(v, Mapping)}
        return [(int(overrides.get(i, {}).get("head_dim") or base[0]),
                 int(overrides.get(i, {}).get("num_key_value_heads") or base[1])) for i in range(len(layer_types))]
    global_kv = text.get("num_global_key_value_heads")
    gated = bool(text.get("attention_k_eq_v", True))
    full = (c.int("global_head_dim", default=_GLOBAL_HEAD_DIM),
            int(global_kv) if gated and isinstance(global_kv, int) and global_kv > 0 else base[1])
    return [base if kind == "sliding_attention" else full for kind in layer_types]


def _attention(c: Cfg, layer: Gemma4Layer, span: Span) -> list[WeightTensor]:
    hidden, heads, size = c.int("hidden_size"), c.int("num_attention_heads"), layer.head_dim
    bias = c.flag("attention_bias")
    tensors = [*linear("self_attn.q_proj", (heads, size), hidden, "attention", tp="column", bias=bias, layers=span),
               *linear("self_attn.o_proj", (hidden,), heads * size, "attention", tp="row", bias=bias, layers=span),
               *norm("self_attn.q_norm", size, layers=span)]
    if layer.kv_sharing_target is not None:
        return tensors  # NOTE: shared layers project only Q; K and V come from the target layer's cache
    tensors += [*linear("self_attn.k_proj", (layer.num_kv_heads, size), hidden, "attention", tp="column",
                        bias=bias, layers=span),
                *norm("self_attn.k_norm", size, layers=span)]  # NOTE: v_norm has no weight
    if not layer.k_eq_v:
        tensors += linear("self_attn.v_proj", (layer.num_kv_heads, size), hidden, "attention", tp="column",
                          bias=bias, layers=span)
    return tensors


def _moe(c: Cfg, span: Span) -> list[WeightTensor]:
    hidden, experts = c.int("hidden_size"), c.int("num_experts")
    expert_size = c.int("moe_intermediate_size", "expert_intermediate_size")
    # NOTE: the router is a GateLinear kept 16-bit and whole on every rank, with a per-dimension input scale and a
    # per-expert output scale (Gemma4Router).
    return [*linear("router.proj", (experts,), hidden, "router", tp="replicated", layers=span, quantizable=False),
            tensor("router.scale", (hidden,), "router", layers=span),
            tensor("router.per_expert_scale", (experts,), "router", layers=span),
            *gated_mlp("experts", expert_size, hidden, span, role="expert", count=experts),
            *[t for name in ("post_feedforward_layernorm_1", "post_feedforward_layernorm_2",
                             "pre_feedforward_layernorm_2") for t in norm(name, hidden, layers=span)]]


def _per_layer_embeddings(c: Cfg) -> list[WeightTensor]:
    width, num_layers, hidden = c.int("hidden_size_per_layer_input", default=0), c.int("num_hidden_layers"), \
        c.int("hidden_size")
    if not width:
        return []
    everything = (0, num_layers)
    return [tensor("model.embed_tokens_per_layer.weight", (c.int("vocab_size_per_layer_input",
                                                                 default=c.int("vocab_size")), num_layers * width),
                   "embedding", tp="vocab", placement="first"),
            *linear("model.per_layer_model_projection", (num_layers * width,), hidden, "embedding", tp="column",
                    placement="first"),
            *norm("model.per_layer_projection_norm", width, placement="first"),
            *linear("per_layer_input_gate", (width,), hidden, "mlp", tp="replicated", layers=everything),
            *linear("per_layer_projection", (hidden,), width, "mlp", tp="replicated", layers=everything),
            *norm("post_per_layer_input_norm", hidden, layers=everything)]


def gemma4_text_model(c: Cfg, layers: tuple[Gemma4Layer, ...]) -> list[WeightTensor]:
    hidden, num_layers = c.int("hidden_size"), len(layers)
    everything = (0, num_layers)
    tensors = [*edges(c, tied=c.flag("tie_word_embeddings", default=True)), *_per_layer_embeddings(c),
               *[t for name in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                                "post_feedforward_layernorm") for t in norm(name, hidden, layers=everything)],
               tensor("layer_scalar", (1,), "norm", layers=everything)]
    by_shape: dict[Gemma4Layer, list[int]] = {}
    for index, layer in enumerate(layers):
        shape = Gemma4Layer(layer.sliding, layer.head_dim, layer.num_kv_heads, layer.k_eq_v,
                            None if layer.kv_sharing_target is None else -1)
        by_shape.setdefault(shape, []).append(index)
    for shape, indices in by_shape.items():
        for span in runs(indices):
            tensors += _attention(c, shape, span)
    double_wide = c.flag("use_double_wide_mlp")
    for shared, indices in ((False, [i for i, x in enumerate(layers) if x.kv_sharing_target is None]),
                            (True, [i for i, x in enumerate(layers) if x.kv_sharing_target is not None])):
        width = c.int("intermediate_size") * (2 if shared and double_wide else 1)
        for span in runs(indices):
            tensors += gated_mlp("mlp", width, hidden, span)
    if c.get("num_experts") is not None:
        tensors += _moe(c, everything)
    return tensors


def gemma4_vision_tower(v: Cfg, text_hidden: int) -> list[WeightTensor]:
    """Gemma 4's ViT (bias-free q/k/v/o with q/k norms, gated MLP, four norms per layer), its patch embedder with a
    two-axis position table, the optional standardisation vectors, and ``embed_vision``'s projection."""
    hidden, inner, count = v.int("hidden_size"), v.int("intermediate_size"), v.int("num_hidden_layers")
    heads, size = v.int("num_attention_heads"), v.int("head_dim", default=v.int("hidden_size")
                                                      // v.int("num_attention_heads"))
    patch, p = v.int("patch_size"), "vision_tower.encoder.layers"
    common: dict[str, Any] = {"bias": False, "count": count}
    tensors = [
        *_vision_linear("vision_tower.patch_embedder.input_proj", hidden, 3 * patch * patch, "replicated",
                        bias=False),
        tensor("vision_tower.patch_embedder.position_embedding_table",
               (2, v.int("position_embedding_size", default=10_240), hidden), "vision", **ENCODER),
        *_vision_linear(f"{p}.self_attn.q_proj", heads * size, hidden, "column", **common),
        *_vision_linear(f"{p}.self_attn.k_proj", v.int("num_key_value_heads", default=heads) * size, hidden,
                        "column", **common),
        *_vision_linear(f"{p}.self_attn.v_proj", v.int("num_key_value_heads", default=heads) * size, hidden,
                        "column", **common),
        *_vision_linear(f"{p}.self_attn.o_proj", hidden, heads * size, "row", **common),
        *_vision_norm(f"{p}.self_attn.q_norm", size, bias=False, count=count),
        *_vision_norm(f"{p}.self_attn.k_norm", size, bias=False, count=count),
        *_vision_linear(f"{p}.mlp.gate_proj", inner, hidden, "column", **common),
        *_vision_linear(f"{p}.mlp.up_proj", inner, hidden, "column", **common),
        *_vision_linear(f"{p}.mlp.down_proj", hidden, inner, "row", **common),
        *[t for name in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                         "post_feedforward_layernorm") for t in _vision_norm(f"{p}.{name}", hidden, bias=False,
                                                                              count=count)],
        # NOTE: embed_vision's pre-projection RMSNorm has no weight; only its projection is stored.
        *_vision_linear("embed_vision.embedding_projection", text_hidden, hidden, "replicated", bias=False,
                        role="projector"),
    ]
    if v.flag("standardize"):
        tensors += [tensor("vision_tower.std_bias", (hidden,), "vision", **ENCODER),
                    tensor("vision_tower.std_scale", (hidden,), "vision", **ENCODER)]
    return tensors


def gemma4_model(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """``Gemma4ForConditionalGeneration`` (text + vision tower) or a bare ``gemma4_text`` checkpoint."""
    text = text_cfg(config)
    raw = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else config
    tensors = gemma4_text_model(text, gemma4_layers(raw))
    if isinstance(config.get("vision_config"), Mapping):
        tensors += gemma4_vision_tower(vision_cfg(config, "gemma4_vision"), text.int("hidden_size"))
    return tuple(tensors)
