"""Hybrid recurrent decoders: attention layers between linear-attention or convolution layers, which keep a fixed
state per sequence instead of a KV cache. Qwen3-Next / Qwen3-Coder-Next (gated delta net) and LFM2 (short
convolutions), with the tensors vLLM 0.32 builds for them (``qwen3_next.py``, ``qwen_gdn_linear_attn.py``,
``lfm2.py``, ``short_conv.py``).

``hybrid_layer_types`` names each layer's kind for these families, and for Nemotron-H's ``hybrid_override_pattern``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import InvalidConfig
from ..spec import WeightTensor
from ._build import Span, linear, norm, runs, tensor
from ._config import Cfg, text_cfg, vision_cfg
from .decoders import edges, gated_mlp
from .moe import router
from .vision import qwen3_vl_tower

# Nemotron-H's hybrid_override_pattern: one character per layer (NemotronHConfig.layers_block_type).
_NEMOTRON_H_BLOCKS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
STATELESS_LAYER = "mlp"  # a layer that keeps nothing per request (Nemotron-H's MLP and MoE layers)


def hybrid_layer_types(text: Mapping[str, Any], num_layers: int) -> list[str] | None:
    """Each layer's kind as transformers names it: ``layer_types`` first, else derived the way the family's config
    class derives it: Qwen3-Next / Qwen3.5's ``full_attention_interval``, LFM2's ``full_attn_idxs``, Nemotron-H's
    ``hybrid_override_pattern`` (its MLP and MoE layers, which cache nothing, become ``"mlp"``)."""
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        if len(pattern) != num_layers or set(pattern) - set(_NEMOTRON_H_BLOCKS):
            raise InvalidConfig(f"hybrid_override_pattern must give each of the {num_layers} layers one of "
                                f"{', '.join(map(repr, _NEMOTRON_H_BLOCKS))}")
        kinds = [_NEMOTRON_H_BLOCKS[char] for char in pattern]
        return [STATELESS_LAYER if kind == "moe" else kind for kind in kinds]
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list):
        return [str(kind) for kind in layer_types]
    if text.get("linear_num_value_heads") and text.get("full_attention_interval"):
        interval = int(text["full_attention_interval"])
        return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(num_layers)]
    if text.get("conv_L_cache") and isinstance(text.get("full_attn_idxs"), list):
        full = set(text["full_attn_idxs"])
        return ["full_attention" if i in full else "conv" for i in range(num_layers)]
    return None


def _layer_spans(c: Cfg, kind: str) -> list[Span]:
    layers = c.int("num_hidden_layers")
    types = hybrid_layer_types(c.as_mapping(), layers)
    if types is None or len(types) < layers:
        raise InvalidConfig(f"{c.origin} lacks layer_types (or the fields that derive it) for its {layers} layers")
    return list(runs(i for i in range(layers) if types[i] == kind))


def _gated_delta_net(c: Cfg, span: Span) -> list[WeightTensor]:
    """Qwen3-Next's linear attention: fused q/k/v/z and b/a projections, a depthwise conv over q, k and v, per-head
    decay (``A_log``, float32 in vLLM) and step bias, a gated RMSNorm over each value head, the output projection."""
    hidden = c.int("hidden_size")
    k_heads, v_heads = c.int("linear_num_key_heads"), c.int("linear_num_value_heads")
    key_dim, value_dim = k_heads * c.int("linear_key_head_dim"), v_heads * c.int("linear_value_head_dim")
    kernel = c.int("linear_conv_kernel_dim", default=4)
    return [
        *linear("linear_attn.in_proj_qkvz", (2 * key_dim + 2 * value_dim,), hidden, "attention", tp="column",
                layers=span),
        *linear("linear_attn.in_proj_ba", (2 * v_heads,), hidden, "attention", tp="column", layers=span),
        tensor("linear_attn.conv1d.weight", (2 * key_dim + value_dim, 1, kernel), "attention", tp="column",
               layers=span),
        tensor("linear_attn.dt_bias", (v_heads,), "attention", tp="column", layers=span),
        tensor("linear_attn.A_log", (v_heads,), "attention", tp="column", layers=span, dtype_bytes=4),
        *norm("linear_attn.norm", c.int("linear_value_head_dim"), layers=span),
        *linear("linear_attn.out_proj", (hidden,), value_dim, "attention", tp="row", layers=span),
    ]


def _gated_attention(c: Cfg, span: Span) -> list[WeightTensor]:
    """Qwen3-Next's full attention: q_proj also yields the per-head output gate (``attn_output_gate``)."""
    hidden, heads, kv_heads = c.int("hidden_size"), c.int("num_attention_heads"), c.int("num_key_value_heads")
    size = c.int("head_dim", default=hidden // heads)
    gate = 2 if c.flag("attn_output_gate", default=True) else 1
    return [*linear("self_attn.q_proj", (heads * gate, size), hidden, "attention", tp="column", layers=span),
            *linear("self_attn.k_proj", (kv_heads, size), hidden, "attention", tp="column", layers=span),
            *linear("self_attn.v_proj", (kv_heads, size), hidden, "attention", tp="column", layers=span),
            *linear("self_attn.o_proj", (hidden,), heads * size, "attention", tp="row", layers=span),
            *norm("self_attn.q_norm", size, layers=span), *norm("self_attn.k_norm", size, layers=span)]


def qwen3_next_decoder(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """Qwen3-Next / Qwen3-Coder-Next: gated-delta-net and gated-attention layers, each with two norms and a
    Qwen2-MoE block (routed experts, one shared expert behind a sigmoid gate) or, in ``mlp_only_layers``, a dense MLP.

    The checkpoint's multi-token-prediction layer (``mtp.*``, Qwen3-Next-80B) is skipped on load without
    ``--speculative-config``, so it is not counted."""
    c = text_cfg(config)
    num_layers, hidden = c.int("num_hidden_layers"), c.int("hidden_size")
    everything = (0, num_layers)
    tensors = [*edges(c), *(t for name in ("input_layernorm", "post_attention_layernorm")
                            for t in norm(name, hidden, layers=everything))]
    for span in _layer_spans(c, "linear_attention"):
        tensors += _gated_delta_net(c, span)
    for span in _layer_spans(c, "full_attention"):
        tensors += _gated_attention(c, span)
    experts, step = c.int("num_experts", default=0), c.int("decoder_sparse_step", default=1) or 1
    dense_only = set(c.get("mlp_only_layers") or [])
    moe_layers = [i for i in range(num_layers) if experts and i not in dense_only and (i + 1) % step == 0]
    for span in runs(moe_layers):
        tensors += [*router("mlp.gate", experts, hidden, span),
                    *gated_mlp("mlp.experts", c.int("moe_intermediate_size"), hidden, span, role="expert",
                               count=experts)]
        if c.int("shared_expert_intermediate_size", default=0):
            tensors += [*gated_mlp("mlp.shared_expert", c.int("shared_expert_intermediate_size"), hidden, span),
                        *router("mlp.shared_expert_gate", 1, hidden, span)]
    for span in runs(set(range(num_layers)) - set(moe_layers)):
        tensors += gated_mlp("mlp", c.int("intermediate_size"), hidden, span)
    return tuple(tensors)


def lfm2_feed_forward_size(c: Cfg) -> int:
    """LFM2's MLP width as Lfm2MLP computes it: 2/3 of ``intermediate_size`` (``block_ff_dim`` in early configs),
    times ``block_ffn_dim_multiplier``, rounded up to ``block_multiple_of``, when ``block_auto_adjust_ff_dim``."""
    size = c.int("intermediate_size", "block_ff_dim")
    if not c.flag("block_auto_adjust_ff_dim", default=True):
        return size
    size = int(2 * size / 3)
    multiplier = c.get("block_ffn_dim_multiplier", 1.0)
    if multiplier is not None:
        size = int(float(multiplier) * size)
    multiple = c.int("block_multiple_of", default=256) or 1
    return multiple * ((size + multiple - 1) // multiple)


def lfm2_decoder(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """LFM2 / LFM2.5 (dense): short-convolution layers (in_proj to B, C and x, a depthwise conv of ``conv_L_cache``
    taps, out_proj) and GQA layers with per-head QK norms; every layer an ``operator_norm``, an ``ffn_norm`` and a
    SwiGLU ``feed_forward`` (w1/w3/w2); the final norm is ``embedding_norm``. vLLM always ties the LM head to the
    embeddings (``lm_head.tie_weights``), so none is counted."""
    c = text_cfg(config)
    everything = (0, c.int("num_hidden_layers"))
    return (*_lfm2_mixers(c, conv=c.int("conv_dim", default=c.int("hidden_size"))),
            *gated_mlp("feed_forward", lfm2_feed_forward_size(c), c.int("hidden_size"), everything,
                       names=("w1", "w3", "w2")))


def lfm2_moe_decoder(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """LFM2-MoE (``lfm2_moe.py``): LFM2's mixers with convolutions as wide as ``hidden_size``, a SwiGLU of
    ``intermediate_size`` (as given) in the first ``num_dense_layers`` layers, then a sigmoid router (its
    ``expert_bias`` float32 in vLLM, where ``use_expert_bias``) over ``num_experts`` experts (w1/w3/w2)."""
    c = text_cfg(config)
    num_layers, hidden = c.int("num_hidden_layers"), c.int("hidden_size")
    dense = min(c.int("num_dense_layers", default=0), num_layers)
    experts, moe = c.int("num_experts"), (dense, num_layers)
    tensors = list(_lfm2_mixers(c, conv=hidden))
    if dense:
        tensors += gated_mlp("feed_forward", c.int("intermediate_size"), hidden, (0, dense), names=("w1", "w3", "w2"))
    if dense < num_layers:
        tensors += [*router("feed_forward.gate", experts, hidden, moe),
                    *gated_mlp("feed_forward.experts", c.int("moe_intermediate_size"), hidden, moe, role="expert",
                               count=experts, names=("w1", "w3", "w2"))]
        if c.flag("use_expert_bias"):
            tensors.append(tensor("feed_forward.expert_bias", (experts,), "router", layers=moe, dtype_bytes=4))
    return tuple(tensors)


def _lfm2_mixers(c: Cfg, *, conv: int) -> list[WeightTensor]:
    """Everything of an LFM2 model but its feed-forward blocks: embeddings, norms, short convolutions, attention."""
    num_layers, hidden = c.int("num_hidden_layers"), c.int("hidden_size")
    everything = (0, num_layers)
    heads, kv_heads = c.int("num_attention_heads"), c.int("num_key_value_heads")
    size = hidden // heads
    bias = c.flag("conv_bias")
    vocab = c.int("vocab_size")
    tensors = [tensor("model.embed_tokens.weight", (vocab, hidden), "embedding", tp="vocab", placement="first"),
               *norm("model.embedding_norm", hidden, placement="last"),
               *(t for name in ("operator_norm", "ffn_norm") for t in norm(name, hidden, layers=everything))]
    for span in _layer_spans(c, "conv"):
        tensors += [*linear("conv.in_proj", (3 * conv,), hidden, "attention", tp="column", bias=bias, layers=span),
                    tensor("conv.conv.weight", (conv, 1, c.int("conv_L_cache")), "attention", tp="column",
                           layers=span),
                    *linear("conv.out_proj", (hidden,), conv, "attention", tp="row", bias=bias, layers=span)]
        if bias:
            tensors.append(tensor("conv.conv.bias", (conv,), "attention", tp="column", layers=span))
    for span in _layer_spans(c, "full_attention"):
        tensors += [*linear("self_attn.q_proj", (heads, size), hidden, "attention", tp="column", layers=span),
                    *linear("self_attn.k_proj", (kv_heads, size), hidden, "attention", tp="column", layers=span),
                    *linear("self_attn.v_proj", (kv_heads, size), hidden, "attention", tp="column", layers=span),
                    *linear("self_attn.out_proj", (hidden,), hidden, "attention", tp="row", layers=span),
                    *norm("self_attn.q_layernorm", size, layers=span),
                    *norm("self_attn.k_layernorm", size, layers=span)]
    return tensors


def _mamba2_mixer(prefix: str, c: Cfg, span: Span, *, heads: int, groups: int, state: int, kernel: int, inner: int,
                  conv_bias: bool, proj_bias: bool, gated_norm: bool = True) -> list[WeightTensor]:
    """vLLM's MambaMixer2: in_proj to x, z, B, C and dt; a depthwise conv over x, B, C; per-head A (float32 in vLLM),
    D and dt bias; a gated RMSNorm over x; out_proj."""
    hidden = c.int("hidden_size")
    conv_dim = inner + 2 * groups * state
    tensors = [*linear(f"{prefix}.in_proj", (inner + conv_dim + heads,), hidden, "attention", tp="column",
                       bias=proj_bias, layers=span),
               tensor(f"{prefix}.conv1d.weight", (conv_dim, 1, kernel), "attention", tp="column", layers=span),
               tensor(f"{prefix}.A_log", (heads,), "attention", tp="column", layers=span, dtype_bytes=4),
               tensor(f"{prefix}.D", (heads,), "attention", tp="column", layers=span),
               tensor(f"{prefix}.dt_bias", (heads,), "attention", tp="column", layers=span),
               *linear(f"{prefix}.out_proj", (hidden,), inner, "attention", tp="row", bias=proj_bias, layers=span)]
    if conv_bias:
        tensors.append(tensor(f"{prefix}.conv1d.bias", (conv_dim,), "attention", tp="column", layers=span))
    if gated_norm:  # NOTE: Mixer2RMSNormGated registers its weight only when it normalises (Falcon-H1 may not)
        tensors.append(tensor(f"{prefix}.norm.weight", (inner,), "norm", tp="column", layers=span))
    return tensors


def _plain_attention(prefix: str, c: Cfg, span: Span, *, head_dim: int, bias: bool) -> list[WeightTensor]:
    hidden, heads, kv_heads = c.int("hidden_size"), c.int("num_attention_heads"), c.int("num_key_value_heads")
    return [*linear(f"{prefix}.q_proj", (heads, head_dim), hidden, "attention", tp="column", bias=bias, layers=span),
            *linear(f"{prefix}.k_proj", (kv_heads, head_dim), hidden, "attention", tp="column", bias=bias,
                    layers=span),
            *linear(f"{prefix}.v_proj", (kv_heads, head_dim), hidden, "attention", tp="column", bias=bias,
                    layers=span),
            *linear(f"{prefix}.o_proj", (hidden,), heads * head_dim, "attention", tp="row", bias=bias, layers=span)]


def granite_moe_hybrid_decoder(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """Granite 4.0-H (GraniteMoeHybrid): Mamba2 or attention mixers (``layer_types`` "mamba" / "attention"), each
    layer with two norms, routed experts (fused input_linear = gate and up, output_linear) and a shared MLP."""
    c = text_cfg(config)
    num_layers, hidden = c.int("num_hidden_layers"), c.int("hidden_size")
    everything = (0, num_layers)
    heads = c.int("mamba_n_heads")
    tensors = [*edges(c), *(t for name in ("input_layernorm", "post_attention_layernorm")
                            for t in norm(name, hidden, layers=everything))]
    for span in _layer_spans(c, "mamba"):
        tensors += _mamba2_mixer("mamba", c, span, heads=heads, groups=c.int("mamba_n_groups", default=1),
                                 state=c.int("mamba_d_state"),
                                 kernel=c.int("mamba_d_conv", default=4),
                                 inner=int(float(c.get("mamba_expand", 2)) * hidden),
                                 conv_bias=c.flag("mamba_conv_bias", default=True),
                                 proj_bias=c.flag("mamba_proj_bias"))
    for span in _layer_spans(c, "attention"):
        tensors += _plain_attention("self_attn", c, span, head_dim=hidden // c.int("num_attention_heads"),
                                    bias=c.flag("attention_bias"))
    experts = c.int("num_local_experts", default=0)
    if experts:
        size = c.int("intermediate_size")
        tensors += [*router("block_sparse_moe.router.layer", experts, hidden, everything),
                    *linear("block_sparse_moe.input_linear", (2 * size,), hidden, "expert", tp="column",
                            layers=everything, count=experts),
                    *linear("block_sparse_moe.output_linear", (hidden,), size, "expert", tp="row",
                            layers=everything, count=experts)]
    shared = c.int("shared_intermediate_size", default=0)
    if shared:
        tensors += [*linear("shared_mlp.input_linear", (2 * shared,), hidden, "mlp", tp="column", layers=everything),
                    *linear("shared_mlp.output_linear", (hidden,), shared, "mlp", tp="row", layers=everything)]
    return tuple(tensors)


def _nemotron_mlp_sizes(c: Cfg, count: int) -> list[int]:
    sizes = c.get("intermediate_size")
    if isinstance(sizes, list):
        return [int(sizes[0] if len(sizes) == 1 else sizes[i]) for i in range(count)]
    return [c.int("intermediate_size")] * count


def nemotron_h_decoder(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """Nemotron-H (NVIDIA Nemotron Nano 2, Nemotron 3): one block per layer as ``hybrid_override_pattern`` says
    ('M' Mamba2, '*' attention, '-' a squared-ReLU MLP, 'E' routed + shared experts), each behind one norm; the
    backbone's embeddings and final ``norm_f``; an untied LM head."""
    c = text_cfg(config)
    num_layers, hidden = c.int("num_hidden_layers"), c.int("hidden_size")
    pattern = str(c.get("hybrid_override_pattern") or "")
    if len(pattern) != num_layers:
        raise InvalidConfig(f"{c.origin} hybrid_override_pattern must give each of the {num_layers} layers a block")
    vocab = c.int("vocab_size")
    tensors = [tensor("backbone.embeddings.weight", (vocab, hidden), "embedding", tp="vocab", placement="first"),
               *norm("backbone.norm_f", hidden, placement="last"),
               *norm("norm", hidden, layers=(0, num_layers))]
    if not c.flag("tie_word_embeddings"):
        tensors.append(tensor("lm_head.weight", (vocab, hidden), "lm_head", tp="vocab", placement="last"))
    heads, head_dim = c.int("mamba_num_heads"), c.int("mamba_head_dim")
    mlp_sizes = iter(_nemotron_mlp_sizes(c, pattern.count("-")))
    bias = c.flag("mlp_bias")
    for index, block in enumerate(pattern):
        span = (index, index + 1)
        if block == "M":
            tensors += _mamba2_mixer("mixer", c, span, heads=heads, groups=c.int("n_groups"),
                                     state=c.int("ssm_state_size"), kernel=c.int("conv_kernel", default=4),
                                     inner=heads * head_dim, conv_bias=c.flag("use_conv_bias", default=True),
                                     proj_bias=c.flag("use_bias"))
        elif block == "*":
            tensors += _plain_attention("mixer", c, span, head_dim=c.int(
                "head_dim", default=hidden // c.int("num_attention_heads")), bias=False)
        elif block == "-":
            size = next(mlp_sizes)
            tensors += [*linear("mixer.up_proj", (size,), hidden, "mlp", tp="column", bias=bias, layers=span),
                        *linear("mixer.down_proj", (hidden,), size, "mlp", tp="row", bias=bias, layers=span)]
        else:  # "E"
            tensors += _nemotron_moe(c, span)
    return tuple(tensors)


def _nemotron_moe(c: Cfg, span: Span) -> list[WeightTensor]:
    hidden, experts = c.int("hidden_size"), c.int("n_routed_experts")
    width = c.int("moe_latent_size", default=0) or hidden
    size, bias = c.int("moe_intermediate_size"), c.flag("mlp_bias")
    tensors = [*router("mixer.gate", experts, hidden, span),
               tensor("mixer.gate.e_score_correction_bias", (experts,), "router", layers=span, dtype_bytes=4),
               *linear("mixer.experts.up_proj", (size,), width, "expert", tp="column", layers=span, count=experts),
               *linear("mixer.experts.down_proj", (width,), size, "expert", tp="row", layers=span, count=experts)]
    shared = c.int("moe_shared_expert_intermediate_size", default=0) * c.int("n_shared_experts", default=0)
    if shared:
        tensors += [*linear("mixer.shared_experts.up_proj", (shared,), hidden, "mlp", tp="column", bias=bias,
                            layers=span),
                    *linear("mixer.shared_experts.down_proj", (hidden,), shared, "mlp", tp="row", bias=bias,
                            layers=span)]
    if width != hidden:
        tensors += [*linear("mixer.fc1_latent_proj", (width,), hidden, "mlp", tp="replicated", bias=bias, layers=span),
                    *linear("mixer.fc2_latent_proj", (hidden,), width, "mlp", tp="replicated", bias=bias,
                            layers=span)]
    return tensors


def qwen3_5_model(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """Qwen3.5 / Qwen3.6 (dense ``qwen3_5``, MoE ``qwen3_5_moe``, and their text-only ``*_text`` checkpoints): the
    Qwen3-Next layer layout (vLLM fuses the checkpoint's in_proj_qkv + in_proj_z and in_proj_b + in_proj_a into the
    same two projections) with the Qwen3-VL vision tower (``Qwen3_VisionTransformer``) when a ``vision_config`` is
    present. The ``mtp.*`` layer is skipped on load without ``--speculative-config``."""
    text = qwen3_next_decoder(config)
    if not isinstance(config.get("vision_config"), Mapping):
        return text
    return (*text, *qwen3_vl_tower(vision_cfg(config, "qwen3_5")))


def falcon_h1_decoder(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """Falcon-H1 (FalconH1ParallelHybrid): in every layer attention and a Mamba2 mixer (``mamba_d_ssm`` or
    ``mamba_expand`` x hidden wide; its gated norm only with ``mamba_rms_norm``) side by side, then a SwiGLU MLP;
    ``input_layernorm`` and ``pre_ff_layernorm``."""
    c = text_cfg(config)
    num_layers, hidden = c.int("num_hidden_layers"), c.int("hidden_size")
    everything = (0, num_layers)
    heads = c.int("num_attention_heads")
    inner = c.int("mamba_d_ssm", default=0) or int(float(c.get("mamba_expand", 2)) * hidden)
    return (*edges(c), *(t for name in ("input_layernorm", "pre_ff_layernorm")
                         for t in norm(name, hidden, layers=everything)),
            *_plain_attention("self_attn", c, everything, head_dim=c.int("head_dim", default=hidden // heads),
                              bias=False),
            *_mamba2_mixer("mamba", c, everything, heads=c.int("mamba_n_heads"),
                           groups=c.int("mamba_n_groups", default=1), state=c.int("mamba_d_state"),
                           kernel=c.int("mamba_d_conv", default=4), inner=inner,
                           conv_bias=c.flag("mamba_conv_bias", default=True), proj_bias=c.flag("mamba_proj_bias"),
                           gated_norm=c.flag("mamba_rms_norm")),
            *gated_mlp("feed_forward", c.int("intermediate_size"), hidden, everything))
