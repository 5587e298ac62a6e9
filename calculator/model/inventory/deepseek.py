"""DeepSeek V2/V3: multi-head latent attention (MLA), routed + shared experts, and the MTP module."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..spec import WeightTensor
from ._build import Span, linear, norm, runs, tensor
from ._config import Cfg, text_cfg
from .decoders import DecoderStyle, edges, gated_mlp, layer_norms


def mla_attention(c: Cfg, layers: Span, *, loaded: bool = True) -> list[WeightTensor]:
    """MLA projections: q (direct or through a low-rank ``q_a``/``q_b`` pair), the joint KV latent, kv_b, o."""
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    kv_rank, rope, nope, v_dim = (c.int("kv_lora_rank"), c.int("qk_rope_head_dim"), c.int("qk_nope_head_dim"),
                                  c.int("v_head_dim"))
    q_rank = c.get("q_lora_rank")
    common: dict[str, Any] = {"layers": layers, "loaded": loaded}
    if q_rank:
        # NOTE: q_a_proj and kv_a_proj_with_mqa are ReplicatedLinear in vLLM: every TP rank holds them whole.
        query = [*linear("self_attn.q_a_proj", (q_rank,), hidden, "attention", tp="replicated", **common),
                 *norm("self_attn.q_a_layernorm", q_rank, **common),
                 *linear("self_attn.q_b_proj", (heads, nope + rope), q_rank, "attention", tp="column", **common)]
    else:
        query = linear("self_attn.q_proj", (heads, nope + rope), hidden, "attention", tp="column", **common)
    return [*query,
            *linear("self_attn.kv_a_proj_with_mqa", (kv_rank + rope,), hidden, "attention", tp="replicated",
                    **common),
            *norm("self_attn.kv_a_layernorm", kv_rank, **common),
            *linear("self_attn.kv_b_proj", (heads, nope + v_dim), kv_rank, "attention", tp="column", **common),
            *linear("self_attn.o_proj", (hidden,), heads * v_dim, "attention", tp="row", **common)]


def indexer_layers(text: Mapping[str, Any]) -> list[bool]:
    """Which decoder layers build a sparse-attention indexer (and its cache): all of them unless IndexCache
    (``index_topk_freq`` / ``index_topk_pattern``) lets some reuse an earlier layer's top-k (deepseek_v2.py, 0.32)."""
    num_layers = int(text.get("num_hidden_layers") or 0)
    if not text.get("index_topk"):
        return [False] * num_layers
    pattern = text.get("index_topk_pattern")
    if isinstance(pattern, (list, str)):
        return [not (i < len(pattern) and pattern[i] == "S") for i in range(num_layers)]
    frequency = int(text.get("index_topk_freq") or 1)
    offset = int(text.get("index_skip_topk_offset", 2))
    return [max(i - offset + 1, 0) % frequency == 0 for i in range(num_layers)]


def _indexer(c: Cfg, layers: Span, *, loaded: bool) -> list[WeightTensor]:
    """DeepSeek-V3.2 / GLM-5 sparse-attention indexer: its query from the q latent, one key head, per-head weights."""
    if not c.get("index_topk") or not c.get("q_lora_rank") or not c.get("index_head_dim"):
        return []
    hidden, heads, size = c.int("hidden_size"), c.int("index_n_heads"), c.int("index_head_dim")
    common: dict[str, Any] = {"layers": layers, "loaded": loaded, "tp": "replicated"}
    # NOTE: every part is replicated on every TP rank; wk and weights_proj are fused without quantization (vLLM
    # upcasts an FP8 wk to 16 bits), wq_b follows the model's quantization.
    return [*linear("self_attn.indexer.wq_b", (heads * size,), c.int("q_lora_rank"), "attention", **common),
            *linear("self_attn.indexer.wk", (size,), hidden, "attention", quantizable=False, **common),
            *norm("self_attn.indexer.k_norm", size, bias=True, layers=layers, loaded=loaded),
            *linear("self_attn.indexer.weights_proj", (heads,), hidden, "attention", quantizable=False, **common)]


def moe_block(c: Cfg, layers: Span, *, loaded: bool = True, routing_bias: bool | None = None) -> list[WeightTensor]:
    """Routed experts, their router (with the aux-loss-free bias where ``routing_bias``, by default where
    ``topk_method`` is noaux_tc) and the shared experts."""
    hidden, experts, expert_size = c.int("hidden_size"), c.int("n_routed_experts"), c.int("moe_intermediate_size")
    tensors = [tensor("mlp.gate.weight", (experts, hidden), "router", layers=layers, loaded=loaded)]
    if c.get("topk_method") == "noaux_tc" if routing_bias is None else routing_bias:
        # NOTE: vLLM allocates the aux-loss-free routing bias in float32 whatever the model dtype.
        tensors.append(tensor("mlp.gate.e_score_correction_bias", (experts,), "router", layers=layers,
                              loaded=loaded, dtype_bytes=4))
    tensors += gated_mlp("mlp.experts", expert_size, hidden, layers, role="expert", count=experts, loaded=loaded)
    shared = c.int("n_shared_experts", default=0)
    if shared:
        tensors += gated_mlp("mlp.shared_experts", expert_size * shared, hidden, layers, loaded=loaded)
    return tensors


def is_moe_layer(c: Cfg, index: int) -> bool:
    return (c.int("n_routed_experts", default=0) > 0 and index >= c.int("first_k_dense_replace", default=0)
            and index % c.int("moe_layer_freq", default=1) == 0)


def mtp_span(c: Cfg) -> Span | None:
    """The multi-token-prediction layers after the main stack (``num_nextn_predict_layers``), if any."""
    first, count = c.int("num_hidden_layers"), c.int("num_nextn_predict_layers", default=0)
    return (first, first + count) if count else None


# NOTE: GLM-5's MTP layer stores no embed_tokens or shared_head.head of its own (zai-org/GLM-5.1's tensor list has
# only eh_proj, enorm, hnorm and shared_head.norm beside the decoder layer: 753,864,139,008 adds up that way).
_MTP_WITHOUT_OWN_EMBEDDINGS = frozenset({"glm_moe_dsa"})


def mtp_extras(c: Cfg, span: Span) -> list[WeightTensor]:
    """What an MTP layer stores besides its decoder layer: in the checkpoint, skipped by vLLM by default."""
    hidden, vocab = c.int("hidden_size"), c.int("vocab_size")
    # NOTE: each MTP layer stores its own embed_tokens and shared_head.head copies besides a full MoE decoder
    # layer, and its eh_proj has no FP8 scale: DeepSeek-V3's 684,531,386,000 only adds up that way.
    copies = [] if c.model_type in _MTP_WITHOUT_OWN_EMBEDDINGS else [
        tensor("embed_tokens.weight", (vocab, hidden), "mtp", tp="vocab", layers=span, loaded=False),
        tensor("shared_head.head.weight", (vocab, hidden), "mtp", tp="vocab", layers=span, loaded=False)]
    return [*copies,
            *norm("enorm", hidden, layers=span, role="mtp", loaded=False),
            *norm("hnorm", hidden, layers=span, role="mtp", loaded=False),
            *linear("eh_proj", (hidden,), 2 * hidden, "mtp", tp="replicated", layers=span, loaded=False,
                    quantizable=False),
            *norm("shared_head.norm", hidden, layers=span, role="mtp", loaded=False)]


def mtp_module(c: Cfg) -> list[WeightTensor]:
    """DeepSeek's MTP layers: the extras and a full MLA + MoE decoder layer each."""
    span = mtp_span(c)
    if span is None:
        return []
    return [*mtp_extras(c, span), *mla_attention(c, span, loaded=False), *_indexer(c, span, loaded=False),
            *layer_norms(c, DecoderStyle(), span, loaded=False),
            *moe_block(c, span, loaded=False)]


def deepseek_decoder(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    c = text_cfg(config)
    num_layers = c.int("num_hidden_layers")
    everything = (0, num_layers)
    tensors = [*edges(c), *mla_attention(c, everything), *layer_norms(c, DecoderStyle(), everything)]
    for span in runs(i for i, built in enumerate(indexer_layers(config.get("text_config") or config)) if built):
        tensors += _indexer(c, span, loaded=True)
    moe_layers = [i for i in range(num_layers) if is_moe_layer(c, i)]
    for span in runs(moe_layers):
        tensors += moe_block(c, span)
    for span in runs(set(range(num_layers)) - set(moe_layers)):
        tensors += gated_mlp("mlp", c.int("intermediate_size"), c.int("hidden_size"), span)
    return (*tensors, *mtp_module(c))
