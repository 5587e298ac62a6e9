"""Mixture-of-experts decoders with Llama-style attention: Mixtral, Qwen2/Qwen3-MoE, gpt-oss.

Experts of one layer are one entry with ``count`` = number of experts; vLLM's FusedMoE shards each expert's
intermediate dimension across TP (gate/up by output rows, down by input columns), so they are "column"/"row".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..spec import WeightTensor
from ._build import Span, linear, norm, runs, tensor
from ._config import Cfg, text_cfg
from .decoders import DecoderStyle, attention, decoder_layers, edges, gated_mlp, layer_norms, style_of


def router(prefix: str, experts: int, hidden: int, layers: Span, *, bias: bool = False) -> list[WeightTensor]:
    # NOTE: routers are ReplicatedLinear/GateLinear with quant_config=None in vLLM: whole and 16-bit on every rank.
    return linear(prefix, (experts,), hidden, "router", tp="replicated", bias=bias, layers=layers,
                  quantizable=False)


def mixtral_decoder(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    c = text_cfg(config)
    everything = (0, c.int("num_hidden_layers"))
    experts, hidden = c.int("num_local_experts"), c.int("hidden_size")
    return (*edges(c), *decoder_layers(c, DecoderStyle(), everything),
            *router("block_sparse_moe.gate", experts, hidden, everything),
            *gated_mlp("block_sparse_moe.experts", c.int("intermediate_size"), hidden, everything, role="expert",
                       count=experts, names=("w1", "w3", "w2")))


def _qwen_moe_layers(c: Cfg) -> list[int]:
    # NOTE: transformers' Qwen2/3-MoE: a layer is sparse unless listed in mlp_only_layers, every
    # decoder_sparse_step-th layer counting from 1.
    dense_only = set(c.get("mlp_only_layers") or [])
    step = c.int("decoder_sparse_step", default=1) or 1
    experts = c.int("num_experts", default=0)
    return [i for i in range(c.int("num_hidden_layers"))
            if experts > 0 and i not in dense_only and (i + 1) % step == 0]


def qwen_moe_decoder(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """Qwen2-MoE (routed + one gated shared expert) and Qwen3-MoE (routed only)."""
    c = text_cfg(config)
    num_layers, hidden = c.int("num_hidden_layers"), c.int("hidden_size")
    experts = c.int("num_experts", default=0)
    style = style_of(c)
    tensors = [*edges(c), *decoder_layers(c, style, (0, num_layers))]
    moe_layers = _qwen_moe_layers(c)
    for span in runs(moe_layers):
        tensors += [*router("mlp.gate", experts, hidden, span),
                    *gated_mlp("mlp.experts", c.int("moe_intermediate_size"), hidden, span, role="expert",
                               count=experts)]
        shared_size = c.int("shared_expert_intermediate_size", default=0)
        if shared_size:
            tensors += [*gated_mlp("mlp.shared_expert", shared_size, hidden, span),
                        *router("mlp.shared_expert_gate", 1, hidden, span)]
    for span in runs(set(range(num_layers)) - set(moe_layers)):
        tensors += gated_mlp("mlp", c.int("intermediate_size"), hidden, span)
    return tuple(tensors)


def gpt_oss_decoder(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """gpt-oss: biased attention with per-head sinks, a biased router, experts with biases (MXFP4 in the Hub)."""
    c = text_cfg(config)
    everything = (0, c.int("num_hidden_layers"))
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    experts, expert_size = c.int("num_local_experts"), c.int("intermediate_size")
    biased = DecoderStyle(qkv_bias=True, o_bias=True)
    expert_common: dict[str, Any] = {"layers": everything, "count": experts, "bias": True}
    # NOTE: the checkpoint fuses gate and up as gate_up_proj; listed as two parts, each I x H (vLLM w13).
    return (*edges(c), *attention(c, biased, everything), *layer_norms(c, biased, everything),
            tensor("self_attn.sinks", (heads,), "attention", tp="column", layers=everything),
            *router("mlp.router", experts, hidden, everything, bias=True),
            *linear("mlp.experts.gate_proj", (expert_size,), hidden, "expert", tp="column", **expert_common),
            *linear("mlp.experts.up_proj", (expert_size,), hidden, "expert", tp="column", **expert_common),
            *linear("mlp.experts.down_proj", (hidden,), expert_size, "expert", tp="row", **expert_common))



def minimax_m2_decoder(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """MiniMax-M2 / M2.1 / M2.5: full GQA attention with QK norms over the whole projected q and k, and Mixtral-style
    experts (w1/w3/w2, ``intermediate_size`` wide) behind a router with a float32 routing bias (minimax_m2.py, 0.32).

    The ``num_mtp_modules`` layers vLLM drops on load (``hf_to_vllm_mapper``) are not counted."""
    c = text_cfg(config)
    everything = (0, c.int("num_hidden_layers"))
    hidden, heads, kv_heads = c.int("hidden_size"), c.int("num_attention_heads"), c.int("num_key_value_heads")
    size, experts = c.int("head_dim", default=hidden // heads), c.int("num_local_experts")
    style = DecoderStyle(qkv_bias=c.flag("attention_bias"))
    tensors = [*edges(c), *attention(c, style, everything), *layer_norms(c, style, everything),
               # NOTE: the router is a float32 GateLinear (params_dtype=torch.float32), as the checkpoint stores it
               tensor("block_sparse_moe.gate.weight", (experts, hidden), "router", layers=everything, dtype_bytes=4),
               *gated_mlp("block_sparse_moe.experts", c.int("intermediate_size"), hidden, everything, role="expert",
                          count=experts, names=("w1", "w3", "w2"))]
    if c.flag("use_qk_norm", default=True):
        tensors += [*norm("self_attn.q_norm", heads * size, layers=everything),
                    *norm("self_attn.k_norm", kv_heads * size, layers=everything)]
    if c.flag("use_routing_bias"):
        tensors.append(tensor("block_sparse_moe.e_score_correction_bias", (experts,), "router", layers=everything,
                              dtype_bytes=4))
    return tuple(tensors)
