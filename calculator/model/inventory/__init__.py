"""config.json -> the tensors a checkpoint holds (``WeightTensor``s), per architecture family.

``weight_tensors`` covers the families in ``FAMILIES``; ``generic_decoder_tensors`` estimates anything else and
says what it assumed; ``checkpoint_num_params`` gives the figure the Hub publishes for the same checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...errors import UnsupportedArchitecture
from ..spec import WeightTensor
from .checkpoint import CheckpointFacts, checkpoint_facts, checkpoint_num_params
from .decoders import dense_decoder
from .deepseek import deepseek_decoder
from .gemma4 import gemma4_model
from .generic import generic_decoder_tensors
from .hybrid import (
    falcon_h1_decoder,
    granite_moe_hybrid_decoder,
    lfm2_decoder,
    lfm2_moe_decoder,
    nemotron_h_decoder,
    qwen3_5_model,
    qwen3_next_decoder,
)
from .kimi_linear import kimi_linear_decoder
from .legacy import opt_decoder, phi_decoder
from .glm import glm4_moe_decoder
from .moe import gpt_oss_decoder, minimax_m2_decoder, mixtral_decoder, qwen_moe_decoder
from .vision import MULTIMODAL

Inventory = Callable[[Mapping[str, Any]], tuple[WeightTensor, ...]]

# Keyed by the top-level ``model_type``, as vLLM's registry is keyed by architecture.
FAMILIES: dict[str, Inventory] = {
    **dict.fromkeys(("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "seed_oss"),
                    dense_decoder),
    "mixtral": mixtral_decoder,
    "qwen2_moe": qwen_moe_decoder,
    "qwen3_moe": qwen_moe_decoder,
    "gpt_oss": gpt_oss_decoder,
    "glm4_moe": glm4_moe_decoder,
    "glm4_moe_lite": deepseek_decoder,  # GLM-4.7-Flash: DeepSeek-V3's MLA + MoE layout under GLM's name
    "minimax_m2": minimax_m2_decoder,
    "deepseek_v2": deepseek_decoder,
    "deepseek_v3": deepseek_decoder,
    "deepseek_v32": deepseek_decoder,  # DeepSeek-V3.2: V3 plus the sparse-attention indexer
    "glm_moe_dsa": deepseek_decoder,  # GLM-5: MLA + DSA indexer + DeepSeek-style MoE (vLLM's deepseek_v32 module)
    "kimi_k2": deepseek_decoder,  # Kimi K2 ships DeepseekV3ForCausalLM weights under its own model_type
    "phi": phi_decoder,
    "opt": opt_decoder,
    "gemma4": gemma4_model,
    "gemma4_text": gemma4_model,
    "qwen3_next": qwen3_next_decoder,  # Qwen3-Next, Qwen3-Coder-Next: gated delta net + gated attention, MoE
    **dict.fromkeys(("qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"), qwen3_5_model),  # Qwen3.5 / 3.6
    "lfm2": lfm2_decoder,  # LFM2 / LFM2.5: short convolutions + GQA
    "lfm2_moe": lfm2_moe_decoder,  # LFM2-MoE: the same mixers, dense then routed feed-forward blocks
    "granitemoehybrid": granite_moe_hybrid_decoder,  # Granite 4.0-H: Mamba2 + attention, experts + shared MLP
    "nemotron_h": nemotron_h_decoder,  # Nemotron-H: Mamba2, attention, MLP and MoE layers by pattern
    "falcon_h1": falcon_h1_decoder,  # Falcon-H1: attention and Mamba2 side by side in every layer
    "kimi_linear": kimi_linear_decoder,  # Kimi-Linear: KDA + MLA layers, routed + shared experts
    **MULTIMODAL,
}


def is_known_architecture(config: Mapping[str, Any]) -> bool:
    return str(config.get("model_type") or "") in FAMILIES


def weight_tensors(config: Mapping[str, Any]) -> tuple[WeightTensor, ...]:
    """Every tensor of the checkpoint described by the full config.json ``config`` (logical shapes).

    Raises ``UnsupportedArchitecture`` for a family not in ``FAMILIES`` (use ``generic_decoder_tensors``)
    and ``InvalidConfig`` when a field the layout needs is missing.
    """
    model_type = str(config.get("model_type") or "")
    inventory = FAMILIES.get(model_type)
    if inventory is None:
        raise UnsupportedArchitecture(f"no weight layout for model_type {model_type!r}; generic_decoder_tensors "
                                      f"estimates it. Known: {', '.join(sorted(FAMILIES))}")
    return inventory(config)


__all__ = [
    "FAMILIES",
    "CheckpointFacts",
    "checkpoint_facts",
    "checkpoint_num_params",
    "generic_decoder_tensors",
    "is_known_architecture",
    "weight_tensors",
]
