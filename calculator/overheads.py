"""The empirical terms of the budget: activation peak, non-torch memory, CUDA graphs, CUDA context.

A config cannot give these exactly; vLLM measures them at start-up. Each constant carries its source (the
calibration records in ``shared/data/vllm-startup-logs/calibration.jsonl``, cited by record id) and each form
is physically motivated, so that it extrapolates to models and GPUs that are not in the records.
"""

from __future__ import annotations

from .spec import ModelSpec
from .units import GIB, KIB
from .vllm_versions import Device, VersionRules

# --- Activation peak (profile_run, §1.4) -------------------------------------------------------------------
# The sampler's fp32 logits pipeline for min(max_num_seqs, max_num_batched_tokens) rows x vocab. The peak is a
# fixed multiple of one fp32 logits copy: 9.6-9.9x in every record that prints it (llmd-h100-llama31-8b 4.76 GiB,
# llmd-h100-qwen3-0.6b-16k 5.56, llmd-h100-qwen3-32b-tp1-16k 5.64, llmd-h100-gpt-oss-20b 7.38 at 1024 seqs;
# file-a100-40g-phi4-mini-ft-v073 1.83 at 256 seqs).
SAMPLER_FP32_LOGITS_COPIES = 9.7
LOGITS_BYTES_PER_ELEMENT = 4
# The forward pass over max_num_batched_tokens keeps the residual stream and a few hidden-size tensors
# (~4 x hidden) and, in the MLP, the gate_up output plus the activation (~3 x intermediate per rank).
# Checked on file-80gb-llava16-mistral-7b-v0102 (1.97 GiB at 16,384 tokens) and file-uitars-7b-24gb-v066 (1.16 GiB).
FORWARD_HIDDEN_TENSORS = 4
FORWARD_INTERMEDIATE_TENSORS = 3

# --- Non-torch memory growth after the start-up snapshot (NCCL buffers, cuBLAS workspaces) --------------------
NON_TORCH_TP1_BYTES = int(0.13 * GIB)  # llmd-h100-* TP=1 records: 0.13-0.14 GiB
NCCL_FIRST_PEER_BYTES = int(0.41 * GIB)  # llmd-h100-qwen3-32b-tp2-16k 0.54 GiB at TP=2
NCCL_EXTRA_PEER_BYTES = int(0.20 * GIB)  # file-8xh200-glm53-flash-tp8 1.74 GiB at TP=8
PIPELINE_P2P_BYTES = int(0.20 * GIB)  # assumption: one more communicator for PP send/recv

# --- CUDA context, NCCL communicators and cuBLAS handles made before the snapshot (outside the budget) ------------
CUDA_CONTEXT_BYTES = int(0.50 * GIB)  # a bare torch CUDA context on Hopper/Ampere (nvidia-smi of an idle process)
DISTRIBUTED_CONTEXT_BYTES = int(0.25 * GIB)  # assumption: NCCL communicators set up before the snapshot

# --- CUDA graphs (§1.5): one pooled graph per capture size ------------------------------------------------------
CUDAGRAPH_BYTES_PER_LAYER_PER_CAPTURE = 256 * KIB  # assumption: pooled per-layer buffers and graph nodes
CUDAGRAPH_MAX_CAPTURE_SIZE = 512


def cudagraph_capture_sizes(max_num_seqs: int) -> tuple[int, ...]:
    """vLLM's default capture sizes: [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)."""
    largest = min(max_num_seqs * 2, CUDAGRAPH_MAX_CAPTURE_SIZE)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)]
    return tuple(size for size in sizes if size <= largest)


def _mlp_intermediate_per_rank(spec: ModelSpec, tensor_parallel_size: int) -> float:
    if spec.moe is None:
        return spec.intermediate_size / tensor_parallel_size
    moe = spec.moe
    # NOTE: fused MoE materialises top_k expert rows per token; shared experts run beside them.
    routed = moe.experts_per_token * moe.expert_intermediate_size
    return (routed + moe.shared_expert_intermediate_size) / tensor_parallel_size


def forward_activation_bytes(spec: ModelSpec, *, max_num_batched_tokens: int, activation_dtype_bytes: int,
                             tensor_parallel_size: int) -> int:
    """Peak of the dummy forward pass over ``max_num_batched_tokens`` tokens (attention skipped)."""
    per_token = (FORWARD_HIDDEN_TENSORS * spec.hidden_size
                 + FORWARD_INTERMEDIATE_TENSORS * _mlp_intermediate_per_rank(spec, tensor_parallel_size))
    return int(max_num_batched_tokens * per_token * activation_dtype_bytes)


def sampler_activation_bytes(spec: ModelSpec, *, max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """Peak of the sampler warm-up: a few fp32 copies of [min(seqs, tokens), vocab] logits."""
    rows = min(max_num_seqs, max_num_batched_tokens)
    return int(SAMPLER_FP32_LOGITS_COPIES * rows * spec.vocab_size * LOGITS_BYTES_PER_ELEMENT)


def activation_peak_bytes(spec: ModelSpec, *, max_num_batched_tokens: int, max_num_seqs: int,
                          activation_dtype_bytes: int, tensor_parallel_size: int, is_last_stage: bool) -> int:
    """The profiled peak: the forward pass and the sampler run one after the other, so the larger one counts."""
    forward = forward_activation_bytes(spec, max_num_batched_tokens=max_num_batched_tokens,
                                       activation_dtype_bytes=activation_dtype_bytes,
                                       tensor_parallel_size=tensor_parallel_size)
    if not is_last_stage:
        return forward
    return max(forward, sampler_activation_bytes(spec, max_num_seqs=max_num_seqs,
                                                 max_num_batched_tokens=max_num_batched_tokens))


def non_torch_bytes(*, tensor_parallel_size: int, pipeline_parallel_size: int, device: Device) -> int:
    """Non-torch growth during profiling: cuBLAS workspaces, plus NCCL buffers that grow with the peers."""
    if device == "cpu":
        return 0
    total = NON_TORCH_TP1_BYTES
    if tensor_parallel_size > 1:
        total += NCCL_FIRST_PEER_BYTES + NCCL_EXTRA_PEER_BYTES * (tensor_parallel_size - 2)
    if pipeline_parallel_size > 1:
        total += PIPELINE_P2P_BYTES
    return total


def cuda_context_bytes(*, tensor_parallel_size: int, pipeline_parallel_size: int, device: Device) -> int:
    """Memory taken before vLLM's snapshot; it must fit in the (1 - utilization) slack."""
    if device == "cpu":
        return 0
    distributed = tensor_parallel_size > 1 or pipeline_parallel_size > 1
    return CUDA_CONTEXT_BYTES + (DISTRIBUTED_CONTEXT_BYTES if distributed else 0)


def cudagraph_bytes(spec: ModelSpec, *, layers_on_rank: int, max_num_seqs: int, activation_dtype_bytes: int,
                    tensor_parallel_size: int, enforce_eager: bool, rules: VersionRules, device: Device) -> int:
    """CUDA-graph pool: per-capture graph memory for every layer plus the largest captured batch's buffers."""
    del rules  # NOTE: graphs exist in every version; *where* they are paid for is the budget's business
    if enforce_eager or device == "cpu":
        return 0
    sizes = cudagraph_capture_sizes(max_num_seqs)
    graphs = len(sizes) * layers_on_rank * CUDAGRAPH_BYTES_PER_LAYER_PER_CAPTURE
    buffers = forward_activation_bytes(spec, max_num_batched_tokens=max(sizes),
                                       activation_dtype_bytes=activation_dtype_bytes,
                                       tensor_parallel_size=tensor_parallel_size)
    return graphs + buffers
