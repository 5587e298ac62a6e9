"""The fallback for an architecture we do not know: a Llama-style decoder, with every guess written down."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..spec import WeightTensor
from ._build import linear
from ._config import Cfg, text_cfg
from .decoders import DecoderStyle, attention, edges, gated_mlp, layer_norms

_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
_KV_HEAD_KEYS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num")


def generic_decoder_tensors(config: Mapping[str, Any]) -> tuple[tuple[WeightTensor, ...], tuple[str, ...]]:
    """A Llama-style weight inventory for an unknown architecture, and the assumptions behind it.

    Show the assumptions to the person: they say which numbers are guesses (e.g. "no attention biases").
    Raises ``InvalidConfig`` when even the hidden size, layers, heads or vocabulary are missing.
    """
    raw = text_cfg(config)
    hidden = raw.int("hidden_size", "d_model", "n_embd")
    layers = raw.int("num_hidden_layers", "n_layer", "num_layers")
    heads = raw.int("num_attention_heads", "n_head", "num_heads")
    assumptions = ["a Llama-style decoder: q/k/v/o attention, a gated MLP (gate, up, down), two RMSNorms per "
                   "layer, learned token embeddings and no position embeddings"]
    kv_heads = next((raw.int(k) for k in _KV_HEAD_KEYS if raw.has(k)), None)
    if kv_heads is None:
        kv_heads = heads
        assumptions.append(f"no KV-head count in the config: {heads} KV heads (one per attention head)")
    if not raw.has("head_dim"):
        assumptions.append(f"head_dim = hidden_size / heads = {hidden // heads}")
    intermediate = raw.int("intermediate_size", "ffn_dim", "n_inner", default=0)
    if not intermediate:
        intermediate = 4 * hidden
        assumptions.append(f"no intermediate size in the config: 4 x hidden_size = {intermediate}")
    if not raw.has("tie_word_embeddings"):
        assumptions.append("tie_word_embeddings not set: a separate lm_head")
    if not raw.has("attention_bias"):
        assumptions.append("no attention biases")
    style = DecoderStyle(qkv_bias=raw.flag("attention_bias"), o_bias=raw.flag("attention_bias"),
                         mlp_bias=raw.flag("mlp_bias"))
    shapes = Cfg({"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
                  "num_key_value_heads": kv_heads, "head_dim": raw.int("head_dim", default=hidden // heads),
                  "vocab_size": raw.int("vocab_size")}, raw.origin)
    everything = (0, layers)
    tensors = [*edges(shapes, tied=raw.flag("tie_word_embeddings")), *attention(shapes, style, everything),
               *layer_norms(shapes, style, everything)]
    experts = next((raw.int(k) for k in _EXPERT_KEYS if raw.int(k, default=0)), 0)
    if experts:
        expert_size = raw.int("moe_intermediate_size", default=intermediate)
        assumptions.append(f"every layer is a mixture of {experts} experts of size {expert_size} with a "
                           "router and no shared expert")
        tensors += [*linear("mlp.gate", (experts,), hidden, "router", tp="replicated", layers=everything,
                            quantizable=False),
                    *gated_mlp("mlp.experts", expert_size, hidden, everything, role="expert", count=experts)]
    else:
        tensors += gated_mlp("mlp", intermediate, hidden, everything, bias=style.mlp_bias)
    return tuple(tensors), tuple(assumptions)
