"""What profiling a multimodal encoder leaves in memory while vLLM profiles the language model (V1 engine).

``GPUModelRunner.profile_run`` (vLLM 0.13) first runs the encoder on a dummy batch of the largest item of the
modality with the most tokens, keeps the outputs in the encoder cache, then runs the language model's dummy forward
pass and the sampler, and only then clears the cache: the encoder's outputs sit on top of the profiled peak.

Modelled where the config gives the output width and the processor's default gives the largest item: the Qwen VL
families. Not modelled: the encoder's own peak (below the language model's and sampler's for these shapes), and
``--limit-mm-per-prompt`` / ``--mm-processor-kwargs`` that shrink the largest item.
"""

from __future__ import annotations

from typing import Any

from ..model.spec import ModelSpec
from .vllm_versions import VersionRules

# NOTE: the image processors' default pixel cap divided by one merged patch: Qwen2.5-VL max_pixels 12,845,056 /
# (14 x 2)^2 and Qwen3-VL longest_edge 16,777,216 / (16 x 2)^2, both 16,384 tokens. A vLLM 0.13 Qwen3-VL-30B-A3B
# start at max_num_batched_tokens 8,192 logs "Encoder cache will be initialized with a budget of 16384 tokens, and
# profiled with 1 image items of the maximum feature size" (benchmarks/data/calibration-2026-12.jsonl,
# file-h100nvl-qwen3-vl-30b-a3b-custom-v0130).
QWEN_VL_MAX_TOKENS_PER_IMAGE = 16_384
_QWEN_VL_MODEL_TYPES = frozenset({"qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"})


def encoder_output_width(config: dict[str, Any] | None) -> int | None:
    """Values per token of the encoder's output, or None where it is not modelled.

    Qwen3-VL concatenates its deepstack features to the merger's output: out_hidden_size x (1 + deepstack levels).
    """
    if not config or config.get("model_type") not in _QWEN_VL_MODEL_TYPES:
        return None
    vision = config.get("vision_config")
    if not isinstance(vision, dict) or not isinstance(vision.get("out_hidden_size"), int):
        return None
    deepstack = vision.get("deepstack_visual_indexes") or []
    return vision["out_hidden_size"] * (1 + len(deepstack))


def profiled_encoder_cache_bytes(spec: ModelSpec, *, max_num_batched_tokens: int, max_num_seqs: int,
                                 activation_dtype_bytes: int, rules: VersionRules | None) -> int:
    """Bytes of the dummy encoder outputs held through the language model's profiling run."""
    width = encoder_output_width(spec.hf_config)
    if width is None or rules is None or rules.engine != "v1":
        return 0
    per_item = QWEN_VL_MAX_TOKENS_PER_IMAGE
    # NOTE: the encoder budget is max(max_num_batched_tokens, largest item) (compute_mm_encoder_budget); the items
    # profiled are as many largest items as it holds, at least one and at most one per sequence slot.
    items = max(1, min(max(max_num_batched_tokens, per_item) // per_item, max_num_seqs))
    return items * per_item * width * activation_dtype_bytes
