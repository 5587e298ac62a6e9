"""Vision towers and projectors of multimodal checkpoints, plus the wrappers that join them to a text model.

vLLM builds the encoder on every pipeline stage (placement "all") and shards its attention and MLP like the
text model's (the default ``mm_encoder_tp_mode="weights"``). Encoder layers are counted with ``count``, not
with decoder-layer ranges, because they take no part in the pipeline split.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..spec import TpSharding, WeightRole, WeightTensor
from ._build import linear, norm, tensor
from ._config import Cfg, text_cfg, vision_cfg
from .decoders import dense_text_model
from .moe import qwen_moe_decoder

ENCODER: dict[str, Any] = {"placement": "all", "quantizable": False}


def _vision_linear(prefix: str, out: int, inp: int, tp: TpSharding, *, bias: bool, count: int = 1,
                   role: WeightRole = "vision", loaded: bool = True) -> list[WeightTensor]:
    return linear(prefix, (out,), inp, role, tp=tp, bias=bias, count=count, loaded=loaded, **ENCODER)


def _vision_norm(prefix: str, size: int, *, bias: bool, count: int = 1, role: WeightRole = "vision",
                 loaded: bool = True) -> list[WeightTensor]:
    return norm(prefix, size, bias=bias, count=count, role=role, placement="all", loaded=loaded)


def _vit_layers(prefix: str, v: Cfg, count: int, *, loaded: bool = True) -> list[WeightTensor]:
    """CLIP/SigLIP encoder layers: biased q/k/v/out and fc1/fc2, two LayerNorms."""
    hidden, inner = v.int("hidden_size"), v.int("intermediate_size")
    common: dict[str, Any] = {"bias": True, "count": count, "loaded": loaded}
    return [*_vision_linear(f"{prefix}.self_attn.q_proj", hidden, hidden, "column", **common),
            *_vision_linear(f"{prefix}.self_attn.k_proj", hidden, hidden, "column", **common),
            *_vision_linear(f"{prefix}.self_attn.v_proj", hidden, hidden, "column", **common),
            *_vision_linear(f"{prefix}.self_attn.out_proj", hidden, hidden, "row", **common),
            *_vision_linear(f"{prefix}.mlp.fc1", inner, hidden, "column", **common),
            *_vision_linear(f"{prefix}.mlp.fc2", hidden, inner, "row", **common),
            *_vision_norm(f"{prefix}.layer_norm1", hidden, bias=True, count=count, loaded=loaded),
            *_vision_norm(f"{prefix}.layer_norm2", hidden, bias=True, count=count, loaded=loaded)]


def _patches_per_side(v: Cfg) -> int:
    return v.int("image_size") // v.int("patch_size")


def clip_tower(v: Cfg, layers_used: int) -> list[WeightTensor]:
    """CLIP ViT as LLaVA uses it: layers past the feature layer and the post-norm stay in the checkpoint only."""
    hidden, patch, layers = v.int("hidden_size"), v.int("patch_size"), v.int("num_hidden_layers")
    p = "vision_tower.vision_model"
    tensors = [
        tensor(f"{p}.embeddings.class_embedding", (hidden,), "vision", **ENCODER),
        tensor(f"{p}.embeddings.patch_embedding.weight", (hidden, v.int("num_channels"), patch, patch), "vision",
               **ENCODER),
        tensor(f"{p}.embeddings.position_embedding.weight", (_patches_per_side(v) ** 2 + 1, hidden), "vision",
               **ENCODER),
        *_vision_norm(f"{p}.pre_layrnorm", hidden, bias=True),
        *_vit_layers(f"{p}.encoder.layers", v, layers_used),
        *_vision_norm(f"{p}.post_layernorm", hidden, bias=True, loaded=layers_used == layers),
    ]
    if layers > layers_used:
        tensors += _vit_layers(f"{p}.encoder.unused_layers", v, layers - layers_used, loaded=False)
    return tensors


def siglip_tower(v: Cfg) -> list[WeightTensor]:
    hidden, patch = v.int("hidden_size"), v.int("patch_size")
    p = "vision_tower.vision_model"
    return [
        tensor(f"{p}.embeddings.patch_embedding.weight", (hidden, v.int("num_channels"), patch, patch), "vision",
               **ENCODER),
        tensor(f"{p}.embeddings.patch_embedding.bias", (hidden,), "vision", **ENCODER),
        tensor(f"{p}.embeddings.position_embedding.weight", (_patches_per_side(v) ** 2, hidden), "vision",
               **ENCODER),
        *_vit_layers(f"{p}.encoder.layers", v, v.int("num_hidden_layers")),
        *_vision_norm(f"{p}.post_layernorm", hidden, bias=True),
    ]


def pixtral_tower(v: Cfg) -> list[WeightTensor]:
    """Pixtral (Mistral 3): bias-free patch conv, RMSNorms, gated MLP; rotary tables are not weights."""
    hidden, inner, patch, count = v.int("hidden_size"), v.int("intermediate_size"), v.int("patch_size"), \
        v.int("num_hidden_layers")
    p = "vision_tower.transformer.layers"
    common: dict[str, Any] = {"bias": False, "count": count}
    return [
        tensor("vision_tower.patch_conv.weight", (hidden, v.int("num_channels"), patch, patch), "vision", **ENCODER),
        *_vision_norm("vision_tower.ln_pre", hidden, bias=False),
        *_vision_linear(f"{p}.attention.q_proj", hidden, hidden, "column", **common),
        *_vision_linear(f"{p}.attention.k_proj", hidden, hidden, "column", **common),
        *_vision_linear(f"{p}.attention.v_proj", hidden, hidden, "column", **common),
        *_vision_linear(f"{p}.attention.o_proj", hidden, hidden, "row", **common),
        *_vision_linear(f"{p}.feed_forward.gate_proj", inner, hidden, "column", **common),
        *_vision_linear(f"{p}.feed_forward.up_proj", inner, hidden, "column", **common),
        *_vision_linear(f"{p}.feed_forward.down_proj", hidden, inner, "row", **common),
        *_vision_norm(f"{p}.attention_norm", hidden, bias=False, count=count),
        *_vision_norm(f"{p}.ffn_norm", hidden, bias=False, count=count),
    ]


def qwen2_5_vl_tower(v: Cfg) -> list[WeightTensor]:
    """Qwen2.5-VL's window-attention ViT (RMSNorms, biased gated MLP) and its 2x2 patch merger."""
    hidden, inner, count = v.int("hidden_size"), v.int("intermediate_size"), v.int("depth")
    patch, temporal = v.int("patch_size"), v.int("temporal_patch_size", default=2)
    merged = hidden * v.int("spatial_merge_size", default=2) ** 2
    common: dict[str, Any] = {"bias": True, "count": count}
    return [
        tensor("visual.patch_embed.proj.weight", (hidden, v.int("in_chans", default=3), temporal, patch, patch),
               "vision", **ENCODER),
        *_vision_linear("visual.blocks.attn.qkv", 3 * hidden, hidden, "column", **common),
        *_vision_linear("visual.blocks.attn.proj", hidden, hidden, "row", **common),
        *_vision_linear("visual.blocks.mlp.gate_proj", inner, hidden, "column", **common),
        *_vision_linear("visual.blocks.mlp.up_proj", inner, hidden, "column", **common),
        *_vision_linear("visual.blocks.mlp.down_proj", hidden, inner, "row", **common),
        *_vision_norm("visual.blocks.norm1", hidden, bias=False, count=count),
        *_vision_norm("visual.blocks.norm2", hidden, bias=False, count=count),
        *_vision_norm("visual.merger.ln_q", hidden, bias=False, role="projector"),
        *_vision_linear("visual.merger.mlp.0", merged, merged, "column", bias=True, role="projector"),
        *_vision_linear("visual.merger.mlp.2", v.int("out_hidden_size"), merged, "row", bias=True,
                        role="projector"),
    ]


def qwen3_vl_tower(v: Cfg) -> list[WeightTensor]:
    """Qwen3-VL's ViT: biased Conv3d patches, a learned position table, LayerNorm blocks with a fused biased qkv and
    a biased fc1/fc2 MLP, the 2x2 merger and one deepstack merger per ``deepstack_visual_indexes`` entry, whose norm
    runs after the 2x2 shuffle (qwen3_vl.py, 0.32)."""
    hidden, inner, count = v.int("hidden_size"), v.int("intermediate_size"), v.int("depth")
    patch, temporal = v.int("patch_size"), v.int("temporal_patch_size", default=2)
    merged, out = hidden * v.int("spatial_merge_size", default=2) ** 2, v.int("out_hidden_size")
    deepstack = len(v.get("deepstack_visual_indexes") or [])
    common: dict[str, Any] = {"bias": True, "count": count}
    tensors = [
        tensor("visual.patch_embed.proj.weight", (hidden, v.int("in_channels", default=3), temporal, patch, patch),
               "vision", **ENCODER),
        tensor("visual.patch_embed.proj.bias", (hidden,), "vision", **ENCODER),
        tensor("visual.pos_embed.weight", (v.int("num_position_embeddings"), hidden), "vision", **ENCODER),
        *_vision_linear("visual.blocks.attn.qkv", 3 * hidden, hidden, "column", **common),
        *_vision_linear("visual.blocks.attn.proj", hidden, hidden, "row", **common),
        *_vision_linear("visual.blocks.mlp.linear_fc1", inner, hidden, "column", **common),
        *_vision_linear("visual.blocks.mlp.linear_fc2", hidden, inner, "row", **common),
        *_vision_norm("visual.blocks.norm1", hidden, bias=True, count=count),
        *_vision_norm("visual.blocks.norm2", hidden, bias=True, count=count),
        *_vision_norm("visual.merger.norm", hidden, bias=True, role="projector"),
        *_vision_linear("visual.merger.linear_fc1", merged, merged, "column", bias=True, role="projector"),
        *_vision_linear("visual.merger.linear_fc2", out, merged, "row", bias=True, role="projector"),
    ]
    if deepstack:
        tensors += [*_vision_norm("visual.deepstack_merger_list.norm", merged, bias=True, count=deepstack,
                                  role="projector"),
                    *_vision_linear("visual.deepstack_merger_list.linear_fc1", merged, merged, "column", bias=True,
                                    count=deepstack, role="projector"),
                    *_vision_linear("visual.deepstack_merger_list.linear_fc2", out, merged, "row", bias=True,
                                    count=deepstack, role="projector")]
    return tensors


def _feature_layers(config: Mapping[str, Any], total: int) -> int:
    """How many encoder layers vLLM builds: up to the deepest ``vision_feature_layer`` (llava.py)."""
    wanted = config.get("vision_feature_layer", -1)
    indices = wanted if isinstance(wanted, list) else [wanted]
    return max(total + int(i) + 1 if int(i) < 0 else int(i) for i in indices)


def llava_model(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """LLaVA 1.5 / LLaVA-NeXT: CLIP tower, two-layer GELU projector, NeXT's ``image_newline``."""
    text, v = text_cfg(config), vision_cfg(config, "clip_vision_model")
    hidden, vision_hidden = text.int("hidden_size"), v.int("hidden_size")
    bias = bool(config.get("multimodal_projector_bias", True))
    tensors = [*dense_text_model(text), *clip_tower(v, _feature_layers(config, v.int("num_hidden_layers"))),
               *_vision_linear("multi_modal_projector.linear_1", hidden, vision_hidden, "column", bias=bias,
                               role="projector"),
               *_vision_linear("multi_modal_projector.linear_2", hidden, hidden, "row", bias=bias,
                               role="projector")]
    if str(config.get("model_type")) == "llava_next":
        tensors.append(tensor("image_newline", (hidden,), "projector", **ENCODER))
    return tuple(tensors)


def mistral3_model(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """Mistral 3 (Mistral-Small 3.1/3.2): Pixtral tower, RMSNorm + patch merger + two-layer projector."""
    text, v = text_cfg(config), vision_cfg(config, "pixtral")
    hidden, vision_hidden = text.int("hidden_size"), v.int("hidden_size")
    merge = int(config.get("spatial_merge_size") or 2)
    bias = bool(config.get("multimodal_projector_bias", False))
    return (*dense_text_model(text), *pixtral_tower(v),
            *_vision_norm("multi_modal_projector.norm", vision_hidden, bias=False, role="projector"),
            *_vision_linear("multi_modal_projector.patch_merger.merging_layer", vision_hidden,
                            vision_hidden * merge**2, "replicated", bias=False, role="projector"),
            *_vision_linear("multi_modal_projector.linear_1", hidden, vision_hidden, "column", bias=bias,
                            role="projector"),
            *_vision_linear("multi_modal_projector.linear_2", hidden, hidden, "row", bias=bias, role="projector"))


def gemma3_model(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """Gemma 3 (4B+): SigLIP tower, soft-embedding RMSNorm and one projection matrix (vision x text)."""
    text, v = text_cfg(config), vision_cfg(config, "siglip_vision_model")
    vision_hidden = v.int("hidden_size")
    return (*dense_text_model(text), *siglip_tower(v),
            tensor("multi_modal_projector.mm_input_projection_weight", (vision_hidden, text.int("hidden_size")),
                   "projector", **ENCODER),
            *_vision_norm("multi_modal_projector.mm_soft_emb_norm", vision_hidden, bias=False, role="projector"))


def qwen2_5_vl_model(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    return (*dense_text_model(text_cfg(config)), *qwen2_5_vl_tower(vision_cfg(config, "qwen2_5_vl")))


def qwen3_vl_model(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """Qwen3-VL (dense text) and Qwen3-VL-MoE (Qwen3-MoE text) with the Qwen3-VL vision tower."""
    text = qwen_moe_decoder(config) if str(config.get("model_type")) == "qwen3_vl_moe" \
        else tuple(dense_text_model(text_cfg(config)))
    return (*text, *qwen3_vl_tower(vision_cfg(config, "qwen3_vl")))


MULTIMODAL: dict[str, Callable[[Mapping[str, Any]], tuple[WeightTensor, ...]]] = {
    "llava": llava_model,
    "llava_next": llava_model,
    "mistral3": mistral3_model,
    "gemma3": gemma3_model,
    "qwen2_5_vl": qwen2_5_vl_model,
    "qwen3_vl": qwen3_vl_model,
    "qwen3_vl_moe": qwen3_vl_model,
}
