"""Kimi-Linear (``KimiLinearForCausalLM``): Kimi Delta Attention (KDA) layers between MLA layers, a dense MLP in
the first ``first_k_dense_replace`` layers and routed + shared experts after, with the tensors vLLM 0.32 builds for
it (``models/kimi_k3/nvidia/model.py``, ``layers/mamba/gdn/kimi_gdn_linear_attn.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import InvalidConfig
from ..spec import WeightTensor
from ._build import Span, linear, norm, runs, tensor
from ._config import Cfg, text_cfg
from .decoders import DecoderStyle, edges, gated_mlp, layer_norms
from .deepseek import mla_attention
from .moe import router


_KDA_FIELDS = ("kda_layers", "num_heads", "head_dim", "short_conv_kernel_size")


def kda_layer_indices(text: Mapping[str, Any]) -> set[int]:
    """The 0-based KDA layers: ``linear_attn_config["kda_layers"]`` counts from 1
    (``KimiLinearConfig.is_kda_layer``)."""
    kda = text.get("linear_attn_config")
    missing = [f for f in _KDA_FIELDS if not isinstance(kda, Mapping) or kda.get(f) is None]
    if missing or not isinstance(kda, Mapping) or not isinstance(kda["kda_layers"], list):
        raise InvalidConfig(f"a kimi_linear config.json needs linear_attn_config with {', '.join(_KDA_FIELDS)}; "
                            f"missing: {', '.join(missing) or 'kda_layers as a list'}")
    return {int(layer) - 1 for layer in kda["kda_layers"]}


def _kda(c: Cfg, span: Span) -> list[WeightTensor]:
    """KimiGatedDeltaNetAttention: q, k, v and beta (b) projections, the low-rank forget (f) and output-gate (g)
    pairs, a float32 depthwise conv over each of q, k and v, float32 ``dt_bias`` and ``A_log``, a gated norm over
    one head, the output projection."""
    kda = c.get("linear_attn_config")
    hidden, heads, size = c.int("hidden_size"), int(kda["num_heads"]), int(kda["head_dim"])
    kernel, width = int(kda["short_conv_kernel_size"]), heads * size
    projections = [linear(f"self_attn.{name}_proj", (heads, size), hidden, "attention", tp="column", layers=span)
                   for name in ("q", "k", "v")]
    # NOTE: vLLM keeps f_a and g_a whole on every rank (ReplicatedLinear, in_proj's replicated shard), and the
    # conv weights, dt_bias and A_log in float32 whatever the model dtype.
    convs = [tensor(f"self_attn.{name}_conv1d.weight", (width, 1, kernel), "attention", tp="column", layers=span,
                    dtype_bytes=4) for name in ("q", "k", "v")]
    return [*(t for part in projections for t in part), *convs,
            *linear("self_attn.b_proj", (heads,), hidden, "attention", tp="column", layers=span),
            *linear("self_attn.f_a_proj", (size,), hidden, "attention", tp="replicated", layers=span),
            *linear("self_attn.f_b_proj", (width,), size, "attention", tp="column", layers=span),
            *linear("self_attn.g_a_proj", (size,), hidden, "attention", tp="replicated", layers=span),
            *linear("self_attn.g_b_proj", (width,), size, "attention", tp="column", layers=span),
            tensor("self_attn.dt_bias", (width,), "attention", tp="column", layers=span, dtype_bytes=4),
            tensor("self_attn.A_log", (heads,), "attention", tp="column", layers=span, dtype_bytes=4),
            *norm("self_attn.o_norm", size, layers=span),
            *linear("self_attn.o_proj", (hidden,), width, "attention", tp="row", layers=span)]


def _moe(c: Cfg, span: Span) -> list[WeightTensor]:
    """KimiMoE: a sigmoid router with its aux-loss-free bias (float32 in vLLM), the experts (w1, w3, w2) and
    ``num_shared_experts`` shared experts fused into one MLP."""
    hidden, experts, size = c.int("hidden_size"), c.int("num_experts"), c.int("moe_intermediate_size")
    tensors = [*router("block_sparse_moe.gate", experts, hidden, span),
               tensor("block_sparse_moe.gate.e_score_correction_bias", (experts,), "router", layers=span,
                      dtype_bytes=4),
               *gated_mlp("block_sparse_moe.experts", size, hidden, span, role="expert", count=experts,
                          names=("w1", "w3", "w2"))]
    shared = c.int("num_shared_experts", default=0)
    if shared:
        tensors += gated_mlp("block_sparse_moe.shared_experts", size * shared, hidden, span)
    return tensors


def kimi_linear_decoder(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    c = text_cfg(config)
    num_layers = c.int("num_hidden_layers")
    kda = kda_layer_indices(c.as_mapping())
    first_dense, frequency = c.int("first_k_dense_replace", default=0), c.int("moe_layer_freq", default=1)
    moe = {i for i in range(num_layers) if c.int("num_experts", default=0) and i >= first_dense and i % frequency == 0}
    tensors = [*edges(c), *layer_norms(c, DecoderStyle(), (0, num_layers))]
    for span in runs(kda):
        tensors += _kda(c, span)
    for span in runs(set(range(num_layers)) - kda):
        tensors += mla_attention(c, span)
    for span in runs(moe):
        tensors += _moe(c, span)
    for span in runs(set(range(num_layers)) - moe):
        tensors += gated_mlp("mlp", c.int("intermediate_size"), c.int("hidden_size"), span)
    return tuple(tensors)
