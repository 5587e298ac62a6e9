"""GLM-4.5 / 4.6 / 4.7 (``glm4_moe``): Llama-style GQA attention (biased q/k/v, optional QK norms) over DeepSeek-style
MoE layers — routed experts with a float32 routing bias, shared experts, the first ``first_k_dense_replace`` layers
dense — and the MTP layer after the stack, as vLLM's ``glm4_moe.py`` / ``glm4_moe_mtp.py`` (0.32) build them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..spec import WeightTensor
from ._build import runs
from ._config import text_cfg
from .decoders import DecoderStyle, attention, edges, gated_mlp, layer_norms
from .deepseek import is_moe_layer, moe_block, mtp_extras, mtp_span


def glm4_moe_decoder(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    c = text_cfg(config)
    num_layers, hidden = c.int("num_hidden_layers"), c.int("hidden_size")
    everything = (0, num_layers)
    # NOTE: q/k/v take attention_bias, o_proj never has one (Glm4MoeAttention); GLM's router always carries the
    # e_score_correction_bias, with no topk_method key to say so.
    style = DecoderStyle(qkv_bias=c.flag("attention_bias"), qk_norm=c.flag("use_qk_norm"))
    tensors = [*edges(c), *attention(c, style, everything), *layer_norms(c, style, everything)]
    moe_layers = [i for i in range(num_layers) if is_moe_layer(c, i)]
    for span in runs(moe_layers):
        tensors += moe_block(c, span, routing_bias=True)
    for span in runs(set(range(num_layers)) - set(moe_layers)):
        tensors += gated_mlp("mlp", c.int("intermediate_size"), hidden, span)
    span = mtp_span(c)
    if span is not None:
        tensors += [*mtp_extras(c, span), *attention(c, style, span, loaded=False),
                    *layer_norms(c, style, span, loaded=False), *moe_block(c, span, loaded=False, routing_bias=True)]
    return tuple(tensors)
