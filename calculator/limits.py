"""Generous physical bounds for every size a person can type, paste or upload.

A value past these is a typo or an attack, never a model: refusing it up front, with the bound in the message,
keeps work that grows with a dimension (one entry per layer, per block, per request) from exhausting a shared
server. Each bound sits one to two orders of magnitude above the largest published model of 2025.
"""

from __future__ import annotations

from annotated_types import Ge, Gt, Le, Lt

MAX_LAYERS = 10_000  # Llama-3.1-405B has 126 decoder layers
MAX_WIDTH = 1 << 20  # hidden and intermediate sizes, LoRA ranks; Llama-3.1-405B: hidden 16,384, MLP 53,248
MAX_HEADS = 1 << 16  # attention, KV and state heads; the largest models use 128
MAX_HEAD_DIM = 1 << 16  # head_dim, rope/nope/value dims, SSM state; the largest use 256 (Gemma) or 576 (MLA)
MAX_VOCAB = 1 << 24  # Gemma 3: 262,208 entries
MAX_EXPERTS = 1 << 16  # Qwen3-Next: 512 routed experts; Kimi K2: 384
MAX_CONTEXT_TOKENS = 100_000_000  # Llama 4 Scout: 10,485,760 tokens
MAX_IMAGE_PIXELS_PER_SIDE = 1 << 16  # vision towers: 224 to 1,540
MAX_CONV_KERNEL = 1 << 10  # Mamba and gated-delta-net convolutions: 4
MAX_QUANT_BITS = 64
MAX_ROPE_FACTOR = 1 << 16  # YaRN factors: 4 to 64

MAX_PARALLEL_SIZE = 1024  # tensor or pipeline parallel ranks; the largest deployments use 8 x 16
MAX_NUM_SEQS = 1_000_000  # vLLM's largest default is 1,024
MAX_BLOCK_SIZE_TOKENS = 4096  # the largest kernel block size vLLM knows is 1,024 (FlashInfer TRT-LLM on sm100)
# NOTE: vLLM bounds neither of these two; an override past the device fails at allocation (CUDA out of memory),
# which the estimate reports. These bounds only keep the arithmetic and the messages readable.
MAX_NUM_GPU_BLOCKS = 1 << 40
MAX_KV_CACHE_MEMORY_BYTES = 1 << 50  # 1 PiB: some 3,900 B300s (288 GB each)
MAX_LORAS = 4096  # adapter slots on the GPU (--max-loras); deployments use 1 to a few hundred
MAX_SPECULATIVE_TOKENS = 128  # draft tokens per step; published configs propose 1 to 10

MAX_CONFIG_BYTES = 8 << 20  # published config.json files are 0.5 to 60 KiB
MAX_CONFIG_NESTING = 32  # published configs nest 4 deep (quantization_config.config_groups.group_0.weights)
MAX_NAME_CHARS = 256  # model_type, architecture class names
MAX_MODEL_REFERENCE_CHARS = 1024  # a Hub id (96 chars at most), a path or a folder


def field_bounds(model: type, field: str) -> tuple[float | None, float | None]:
    """(lowest, highest) value a pydantic model accepts for ``field``: widgets, links and CLI flags check the
    same range the model does."""
    low = high = None
    for rule in model.model_fields[field].metadata:
        if isinstance(rule, Ge):
            low = rule.ge
        elif isinstance(rule, Gt):
            low = rule.gt
        elif isinstance(rule, Le):
            high = rule.le
        elif isinstance(rule, Lt):  # NOTE: an exclusive cap far above any real value; a widget stops at it
            high = rule.lt
    return low, high
