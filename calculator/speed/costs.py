"""What one forward step costs on one GPU: bytes it must read and FLOPs it must do, per token and per context token.

Pure arithmetic on an ``Estimate`` (weights as vLLM loads them, the KV layout, TP/PP). Everything here is per rank
of the busiest pipeline stage, because the slowest rank sets the step time.
"""

from __future__ import annotations

import math
from functools import lru_cache

from pydantic import BaseModel, ConfigDict

from ..engine.estimate import Estimate
from ..engine.speculative import tokens_per_step
from ..engine.kv_cache import kv_page_bytes_per_token, mamba_state_bytes, pp_layer_ranges
from ..engine.overheads import FORWARD_HIDDEN_TENSORS, FORWARD_INTERMEDIATE_TENSORS
from ..model.quantization import converts, excluded_layers
from ..model.spec import LayerAttention, ModelSpec, QuantizationSpec, WeightTensor
from ..units import round_up
from .expert_kernels import expert_gemm_share
from .hardware import compute_path
from .mla_kernels import mla_decode_excess
from .moe_dispatch import moe_dispatch_bytes_per_token

# Roles a decode step does not stream from HBM: the embedding is a lookup of B rows; vision towers and projectors
# run only on images in prefill; MTP (speculative) layers are not run without speculative decoding.
_NOT_STREAMED = frozenset({"embedding", "position_embedding", "vision", "projector", "mtp", "expert"})
_LINEAR_ROLES = frozenset({"attention", "mlp", "expert", "router", "lm_head"})
TP_ALL_REDUCES_PER_LAYER = 2  # after attention (o_proj) and after the MLP/MoE (down_proj): RowParallelLinear
# Kernels one decode step launches per layer and rank (vLLM's model code; TP all-reduces are counted apart). Each
# kernel pays a fixed latency (launch, ramp-up, tail) on top of its bytes and FLOPs, so a layer of many small
# kernels costs more than its bytes say. Attention (GQA/MHA, windowed): fused add+RMSNorm, QKV GEMM, RoPE, KV-cache
# write, attention, o_proj. MLA (deepseek_v2.py): norm, q_a and kv_a GEMMs, their two RMSNorms, q_b GEMM, RoPE,
# latent cache write, W_UK BMM, split-KV decode attention and its reduction, W_UV BMM, o_proj (two fewer without a
# q LoRA). Mamba/linear attention: norm, in_proj, conv1d, scan, gated norm, out_proj. Dense MLP: norm, gate_up GEMM,
# SiLU-and-mul, down GEMM. MoE (fused_moe): norm, router GEMM, top-k, align/sort, two grouped GEMMs, activation,
# weighted sum; shared experts add gate_up, activation, down and the add.
KERNELS_ATTENTION, KERNELS_MLA, KERNELS_MLA_NO_Q_LORA, KERNELS_MAMBA = 6, 13, 11, 6
# FlashMLA's sparse kernels take a multiple of 64 query heads a rank on Hopper and of 128 on Blackwell
# (FlashMLASparseImpl.prefill_padding: "kernel requires num_local_head to be a multiple of 64 on hopper and 128 on
# blackwell"); vLLM pads the heads a rank holds up to it.
SPARSE_MLA_HEAD_MULTIPLE = {"hopper": 64, "blackwell": 128}
KERNELS_DENSE_MLP, KERNELS_MOE, KERNELS_SHARED_EXPERTS = 4, 8, 4
# MXFP4 experts on CDNA3 (gfx942: MI300X, MI300A, MI325X). vLLM runs them through OpenAI's triton_kernels
# ``matmul_ogs`` (Mxfp4Backend.TRITON: ``get_mxfp4_backend`` in quantization/mxfp4.py, 0.10.2: ROCm with
# triton_kernels installed; 0.30-0.32 fused_moe/oracle/mxfp4.py: the gpt-oss list reaches TRITON on gfx942 unless
# VLLM_ROCM_USE_AITER=1 enables AITER's a16w4 kernel, which the planner does not model). gfx942 has no FP4 matrix
# cores, so each tile dequantizes its MXFP4 weights in registers before a BF16 MFMA, block_k 128 ("matmul_ogs uses
# block_k=128 for MXFP4 on pre-CDNA4 GPUs", oracle/mxfp4.py, which pads K to 256 on ROCm). At decode a call has few
# tiles (4 routed experts x N / block_n), one wave on the GPU, so its time is one tile's serial K loop, not its bytes:
# ROCm/triton issue #970 measures one matmul_ogs call at gpt-oss-20b's gate_up shape (M = 1, 4 of 32 experts,
# K 3072, N 6144) at 79 us on MI300X (119 us with the 3.7.1 amdgpu-trackers flag, a later regression) against a
# 7-9 us memory floor: 79 us / (3072 / 128) K steps = 3.29 us per 128-deep K step.
ROCM_MXFP4_TRITON_BLOCK_K = 128
ROCM_MXFP4_TRITON_PAD = 256
ROCM_MXFP4_TRITON_K_STEP_S = 79e-6 / (3072 / ROCM_MXFP4_TRITON_BLOCK_K)
EXPERT_GEMMS_PER_MOE_LAYER = 2  # gate_up (K = hidden) and down (K = the expert intermediate size on this rank)


class AttentionGroup(BaseModel):
    """Layers on the busiest rank that attend over the same span (full context, or a window)."""

    model_config = ConfigDict(frozen=True)
    window_tokens: int | None  # None: the whole context
    kv_bytes_per_context_token: float  # all layers of the group, this rank
    decode_flops_per_context_token: float  # one query token attending over one context token, all layers
    prefill_flops_per_context_token: float  # the same in prefill (MLA runs un-absorbed there)
    sparse_mla_heads: int = 0  # DeepSeek sparse attention: the query heads on this rank (forward_costs pads them)
    sparse_mla_padded_heads: int = 0  # the heads FlashMLA's sparse kernels compute for them (prompts)


class ForwardCosts(BaseModel):
    """Per rank of the busiest stage: the fixed bytes of a step, per-token FLOPs, attention and communication."""

    model_config = ConfigDict(frozen=True)
    dense_weight_bytes: float  # streamed every step whatever the batch
    expert_weight_bytes: float  # routed experts on this rank; a step streams the share its tokens touch
    num_experts: int  # routed experts per MoE layer (0 for a dense model)
    experts_per_token: int
    linear_flops_per_token: float  # 2 x matmul parameters a token passes through on this rank
    # of which the LM head's: vLLM computes logits only for the last token of each request in the step
    # (V1's gpu_model_runner: ``hidden_states[logits_indices]``; V0's LogitsProcessor prunes to the sampled rows), so
    # a prompt chunk's other tokens skip it
    lm_head_flops_per_token: float = 0.0
    # of which the routed experts' (k experts a token), done at ``expert_gemm_share`` of the dense rate
    # (expert_kernels.py: vLLM's fused-MoE kernels as timed on the card)
    expert_flops_per_token: float = 0.0
    expert_gemm_share: float = 1.0
    # of which the linear layers a quantized checkpoint leaves 16-bit (its exclusion list, gpt-oss's attention, an
    # unquantized LM head), and of those the LM head's: they run at the BF16 ceiling, not the quantized path's
    bf16_linear_flops_per_token: float = 0.0
    bf16_lm_head_flops_per_token: float = 0.0
    attention: tuple[AttentionGroup, ...]
    recurrent_state_bytes_per_request: float  # Mamba/linear-attention state read and written each step
    activation_bytes_per_token: float  # hidden and intermediate tensors written and read, all layers
    layers: int  # decoder layers on the busiest stage
    moe_layers: int  # of which mixture-of-experts layers
    mla_layers: int = 0  # of which multi-head latent attention layers
    mla_kernels_per_layer: int = 0
    kernels_per_step: int  # GPU kernels a decode step launches on the busiest rank (all its layers)
    cuda_graphs: bool  # False under --enforce-eager: every kernel launch is paid from the CPU
    # decode-only steps replay one full CUDA graph (V0; V1 from 0.11, FULL_AND_PIECEWISE); otherwise, and in every
    # step with prompt tokens, the graph breaks at each layer's attention (V1's PIECEWISE; V0 runs them eagerly)
    full_decode_graphs: bool = True
    async_scheduling: bool  # the CPU schedules step n+1 while the GPU runs step n (vLLM 0.14+ default)
    all_reduce_bytes_per_token: float  # one all-reduce's payload per token (hidden x activation bytes)
    tensor_parallel_size: int
    pipeline_parallel_size: int
    # --enable-lora (punica shrink and expand on every wrapped module): one adapter's A and B on this rank, the
    # slots a step may hold, 2 x rank x (in + out) FLOPs per token, and two kernels per wrapped module.
    lora_slot_bytes: float = 0.0
    lora_slots: int = 0
    lora_flops_per_token: float = 0.0
    lora_kernels: int = 0
    # Speculative decoding: k proposals per request and step, the chance each is accepted, and one proposal
    # pass of the drafter (its weights, its KV per context token and its FLOPs per token, this rank).
    speculative_tokens: int = 0
    acceptance_rate: float = 0.0
    draft_weight_bytes: float = 0.0
    draft_kv_bytes_per_context_token: float = 0.0
    draft_flops_per_token: float = 0.0
    draft_kernels: int = 0
    # Floor of the MoE layer's two grouped expert GEMMs (seconds per layer, both calls): the time a kernel that
    # dequantizes in its K loop takes at decode whatever its bytes (``ROCM_MXFP4_TRITON_K_STEP_S``); 0 elsewhere.
    expert_gemm_floor_s: float = 0.0
    # --data-parallel-size > 1 on an MoE model: each MoE layer works on the tokens of this many engines, and moves
    # this many bytes per local token over the link (dispatch and combine, ``moe_dispatch.py``).
    moe_token_ranks: int = 1
    moe_dispatch_bytes_per_token: float = 0.0
    # Seconds an MLA block takes at decode beyond streaming its bytes, at ``mla_kernels.MLA_BATCHES`` requests, as
    # timed on a card of this family (mla_kernels.py); None where nobody timed it.
    mla_decode_excess: tuple[float, ...] | None = None

    @property
    def tokens_per_decode_step(self) -> float:
        """Tokens one decoding request gains per step (1 without speculative decoding)."""
        return tokens_per_step(self.speculative_tokens, self.acceptance_rate)

    def touched_expert_fraction(self, tokens: float) -> float:
        """Expected share of routed experts that ``tokens`` tokens touch (uniform top-k routing).

        Each token picks k of E experts, so an expert is missed by all of them with probability (1 - k/E)^tokens.
        """
        if not self.num_experts or tokens <= 0:
            return 0.0
        return 1.0 - (1.0 - self.experts_per_token / self.num_experts) ** tokens

    def kv_read_bytes(self, context_tokens: float) -> float:
        """KV bytes one request's decode step reads at this context length."""
        return sum(g.kv_bytes_per_context_token * _span(context_tokens, g.window_tokens) for g in self.attention)

    def decode_attention_flops(self, context_tokens: float) -> float:
        return sum(g.decode_flops_per_context_token * _span(context_tokens, g.window_tokens) for g in self.attention)

    def prefill_attention_flops(self, chunk_tokens: float, start_tokens: float) -> float:
        """Causal attention FLOPs of a prompt chunk of ``chunk_tokens`` that starts after ``start_tokens``."""
        total = 0.0
        for group in self.attention:
            # each new token attends over everything before it: sum of (start + i) for i < chunk, capped by the window
            mean_span = _span(start_tokens + chunk_tokens / 2, group.window_tokens)
            total += group.prefill_flops_per_context_token * chunk_tokens * mean_span
        return total


def _span(context_tokens: float, window: int | None) -> float:
    return context_tokens if window is None else min(context_tokens, window)


def forward_costs(result: Estimate) -> ForwardCosts:
    """The step costs of ``result``'s deployment (memoised per model and parallel layout)."""
    s = result.settings
    # NOTE: vLLM PR #25444 made FULL_AND_PIECEWISE the default cudagraph_mode in 0.11.0; V1 before it captured
    # PIECEWISE graphs only (vllm/config/compilation.py), V0 full graphs of decode batches.
    full_decode_graphs = s.engine == "v0" or result.rules.version.at_least(11)
    costs = _forward_costs(result.model, s.tensor_parallel_size, s.pipeline_parallel_size, s.dtype_bytes,
                           s.kv_cache_dtype, tuple(sorted(result.weights_by_role.items())), not s.enforce_eager,
                           s.async_scheduling, full_decode_graphs, result.quantization)
    extra: dict[str, float | int] = {}
    if result.lora is not None:
        lora = result.lora
        extra.update(lora_slot_bytes=lora.slot_bytes_busiest, lora_slots=lora.max_loras,
                     lora_flops_per_token=2.0 * lora.linear_rank_features_per_token,
                     lora_kernels=2 * lora.modules_per_layer * costs.layers)
    scenario = result.scenario
    if result.model.moe is not None and scenario.data_parallel_size > 1:
        extra.update(moe_token_ranks=scenario.data_parallel_size, moe_dispatch_bytes_per_token=(
            moe_dispatch_bytes_per_token(result.model, tensor_parallel_size=s.tensor_parallel_size,
                                         data_parallel_size=scenario.data_parallel_size,
                                         enable_expert_parallel=scenario.enable_expert_parallel,
                                         all2all_backend=scenario.all2all_backend, dtype_bytes=s.dtype_bytes)))
    if (floor := expert_gemm_floor_s(result)) > 0:
        extra["expert_gemm_floor_s"] = floor
    if result.gpu is not None and any(group.sparse_mla_heads for group in costs.attention):
        extra["attention"] = _padded_sparse_mla(costs.attention, result.gpu.family, s.kv_cache_dtype)
    if costs.mla_layers and result.gpu is not None:
        extra["mla_decode_excess"] = mla_decode_excess(
            result.gpu.family, compute_path(result.gpu, result.quantization),
            math.ceil(result.model.num_attention_heads / s.tensor_parallel_size))
    if costs.expert_flops_per_token:
        extra["expert_gemm_share"] = expert_gemm_share(result.gpu.family if result.gpu else None,
                                                       result.quantization)
    drafter = result.proposer
    if drafter is not None:
        extra.update(speculative_tokens=drafter.num_speculative_tokens, acceptance_rate=drafter.acceptance_rate)
        if drafter.spec is not None:
            draft = _forward_costs(drafter.spec, drafter.tensor_parallel_size, 1, s.dtype_bytes, s.kv_cache_dtype,
                                   (("attention", drafter.weights_bytes),), not s.enforce_eager, s.async_scheduling,
                                   full_decode_graphs)
            extra.update(draft_weight_bytes=float(drafter.weights_bytes),
                         draft_kv_bytes_per_context_token=sum(g.kv_bytes_per_context_token for g in draft.attention),
                         draft_flops_per_token=draft.linear_flops_per_token, draft_kernels=draft.kernels_per_step)
    return costs.model_copy(update=extra) if extra else costs


def _padded_sparse_mla(groups: tuple[AttentionGroup, ...], gpu_family: str,
                       kv_cache_dtype: str) -> tuple[AttentionGroup, ...]:
    """The sparse-MLA groups' FLOPs at the query heads FlashMLA's sparse kernels compute: vLLM pads a rank's heads to
    ``SPARSE_MLA_HEAD_MULTIPLE`` (the BF16 kernel, which runs every step of a BF16 cache and the prompts of an FP8
    one; an ``fp8_ds_mla`` cache decodes at 64 heads up to 64, else 128). Other GPUs have no sparse FlashMLA."""
    multiple = SPARSE_MLA_HEAD_MULTIPLE.get(gpu_family)
    if multiple is None:
        return groups
    padded = []
    for group in groups:
        heads = group.sparse_mla_heads
        if heads:
            prompt_heads = round_up(heads, multiple)
            decode_heads = (64 if heads <= 64 else 128) if kv_cache_dtype == "fp8_ds_mla" else prompt_heads
            group = group.model_copy(update={
                "decode_flops_per_context_token": group.decode_flops_per_context_token * decode_heads / heads,
                "prefill_flops_per_context_token": group.prefill_flops_per_context_token * prompt_heads / heads,
                "sparse_mla_padded_heads": prompt_heads})
        padded.append(group)
    return tuple(padded)


def expert_gemm_floor_s(result: Estimate) -> float:
    """Seconds one MoE layer's two expert GEMMs take at least at decode: MXFP4 experts on a CDNA3 GPU, where
    vLLM's Triton kernel dequantizes each 128-deep K step in registers (``ROCM_MXFP4_TRITON_K_STEP_S``); 0 for
    every other deployment, whose expert GEMMs stream at the roofline."""
    moe, quantization, gpu = result.model.moe, result.quantization, result.gpu
    if moe is None or quantization is None or quantization.method != "mxfp4" or gpu is None or gpu.family != "cdna3":
        return 0.0
    # NOTE: tensor parallelism splits the expert intermediate size (the down GEMM's K); expert parallelism keeps
    # whole experts on each rank.
    split = 1 if result.scenario.enable_expert_parallel else result.settings.tensor_parallel_size
    steps = sum(math.ceil(round_up(k, ROCM_MXFP4_TRITON_PAD) / ROCM_MXFP4_TRITON_BLOCK_K)
                for k in (result.model.hidden_size, math.ceil(moe.expert_intermediate_size / split)))
    return steps * ROCM_MXFP4_TRITON_K_STEP_S


@lru_cache(maxsize=1024)
def _forward_costs(spec: ModelSpec, tp: int, pp: int, dtype_bytes: int, kv_cache_dtype: str,
                   weights_by_role: tuple[tuple[str, int], ...], cuda_graphs: bool,
                   async_scheduling: bool, full_decode_graphs: bool,
                   quantization: QuantizationSpec | None = None) -> ForwardCosts:
    roles = dict(weights_by_role)
    ranges = pp_layer_ranges(spec.num_hidden_layers, pp)
    first, last = max(ranges, key=lambda r: r[1] - r[0])
    on_stage = [layer for index, layer in enumerate(spec.layers) if first <= index < last]
    dense = sum(v for role, v in roles.items() if role not in _NOT_STREAMED)
    if spec.tie_word_embeddings and "lm_head" not in roles:
        dense += roles.get("embedding", 0)  # the tied embedding is the LM head's matrix, streamed every step
    moe = spec.moe
    linear_params = sum(_params_per_rank(w, tp, first, last, moe.experts_per_token if moe else 0)
                        for w in spec.weights if w.role in _LINEAR_ROLES and w.loaded)
    lm_head_params = sum(_params_per_rank(w, tp, first, last, 0) for w in spec.weights
                         if w.role == "lm_head" and w.loaded)
    expert_params = sum(_params_per_rank(w, tp, first, last, moe.experts_per_token if moe else 0)
                        for w in spec.weights if w.role == "expert" and w.loaded)
    unconverted = [(w.role, _params_per_rank(w, tp, first, last, 0)
                    * _unconverted_share(quantization, w, first, last))
                   for w in spec.weights if quantization and w.role in _LINEAR_ROLES - {"expert"} and w.loaded]
    bf16_params = sum(params for _, params in unconverted)
    bf16_lm_head_params = sum(params for role, params in unconverted if role == "lm_head")
    if spec.tie_word_embeddings:
        tied = spec.vocab_size * spec.hidden_size / tp
        linear_params, lm_head_params = linear_params + tied, lm_head_params + tied
        if quantization is not None:  # the embedding matrix is never quantized
            bf16_params, bf16_lm_head_params = bf16_params + tied, bf16_lm_head_params + tied
    moe_layers = 0
    if moe:
        routed = [w for w in spec.weights if w.role == "expert" and w.layers is not None and w.loaded]
        moe_layers = max((max(0, min(last, w.layers[1]) - max(first, w.layers[0])) for w in routed), default=0)
    kernels = _kernels(spec, on_stage, moe_layers)
    intermediate = max(spec.intermediate_size, moe.expert_intermediate_size * moe.experts_per_token if moe else 0)
    activation = len(on_stage) * dtype_bytes * 2 * (FORWARD_HIDDEN_TENSORS * spec.hidden_size
                                                    + FORWARD_INTERMEDIATE_TENSORS * intermediate / tp)
    return ForwardCosts(
        dense_weight_bytes=float(dense), expert_weight_bytes=float(roles.get("expert", 0)),
        num_experts=moe.num_experts if moe else 0, experts_per_token=moe.experts_per_token if moe else 0,
        linear_flops_per_token=2.0 * linear_params, lm_head_flops_per_token=2.0 * lm_head_params,
        expert_flops_per_token=2.0 * expert_params,
        bf16_linear_flops_per_token=2.0 * bf16_params, bf16_lm_head_flops_per_token=2.0 * bf16_lm_head_params,
        attention=_attention_groups(spec, on_stage, tp, dtype_bytes, kv_cache_dtype),
        recurrent_state_bytes_per_request=2.0 * sum(
            mamba_state_bytes(state, tensor_parallel_size=tp, model_dtype_bytes=dtype_bytes)
            for layer in on_stage for state in (layer, layer.parallel_state) if state and state.kind == "mamba"),
        activation_bytes_per_token=activation, layers=len(on_stage), moe_layers=moe_layers,
        mla_layers=sum(1 for layer in on_stage if layer.kind == "mla"), mla_kernels_per_layer=_mla_kernels(spec),
        kernels_per_step=kernels, cuda_graphs=cuda_graphs, full_decode_graphs=full_decode_graphs,
        async_scheduling=async_scheduling,
        all_reduce_bytes_per_token=float(spec.hidden_size * dtype_bytes),
        tensor_parallel_size=tp, pipeline_parallel_size=pp)


def _kernels(spec: ModelSpec, layers: list[LayerAttention], moe_layers: int) -> int:
    """Kernels of the decode step over ``layers`` (``moe_layers`` of them with a MoE block)."""
    mla = _mla_kernels(spec)
    mixers = sum(mla if layer.kind == "mla" else KERNELS_MAMBA if layer.kind == "mamba" else KERNELS_ATTENTION
                 for layer in layers)
    moe = KERNELS_MOE + (KERNELS_SHARED_EXPERTS if spec.moe and spec.moe.num_shared_experts else 0)
    return mixers + moe_layers * moe + (len(layers) - moe_layers) * KERNELS_DENSE_MLP


def _mla_kernels(spec: ModelSpec) -> int:
    """Kernels of one MLA block at decode (two fewer without a q LoRA: no q_a GEMM and its norm)."""
    return KERNELS_MLA if spec.mla is not None and spec.mla.q_lora_rank else KERNELS_MLA_NO_Q_LORA


def _unconverted_share(quantization: QuantizationSpec, tensor: WeightTensor, first: int, last: int) -> float:
    """The share of a tensor's copies on layers [first, last) that the checkpoint leaves 16-bit."""
    if not converts(quantization, tensor):
        return 1.0
    excluded = excluded_layers(tensor.name, tensor.layers, quantization.modules_to_not_convert)
    if tensor.placement != "layers" or tensor.layers is None:
        return 1.0 if excluded else 0.0
    span = range(max(first, tensor.layers[0]), min(last, tensor.layers[1]))
    return sum(1 for layer in span if layer in excluded) / len(span) if span else 0.0


def _params_per_rank(tensor: WeightTensor, tp: int, first: int, last: int, experts_per_token: int) -> float:
    if tensor.placement == "layers" and tensor.layers is not None:
        layers = max(0, min(last, tensor.layers[1]) - max(first, tensor.layers[0]))
    else:
        layers = 1
    copies = experts_per_token if tensor.role == "expert" else tensor.count  # a token passes through k experts
    split = 1 if tensor.tp == "replicated" else tp
    return tensor.numel * copies * layers / split


def _attention_groups(spec: ModelSpec, layers: list[LayerAttention], tp: int, dtype_bytes: int,
                      kv_cache_dtype: str) -> tuple[AttentionGroup, ...]:
    q_heads = math.ceil(spec.num_attention_heads / tp)
    groups: dict[tuple[int | None, int], list[float]] = {}  # (window, sparse MLA heads) -> kv, decode, prefill

    def add(window: int | None, sparse_heads: int, kv: float, decode: float, prefill: float) -> None:
        totals = groups.setdefault((window, sparse_heads), [0.0, 0.0, 0.0])
        totals[0] += kv
        totals[1] += decode
        totals[2] += prefill

    for layer in layers:
        if layer.kind == "mamba" or layer.stateless:
            continue
        window = layer.sliding_window if layer.kind == "sliding_window" else (
            layer.attention_chunk_size if layer.kind == "chunked_local" else None)
        kv = kv_page_bytes_per_token(layer, kv_cache_dtype=kv_cache_dtype, model_dtype_bytes=dtype_bytes,
                                     tensor_parallel_size=tp)
        if layer.kind == "mla" and spec.mla is not None:
            mla = spec.mla
            # NOTE: decode absorbs W_UK/W_UV, so every head scores the 576-wide latent and mixes the 512-wide one;
            # prefill expands K/V per head (qk_nope + rope for scores, v_head_dim for values).
            decode = 2.0 * q_heads * (mla.latent_size + mla.kv_lora_rank)
            prefill = 2.0 * q_heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim)
            if layer.indexer_bytes_per_token and mla.index_topk:
                # NOTE: DeepSeek sparse attention (FlashMLASparseImpl.forward_mqa): the sparse kernels run the absorbed
                # 576/512 MQA form for prompts too, over the top-k latents the indexer picks; the indexer (replicated
                # on every rank) scores every earlier token with its own heads.
                indexer = layer.indexer_bytes_per_token
                add(mla.index_topk, q_heads, kv - indexer, decode, decode)
                scores = 2.0 * mla.index_n_heads * mla.index_head_dim
                add(None, 0, indexer, scores, scores)
                continue
        else:
            decode = prefill = 2.0 * q_heads * (layer.head_size + (layer.head_size_v or layer.head_size))
        add(window, 0, kv, decode, prefill)
    return tuple(AttentionGroup(window_tokens=window, kv_bytes_per_context_token=t[0],
                                decode_flops_per_context_token=t[1], prefill_flops_per_context_token=t[2],
                                sparse_mla_heads=heads) for (window, heads), t in groups.items())
