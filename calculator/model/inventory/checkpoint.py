"""The Hub's parameter figure (``safetensors.total``): elements stored in a checkpoint, as opposed to the
model's logical parameters (``ModelSpec.num_params``).

The two differ by what a checkpoint stores beyond the parameters: a copy of a tied ``lm_head``, buffers some
conversion scripts saved, and quantization's packed words and scales (``quantization.checkpoint_elements``).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..quantization import checkpoint_elements, converts, excluded_layers, quantization_from_config
from ..spec import WeightTensor
from ._config import text_cfg
from .decoders import head_dim


@dataclass(frozen=True)
class CheckpointFacts:
    stores_tied_lm_head: bool = False  # lm_head.weight saved although tied to embed_tokens
    stores_rotary_inv_freq: bool = False  # self_attn.rotary_emb.inv_freq saved per layer (head_dim / 2)


# NOTE: Qwen3's tied checkpoints keep lm_head.weight: Qwen3-0.6B's Hub figure 751,632,384 = 596,049,920
# parameters + 155,582,464 for that copy. Qwen2.5-1.5B (tied) and Llama 3.2 (tied) do not store it.
FAMILY_CHECKPOINT_FACTS: dict[str, CheckpointFacts] = {
    "qwen3": CheckpointFacts(stores_tied_lm_head=True),
}
# NOTE: Meta's Llama 2 conversion script wrote rotary inv_freq into the state dict: Llama-2-70b-hf's Hub
# figure 68,976,653,312 = 68,976,648,192 parameters + 80 layers x 64; Llama-2-7b-hf's adds 32 x 64.
REPO_CHECKPOINT_FACTS: dict[str, CheckpointFacts] = {
    "meta-llama/Llama-2-*": CheckpointFacts(stores_rotary_inv_freq=True),
}


def checkpoint_facts(config: Mapping[str, Any], model_id: str | None = None) -> CheckpointFacts:
    """Facts for this checkpoint: by Hub repo (``model_id`` or the config's ``_name_or_path``), else family."""
    repo = model_id or str(config.get("_name_or_path") or "")
    for pattern, facts in REPO_CHECKPOINT_FACTS.items():
        if repo and fnmatch.fnmatch(repo, pattern):
            return facts
    return FAMILY_CHECKPOINT_FACTS.get(str(config.get("model_type") or ""), CheckpointFacts())


def checkpoint_num_params(config: Mapping[str, Any], tensors: Sequence[WeightTensor],
                          model_id: str | None = None) -> int:
    """Elements the Hub counts for this checkpoint, given its inventory (``weight_tensors(config)``)."""
    quant = quantization_from_config(config)
    total = 0
    for t in tensors:
        copies = t.count * t.num_layers
        if quant is None or not converts(quant, t):
            total += t.numel * copies
            continue
        excluded = len(excluded_layers(t.name, t.layers, quant.modules_to_not_convert))
        out_features, in_features = t.numel // t.shape[-1], t.shape[-1]
        converted = t.num_layers - excluded
        total += t.count * (converted * checkpoint_elements(quant, out_features, in_features) + excluded * t.numel)
    facts = checkpoint_facts(config, model_id)
    if facts.stores_tied_lm_head and not any(t.role == "lm_head" for t in tensors):
        total += next(t.numel for t in tensors if t.role == "embedding")
    if facts.stores_rotary_inv_freq:
        text = text_cfg(config)
        total += text.int("num_hidden_layers") * (head_dim(text) // 2)
    return total
