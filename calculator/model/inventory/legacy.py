"""Pre-Llama decoders with biased linears and LayerNorms: Phi-1/1.5/2 and OPT."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..spec import WeightTensor
from ._build import linear, norm, tensor
from ._config import Cfg, is_tied, text_cfg

# NOTE: OPT's learned positions are offset by 2 (OPTLearnedPositionalEmbedding: num_embeddings + 2).
OPT_POSITION_OFFSET = 2


def phi_decoder(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """PhiForCausalLM: one LayerNorm per layer feeding attention and MLP in parallel; partial rotary has no
    weights; every linear and the lm_head carry a bias."""
    c = text_cfg(config)
    everything = (0, c.int("num_hidden_layers"))
    hidden, heads, vocab = c.int("hidden_size"), c.int("num_attention_heads"), c.int("vocab_size")
    kv_heads = c.int("num_key_value_heads", default=heads)
    size = hidden // heads
    intermediate = c.int("intermediate_size")
    common: dict[str, Any] = {"layers": everything, "bias": True}
    tensors = [
        tensor("model.embed_tokens.weight", (vocab, hidden), "embedding", tp="vocab", placement="first"),
        *norm("model.final_layernorm", hidden, bias=True, placement="last"),
        *norm("input_layernorm", hidden, bias=True, layers=everything),
        *linear("self_attn.q_proj", (heads, size), hidden, "attention", tp="column", **common),
        *linear("self_attn.k_proj", (kv_heads, size), hidden, "attention", tp="column", **common),
        *linear("self_attn.v_proj", (kv_heads, size), hidden, "attention", tp="column", **common),
        *linear("self_attn.dense", (hidden,), heads * size, "attention", tp="row", **common),
        *linear("mlp.fc1", (intermediate,), hidden, "mlp", tp="column", **common),
        *linear("mlp.fc2", (hidden,), intermediate, "mlp", tp="row", **common),
    ]
    if c.flag("qk_layernorm"):
        tensors += [*norm("self_attn.q_layernorm", size, bias=True, layers=everything),
                    *norm("self_attn.k_layernorm", size, bias=True, layers=everything)]
    if not is_tied(c):
        tensors += [tensor("lm_head.weight", (vocab, hidden), "lm_head", tp="vocab", placement="last"),
                    tensor("lm_head.bias", (vocab,), "lm_head", tp="vocab", placement="last")]
    return tuple(tensors)


def opt_decoder(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """OPTForCausalLM: learned positions, biased projections, LayerNorms, optional project_in/out."""
    c: Cfg = text_cfg(config)
    everything = (0, c.int("num_hidden_layers"))
    hidden, heads, vocab = c.int("hidden_size"), c.int("num_attention_heads"), c.int("vocab_size")
    embed_dim = c.int("word_embed_proj_dim", default=hidden)
    ffn = c.int("ffn_dim")
    bias = c.flag("enable_bias", True)
    affine = c.flag("layer_norm_elementwise_affine", True)
    common: dict[str, Any] = {"layers": everything, "bias": bias}
    tensors = [
        tensor("model.decoder.embed_tokens.weight", (vocab, embed_dim), "embedding", tp="vocab", placement="first"),
        tensor("model.decoder.embed_positions.weight", (c.int("max_position_embeddings") + OPT_POSITION_OFFSET,
                                                        hidden), "position_embedding", placement="first"),
        *linear("self_attn.q_proj", (heads, hidden // heads), hidden, "attention", tp="column", **common),
        *linear("self_attn.k_proj", (heads, hidden // heads), hidden, "attention", tp="column", **common),
        *linear("self_attn.v_proj", (heads, hidden // heads), hidden, "attention", tp="column", **common),
        *linear("self_attn.out_proj", (hidden,), hidden, "attention", tp="row", **common),
        *linear("fc1", (ffn,), hidden, "mlp", tp="column", **common),
        *linear("fc2", (hidden,), ffn, "mlp", tp="row", **common),
    ]
    if affine:
        tensors += [*norm("self_attn_layer_norm", hidden, bias=True, layers=everything),
                    *norm("final_layer_norm", hidden, bias=True, layers=everything)]
    if embed_dim != hidden:
        tensors += [*linear("model.decoder.project_in", (hidden,), embed_dim, "other", tp="replicated",
                            placement="first"),
                    *linear("model.decoder.project_out", (embed_dim,), hidden, "other", tp="replicated",
                            placement="last")]
    if c.flag("do_layer_norm_before", True) and not c.flag("_remove_final_layer_norm") and affine:
        tensors += norm("model.decoder.final_layer_norm", hidden, bias=True, placement="last")
    if not is_tied(c):
        tensors.append(tensor("lm_head.weight", (vocab, embed_dim), "lm_head", tp="vocab", placement="last"))
    return tuple(tensors)
