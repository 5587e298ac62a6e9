"""Bytes of weights resident on each GPU after vLLM loads a model: TP shards, PP stages, quantized storage.

What "Model loading took X GiB" reports for the weights (research §3), for the busiest rank of each stage.
"""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, computed_field

from ..engine.kv_cache import pp_layer_ranges
from ..errors import InvalidInput
from ..units import round_up
from .quantization import (
    GENERIC_EXPERT_STORAGE,
    MXFP4_GROUP,
    ExpertStorage,
    converts,
    excluded_layers,
    resident_bytes,
)
from .spec import ModelSpec, QuantizationSpec, WeightTensor

# vllm/model_executor/layers/vocab_parallel_embedding.py: the vocabulary is padded to a multiple of this
# before being split evenly across TP ranks (embedding and lm_head alike).
DEFAULT_VOCAB_PADDING_SIZE = 64


class WeightsBreakdown(BaseModel):
    """Resident weight bytes of one TP rank in each pipeline stage (the busiest rank where TP splits unevenly)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tensor_parallel_size: int = Field(ge=1)
    pipeline_parallel_size: int = Field(ge=1)
    layers_per_stage: tuple[int, ...]
    per_stage_bytes: tuple[int, ...]
    per_stage_bytes_by_role: tuple[dict[str, int], ...]
    total_bytes: int  # every GPU of the deployment together (TP x PP ranks), replicated pieces counted each time
    model_bytes: int  # one copy of the resident model, as on a single GPU (TP = PP = 1)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def busiest_stage(self) -> int:
        """The stage whose rank holds the most weight bytes (the first of equals)."""
        return max(range(len(self.per_stage_bytes)), key=lambda stage: (self.per_stage_bytes[stage], -stage))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def busiest_stage_bytes(self) -> int:
        return self.per_stage_bytes[self.busiest_stage]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def busiest_stage_bytes_by_role(self) -> dict[str, int]:
        return self.per_stage_bytes_by_role[self.busiest_stage]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def shard_shape(tensor: WeightTensor, tp: int, *, pad_to: int = 1) -> tuple[int, ...]:
    """One TP rank's share of ``tensor`` (the largest share when the split is uneven).

    ``pad_to`` rounds the split dimension of a sharded tensor up (MXFP4 expert tiles).
    """
    shape = list(tensor.shape)
    # NOTE: "expert" (whole experts per rank, for expert parallelism) is not modelled yet; it splits like a
    # column until EP is.
    if tensor.tp in ("column", "expert", "vocab"):
        # NOTE: a column split of (kv_heads, head_dim, in) gives max(1, kv_heads // tp) heads: vLLM replicates
        # KV heads when TP exceeds them.
        first = round_up(shape[0], DEFAULT_VOCAB_PADDING_SIZE) if tensor.tp == "vocab" else shape[0]
        shape[0] = round_up(_cdiv(first, tp), pad_to)
    elif tensor.tp == "row":
        shape[-1] = round_up(_cdiv(shape[-1], tp), pad_to)
    return tuple(shape)


def _numel(shape: tuple[int, ...]) -> int:
    total = 1
    for dim in shape:
        total *= dim
    return total


def _plain_bytes(tensor: WeightTensor, shape: tuple[int, ...], dtype_bytes: int) -> int:
    itemsize = tensor.dtype_bytes if tensor.dtype_bytes is not None else dtype_bytes
    return _cdiv(round(_numel(shape) * itemsize * 8), 8)


class _TensorCost(NamedTuple):
    """Bytes of one copy of a tensor on one rank: converted by the quantization, and kept 16-bit."""

    plain: int
    converted: int
    excluded: frozenset[int]  # layers (or {-1}) the exclusion list keeps 16-bit

    def stage_bytes(self, tensor: WeightTensor, copies: int, first: int, last: int) -> int:
        if not self.excluded:
            return tensor.count * copies * self.converted
        kept = 1 if tensor.layers is None else sum(1 for i in self.excluded if first <= i < last)
        return tensor.count * ((copies - kept) * self.converted + kept * self.plain)


def _packed_expert_bytes(tensor: WeightTensor, tp: int, dtype_bytes: int, storage: ExpertStorage) -> int:
    """One rank's copy of an MXFP4 expert tensor (weight or bias) as the MoE kernel holds it."""
    is_bias = len(tensor.shape) == 1
    if tensor.tp == "column":  # gate/up (w13): intermediate rows split by TP, hidden inputs
        rows = round_up(_cdiv(tensor.shape[0], tp), storage.intermediate_align)
        inputs = round_up(tensor.shape[-1], storage.hidden_align)
    elif is_bias:  # down bias: hidden, whole on every rank
        rows, inputs = round_up(tensor.shape[0], storage.hidden_align), 1
    else:  # down (w2): hidden rows, intermediate inputs split by TP
        rows = round_up(tensor.shape[0], storage.hidden_align)
        inputs = round_up(_cdiv(tensor.shape[-1], tp), storage.intermediate_align)
    if is_bias:
        return rows * (storage.bias_bytes or dtype_bytes)
    fused_parts = 2 if tensor.tp == "column" else 1
    scales = sum(round_up(rows, max(1, row_align // fused_parts)) * round_up(_cdiv(inputs, MXFP4_GROUP), col_align)
                 for row_align, col_align in storage.scale_copies)
    return _cdiv(rows * inputs, 2) + scales


@lru_cache(maxsize=8192)
def _tensor_cost(tensor: WeightTensor, tp: int, dtype_bytes: int, quant: QuantizationSpec | None,
                 is_mla: bool, expert_storage: ExpertStorage | None = None) -> _TensorCost:
    packed_expert = quant is not None and quant.method == "mxfp4" and tensor.role == "expert"
    storage = expert_storage or GENERIC_EXPERT_STORAGE
    shape = shard_shape(tensor, tp, pad_to=storage.intermediate_align if packed_expert else 1)
    plain = _plain_bytes(tensor, shape, dtype_bytes)
    if packed_expert:
        packed = _packed_expert_bytes(tensor, tp, dtype_bytes, storage)
        excluded = excluded_layers(tensor.name, tensor.layers, quant.modules_to_not_convert)  # type: ignore[union-attr]
        return _TensorCost(plain, packed, excluded)
    if quant is None or not converts(quant, tensor):
        return _TensorCost(plain, plain, frozenset())
    out_features, in_features = _numel(shape[:-1]), shape[-1]
    # NOTE: with act-order GPTQ, row-parallel layers keep the scales of every input group on each rank.
    full_in = tensor.shape[-1] if quant.has_g_idx and tensor.tp == "row" and tp > 1 else None
    converted = resident_bytes(quant, out_features, in_features, scale_in_features=full_in)
    if is_mla and tensor.name.endswith("kv_b_proj.weight"):
        # NOTE: MLA dequantizes kv_b_proj into W_UK/W_UV copies in the activation dtype after loading.
        converted += _numel(shape) * dtype_bytes
    return _TensorCost(plain, converted, excluded_layers(tensor.name, tensor.layers, quant.modules_to_not_convert))


def _copies_on_stage(tensor: WeightTensor, stage: int, stages: int, first: int, last: int) -> tuple[int, int, int]:
    """How many copies of ``tensor`` a stage holds, and the layer range they come from."""
    if tensor.placement == "layers":
        low, high = tensor.layers or (0, 0)
        low, high = max(low, first), min(high, last)
        return max(0, high - low), low, high
    on_stage = {"first": stage == 0, "last": stage == stages - 1, "all": True}[tensor.placement]
    return int(on_stage), 0, 0


def weight_bytes_per_rank(spec: ModelSpec, *, dtype_bytes: int, tensor_parallel_size: int = 1,
                          pipeline_parallel_size: int = 1, quantization: QuantizationSpec | None = None,
                          expert_storage: ExpertStorage | None = None) -> WeightsBreakdown:
    """Weight bytes each GPU holds once vLLM has loaded ``spec``.

    ``dtype_bytes``: the model dtype (2 for bf16/fp16), used by every tensor the quantization leaves alone.
    ``quantization``: what is loaded (``quantization_from_flag``); ``None`` = the checkpoint's own.
    ``expert_storage``: how the MoE kernel lays out MXFP4 experts (``engine/quant_kernels.py``); ``None`` = the
    generic layout (intermediate rounded up to 64, checkpoint scales, biases in the model dtype).
    Tensors vLLM does not load (``loaded=False``, e.g. DeepSeek's MTP layers) are not counted.
    """
    tp, pp = tensor_parallel_size, pipeline_parallel_size
    if tp < 1 or pp < 1:
        raise InvalidInput(f"tensor_parallel_size and pipeline_parallel_size must be at least 1, got {tp} and {pp}")
    if pp > spec.num_hidden_layers:
        raise InvalidInput(f"pipeline_parallel_size {pp} exceeds the {spec.num_hidden_layers} layers of "
                           f"{spec.model_id}: every stage needs at least one layer")
    quant = quantization if quantization is not None else spec.quantization
    bounds = pp_layer_ranges(spec.num_hidden_layers, pp)
    by_role: list[defaultdict[str, int]] = [defaultdict(int) for _ in range(pp)]
    model_bytes = 0
    for tensor in spec.weights:
        if not tensor.loaded:
            continue
        cost = _tensor_cost(tensor, tp, dtype_bytes, quant, spec.mla is not None, expert_storage)
        for stage, (first, last) in enumerate(bounds):
            copies, low, high = _copies_on_stage(tensor, stage, pp, first, last)
            if copies:
                by_role[stage][tensor.role] += cost.stage_bytes(tensor, copies, low, high)
        whole = _tensor_cost(tensor, 1, dtype_bytes, quant, spec.mla is not None, expert_storage)
        low, high = tensor.layers or (0, 0)
        model_bytes += whole.stage_bytes(tensor, tensor.num_layers, low, high)
    if pp > 1 and not any(t.role == "lm_head" and t.loaded for t in spec.weights):
        # NOTE: tied embeddings: the last stage builds its own embed_tokens for the lm_head to share.
        embedding = next(t for t in spec.weights if t.role == "embedding")
        by_role[-1]["lm_head"] += _plain_bytes(embedding, shard_shape(embedding, tp), dtype_bytes)
    per_stage = tuple(sum(roles.values()) for roles in by_role)
    return WeightsBreakdown(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                            layers_per_stage=tuple(last - first for first, last in bounds),
                            per_stage_bytes=per_stage, per_stage_bytes_by_role=tuple(dict(r) for r in by_role),
                            total_bytes=sum(per_stage) * tp, model_bytes=model_bytes)
