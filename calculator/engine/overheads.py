"""The empirical terms of the budget: activation peak, non-torch memory, CUDA graphs, CUDA context.

A config cannot give these exactly; vLLM measures them at start-up. Each constant carries its source (the
calibration records in ``shared/data/vllm-startup-logs/calibration.jsonl``, copied to ``benchmarks/data/``, cited
by record id) and each form is physically motivated, so that it extrapolates to models and GPUs that are not in the
records. The constants change with the version era (``VersionRules.overhead_era``); ``docs/accuracy.md`` shows the
residuals they leave.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from ..gpus import Interconnect
from ..model.spec import ModelSpec
from ..units import GIB
from .encoder_profile import profiled_encoder_cache_bytes
from .expert_parallel import moe_token_factor
from .interconnect import UNKNOWN_INTERCONNECT, all_reduce_buffer_bytes, nccl_buffer_bytes
from .moe_workspace import kept_moe_workspace_bytes, moe_workspace_bytes
from .vllm_versions import CudagraphCaptureRule, Device, OverheadEra, VersionRules

# --- Activation peak (profile_run, §1.4) -------------------------------------------------------------------
# The sampler's fp32 logits pipeline for min(max_num_seqs, max_num_batched_tokens) rows x vocab; its peak is a
# fixed multiple of one fp32 logits copy, per era (``EraConstants.sampler_logits_copies``).
LOGITS_BYTES_PER_ELEMENT = 4
# The forward pass over max_num_batched_tokens keeps the residual stream and a few hidden-size tensors
# (~4 x hidden) and, in the MLP, the gate_up output plus the activation (~3 x intermediate per rank).
# Checked on file-80gb-llava16-mistral-7b-v0102 (1.97 GiB at 16,384 tokens; 1.81 predicted before the vision
# encoder) and, in the V0 era, file-uitars-7b-24gb-v066 (1.16 GiB at 8,192 tokens; 1.09 predicted).
FORWARD_HIDDEN_TENSORS = 4
FORWARD_INTERMEDIATE_TENSORS = 3


class EraConstants(NamedTuple):
    """The measured overhead constants of one era (``VersionRules.overhead_era``)."""

    sampler_logits_copies: float
    non_torch_tp1_bytes: int  # cuBLAS workspaces and allocations made after the snapshot, one GPU
    # NCCL buffers that grow after the snapshot at TP = 2 on an NVSwitch system with NVLS (the records' H100/H200 SXM
    # and A100 SXM runs); other links: ``interconnect.P2P_BUFFER_BYTES``
    nccl_first_peer_bytes: int
    nccl_extra_peer_bytes: int  # each TP peer past the second (NVLS)
    pipeline_p2p_bytes: int  # PP send/recv buffers
    cudagraph_bytes_per_hidden: float  # graph pool per (layer x capture size x hidden unit)
    held_after_profile_bytes: int = 0  # <= 0.6.3: memory in use after profiling that later versions leave out


# V0 worker (0.6.4+). Sampler 9.6-10x one fp32 logits copy: file-a100-40g-phi4-mini-ft-v073 1.83 GiB (256 seqs x
# 200,064 vocab), file-rocm-24gb-opt125m-serverlessllm 0.49, file-h200-rho-1b-v064 0.33 (peak 2.38 - weights 2.05).
# Non-torch at TP=1: file-uitars-7b-24gb-v066 0.28, file-80gb-phi4-bnb-lora-util070 0.09,
# file-a100-40g-phi4-mini-ft-v073 0.01 (mean 0.13). NCCL communicators are built before the V0 baseline, so only
# their growth counts: vllm-16570-4xa100-40g-qwen25-vl-72b-tp4 0.34-0.43 at TP=4 (0.25 above TP=1).
# Graph pools (V0 full graphs, 35 sizes): file-uitars 1.92 GiB, file-80gb-phi4 1.12, file-a100-40g-phi4-mini 0.41,
# file-rocm-opt125m 0.13 -> 128-587 B per hidden unit per layer per size; the middle two average 300.
_V0 = EraConstants(sampler_logits_copies=9.7, non_torch_tp1_bytes=int(0.13 * GIB),
                   nccl_first_peer_bytes=int(0.25 * GIB), nccl_extra_peer_bytes=0,
                   pipeline_p2p_bytes=int(0.20 * GIB), cudagraph_bytes_per_hidden=300.0)

ERA_CONSTANTS: dict[OverheadEra, EraConstants] = {
    # V0 up to 0.6.3: peak = free at the init snapshot - free after profiling, with no empty_cache in between (§1.2
    # table), so the allocator's cached activation blocks and the NCCL communicator that the warm-up all-reduce
    # builds after the snapshot (even at TP=1) count too. vllm-pr4454-a6000-opt-125m,
    # vllm-pr4454-a6000-meta-llama-3-8b-instruct and vllm-pr4454-a6000-zephyr-7b-beta-awq (~0.4.1) hold 0.65, 1.03
    # and 1.11 GiB beyond the 0.6.4+ terms, file-mi300x-llama2-7b-tp1-v063dev (0.6.3.dev on an MI300X, ROCm's
    # 0.40 GiB below taken as known) 1.35: the mean, 1.035 GiB.
    "v0_used_memory": _V0._replace(held_after_profile_bytes=int(1.035 * GIB)),
    "v0": _V0,
    # V1 before 0.17. Sampler 9.6-9.9x: llmd-h100-llama31-8b 4.76 GiB, llmd-h100-qwen3-0.6b-16k 5.56,
    # llmd-h100-qwen3-32b-tp1-16k 5.64, llmd-h100-gpt-oss-20b 7.38 at 1024 seqs, file-24gb-qwen3-8b-fp8-util080-len1k
    # 1.40 at 256 (9.66x). NOTE: that is torch's sort path. 0.10-0.11 sample top-p/top-k with FlashInfer whenever it is
    # installed (the Docker image; an extra of the wheel: 0.11.0's metadata lists 'flashinfer-python==0.3.1; extra ==
    # "flashinfer"'), 0.11.1+ only with VLLM_USE_FLASHINFER_SAMPLER=1 (PR #26859), and the FlashInfer path leaves ~4x:
    # llmd-h100-mistral-small-3.2-24b-v0110 (v0.11.0 image) 2.12 GiB, 4.2x, and file-44gb-llama32-1b-default-v0101dev
    # 0.45, 3.7x: the ``install`` setting ("docker") takes that path (``flashinfer_sampler_bytes``); pip installs of
    # the same era print torch's figure: file-8xl40s-qwen3-235b-a22b-fp8-tp8-ep-v0102 1.40 GiB at 256 x 151,936, 9.7x.
    # The Mistral record's whole -9 % was this term: weights 44.76 printed / 44.72 ours, non-torch 0.14 / 0.09, peak
    # 2.12 / 4.85 (1.83 on FlashInfer's path: -9.1 % -> +1.6 % KV tokens). Its Pixtral encoder adds little: two
    # 1540 px images (55 x 56 = 3,080 tokens each) fill the 8,192-token encoder budget, 2 x 3,080 x 5,120 x 2 B =
    # 0.06 GiB of cached outputs (not modelled: ``encoder_profile`` covers Qwen VL).
    # Non-torch at TP=1: llmd 0.13-0.14 (four set-ups), file-24gb-qwen3-8b-fp8-util080-len1k 0.02,
    # file-80gb-llava16-mistral-7b-v0102 0.07 (an H100), file-44gb-llama32-1b-default-v0101dev 0.02: the mean of the
    # seven set-ups, 0.091. NCCL at TP=2 on NVSwitch: llmd-h100-qwen3-32b-tp2-16k 0.54 and
    # llmd-h100-llama33-70b-fp8-tp2 0.55 in all, 0.45 above the TP=1 figure; file-8xh200-glm53-flash-tp8 1.74 at
    # TP=8; PP: assumption (one more communicator). Graph pools (V1 piecewise, measured after the KV cache):
    # llmd-h100-qwen3-0.6b-16k 0.10 GiB, file-80gb-llava16-mistral-7b-v0102 0.67, llmd-h100-gpt-oss-20b 0.39
    # -> 73-119 B per hidden unit per layer per size (median 82).
    "v1": EraConstants(sampler_logits_copies=9.7, non_torch_tp1_bytes=int(0.091 * GIB),
                       nccl_first_peer_bytes=int(0.45 * GIB), nccl_extra_peer_bytes=int(0.20 * GIB),
                       pipeline_p2p_bytes=int(0.20 * GIB), cudagraph_bytes_per_hidden=80.0),
    # V1 0.17+ (no record of ours prints a breakdown this late). The sampler warm-up peak fell ~60% at 0.17: llm-d's
    # v0.19.0 accuracy report on H100 (competitors.md §3) prints Llama-3.1-8B 1.89 GiB, Qwen3-8B 2.21, phi-4 1.52 at
    # 1024 seqs (3.8-4.0 copies); file-l4-gemma4-e2b-v0210 (0.21) leaves ~4.7 and file-mi300x-gemma4-e2b-v0291 5.6
    # (262,144 vocab) -> 4.5. Non-torch from the same report: 0.24-0.27 GiB at TP=1, 2.07 at TP=2, 2.13 at TP=4 (NCCL
    # buffers now allocated after the snapshot), 0.07 at PP=2 (we keep the TP=1 figure there).
    "v1_0_17": EraConstants(sampler_logits_copies=4.5, non_torch_tp1_bytes=int(0.26 * GIB),
                            nccl_first_peer_bytes=int(1.81 * GIB), nccl_extra_peer_bytes=int(0.03 * GIB),
                            pipeline_p2p_bytes=0, cudagraph_bytes_per_hidden=80.0),
}
# ROCm's hipBLASLt/rocBLAS workspaces: file-rocm-24gb-opt125m-serverlessllm prints 0.53 GiB non-torch at TP=1,
# 0.40 above the CUDA records of the same era (file-mi300x-gemma4-e2b-v0291, without a config, suggests more).
ROCM_EXTRA_NON_TORCH_BYTES = int(0.40 * GIB)
# 0.27+ size the budget from the drop in free memory (``memory_profiling``: ``total_consumed``), which also counts what
# the 0.9.1-0.26 sum of parts left between its terms: persistent buffers allocated after the snapshot outside
# load_model (input, sampling and block-table buffers), allocator segments empty_cache cannot return, late non-torch
# growth. vLLM 0.28 on Qwen3-14B-AWQ holds this much more than weights + activation + non-torch: blog-l40s-qwen3-14b-
# awq-tuned 0.49 GiB, blog-l4-qwen3-14b-awq-pp2 0.70, blog-l4-qwen3-14b-awq-single/-replica 0.38 together (same
# settings, two start orders): the median of the three set-ups. NOTE: measured against the totals vLLM prints for these
# cards (L40S 44.39 GiB, L4 22.05; gpus.json), not nvidia-smi's (0.60 and 0.44 GiB higher, which this constant held
# before: 1.06). One model family, one version: a thin constant.
# NOTE: part of it is Model Runner V2's penalty tensors (``vllm/v1/worker/gpu/sample/penalties.py``, 0.28-0.34:
# output_bin_counts [max_num_seqs, vocab] and prompt_bin_mask [max_num_seqs, vocab / 32], int32, made in load_model
# after the weights are measured): 0.15 GiB at these records' 256 seqs, 0.005 at the tuned run's 8, but 1.03 GiB for a
# 262K vocabulary at an H100's default 1,024. Counted apart (the set-ups then give 0.49, 0.55 and 0.23: median 0.49),
# they move file-4070laptop-qwen25-1.5b-util080-4k-v0300 from +0.5 % to -7.2 % (a WSL2 laptop whose total is
# nvidia-smi's) and issue 13's in-sample p90 from 4.1 % to 6.6 %, so they stay inside this constant until the records
# can separate them. That record cannot: it ran Model Runner V2 (its "[model_runner.py:428] Model loading took" is
# 0.30's vllm/v1/worker/gpu/model_runner.py; V1 logs from gpu_model_runner.py:5416) at 256 seqs, but the same set-up
# with --enforce-eager printed 3.01 GiB (112,704 tokens; statecraft-serving results/phase1-1.5b/20261003T001956Z/eager/
# env.json) where we predict 2.12: vLLM held 0.41 GiB beside the weights, we hold 1.40. Its +0.5 % is two errors of
# about 1 GiB cancelling (graphs and compile on, off), not a measure of these tensors. Nor do the constant's records
# follow max_num_seqs: the 8-seq run needs the most (0.49), the 256-seq runs 0.23-0.55 once the tensors are taken off.
# NOTE: what vLLM allocates between its snapshot (gpu_worker.init_device, after NCCL) and the KV sizing, read in the
# 0.28.0 build (the same in 0.29/0.30/0.32 unless said), besides the weights, the profiled peak and the graph estimate:
# * Model Runner V2 (v1/worker/gpu/), built after the snapshot: RequestState keeps all_token_ids [seqs, max_model_len]
#   in host memory (UVA), so max_model_len costs no GPU memory; its GPU vectors and InputBuffers come to ~28 B a seq and
#   ~13 B a batched token. load_model, after "Model loading took": PenaltiesState (``penalty_state_bytes``; 0.149 GiB at
#   256 x 151,936), LogitBiasState int32/fp32 [seqs, 1024 + 1024 + 1024 + 128] (3.1 MiB at 256), bad-word, logprob and
#   thinking-budget tables [seqs, small], the grammar bitmask int32 [seqs, ceil(vocab / 32)] (4.6 MiB), on non-first PP
#   ranks intermediate_tensors 2 x [max_num_batched_tokens, hidden] (40 MiB at 2,048 x 5,120). Block tables and the
#   attention backends' workspaces come in initialize_kv_cache, after the sizing; its graph estimate is 0 up to 0.28.
#   The dummy sampler holds bf16 logits [min(seqs, tokens), vocab] (no request needs processing: no fp32 copy, no
#   sort), a transient.
# * V1's runner (gpu_model_runner.py): inputs_embeds [max_num_batched_tokens, hidden] in the model dtype (64 MiB for
#   kubesimplify's 8,192 x 4,096) and per-token / per-seq vectors under 1 MiB; the kept MoE workspace is modelled
#   (``moe_workspace``).
# Read together: 0.157 GiB for the blog defaults (256 seqs), 0.005 for the tuned run (8 seqs). The records ask more:
# printed weights + pool leave 1.75-1.77 GiB for the three default runs (L40S FP16 and AWQ, L4 single) and 1.71 at the
# tuned run's 8 seqs and 8,192 tokens, and file-rtxpro4000-qwen25-7b-awq-8k-v0280 (compiled, V2, 0.28) holds ~1.5 GiB
# beyond our terms even with this constant, so most of it is in no buffer the runner names (allocator segments kept
# through the compiled profile run, Inductor/Triton module memory: not separable from start-up lines). It is a
# compiled-run term: the eager V2 runs print their consumed memory whole (file-turing24g-qwen25-1.5b-fp16-eager-4k-
# v0281rc1 3.25 - 2.98 GiB of weights = 0.27: the 0.15 of penalties and cuBLAS; its TP 2 twin 0.21), and
# statecraft-serving's 4070 laptop pool was 1.06 GiB smaller compiled than eager (above; 0.30's V2 graph estimate is
# part of that). ``free_drop_persistent_bytes`` keeps the constant for compiled runs, only the penalty state for eager.
FREE_DROP_PERSISTENT_BYTES = int(0.49 * GIB)
PENALTY_STATE_FROM_MINOR = 28  # penalties.py as quoted above: the same in the 0.28, 0.29, 0.30 and 0.32 wheels


def free_drop_persistent_bytes(rules: VersionRules | None, *, device: Device, enforce_eager: bool,
                               penalty_state: int = 0) -> int:
    """What 0.27+'s free-memory drop holds beyond the weights, the activation peak and the non-torch terms.

    Compiled (the default): ``FREE_DROP_PERSISTENT_BYTES``, measured on compiled runs only. With ``--enforce-eager``
    only what vLLM's source shows the runner keeping: ``penalty_state`` (``penalty_state_bytes`` on the last stage of
    Model Runner V2 from 0.28, else 0); the eager records print no more (NOTE above).
    """
    if device == "cpu" or rules is None or not rules.version.at_least(27):
        return 0
    return penalty_state if enforce_eager else FREE_DROP_PERSISTENT_BYTES


def penalty_state_bytes(*, max_num_seqs: int, vocab_size: int) -> int:
    """Model Runner V2's ``PenaltiesState`` on the GPU: ``output_bin_counts`` [seqs, vocab] and ``prompt_bin_mask``
    [seqs, ceil(vocab / 32)], both int32 (``vllm/v1/worker/gpu/sample/penalties.py``, 0.28+).

    The part of ``FREE_DROP_PERSISTENT_BYTES`` read from vLLM's source; ``benchmarks/held_out.py`` falls back to it
    when every record that set the constant is left out. 256 seqs x 151,936 vocab: 160,444,416 bytes (0.15 GiB).
    """
    return 4 * max_num_seqs * (vocab_size + -(-vocab_size // 32))


# --- Integrated GPUs (one memory pool with the host: GB10 / DGX Spark), ``GpuSpec.unified_memory`` ---------------
# vLLM reads "free" as psutil's MemAvailable there (vllm/utils/mem_utils.py), so the host's own use is memory taken
# before the snapshot, outside the budget: the OS plus vLLM's API-server/engine processes and CUDA context.
# file-gb10-qwen38-27b-786k-v0271 prints 112.26 of 119.63 GiB free at the snapshot (7.37 in use);
# llamastash/llamastash#81 measures an idle DGX Spark at 116.43 GiB MemAvailable of 121.69 and vLLM's own reading
# 2.7 GiB below it (5.3 + 2.7 = 8.0). Two-node kits report up to 20.4 (MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#47:
# 101.3 of 121.69 free), the high end the verdict checks (``uncertainty.py``).
UMA_HOST_BASELINE_BYTES = int(7.37 * GIB)
UMA_HOST_BASELINE_HIGH_BYTES = int(20.4 * GIB)
# ... and whatever the host side of the engine grows by after the snapshot (loading, torch.compile workers, tokenizer)
# is non-torch memory to the profiler. Non-weight memory beyond our activation and non-torch terms on GB10:
# file-gb10-nemotron3-nano-4b-fp8-util015-v0130nv 0.86 GiB, file-gb10-qwen3-30b-a3b-fp8-util030-v0130nv 1.89,
# file-gb10-qwen25-14b-fp8dyn-util015-failed-v0130nv 2.79 (the last two with the Qwen2.5-14B / Qwen3-30B-A3B configs
# and vLLM's FP8 layouts; no exact config of those checkpoints is bundled), file-gb10-qwen38-27b-786k-v0271 4.38
# (consumed 55.99 - weights 51.35 - 0.26): the median.
UMA_HOST_GROWTH_BYTES = int(2.3 * GIB)

# --- CUDA context, NCCL communicators and cuBLAS handles made before the snapshot (outside the budget) ------------
CUDA_CONTEXT_BYTES = int(0.50 * GIB)  # a bare torch CUDA context on Hopper/Ampere (nvidia-smi of an idle process)
DISTRIBUTED_CONTEXT_BYTES = int(0.25 * GIB)  # assumption: NCCL communicators set up before the snapshot

# --- CUDA graphs (§1.5) --------------------------------------------------------------------------------------------
CUDAGRAPH_MAX_CAPTURE_SIZE = 512
# vLLM 0.28 (PR #49390, config/vllm.py ``_set_cudagraph_sizes``: "1024 if current_platform.
# is_device_capability_family(100) else 512"; 0.27 still 512): data-centre Blackwell captures up to 1,024
BLACKWELL_MAX_CAPTURE_SIZE = 1024
V0_MAX_CAPTURE_SIZE = 256


def max_capture_size(rules: VersionRules | None, compute_capability: tuple[int, int] | None) -> int:
    """The largest batch vLLM's default capture list may reach on this GPU (before ``max_num_seqs`` bounds it)."""
    blackwell = compute_capability is not None and compute_capability[0] == 10
    return (BLACKWELL_MAX_CAPTURE_SIZE if blackwell and rules is not None and rules.version.at_least(28)
            else CUDAGRAPH_MAX_CAPTURE_SIZE)


def cudagraph_capture_sizes(max_num_seqs: int, rules: VersionRules | None = None,
                            max_num_batched_tokens: int | None = None,
                            ceiling: int = CUDAGRAPH_MAX_CAPTURE_SIZE) -> tuple[int, ...]:
    """vLLM's default capture sizes for the version (``VersionRules.cudagraph_capture_rule``); ``ceiling``:
    ``max_capture_size`` of the GPU."""
    rule = rules.cudagraph_capture_rule if rules else "v1_twice_max_num_seqs"
    return _capture_sizes(max_num_seqs, rule, max_num_batched_tokens, ceiling)


# NOTE: every estimate asks for them, few (max_num_seqs, max_num_batched_tokens) pairs occur, and a tuple is immutable.
@lru_cache(maxsize=1024)
def _capture_sizes(max_num_seqs: int, rule: CudagraphCaptureRule, max_num_batched_tokens: int | None,
                   ceiling: int = CUDAGRAPH_MAX_CAPTURE_SIZE) -> tuple[int, ...]:
    if rule == "v0":
        # NOTE: V0 pads max_num_seqs up to the next capture size and captures every size up to it (max 256).
        aligned = [1, 2, 4, *range(8, V0_MAX_CAPTURE_SIZE + 1, 8)]
        largest = next((size for size in aligned if size >= max_num_seqs), V0_MAX_CAPTURE_SIZE)
        sizes = [size for size in aligned if size <= largest]
    elif rule == "v1_fixed_512":
        sizes = [1, 2, 4, *range(8, CUDAGRAPH_MAX_CAPTURE_SIZE + 1, 8)]
    else:
        largest = min(max_num_seqs * 2, ceiling)
        sizes = [size for size in (1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)) if size <= largest]
    if max_num_batched_tokens is not None and rule != "v0":
        sizes = [size for size in sizes if size <= max_num_batched_tokens] or [1]
    return tuple(sizes)


def sampler_logits_copies(rules: VersionRules | None) -> float:
    """How many fp32 logits copies the sampler warm-up holds at its peak in this version."""
    return ERA_CONSTANTS[rules.overhead_era if rules else "v1"].sampler_logits_copies


def _dense_intermediate_per_rank(spec: ModelSpec, tensor_parallel_size: int) -> float:
    """The dense (or shared-expert) MLP's width on one rank; routed experts: ``moe_workspace``."""
    if spec.moe is None:
        return spec.intermediate_size / tensor_parallel_size
    return spec.moe.shared_expert_intermediate_size / tensor_parallel_size


def forward_activation_bytes(spec: ModelSpec, *, max_num_batched_tokens: int, activation_dtype_bytes: int,
                             tensor_parallel_size: int, data_parallel_size: int = 1,
                             enable_expert_parallel: bool = False, rules: VersionRules | None = None) -> int:
    """Peak of the dummy forward pass over ``max_num_batched_tokens`` tokens (attention skipped): the hidden-size
    and dense-MLP tensors, and in an MoE model the fused-MoE workspace (``moe_workspace_bytes``) and, with DP, the
    gathered hidden states of the other ranks' tokens."""
    dense = _dense_intermediate_per_rank(spec, tensor_parallel_size)
    gathered = moe_token_factor(spec, data_parallel_size=data_parallel_size)
    per_token = (FORWARD_HIDDEN_TENSORS * spec.hidden_size + FORWARD_INTERMEDIATE_TENSORS * dense
                 + (gathered * spec.hidden_size if gathered > 1 else 0))
    return int(max_num_batched_tokens * per_token * activation_dtype_bytes) + moe_workspace_bytes(
        spec, max_num_batched_tokens=max_num_batched_tokens, activation_dtype_bytes=activation_dtype_bytes,
        tensor_parallel_size=tensor_parallel_size, data_parallel_size=data_parallel_size,
        enable_expert_parallel=enable_expert_parallel, rules=rules)


def sampler_activation_bytes(spec: ModelSpec, *, max_num_seqs: int, max_num_batched_tokens: int,
                             rules: VersionRules | None = None, flashinfer: bool = False,
                             activation_dtype_bytes: int = 2) -> int:
    """Peak of the sampler warm-up: a few fp32 copies of [min(seqs, tokens), vocab] logits (torch's path, fitted), or
    FlashInfer's top-k/top-p path (``flashinfer_sampler_bytes``, read in the source) where vLLM takes it."""
    rows = min(max_num_seqs, max_num_batched_tokens)
    if flashinfer:
        return flashinfer_sampler_bytes(spec, rows=rows, max_num_batched_tokens=max_num_batched_tokens,
                                        activation_dtype_bytes=activation_dtype_bytes)
    return int(sampler_logits_copies(rules) * rows * spec.vocab_size * LOGITS_BYTES_PER_ELEMENT)


def flashinfer_sampler_bytes(spec: ModelSpec, *, rows: int, max_num_batched_tokens: int,
                             activation_dtype_bytes: int) -> int:
    """The tensors alive at the peak of ``_dummy_sampler_run`` on FlashInfer's path (vLLM 0.10-0.11.0):

    * the dummy forward's hidden states, [max_num_batched_tokens, hidden] in the model's dtype (still referenced by
      ``profile_run`` while the sampler runs);
    * the lm_head's logits, [rows, vocab] in the model's dtype, and ``Sampler.forward``'s ``logits.to(float32)``;
    * ``flashinfer.sampling.top_k_top_p_sampling_from_logits`` (``filter_apply_order="top_k_first"``): the fp32
      ``top_k_mask_logits`` output and ``torch.softmax`` of it; ``top_p_sampling_from_probs`` returns [rows] int32.

    No sort, hence ~3.5 fp32 copies where torch's ``apply_top_k_top_p`` (sort values + int64 indices + the sort's
    buffers, the masks, the scatter, softmax and the exponential noise) leaves 9.7. Mistral-Small-3.2 at 1,024 seqs x
    131,072 vocab, 8,192 tokens x 5,120 hidden, bf16: 1,962,934,272 bytes (1.83 GiB; vLLM 0.11.0's image printed 2.12).
    """
    fp32_copies = 3 if activation_dtype_bytes != LOGITS_BYTES_PER_ELEMENT else 2  # .to(float32) is a no-op in fp32
    logits = rows * spec.vocab_size * (activation_dtype_bytes + fp32_copies * LOGITS_BYTES_PER_ELEMENT)
    return logits + max_num_batched_tokens * spec.hidden_size * activation_dtype_bytes


def activation_peak_bytes(spec: ModelSpec, *, max_num_batched_tokens: int, max_num_seqs: int,
                          activation_dtype_bytes: int, tensor_parallel_size: int, is_last_stage: bool,
                          rules: VersionRules | None = None, data_parallel_size: int = 1,
                          enable_expert_parallel: bool = False, drafter_forward_bytes: int = 0,
                          flashinfer_sampler: bool = False) -> int:
    """The profiled peak: the forward pass (then the drafter's, ``drafter_forward_bytes``) and the sampler run one
    after the other, so the larger one counts, on top of the multimodal encoder's dummy outputs, which stay cached
    through all of them (``encoder_profile``), and of the fused-MoE workspace where vLLM keeps it
    (``kept_moe_workspace_bytes``)."""
    encoder_cache = profiled_encoder_cache_bytes(spec, max_num_batched_tokens=max_num_batched_tokens,
                                                 max_num_seqs=max_num_seqs,
                                                 activation_dtype_bytes=activation_dtype_bytes, rules=rules)
    parallel = {"tensor_parallel_size": tensor_parallel_size, "data_parallel_size": data_parallel_size,
                "enable_expert_parallel": enable_expert_parallel}
    kept = kept_moe_workspace_bytes(spec, max_num_batched_tokens=max_num_batched_tokens,
                                    activation_dtype_bytes=activation_dtype_bytes, rules=rules, **parallel)
    forward = encoder_cache + max(drafter_forward_bytes, forward_activation_bytes(
        spec, max_num_batched_tokens=max_num_batched_tokens, activation_dtype_bytes=activation_dtype_bytes,
        rules=rules, **parallel) - kept)
    if not is_last_stage:
        return kept + forward
    return kept + max(forward, encoder_cache + sampler_activation_bytes(spec, max_num_seqs=max_num_seqs,
                                                                        max_num_batched_tokens=max_num_batched_tokens,
                                                                        rules=rules, flashinfer=flashinfer_sampler,
                                                                        activation_dtype_bytes=activation_dtype_bytes))


def non_torch_bytes(*, tensor_parallel_size: int, pipeline_parallel_size: int, device: Device,
                    rules: VersionRules | None = None, unified_memory: bool = False,
                    interconnect: Interconnect = UNKNOWN_INTERCONNECT, nvls: bool = True) -> int:
    """Non-torch growth during profiling: cuBLAS workspaces, plus NCCL buffers that depend on the link
    (``interconnect.nccl_buffer_bytes``: NVLS on Hopper+ NVSwitch systems, P2P/SHM buffers elsewhere).

    On an integrated GPU also the host's growth. The persistent memory 0.27+'s free-memory drop counts is
    ``free_drop_persistent_bytes`` (it depends on --enforce-eager and max_num_seqs).
    """
    if device == "cpu":
        return 0
    era = ERA_CONSTANTS[rules.overhead_era if rules else "v1"]
    total = (era.non_torch_tp1_bytes + era.held_after_profile_bytes
             + (ROCM_EXTRA_NON_TORCH_BYTES if device == "rocm" else 0)
             + (UMA_HOST_GROWTH_BYTES if unified_memory else 0))
    if not distributed_setup_before_snapshot(rules):
        total += distributed_setup_bytes(tensor_parallel_size=tensor_parallel_size,
                                         pipeline_parallel_size=pipeline_parallel_size, device=device,
                                         interconnect=interconnect, rules=rules)
    total += nccl_buffer_bytes(interconnect=interconnect, nvls=nvls, tensor_parallel_size=tensor_parallel_size,
                               first_peer_nvls_bytes=era.nccl_first_peer_bytes,
                               extra_peer_nvls_bytes=era.nccl_extra_peer_bytes)
    if pipeline_parallel_size > 1:
        total += era.pipeline_p2p_bytes
    return total


def cuda_context_bytes(*, tensor_parallel_size: int, pipeline_parallel_size: int, device: Device,
                       unified_memory: bool = False, interconnect: Interconnect = UNKNOWN_INTERCONNECT,
                       compute_capability: tuple[int, int] | None = None, rules: VersionRules | None = None) -> int:
    """Memory taken before vLLM's snapshot; it must fit in the (1 - utilization) slack.

    On an integrated GPU that is the host's own use too (the OS, vLLM's processes), since free = MemAvailable.
    With TP, the communicators and, where vLLM enables them, the custom and symmetric-memory all-reduce buffers.
    """
    if device == "cpu":
        return 0
    base = UMA_HOST_BASELINE_BYTES if unified_memory else CUDA_CONTEXT_BYTES
    if not distributed_setup_before_snapshot(rules):
        return base
    return base + distributed_setup_bytes(tensor_parallel_size=tensor_parallel_size,
                                          pipeline_parallel_size=pipeline_parallel_size, device=device,
                                          interconnect=interconnect, compute_capability=compute_capability,
                                          rules=rules)


def distributed_setup_before_snapshot(rules: VersionRules | None) -> bool:
    """Whether the communicators and all-reduce buffers exist before vLLM's free-memory snapshot.

    NOTE: up to 0.6.3 ``Worker.init_device`` reads ``init_gpu_memory`` and only then calls
    ``init_worker_distributed_environment`` (vllm/worker/worker.py, 0.6.3), so at TP/PP > 1 the communicators and
    the custom all-reduce buffers are made after the snapshot and count against the budget; later versions take
    the baseline after them.
    """
    return rules is None or rules.overhead_era != "v0_used_memory"


def distributed_setup_bytes(*, tensor_parallel_size: int, pipeline_parallel_size: int, device: Device,
                            interconnect: Interconnect = UNKNOWN_INTERCONNECT,
                            compute_capability: tuple[int, int] | None = None,
                            rules: VersionRules | None = None) -> int:
    """What ``init_worker_distributed_environment`` allocates: the communicators (TP/PP > 1) and, where vLLM enables
    them, the custom and symmetric-memory all-reduce buffers."""
    distributed = tensor_parallel_size > 1 or pipeline_parallel_size > 1
    return ((DISTRIBUTED_CONTEXT_BYTES if distributed else 0)
            + all_reduce_buffer_bytes(interconnect, tensor_parallel_size, device,
                                      compute_capability=compute_capability,
                                      version=rules.version if rules else None))


def cudagraph_bytes(spec: ModelSpec, *, layers_on_rank: int, max_num_seqs: int, enforce_eager: bool,
                    rules: VersionRules, device: Device, max_num_batched_tokens: int | None = None,
                    capture_sizes: tuple[int, ...] | None = None,
                    ceiling: int = CUDAGRAPH_MAX_CAPTURE_SIZE) -> int:
    """CUDA-graph pool: per captured size and layer, buffers that scale with the hidden size.

    NOTE: the hidden size, not its TP shard: the residual stream between the pieces is whole on every rank.
    """
    if enforce_eager or device == "cpu":
        return 0
    sizes = cudagraph_capture_sizes(max_num_seqs, rules, max_num_batched_tokens, ceiling)
    if capture_sizes:  # --cudagraph-capture-sizes: V1 drops sizes above max_num_batched_tokens
        sizes = tuple(size for size in set(capture_sizes)
                      if max_num_batched_tokens is None or size <= max_num_batched_tokens) or (1,)
    per_hidden = ERA_CONSTANTS[rules.overhead_era].cudagraph_bytes_per_hidden
    return int(len(sizes) * layers_on_rank * spec.hidden_size * per_hidden)
