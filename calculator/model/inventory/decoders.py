"""Llama-style decoders: the shared blocks (embeddings, attention, gated MLP, norms) and the dense families.

One ``DecoderStyle`` per family says what differs (biases, QK norms, Gemma's four norms per layer); the shapes
come from the config.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import InvalidConfig
from ..spec import WeightRole, WeightTensor
from ._build import Span, linear, norm, tensor
from ._config import Cfg, is_tied, text_cfg


@dataclass(frozen=True)
class DecoderStyle:
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3, Gemma 3)
    sandwich_norms: bool = False  # Gemma 2/3: pre- and post-norms around attention and MLP, four per layer


def _attention_bias(c: Cfg) -> DecoderStyle:
    bias = c.flag("attention_bias")
    return DecoderStyle(qkv_bias=bias, o_bias=bias, mlp_bias=c.flag("mlp_bias"))


# NOTE: Qwen2 hard-codes q/k/v biases (no config key before transformers 5's ``qkv_bias``); Seed-OSS splits
# the output-projection bias into its own key; Phi-3's fused qkv_proj/gate_up_proj have no biases.
STYLES: dict[str, Callable[[Cfg], DecoderStyle]] = {
    "llama": _attention_bias,
    "mistral": lambda c: DecoderStyle(),
    "mixtral": lambda c: DecoderStyle(),
    "phi3": lambda c: DecoderStyle(),
    "qwen2": lambda c: DecoderStyle(qkv_bias=c.flag("qkv_bias", True)),
    "qwen2_moe": lambda c: DecoderStyle(qkv_bias=c.flag("qkv_bias", True)),
    "qwen2_5_vl": lambda c: DecoderStyle(qkv_bias=True),
    "qwen2_5_vl_text": lambda c: DecoderStyle(qkv_bias=True),
    "qwen3": lambda c: DecoderStyle(qkv_bias=c.flag("attention_bias"), o_bias=c.flag("attention_bias"), qk_norm=True),
    "qwen3_moe": lambda c: DecoderStyle(qkv_bias=c.flag("attention_bias"), o_bias=c.flag("attention_bias"),
                                        qk_norm=True),
    "qwen3_vl_text": lambda c: DecoderStyle(qkv_bias=c.flag("attention_bias"), o_bias=c.flag("attention_bias"),
                                            qk_norm=True),
    "qwen3_vl_moe_text": lambda c: DecoderStyle(qkv_bias=c.flag("attention_bias"), o_bias=c.flag("attention_bias"),
                                                qk_norm=True),
    "gemma": _attention_bias,
    "gemma2": lambda c: DecoderStyle(qkv_bias=c.flag("attention_bias"), o_bias=c.flag("attention_bias"),
                                     sandwich_norms=True),
    "gemma3_text": lambda c: DecoderStyle(qkv_bias=c.flag("attention_bias"), o_bias=c.flag("attention_bias"),
                                          qk_norm=True, sandwich_norms=True),
    "seed_oss": lambda c: DecoderStyle(qkv_bias=c.flag("attention_bias"), o_bias=c.flag("attention_out_bias"),
                                       mlp_bias=c.flag("mlp_bias")),
}


def head_dim(c: Cfg) -> int:
    # NOTE: use head_dim when the config sets it; Qwen3 and Gemma set it independently of hidden_size.
    return c.int("head_dim", default=c.int("hidden_size") // c.int("num_attention_heads"))


def num_kv_heads(c: Cfg) -> int:
    return c.int("num_key_value_heads", default=c.int("num_attention_heads"))


def edges(c: Cfg, *, tied: bool | None = None) -> list[WeightTensor]:
    """Token embedding (first stage), final norm and lm_head (last stage); no lm_head when tied."""
    vocab, hidden = c.int("vocab_size"), c.int("hidden_size")
    tensors = [tensor("model.embed_tokens.weight", (vocab, hidden), "embedding", tp="vocab", placement="first"),
               *norm("model.norm", hidden, placement="last")]
    if not (is_tied(c) if tied is None else tied):
        tensors.append(tensor("lm_head.weight", (vocab, hidden), "lm_head", tp="vocab", placement="last"))
    return tensors


def attention(c: Cfg, style: DecoderStyle, layers: Span, *, loaded: bool = True) -> list[WeightTensor]:
    hidden, heads, kv_heads, size = c.int("hidden_size"), c.int("num_attention_heads"), num_kv_heads(c), head_dim(c)
    common: dict[str, Any] = {"layers": layers, "loaded": loaded}
    tensors = [
        *linear("self_attn.q_proj", (heads, size), hidden, "attention", tp="column", bias=style.qkv_bias, **common),
        *linear("self_attn.k_proj", (kv_heads, size), hidden, "attention", tp="column", bias=style.qkv_bias,
                **common),
        *linear("self_attn.v_proj", (kv_heads, size), hidden, "attention", tp="column", bias=style.qkv_bias,
                **common),
        *linear("self_attn.o_proj", (hidden,), heads * size, "attention", tp="row", bias=style.o_bias, **common),
    ]
    if style.qk_norm:
        tensors += [*norm("self_attn.q_norm", size, **common), *norm("self_attn.k_norm", size, **common)]
    return tensors


def layer_norms(c: Cfg, style: DecoderStyle, layers: Span, *, loaded: bool = True) -> list[WeightTensor]:
    names = ["input_layernorm", "post_attention_layernorm"]
    if style.sandwich_norms:
        names += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
    return [t for name in names for t in norm(name, c.int("hidden_size"), layers=layers, loaded=loaded)]


def gated_mlp(prefix: str, intermediate: int, hidden: int, layers: Span, *, role: WeightRole = "mlp",
              bias: bool = False, count: int = 1, loaded: bool = True,
              names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")) -> list[WeightTensor]:
    """SwiGLU-style MLP: gate and up (column-parallel), down (row-parallel)."""
    gate, up, down = names
    common: dict[str, Any] = {"layers": layers, "count": count, "loaded": loaded, "bias": bias}
    return [*linear(f"{prefix}.{gate}", (intermediate,), hidden, role, tp="column", **common),
            *linear(f"{prefix}.{up}", (intermediate,), hidden, role, tp="column", **common),
            *linear(f"{prefix}.{down}", (hidden,), intermediate, role, tp="row", **common)]


def decoder_layers(c: Cfg, style: DecoderStyle, layers: Span) -> list[WeightTensor]:
    """Attention and norms of a run of layers (the MLP is the family's business)."""
    return [*attention(c, style, layers), *layer_norms(c, style, layers)]


def style_of(c: Cfg) -> DecoderStyle:
    """The family's ``DecoderStyle``; a text block whose model_type names no family is refused by name."""
    if c.model_type not in STYLES:
        raise InvalidConfig(f"{c.origin} model_type {c.model_type!r} is not a text model this layout knows "
                            f"({', '.join(sorted(STYLES))})")
    return STYLES[c.model_type](c)


def dense_text_model(c: Cfg) -> list[WeightTensor]:
    """A dense Llama-style language model described by ``c``."""
    style = style_of(c)
    everything = (0, c.int("num_hidden_layers"))
    return [*edges(c), *decoder_layers(c, style, everything),
            *gated_mlp("mlp", c.int("intermediate_size"), c.int("hidden_size"), everything, bias=style.mlp_bias)]


def dense_decoder(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    return tuple(dense_text_model(text_cfg(config)))
