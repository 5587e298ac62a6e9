"""KV-cache pages, groups, blocks, tokens and concurrency — vLLM's rules (internals notes §2).

Pure arithmetic on a ``ModelSpec``. Vocabulary: a *page* is one layer's share of one block; a *block id*
costs ``bytes_per_block`` (the pages of every layer that shares it); a request needs ``blocks_per_request``
block ids summed over the KV-cache groups.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from ..computed import computed
from ..errors import InvalidInput
from ..model.spec import LayerAttention, ModelSpec
from .vllm_versions import VersionRules

# Bytes per K or V element (STR_DTYPE_TO_TORCH_DTYPE, vllm/utils/torch_utils.py); None = the model dtype.
KV_CACHE_DTYPE_BYTES: dict[str, float | None] = {
    "auto": None, "float16": 2, "bfloat16": 2, "fp16": 2, "bf16": 2, "float32": 4,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1,
}
# Formats with their own per-token layout (§2.9).
FP8_DS_MLA_BYTES_PER_TOKEN = 656  # 512 fp8 NoPE + scales + 64 bf16 RoPE, per MLA layer
NVFP4_DS_MLA_BYTES_PER_TOKEN = 352
PER_TOKEN_HEAD_FORMATS: dict[str, tuple[float, int]] = {
    # name: (bytes per K/V element, bytes of fp32 scales per head-token for K and V together)
    "int8_per_token_head": (1, 8), "fp8_per_token_head": (1, 8), "int4_per_token_head": (0.5, 8),
}
SUPPORTED_KV_CACHE_DTYPES = (*KV_CACHE_DTYPE_BYTES, "fp8_ds_mla", "nvfp4_ds_mla", "nvfp4", *PER_TOKEN_HEAD_FORMATS)

GroupKind = Literal["full", "sliding_window", "chunked_local", "mla", "mamba"]


class KvGroup(BaseModel):
    """One KV-cache group: layers of one spec that share block ids (vLLM ``KVCacheGroupSpec``)."""

    model_config = ConfigDict(frozen=True)
    kind: GroupKind
    layer_indices: tuple[int, ...]  # decoder layers in this group (whole model)
    page_size_bytes: int  # one layer, one block, on one TP rank
    block_size: int  # tokens per block of this group (larger than the base block when pages were unified)
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    layers_per_stage: tuple[int, ...] = ()  # PP stage -> how many of this group's layers live there
    state_blocks: int = 1  # kind == "mamba": state blocks a request holds ("align" mode: 2, Mamba2 from 0.32: 3)


class KvCacheLayout(BaseModel):
    """How one model's KV cache is laid out for a given TP/PP, block size and cache dtype."""

    model_config = ConfigDict(frozen=True)
    groups: tuple[KvGroup, ...]
    block_size: int
    group_size: int  # layer slots per group (padding included)
    padding_layers: int
    bytes_per_block_per_stage: tuple[int, ...]  # PP stage -> bytes one block id costs on that stage's ranks
    kv_bytes_per_token_per_stage: tuple[float, ...]  # full-attention-equivalent bytes per token, per rank

    def __hash__(self) -> int:  # cheap and consistent with __eq__ (see ModelSpec.__hash__)
        fields = self.__dict__
        return hash((fields["block_size"], fields["group_size"], fields["bytes_per_block_per_stage"],
                     len(fields["groups"])))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def bytes_per_block(self) -> int:
        """Bytes of one block id on the busiest stage (the stage that runs out first)."""
        return max(self.bytes_per_block_per_stage)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes one token occupies on the busiest rank, all its attention layers, K and V."""
        return max(self.kv_bytes_per_token_per_stage)


class CapacityFigures(BaseModel):
    """What vLLM logs after sizing: blocks, "GPU KV cache size" tokens and "Maximum concurrency"."""

    model_config = ConfigDict(frozen=True)
    num_gpu_blocks: int = Field(ge=0)
    blocks_per_request: int = Field(ge=0)  # summed over groups, at max_model_len
    max_concurrency: float = Field(ge=0)
    kv_cache_tokens: int = Field(ge=0)


def kv_page_bytes_per_token(layer: LayerAttention, *, kv_cache_dtype: str, model_dtype_bytes: int,
                            tensor_parallel_size: int) -> float:
    """Bytes one token of one layer occupies on one TP rank (the per-token part of the page size)."""
    if layer.kind == "mla":
        # NOTE: the sparse-attention indexer's cache is an MLAAttentionSpec of the same block size, so vLLM puts it
        # in the latent's group (UniformTypeKVCacheSpecs) and a block id costs both pages.
        if kv_cache_dtype == "fp8_ds_mla":
            return FP8_DS_MLA_BYTES_PER_TOKEN + layer.indexer_bytes_per_token
        if kv_cache_dtype == "nvfp4_ds_mla":
            return NVFP4_DS_MLA_BYTES_PER_TOKEN + layer.indexer_bytes_per_token
        heads = 1  # NOTE: MLA latent is replicated on every TP rank (MLAAttentionSpec, max_tp_shards=1)
    else:
        # NOTE: vLLM replicates KV heads when there are fewer than TP ranks: max(1, kv_heads // tp).
        heads = max(1, layer.num_kv_heads // tensor_parallel_size)
    content = layer.head_size + layer.head_size_v
    if kv_cache_dtype in PER_TOKEN_HEAD_FORMATS:
        element_bytes, scale_bytes = PER_TOKEN_HEAD_FORMATS[kv_cache_dtype]
        return heads * (content * element_bytes + scale_bytes)
    if kv_cache_dtype == "nvfp4":
        return heads * (content / 2 + content / 16)  # fp4 data + one fp8 scale per 16 elements
    if kv_cache_dtype in ("fp8_ds_mla", "nvfp4_ds_mla"):
        raise InvalidInput(f"--kv-cache-dtype {kv_cache_dtype} is only for MLA models (DeepSeek-style)")
    if kv_cache_dtype not in KV_CACHE_DTYPE_BYTES:
        raise InvalidInput(f"unknown --kv-cache-dtype {kv_cache_dtype!r}; known: {', '.join(SUPPORTED_KV_CACHE_DTYPES)}")
    element = KV_CACHE_DTYPE_BYTES[kv_cache_dtype] or model_dtype_bytes
    return heads * content * element + layer.indexer_bytes_per_token


_SSM_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def mamba_state_bytes(layer: LayerAttention, *, tensor_parallel_size: int, model_dtype_bytes: int) -> int:
    """One request's recurrent state in one layer on one TP rank (MambaSpec.page_size_bytes before padding).

    The conv state is kept in the model dtype (``mamba_cache_dtype`` "auto"); the temporal state in the dtype the
    model fixes, else the conv state's. Both are split by TP along their head/channel dimension; a Mamba2 layer whose
    B/C groups do not split evenly gives every rank the groups its heads need (``extra_groups_for_head_shards``).
    """
    if layer.mamba_conv_dim is None:
        raise InvalidInput("a recurrent layer without its state shape")
    conv_dim = layer.mamba_conv_dim
    if layer.mamba_n_groups and layer.mamba_temporal_shape and layer.mamba_n_groups % tensor_parallel_size:
        conv_dim += 2 * (tensor_parallel_size - layer.mamba_n_groups) * layer.mamba_temporal_shape[2]
    conv = conv_dim // tensor_parallel_size * (layer.mamba_conv_len or 0) * model_dtype_bytes
    if layer.mamba_temporal_shape is None:
        return conv  # a short convolution keeps no temporal state
    heads, first, second = layer.mamba_temporal_shape
    ssm_bytes = _SSM_DTYPE_BYTES[layer.mamba_ssm_dtype] if layer.mamba_ssm_dtype else model_dtype_bytes
    return conv + heads // tensor_parallel_size * first * second * ssm_bytes


@lru_cache(maxsize=256)  # NOTE: asked several times by every estimate, for a few (layers, pp) pairs
def pp_layer_ranges(num_layers: int, pipeline_parallel_size: int) -> tuple[tuple[int, int], ...]:
    """Decoder layers per PP stage exactly as ``vllm.distributed.utils.get_pp_indices`` splits them."""
    if pipeline_parallel_size > num_layers:
        raise InvalidInput(f"pipeline_parallel_size {pipeline_parallel_size} exceeds the {num_layers} layers")
    partitions = [num_layers // pipeline_parallel_size] * pipeline_parallel_size
    # NOTE: the remainder goes to the stages *before the last* (the last also holds the LM head).
    for i in range(2, num_layers % pipeline_parallel_size + 2):
        partitions[-i] += 1
    ranges, start = [], 0
    for size in partitions:
        ranges.append((start, start + size))
        start += size
    return tuple(ranges)


def as_cached_by(spec: ModelSpec, rules: VersionRules) -> ModelSpec:
    """``spec`` with the layers this version really caches: vLLM before 0.7.1 cached MLA as per-head K and V."""
    if spec.mla is None or rules.mla_cache == "latent":
        return spec
    head = 256 if rules.mla_cache == "heads_256" else spec.mla.qk_nope_head_dim + spec.mla.qk_rope_head_dim
    per_head = LayerAttention(kind="full", num_kv_heads=spec.num_attention_heads, head_size=head, head_size_v=head)
    return spec.model_copy(update={"layers": (per_head,) * len(spec.layers)})


@lru_cache(maxsize=512)
def plan_kv_cache(spec: ModelSpec, *, block_size: int, kv_cache_dtype: str, model_dtype_bytes: int,
                  tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1,
                  hybrid_kv_cache_manager: bool = True, kernel_block_alignment: int = 16,
                  sliding_window_block_size: int | None = None, mamba_state_blocks: int = 1) -> KvCacheLayout:
    """Group the layers and price a block, as ``get_kv_cache_groups`` + ``get_kv_cache_config`` do.

    ``sliding_window_block_size`` is the block sliding-window layers start from when the version gives them their
    own (``engine_support.sliding_window_block_size``); None = the primary ``block_size``. ``mamba_state_blocks`` is
    how many state blocks a request holds in each recurrent group (``mamba_state_blocks_per_request``). The layout's
    ``block_size`` is the smallest group block, which the engine reports (``EngineCore._initialize_kv_caches``).
    """
    if block_size < 1:
        raise InvalidInput("block_size must be at least 1")
    # NOTE: one cache entry per layer, and a second where a Mamba2 mixer runs beside the attention (Falcon-H1);
    # entries are numbered, ``decoder`` maps each to its decoder layer.
    entries = [(i, cache) for i, layer in enumerate(spec.layers)
               if layer.kv_sharing_target is None and not layer.stateless
               for cache in (layer, layer.parallel_state) if cache is not None]
    decoder = [i for i, _ in entries]
    attention = [(e, layer) for e, (_, layer) in enumerate(entries) if layer.kind != "mamba"]
    recurrent = [(e, layer) for e, (_, layer) in enumerate(entries) if layer.kind == "mamba"]
    page_per_token = {e: kv_page_bytes_per_token(layer, kv_cache_dtype=kv_cache_dtype,
                                                 model_dtype_bytes=model_dtype_bytes,
                                                 tensor_parallel_size=tensor_parallel_size) for e, layer in attention}
    if recurrent:
        state = max(mamba_state_bytes(layer, tensor_parallel_size=tensor_parallel_size,
                                      model_dtype_bytes=model_dtype_bytes) for _, layer in recurrent)
        if attention:
            # NOTE: _align_hybrid_block_size raises the attention block until its page holds a whole state,
            # then pads the state page to exactly the attention page, so every layer shares one page size.
            per_token = max(page_per_token[e] for e, _ in attention)
            alignment = max(kernel_block_alignment, block_size)
            if any(layer.kind == "mla" for _, layer in attention):
                alignment = max(alignment, 128)  # NOTE: MLA hybrids keep the manager block a multiple of 128
            block_size = max(block_size, alignment * math.ceil(state / (alignment * per_token)))
            state = math.ceil(block_size * per_token)
        page_per_token.update({e: state / block_size for e, _ in recurrent})

    def kind_of(layer: LayerAttention) -> GroupKind:
        if not hybrid_kv_cache_manager and layer.kind in ("sliding_window", "chunked_local"):
            return "full"  # NOTE: unify_hybrid_kv_cache_specs promotes windows to full attention
        return layer.kind

    def bucket_key(e: int, layer: LayerAttention) -> tuple:
        kind = kind_of(layer)
        window = layer.sliding_window if kind == "sliding_window" else None
        chunk = layer.attention_chunk_size if kind == "chunked_local" else None
        return (kind, window, chunk, page_per_token[e])

    buckets: dict[tuple, list[int]] = {}
    for e, (_, layer) in enumerate(entries):
        buckets.setdefault(bucket_key(e, layer), []).append(e)
    stages = pp_layer_ranges(spec.num_hidden_layers, pipeline_parallel_size)
    kinds = {key[0] for key in buckets}
    per_token = tuple(sum(page_per_token[e] for e, _ in attention if lo <= decoder[e] < hi) for lo, hi in stages)

    def base_block(kind: GroupKind) -> int:
        return sliding_window_block_size or block_size if kind == "sliding_window" else block_size

    if len(buckets) == 1 or (len(kinds) == 1 and "sliding_window" not in kinds and "chunked_local" not in kinds):
        # One group with every layer; same-type layers of different sizes share block ids too
        # (UniformTypeKVCacheSpecs: a block costs the sum of their pages).
        indices = tuple(decoder)
        (kind, window, chunk, _), = list(buckets)[:1]
        block = base_block(kind)
        group = KvGroup(kind=kind, layer_indices=indices,
                        page_size_bytes=math.ceil(block * page_per_token[0]),
                        block_size=block, sliding_window=window, attention_chunk_size=chunk,
                        layers_per_stage=_count_per_stage(indices, stages),
                        state_blocks=mamba_state_blocks if kind == "mamba" else 1)
        per_stage = tuple(sum(math.ceil(block * page_per_token[e]) for e in range(len(entries))
                              if lo <= decoder[e] < hi) for lo, hi in stages)
        return KvCacheLayout(groups=(group,), block_size=block, group_size=len(indices), padding_layers=0,
                             bytes_per_block_per_stage=per_stage, kv_bytes_per_token_per_stage=per_token)

    # Hybrid: unify page sizes (smaller pages get proportionally larger blocks), then equal-size groups.
    pages = {key: math.ceil(base_block(key[0]) * key[3]) for key in buckets}
    largest_page = max(pages.values())
    counts = [len(v) for v in buckets.values()]
    group_size = min(counts)
    if max(counts) < 1.5 * group_size:
        group_size = max(counts)
    groups: list[KvGroup] = []
    padding = 0
    for key, members in buckets.items():
        kind, window, chunk, _ = key
        ratio = max(1, largest_page // pages[key])
        num_groups = math.ceil(len(members) / group_size)
        padding += num_groups * group_size - len(members)
        for j in range(num_groups):
            indices = tuple(decoder[e] for e in members[j::num_groups])
            groups.append(KvGroup(kind=kind, layer_indices=indices,
                                  page_size_bytes=pages[key] * ratio, block_size=base_block(kind) * ratio,
                                  sliding_window=window, attention_chunk_size=chunk,
                                  layers_per_stage=_count_per_stage(indices, stages),
                                  state_blocks=mamba_state_blocks if kind == "mamba" else 1))
    per_stage = tuple(max(g.layers_per_stage[s] * g.page_size_bytes for g in groups) for s in range(len(stages)))
    return KvCacheLayout(groups=tuple(groups), block_size=min(g.block_size for g in groups), group_size=group_size,
                         padding_layers=padding,
                         bytes_per_block_per_stage=per_stage, kv_bytes_per_token_per_stage=per_token)


def _count_per_stage(indices: tuple[int, ...] | list[int], stages: tuple[tuple[int, int], ...]) -> tuple[int, ...]:
    return tuple(sum(1 for i in indices if lo <= i < hi) for lo, hi in stages)


def in_flight_tokens(rules: VersionRules, *, max_num_batched_tokens: int, pipeline_parallel_size: int,
                     async_scheduling: bool) -> int:
    """Tokens a sliding window must keep beyond the window while batches are in flight (§2.1)."""
    if not rules.sliding_window_counts_in_flight_batches:
        return max_num_batched_tokens
    return (pipeline_parallel_size + (1 if async_scheduling else 0)) * max_num_batched_tokens


def _request_blocks_rule(group: KvGroup, in_flight: int) -> tuple[int | None, int]:
    """(cap, extra): a request at max_model_len L needs ``ceil(min(cap, L) / block_size) + extra`` block ids of the
    group; no cap (None) where it keeps every token."""
    if group.kind == "mamba":
        return 0, group.state_blocks  # NOTE: whatever the length: 1 ("none"), 2 ("align"), 3 (Mamba2, "align")
    if group.kind == "sliding_window" and group.sliding_window:
        return group.sliding_window - 1 + in_flight, 1
    if group.kind == "chunked_local" and group.attention_chunk_size:
        return group.attention_chunk_size + in_flight, 0
    return None, 0


def group_blocks_per_request(group: KvGroup, max_model_len: int, in_flight: int) -> int:
    """Block ids one request at ``max_model_len`` needs in one group (``max_memory_usage_bytes`` / page)."""
    cap, extra = _request_blocks_rule(group, in_flight)
    return math.ceil((max_model_len if cap is None else min(cap, max_model_len)) / group.block_size) + extra


def blocks_per_request(layout: KvCacheLayout, max_model_len: int, in_flight: int) -> int:
    return sum(group_blocks_per_request(g, max_model_len, in_flight) for g in layout.groups)


def kv_bytes_needed_for_one_request(layout: KvCacheLayout, max_model_len: int, in_flight: int, stage: int) -> int:
    """``Σ max_memory_usage_bytes`` over one stage's layers: what vLLM checks one request against (§2.6)."""
    return stage_bytes_for_blocks(layout, tuple(group_blocks_per_request(g, max_model_len, in_flight)
                                                for g in layout.groups), stage)


def stage_bytes_for_blocks(layout: KvCacheLayout, blocks_per_group: tuple[int, ...], stage: int) -> int:
    """What one stage's layers hold for ``blocks_per_group`` block ids of each group (``group_blocks_per_request``)."""
    return sum([g.layers_per_stage[stage] * blocks * g.page_size_bytes
                for g, blocks in zip(layout.groups, blocks_per_group)])


def capacity_figures(layout: KvCacheLayout, rules: VersionRules, *, num_gpu_blocks: int, max_model_len: int,
                     in_flight: int, per_request: int | None = None) -> CapacityFigures:
    """The log line's numbers (§2.5), with the version's meaning of "tokens"; ``per_request``: ``blocks_per_request``
    of the same layout and length where the caller has it already."""
    if per_request is None:
        per_request = blocks_per_request(layout, max_model_len, in_flight)
    if rules.engine == "v0" or rules.version.key < (0, 9, 0):
        concurrency = num_gpu_blocks * layout.block_size / max_model_len
    else:
        concurrency = num_gpu_blocks / per_request
    if rules.token_semantics == "concurrency_times_len":
        tokens = int(concurrency * max_model_len)
    elif rules.token_semantics == "blocks_per_group":
        tokens = num_gpu_blocks // len(layout.groups) * min(g.block_size for g in layout.groups)
    else:
        tokens = num_gpu_blocks * layout.block_size
    return computed(CapacityFigures, {"num_gpu_blocks": num_gpu_blocks, "blocks_per_request": per_request,
                                      "max_concurrency": concurrency, "kv_cache_tokens": tokens})


@lru_cache(maxsize=4096)
def largest_fitting_model_len(layout: KvCacheLayout, *, available_bytes_per_stage: tuple[int, ...], upper: int,
                              in_flight: int) -> int:
    """Largest max_model_len whose one-request need fits every stage (vLLM's binary search); 0 if none."""
    # NOTE: the search asks ~log2(upper) times; each group's rule and bytes per block id are read once, as numbers.
    stages = [([(g.layers_per_stage[s] * g.page_size_bytes, *_request_blocks_rule(g, in_flight), g.block_size)
                for g in layout.groups], available) for s, available in enumerate(available_bytes_per_stage)]

    def fits(length: int) -> bool:
        return all(sum(per_block * (math.ceil((length if cap is None else min(cap, length)) / block) + extra)
                       for per_block, cap, extra, block in terms) <= available for terms, available in stages)

    if not fits(1):
        return 0
    lo, hi = 1, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


class AttentionLayoutComparison(BaseModel):
    """KV bytes per token as the model is built, against the same model with one KV head per query head."""

    model_config = ConfigDict(frozen=True)
    as_mha_bytes: float
    as_built_bytes: float
    as_built_fp8_bytes: float
    mha_key_size: int
    mha_value_size: int


def compare_with_mha(spec: ModelSpec, *, model_dtype_bytes: int = 2) -> AttentionLayoutComparison:
    """What GQA or MLA saves: per-token KV bytes as built vs expanded to plain multi-head attention."""
    # NOTE: an MLA model expanded to plain MHA would cache K = nope + rope and V = v_head_dim per head.
    key = spec.mla.qk_nope_head_dim + spec.mla.qk_rope_head_dim if spec.mla else spec.head_dim
    value = spec.mla.v_head_dim if spec.mla else spec.head_dim
    mha = spec.model_copy(update={"layers": tuple(
        LayerAttention(kind="full", num_kv_heads=spec.num_attention_heads, head_size=key, head_size_v=value)
        for _ in spec.layers)})

    def per_token(model: ModelSpec, kv_cache_dtype: str) -> float:
        return plan_kv_cache(model, block_size=16, kv_cache_dtype=kv_cache_dtype,
                             model_dtype_bytes=model_dtype_bytes).kv_bytes_per_token

    return AttentionLayoutComparison(as_mha_bytes=per_token(mha, "auto"), as_built_bytes=per_token(spec, "auto"),
                                     as_built_fp8_bytes=per_token(spec, "fp8"), mha_key_size=key, mha_value_size=value)


def layer_kind_counts(spec: ModelSpec) -> dict[str, int]:
    """How many layers of each attention kind, e.g. ``{"sliding_window": 52, "full": 10}``."""
    return dict(Counter(layer.kind for layer in spec.layers))
