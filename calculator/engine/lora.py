"""LoRA adapter slots: the memory vLLM allocates for ``--enable-lora`` and the work they add to a step.

Pure arithmetic on a ``ModelSpec``, read from vLLM's source (vllm/lora/, 0.28.0 to 0.32.0 read in full; what older
releases accept and wrap differs, ``vllm_versions.lora_limits``):

* ``LoRAModelManager._create_lora_modules`` wraps every linear layer of the model (``get_supported_lora_modules``:
  every ``LinearBase`` and fused-MoE module, plus the model's ``embedding_modules``: ``embed_tokens`` and
  ``lm_head``) whatever modules an adapter targets, and each wrapper's ``create_lora_weights`` allocates
  ``max_loras`` slots of ``max_lora_rank`` before the KV cache is sized (``load_lora_model`` runs inside the
  weight-loading measurement), so the slots count like weights.
* A linear layer holds, per slice (q, k and v of a merged QKV; gate and up of a merged gate-up), A of
  ``(max_loras, 1, rank, in)`` and B of ``(max_loras, 1, out, rank)`` in ``lora_dtype``; ``in`` and ``out`` are the
  rank's shares (column-parallel layers split ``out``, row-parallel ones split ``in``); ``--fully-sharded-loras``
  also splits A's rank on column-parallel layers and B's ``out`` on row-parallel ones (base_linear.py,
  column_parallel_linear.py, row_parallel_linear.py).
* ``embed_tokens``: A of ``(max_loras, vocab, rank)`` and B of ``(max_loras, 1, hidden, rank)``; the LM head
  (``LogitsProcessorWithLoRA``): A of ``(max_loras, 1, rank, hidden)`` and B of ``(max_loras, 1, vocab, rank)``; both
  whole on every rank. Before 0.12 (vLLM PR #28545 removed it) every adapter could add 256 tokens
  (``lora_extra_vocab_size``): the embedding's A had ``vocab + 256`` rows, the LM head's B the vocabulary padded to
  256, and both kept ``(max_loras, 256, hidden)`` of extra embeddings.
* The punica wrapper's index buffers: four int64 of ``max_num_batched_tokens`` (five in 0.28, more before:
  ``lora_limits``) and three of ``max_num_seqs`` (punica_base.py), and two ``LoRAKernelMeta`` of two int32 per
  token and three int32 per-slot arrays of ``max_loras + 1``, ``max_loras + 1`` and ``max_loras + 2`` on the
  device (punica_gpu.py, lora_kernel_metadata.py; its other three tensors are on the CPU).
* The profiling run activates ``max_loras`` dummy adapters (lora_model_runner_mixin.py
  ``maybe_dummy_run_with_lora``), built in CPU memory and copied into the slots, so they add nothing; each wrapped
  layer's shrink writes an fp32 buffer of ``(slices, tokens, max_lora_rank)`` (punica_gpu.py ``add_lora_linear``),
  the widest of which (merged QKV: 3 slices) adds to the activation peak.

Before 0.8 (lora/models.py, punica.py or punica_wrapper/ and worker/ read in 0.4.3, 0.5.1, 0.5.3-0.5.5,
0.6.3-0.6.6 and 0.7.3; lora/layers.py and config.py in 0.7.3): the same slot shapes with the extra vocabulary,
``lora_dtype`` None meaning the model's dtype, and dummy adapters built on the CPU (``create_dummy_lora``). What
differs (``vllm_versions.lora_limits``): the punica index arrays (six int64 of ``max_num_batched_tokens`` and three
of ``max_num_seqs``, no kernel metadata; up to 0.5.3 the six alone, of the tokens rounded up to 8), the shrink (one
slice at a time up to 0.6.4), and 0.6.5-0.7.x leave the slots out of the KV budget. The long-context path
(``--long-lora-scaling-factors``) is not modelled.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, computed_field

from ..model.spec import ModelSpec, WeightTensor
from ..model.weights import shard_shape
from .kv_cache import pp_layer_ranges
from .vllm_versions import LATEST_VERSION, VllmVersion, lora_limits

# The ranks the newest modelled release accepts (the sidebar's choices); per release: ``lora_limits``.
LORA_RANKS = lora_limits(VllmVersion.parse(LATEST_VERSION)).max_lora_ranks
EXTRA_VOCAB_TOKENS = 256  # lora_vocab_padding_size: the LM head's padding while extra vocabulary existed (< 0.12)
_LORA_ROLES = frozenset({"attention", "mlp", "expert", "router"})
_LORA_DTYPE_BYTES = {"float16": 2, "bfloat16": 2}


class LoraSlots(BaseModel):
    """What ``--enable-lora`` adds on one rank of each pipeline stage."""

    model_config = ConfigDict(frozen=True)
    max_loras: int
    max_lora_rank: int
    dtype_bytes: int
    linear_bytes_per_stage: tuple[int, ...]  # A and B of every linear layer on the stage, all slots
    vocab_bytes_per_stage: tuple[int, ...]  # embed_tokens (first stage) and the LM head (last stage), all slots
    punica_bytes: int  # the punica wrapper's index buffers, on every rank
    shrink_buffer_bytes: int  # the widest layer's fp32 shrink output at max_num_batched_tokens (activation peak)
    linear_rank_features_per_token: float  # sum over linear slices of (A's rank x in + out x B's rank), busiest stage
    modules_per_layer: int  # wrapped modules per decoder layer (each runs a shrink and an expand kernel)
    in_kv_budget: bool = True  # False where the version's profile misses the slots (vllm_versions.lora_limits)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def bytes_per_stage(self) -> tuple[int, ...]:
        return tuple(a + b + self.punica_bytes for a, b in zip(self.linear_bytes_per_stage,
                                                               self.vocab_bytes_per_stage))

    @property
    def slot_bytes_busiest(self) -> float:
        """One adapter's A and B on the busiest stage (what a step streams per adapter in the batch)."""
        stage = max(range(len(self.bytes_per_stage)), key=self.bytes_per_stage.__getitem__)
        return (self.linear_bytes_per_stage[stage] + self.vocab_bytes_per_stage[stage]) / self.max_loras


def lora_dtype_bytes(lora_dtype: str, model_dtype_bytes: int) -> int:
    """``--lora-dtype``: ``auto`` takes the model's dtype."""
    return _LORA_DTYPE_BYTES.get(lora_dtype, model_dtype_bytes)


def lora_error(spec: ModelSpec, version: VllmVersion, *, max_lora_rank: int, max_loras: int, max_cpu_loras: int | None,
               tensor_parallel_size: int, fully_sharded: bool, data_parallel_size: int = 1,
               enable_expert_parallel: bool = False, all2all_backend: str | None = None) -> str | None:
    """What vLLM ``version`` refuses about these LoRA settings before it allocates anything (vllm/config/lora.py,
    logits_processor.py, the sharded layers' ``divide``), in its words where it has them."""
    limits = lora_limits(version)
    if max_lora_rank not in limits.max_lora_ranks:
        if limits.rank_error:
            return limits.rank_error.format(rank=max_lora_rank)
        return (f"--max-lora-rank {max_lora_rank}: vLLM accepts {', '.join(map(str, limits.max_lora_ranks))} "
                "(vllm/config/lora.py MaxLoRARanks)")
    if max_cpu_loras is not None and max_cpu_loras < max_loras:
        return f"max_cpu_loras ({max_cpu_loras}) must be >= max_loras ({max_loras})"
    if spec.vocab_size > limits.max_vocab:
        return limits.vocab_error
    if fully_sharded and max_lora_rank % tensor_parallel_size:
        return (f"--fully-sharded-loras splits the rank over the {tensor_parallel_size} tensor-parallel ranks: "
                f"{max_lora_rank} is not divisible by {tensor_parallel_size}")
    # NOTE: FusedMoEWithLoRA (lora/layers/fused_moe.py) asserts these under expert parallelism (lora_limits).
    if spec.moe is not None and enable_expert_parallel and tensor_parallel_size * data_parallel_size > 1:
        if fully_sharded and limits.moe_ep_refuses_fully_sharded:
            return ("Fused MoE LoRA does not support enable_expert_parallel=True together with "
                    "fully_sharded_loras=True. Disable one of them.")
        if limits.moe_ep_needs_allgather and all2all_backend not in (None, "allgather_reducescatter"):
            return ("Fused MoE LoRA with EP currently only supports all2all_backend='allgather_reducescatter', "
                    f"got '{all2all_backend}'.")
    return None


def _linear_dims(tensor: WeightTensor, tp: int) -> tuple[int, int]:
    """(in, out) features of one rank's share of a linear layer."""
    shape = shard_shape(tensor, tp)
    return shape[-1], math.prod(shape[:-1])


def _slice_elements(tensor: WeightTensor, tp: int, rank: int, fully_sharded: bool) -> tuple[int, int]:
    """(A, B) elements of one slot of one slice on one rank."""
    features_in, features_out = _linear_dims(tensor, tp)
    a_rank = rank // tp if fully_sharded and tensor.tp in ("column", "expert") else rank
    b_out = features_out // tp if fully_sharded and tensor.tp == "row" else features_out
    return a_rank * features_in, b_out * rank


def _is_lora_linear(tensor: WeightTensor) -> bool:
    return tensor.loaded and tensor.role in _LORA_ROLES and len(tensor.shape) >= 2 and tensor.layers is not None


def lora_slots(spec: ModelSpec, version: VllmVersion, *, max_loras: int, max_lora_rank: int, dtype_bytes: int,
               tensor_parallel_size: int, pipeline_parallel_size: int, fully_sharded: bool,
               max_num_batched_tokens: int, max_num_seqs: int) -> LoraSlots:
    """The LoRA slots and buffers vLLM ``version`` allocates on each rank (see the module's docstring)."""
    tp, rank = tensor_parallel_size, max_lora_rank
    stages = pp_layer_ranges(spec.num_hidden_layers, pipeline_parallel_size)
    linear = [0] * len(stages)
    features = [0.0] * len(stages)
    limits = lora_limits(version)
    for tensor in filter(_is_lora_linear, spec.weights):
        if tensor.role == "expert" and not limits.wraps_fused_moe:
            continue  # NOTE: before 0.12 only LinearBase and embedding modules were wrapped, not FusedMoE
        a, b = _slice_elements(tensor, tp, rank, fully_sharded)
        for stage, (first, last) in enumerate(stages):
            low, high = tensor.layers  # type: ignore[misc]
            layers = max(0, min(high, last) - max(low, first))
            linear[stage] += layers * tensor.count * (a + b) * max_loras * dtype_bytes
            # NOTE: fused-MoE LoRA runs only the experts a token is routed to; the slots hold all of them. Under
            # expert parallelism (whole, "replicated" experts) a rank runs 1/tp of the routed pairs of its tokens.
            used = (spec.moe.experts_per_token / (tp if tensor.tp == "replicated" else 1)
                    if tensor.role == "expert" and spec.moe else tensor.count)
            features[stage] += layers * used * (a + b)
    extra = limits.extra_vocab_tokens
    hidden, vocab = spec.hidden_size, spec.vocab_size
    padded_vocab = math.ceil(vocab / EXTRA_VOCAB_TOKENS) * EXTRA_VOCAB_TOKENS if extra else vocab
    embedding = ((vocab + extra) * rank + hidden * rank + extra * hidden) * max_loras * dtype_bytes
    lm_head = (rank * hidden + padded_vocab * rank + extra * hidden) * max_loras * dtype_bytes
    vocab_bytes = [0] * len(stages)
    vocab_bytes[0] += embedding
    vocab_bytes[-1] += lm_head
    tokens, seqs = max_num_batched_tokens, max_num_seqs
    kernel_meta = 2 * (2 * tokens * 4 + (3 * max_loras + 4) * 4) if limits.punica_kernel_meta else 0
    if not limits.punica_wrapper:
        tokens, seqs = math.ceil(tokens / 8) * 8, 0  # NOTE: LoRAModelManager's own arrays up to 0.5.3
    punica = (limits.punica_token_arrays * tokens + 3 * seqs) * 8 + kernel_meta
    busiest = max(range(len(stages)), key=lambda s: linear[s] + vocab_bytes[s])
    rows = sum(1 for t in spec.weights if _is_lora_linear(t) and t.tp == "row" and t.role != "expert")
    # NOTE: each row-parallel layer (o_proj, down_proj) follows one merged column-parallel module (qkv, gate_up):
    # two wrapped modules per row-parallel tensor kind.
    modules = 2 * rows if rows else 0
    names = {t.name.rsplit(".", 2)[-2] for t in spec.weights if _is_lora_linear(t)}
    # NOTE: vLLM merges q, k and v (QKVParallelLinear) and gate and up (MergedColumnParallelLinear) into one module.
    slices = 3 if {"q_proj", "k_proj", "v_proj"} <= names else 2 if {"gate_proj", "up_proj"} <= names else 1
    if not limits.shrink_slices_together:
        slices = 1  # NOTE: lora/punica.py (up to 0.6.4) shrinks one slice at a time, each into its own buffer
    a_rank = rank // tp if fully_sharded else rank
    return LoraSlots(max_loras=max_loras, max_lora_rank=rank, dtype_bytes=dtype_bytes,
                     shrink_buffer_bytes=slices * max_num_batched_tokens * a_rank * 4,
                     linear_bytes_per_stage=tuple(linear), vocab_bytes_per_stage=tuple(vocab_bytes),
                     punica_bytes=punica, linear_rank_features_per_token=features[busiest],
                     modules_per_layer=modules, in_kv_budget=limits.slots_in_kv_budget)
