"""What data and expert parallelism cost one GPU beyond the experts it holds (those are ``placement.py``'s).

Read from vLLM 0.32's source (the CPU build's site-packages):

* ``model_executor/layers/fused_moe/layer.py`` / ``config.py`` ``FusedMoEParallelConfig``: with
  ``--data-parallel-size`` > 1 every MoE layer works on the tokens of all DP ranks: without expert parallelism the
  experts are tensor-parallel over tp x dp GPUs and the layer all-gathers its input across the DP group ("naive"
  dispatch); with ``--enable-expert-parallel`` ``use_all2all_kernels`` is ``use_ep and dp_size > 1`` and the
  configured all-to-all backend dispatches them. The default backend, ``allgather_reducescatter``
  (``config/parallel.py``: ``all2all_backend``), does the same all-gather
  (``AgRsAll2AllManager.dispatch_router_logits``) and a reduce-scatter back. So the profiled forward pass runs the
  MoE part on dp times the tokens.
* With expert parallelism a rank holds whole experts (``ep_size = tp x dp``, ``tp_size = 1`` inside the MoE): the
  fused-MoE workspace per routed token is the expert's full intermediate width, not its tp-th.
* ``distributed/device_communicators/all2all.py`` and ``fused_moe/all2all_utils.py``: the buffers each backend
  keeps on a rank (GPU memory made at the first dispatch inside the profiling run, so vLLM counts it as non-torch
  memory); the formulas are ``all2all_buffer_bytes``'s, each with its source.
"""

from __future__ import annotations

from typing import Literal

from ..gpus import GpuSpec
from ..model.spec import ModelSpec, QuantizationSpec
from ..units import GIB, MIB, round_up
from .vllm_versions import VllmVersion

All2AllBackend = Literal[
    "allgather_reducescatter", "naive", "pplx", "deepep_high_throughput", "deepep_low_latency", "deepep_v2",
    "mori_high_throughput", "mori_low_latency", "moonep", "nixl_ep", "flashinfer_all2allv",
    "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided", "passthrough",
]
DEFAULT_ALL2ALL_BACKEND: All2AllBackend = "allgather_reducescatter"


def default_all2all_backend(version: VllmVersion) -> All2AllBackend:
    """What vLLM dispatches with when neither ``--all2all-backend`` nor ``VLLM_ALL2ALL_BACKEND`` is given: envs.py's
    ``VLLM_ALL2ALL_BACKEND`` default is "naive" in the 0.9.2, 0.10.1 and 0.10.2 wheels and "allgather_reducescatter"
    in 0.11.0's; ``ParallelConfig.all2all_backend`` defaults to "allgather_reducescatter" in the 0.28-0.32 builds and
    the 0.34.0 wheel."""
    return DEFAULT_ALL2ALL_BACKEND if version.at_least(11) else "naive"


DEEPEP_BUFFER_BYTES = 1024 * MIB  # envs.VLLM_DEEPEP_BUFFER_SIZE_MB
MOONEP_PREFETCH_SLOTS = 4  # prepare_finalize/moonep.py MOONEP_DEFAULT_NUM_PREFETCH_SLOTS (0.32, 0.34)
# vLLM 0.32 config/vllm.py ``VllmConfig.__post_init__`` (the same in 0.34.0), for --all2all-backend moonep whatever
# the parallelism: the refusals, and the CUDA graphs it turns off where the all-to-all kernels run.
MOONEP_QUANTIZED_ERROR = ("The moonep all2all backend currently supports unquantized BF16 models only; got "
                          "quantization={quantization!r}. Use a different --all2all-backend for quantized models.")
MOONEP_DTYPE_ERROR = ("The moonep all2all backend currently supports BF16 models only; got dtype=torch.{dtype}. Use "
                      "a different --all2all-backend or --dtype bfloat16.")
MOONEP_EAGER_NOTE = "MoonEP: Disabling CUDA Graphs since the MoonEP integration is currently eager-only."


def moonep_config_error(backend: str | None, *, quantization: str | None, dtype: str) -> str | None:
    """vLLM's error when MoonEP is asked for a model it does not serve (quantized, or not bfloat16); else None."""
    if backend != "moonep":
        return None
    if quantization is not None:
        return MOONEP_QUANTIZED_ERROR.format(quantization=quantization)
    return MOONEP_DTYPE_ERROR.format(dtype=dtype) if dtype != "bfloat16" else None


def moonep_runs_eager(backend: str | None, spec: ModelSpec, *, data_parallel_size: int,
                      enable_expert_parallel: bool) -> bool:
    """Whether MoonEP sets ``cudagraph_mode`` to NONE: where its dispatch runs (``parallel_config.use_all2all``)."""
    return backend == "moonep" and uses_all2all(spec, data_parallel_size=data_parallel_size,
                                                enable_expert_parallel=enable_expert_parallel)


# NOTE: MoRI (ROCm/mori src/shmem/init.cpp MemoryStatesInit) allocates one static symmetric heap at shmem init and
# carves every dispatch/combine buffer out of it, so the heap, not the model, is what a rank holds; its size is
# MORI_SHMEM_HEAP_SIZE, unset by vLLM except under --moe-backend aiter_mega_moe (8G, 16G with fused shared experts).
MORI_SHMEM_HEAP_BYTES = 2 * GIB  # ROCm/mori src/shmem/internal.hpp DEFAULT_SYMMETRIC_HEAP_SIZE
MORI_BACKENDS = frozenset({"mori_high_throughput", "mori_low_latency"})


def all2all_pre_snapshot_bytes(backend: All2AllBackend | None, spec: ModelSpec, *, data_parallel_size: int,
                               enable_expert_parallel: bool) -> int:
    """What the backend allocates before vLLM's first memory snapshot (outside the budget, like NCCL's
    communicators): vLLM 0.28-0.32 ``MoriAll2AllManager.__init__`` (all2all.py) runs
    ``mori.shmem.shmem_torch_process_group_init`` while the device communicator is built in
    ``init_worker_distributed_environment``, which ``gpu_worker.py`` ``init_device`` calls before its snapshot."""
    if backend in MORI_BACKENDS and uses_all2all(spec, data_parallel_size=data_parallel_size,
                                                 enable_expert_parallel=enable_expert_parallel):
        return MORI_SHMEM_HEAP_BYTES
    return 0


def deepep_low_latency_rdma_bytes(max_dispatch_tokens_per_rank: int, hidden: int, num_experts: int) -> int:
    """DeepEP's ``get_low_latency_rdma_size_hint`` (csrc/config.hpp ``LowLatencyLayout``, DeepEP 73b6ea4 as
    vLLM 0.32's tools/ep_kernels/install_python_libraries.sh pins it): odd/even send, receive and signaling
    buffers; a dispatch message is an int4 header plus the bf16 token (or FP8 + scales, never larger), a combine
    message the bf16 token plus per-128-channel bf16x2 min/max; rounded up past a 128-byte boundary. The number of
    ranks does not enter it."""
    num_scales = hidden // 128
    dispatch_msg = 16 + max(hidden * 2, hidden + num_scales * 4)
    combine_msg = num_scales * 4 + hidden * 2
    send = max(max_dispatch_tokens_per_rank * dispatch_msg, num_experts * max_dispatch_tokens_per_rank * combine_msg)
    recv = num_experts * max_dispatch_tokens_per_rank * max(dispatch_msg, combine_msg)
    signaling = -(-num_experts * 4 // 128) * 128
    total = 2 * (send + recv + signaling)
    return (total + 128) // 128 * 128  # NUM_BUFFER_ALIGNMENT_BYTES (kernels/configs.cuh)


# DeepEP v2 (deepseek-ai/DeepEP main dd758ca, 2026-07-14; the same layouts as its epv2-release branch 018f21e, which
# did not yet round the buffer to 2 MiB): csrc/elastic/buffer.hpp, deep_ep/include/deep_ep/common/layout.cuh.
# NOTE: FlashInfer's MnnvlMemory and MoonEP round each cuMemCreate allocation up to
# cuMemGetAllocationGranularity(RECOMMENDED) for pinned device memory, 2 MiB on the NVIDIA data-centre GPUs these
# backends run on; MoonEP pads its multicast-bound chunk to cuMulticastGetGranularity(RECOMMENDED) as well, which
# NCCL's documentation shows as 2 MiB for an 8-GPU NVLS group ("ucgran 2097152 ... mcgran 2097152" in its NVLS log
# example; NCCL asks for the same RECOMMENDED value). Neither is measured here: no GPU at hand.
VMM_GRANULARITY = 2 * MIB
MULTICAST_GRANULARITY = 2 * MIB
DEEPEP_V2_ALIGNMENT_BYTES = 2 * MIB  # csrc/kernels/backend/symmetric.hpp kNumAlignmentBytes
DEEPEP_V2_MAX_CHANNELS = 8 * 160  # ElasticBuffer::kNumMaxChannels = kNumMaxChannelsPerSM x kNumMaxSMs
_DEEPEP_V2_TMA_ALIGN = 32  # ptx.cuh kNumTMAAlignBytes
DEFAULT_GPUS_PER_NODE: int = GpuSpec.model_fields["gpus_per_node"].default  # a GPU the catalog does not hold


def _deepep_v2_workspace_bytes() -> int:
    """``WorkspaceLayout::get_num_bytes`` (fixed limits: 1,024 ranks, 2,048 experts, 1,024 channels, 32 in-flight
    AGRS), aligned to 2 MiB as the ``ElasticBuffer`` constructor puts it in front of the buffer."""
    ranks, experts, channels = 1024, 2048, 1024
    num_bytes = (16 + (ranks + experts) * 8 + ranks * 8 * 2 + experts * 8 * 2 + ranks * 4 + ranks * 4 * 2
                 + experts * 4 * 2 + ranks * channels * 8 + ranks * channels * 4 + 2 * 2 * 8 + 33 * ranks * 4)
    return round_up(num_bytes, DEEPEP_V2_ALIGNMENT_BYTES)


def _deepep_v2_token_bytes(hidden_bytes: int, sf_bytes: int, num_topk: int, with_metadata: bool) -> int:
    """``TokenLayout::get_num_bytes<false>``: hidden, scale factors and metadata (top-k ids and weights, plus the
    source index and a slot per top-k when ``with_metadata``), each rounded up to 32 bytes."""
    metadata = num_topk * 8 + ((1 + num_topk) * 4 if with_metadata else 0)
    return sum(round_up(part, _DEEPEP_V2_TMA_ALIGN) for part in (hidden_bytes, sf_bytes, metadata))


def deepep_v2_buffer_bytes(num_max_tokens_per_rank: int, hidden: int, num_topk: int, *, use_fp8_dispatch: bool,
                           num_scaleout_ranks: int, num_scaleup_ranks: int) -> int:
    """The GPU memory of one rank's DeepEP v2 ``ElasticBuffer`` (NCCL symmetric memory, outside torch's allocator):
    ``ElasticBuffer::calculate_buffer_size`` (the larger of the dispatch and combine layouts, aligned to 2 MiB) plus
    the 2 MiB-aligned workspace, with what vLLM 0.32's ``DeepEPV2All2AllManager`` passes: ``allow_hybrid_mode``
    (VLLM_DEEPEP_V2_ALLOW_HYBRID_MODE, on) and no ``allow_multiple_reduction`` (off). With hybrid mode the scale-up
    domain is the NVLink (NCCL LSA) team and the scale-out ranks are the nodes; the scale-up domain is NVLink, so
    the direct layouts keep no send buffer."""
    elem, sf_packs = (1, -(-hidden // 32)) if use_fp8_dispatch else (2, 0)
    dispatch_token = _deepep_v2_token_bytes(hidden * elem, sf_packs * 4, num_topk, with_metadata=True)
    combine_token = _deepep_v2_token_bytes(hidden * 2, 0, num_topk, with_metadata=False)
    tokens, out, up = num_max_tokens_per_rank, num_scaleout_ranks, num_scaleup_ranks
    if out == 1:
        dispatch = dispatch_token * up * tokens  # receive buffer: every peer's tokens
        combine = combine_token * num_topk * tokens  # receive buffer: a slot per top-k (no multiple reduction)
    else:
        dispatch = dispatch_token * (up * out * tokens + tokens + out * (tokens + DEEPEP_V2_MAX_CHANNELS))
        combine = combine_token * num_topk * (out * tokens + tokens + out * (tokens + DEEPEP_V2_MAX_CHANNELS))
    buffer = round_up(max(dispatch, combine), DEEPEP_V2_ALIGNMENT_BYTES)
    return buffer + _deepep_v2_workspace_bytes()


# NOTE: weight-only methods leave the activations in bf16, so the one-sided dispatch moves bf16 tokens.
_WEIGHT_ONLY_METHODS = frozenset({"awq", "awq_marlin", "gptq", "gptq_marlin", "bitsandbytes", "gguf"})


def one_sided_token_bytes(hidden: int, quantization: QuantizationSpec | None) -> int | None:
    """vLLM 0.32 ``fused_moe/all2all_utils.py`` ``flashinfer_one_sided_dispatch_layout``: the bytes of one token
    and its scales in the one-sided dispatch; None where the activation format is not one this planner maps."""
    if quantization is None or quantization.method in _WEIGHT_ONLY_METHODS:
        return hidden * 2
    if quantization.method == "fp8" and quantization.weight_block_size == (128, 128):
        return hidden + hidden // 128 * 4  # DeepSeek blockwise FP8: E4M3 plus a float32 scale per 128
    if quantization.method == "modelopt_fp4":
        return hidden // 2 + hidden // 16  # NVFP4: two values a byte plus a one-byte scale per 16
    return None


_ONE_SIDED_MAX_TOP_K = 22  # moeAlltoAllKernels.h kMaxTopK
_CACHELINE_BYTES = 128  # kCachelineAlignment


def _one_sided_aux_bytes(ep_size: int, max_num_tokens: int) -> int:
    """FlashInfer ``getMoeA2AAuxDataSize`` (``calculateOffsets``' payload offset; vLLM 0.32 and 0.33 pass no EPLB
    statistics, so that region is empty): a flag and a local token counter, send and receive counters per peer,
    dispatch and combine completion flags per peer, and the top-k target ranks and send indices of every token for
    kMaxTopK = 22 slots, all int32, each region from the third on aligned to 128 bytes."""
    offset = round_up(4 + 4 + ep_size * 4 + ep_size * 4, _CACHELINE_BYTES)
    offset = round_up(offset + ep_size * 4, _CACHELINE_BYTES)  # dispatch completion flags
    offset = round_up(offset + ep_size * 4, _CACHELINE_BYTES)  # combine completion flags
    for _ in ("target ranks", "send indices"):
        offset = round_up(offset + max_num_tokens * _ONE_SIDED_MAX_TOP_K * 4, _CACHELINE_BYTES)
    return offset


# FlashInfer 0.7.4 data/csrc/nv_internal/tensorrt_llm/thop/moe/communication/moeAlltoAllMeta.h and
# kernels/moe/communication/moeAlltoAllKernels.h: the fence layout's payload regions start on 256 bytes, and the
# dispatch region keeps one alignment's slack for each of up to 4 payloads (activations, scales, ids, weights).
_ONE_SIDED_WORKSPACE_ALIGNMENT = 256  # kWorkspaceAlignment
_ONE_SIDED_MAX_PAYLOADS = 4  # kMaxPayloads


def _one_sided_fence_layout_bytes(ep_size: int, max_num_tokens: int, hidden: int, top_k: int,
                                  token_bytes: int) -> int:
    """FlashInfer 0.7.4 ``data/csrc/nvlink_one_sided_alltoall.cu`` ``calculateWorkspaceLayout`` (the
    ``WORKSPACE_SIZE_INDEX`` it returns) for what ``moe_ep``'s ``NVLinkOneSidedAlltoAll.__init__`` passes with CFT
    and the Lamport transport off and no EPLB statistics: a flag, a local token counter, send and two rounds of
    receive counters per peer (int32, 4-byte aligned); dispatch completion flags per peer, then the top-k target
    ranks and target indices of every token for the model's top-k (no longer kMaxTopK), each from a 128-byte
    boundary; the dispatch payload (ep x tokens x (token + 8 x top-k) + 4 x 256 B of slack) and, after 128-aligned
    combine completion flags, the bf16 combine input (ep x tokens x hidden x 2), each rounded up to and starting
    on 256 bytes."""
    offset = 4 + 4 + ep_size * 4 + 2 * ep_size * 4  # flag, token counter, send counters, receive counters
    offset = round_up(offset, _CACHELINE_BYTES) + ep_size * 4  # dispatch completion flags
    for _ in ("target ranks", "target indices"):
        offset = round_up(offset, _CACHELINE_BYTES) + max_num_tokens * top_k * 4
    offset = round_up(offset, _CACHELINE_BYTES)  # the EPLB statistics region, empty
    dispatch = ep_size * max_num_tokens * (token_bytes + 2 * top_k * 4)
    dispatch += _ONE_SIDED_MAX_PAYLOADS * _ONE_SIDED_WORKSPACE_ALIGNMENT
    offset = (round_up(offset, _ONE_SIDED_WORKSPACE_ALIGNMENT)
              + round_up(dispatch, _ONE_SIDED_WORKSPACE_ALIGNMENT))
    offset = round_up(offset, _CACHELINE_BYTES) + ep_size * 4  # combine completion flags
    return (round_up(offset, _ONE_SIDED_WORKSPACE_ALIGNMENT)
            + round_up(ep_size * max_num_tokens * hidden * 2, _ONE_SIDED_WORKSPACE_ALIGNMENT))


def flashinfer_one_sided_workspace_bytes(ep_size: int, max_num_tokens: int, hidden: int, top_k: int,
                                         token_bytes: int, *, version: VllmVersion) -> int:
    """The MNNVL workspace of FlashInfer's one-sided all-to-all on one rank, one ``MnnvlMemory`` rounded up to the
    allocation granularity (``MnnvlMemory.open_mnnvl_memory``, the same in FlashInfer 0.6.18, 0.7.2.post1 and
    0.7.4). ``token_bytes`` is the token and its scales as dispatched, the same bytes in vLLM 0.32's
    ``flashinfer_one_sided_dispatch_layout`` and FlashInfer 0.7's ``_DISPATCH_BYTES_PER_TOKEN`` for the formats
    ``one_sided_token_bytes`` maps.

    * vLLM 0.32 ``FlashInferNVLinkOneSidedManager.initialize`` asks ``moe_a2a_get_workspace_size_per_rank``
      (flashinfer/comm/trtllm_moe_alltoall.py) for it and hands it to ``MoeAlltoAll``: the auxiliary region, a
      dispatch payload of the token and its scales, int32 top-k ids and float32 top-k weights, and a bf16 combine
      payload, each for ``ep_size x max_num_tokens`` tokens padded to 128 bytes. Read in FlashInfer's 0.6.18 tree
      (csrc/trtllm_moe_alltoall.cu ``calculateOffsets``).
    * vLLM 0.33 builds ``flashinfer.moe_ep.NVLinkOneSidedAlltoAll`` instead; the FlashInfer it pins (0.7.2.post1,
      requirements of the 0.33.0 wheel) still sizes it with ``moe_a2a_get_workspace_size_per_rank`` (same
      payloads, a combine row of hidden x 2 for bf16) and allocates it through ``MoeAlltoAll``, whose
      data/csrc/trtllm_moe_alltoall.cu ``calculateOffsets`` is 0.6.18's: the same bytes as 0.32.
    * vLLM 0.34 passes ``cft=False, lamport=False`` (all2all.py), so the workspace is the fence layout alone
      (``_one_sided_fence_layout_bytes``), with no Lamport regions and no SM count or kernel probe in its size.
      vLLM 0.34 pins FlashInfer 0.7.3, which the registry does not serve; the layout is read in 0.7.4."""
    if version.at_least(34):
        workspace = _one_sided_fence_layout_bytes(ep_size, max_num_tokens, hidden, top_k, token_bytes)
    else:
        dispatch = token_bytes + top_k * 4 + top_k * 4
        workspace = (_one_sided_aux_bytes(ep_size, max_num_tokens)
                     + round_up(ep_size * max_num_tokens * dispatch, _CACHELINE_BYTES)
                     + round_up(ep_size * max_num_tokens * hidden * 2, _CACHELINE_BYTES))
    return round_up(workspace, VMM_GRANULARITY)


MOONEP_TOKEN_PADDING = 128  # prepare_finalize/moonep.py MOONEP_DEFAULT_TOKEN_PADDING (0.32, 0.34)
MOONEP_MIN_DISPATCH_TOKENS = 128  # prepare_finalize/moonep.py, the pool's smallest buffer
_MOONEP_PLANNING_BLOCK = 2048  # api.py BLOCK_SIZE_P2


def moonep_buffer_bytes(tokens_per_rank: int, hidden: int, top_k: int, num_experts: int, ep_size: int) -> int:
    """One ``moonep.Buffer`` on one rank, summed the way MoonEP's own ``_log_context_buffer_size`` logs its
    total: the rank's bf16 hidden chunk and int32 metadata chunk of the NVLink-shared buffers (cuMemCreate memory,
    outside torch's allocator) and the local scratch tensors. MoonEP (MoonshotAI) api.py ``_create_context`` and
    buffer.py ``pad_dim0_for_alignment``, read in the feliang-git/MoonEP (931911d) and zhumakhan/MoonEP (4818969)
    mirrors, which agree; the arguments are vLLM 0.32's and 0.34's ``MoonEPAll2AllManager._make_buffer_kwargs``
    (S = tokens per DP rank, B = 4 prefetch slots, token padding 128)."""
    S, H, K, E, R, B = tokens_per_rank, hidden, top_k, num_experts, ep_size, MOONEP_PREFETCH_SLOTS
    N = S * K
    # NOTE: every non-empty expert segment (E / R local and E / R remote at most) is padded to 128 token slots
    nvs = N + (MOONEP_TOKEN_PADDING - 1) * 2 * (E // R)
    row = H * 2
    rows = round_up(nvs * row, VMM_GRANULARITY) // row
    while rows * row % VMM_GRANULARITY:
        rows += 1
    planning_out = 3 * E * R + 3 * R * (E + B) + B * R + 2 * R
    plan_off = round_up(round_up(nvs, 4) + R * E, 4)
    # weights | tokens-per-expert gather | planning outputs | three N-slot scratches | 3 barrier slots | src info
    meta_elems = round_up(plan_off + planning_out, 4) + 3 * round_up(N, 4) + 3 + nvs
    meta = round_up(meta_elems * 4, max(VMM_GRANULARITY, MULTICAST_GRANULARITY))
    local = 4 * (E * R + R + R * R + E * -(-N // _MOONEP_PLANNING_BLOCK) + 1 + 2 * R * S + R * S * K + 1)
    return rows * row + meta + local


def moonep_pool_capacities(tokens_per_rank: int) -> list[int]:
    """``MoonEPBufferPool.capacity_for`` over every step size: a power of two from 128 up, capped at the tokens
    per rank (the profiling run's full batch makes the largest)."""
    capacities, capacity = [], MOONEP_MIN_DISPATCH_TOKENS
    while capacity < tokens_per_rank:
        capacities.append(capacity)
        capacity *= 2
    return [*capacities, tokens_per_rank]


TWO_SIDED_BACKENDS = frozenset({"flashinfer_nvlink_two_sided", "flashinfer_all2allv"})  # the old name
_TWO_SIDED_FIFO_BYTES = 8 * 256 * 1024  # RECV_FIFO_DEPTH x RECV_FIFO_ENTRY_BYTES
_TWO_SIDED_PREPARE_FIFO_BYTES = 1024 * 1024  # moe_prepare FIFO_SIZE_IN_U64 x 8
_FIFO_CONN_INFO_BYTES = 256  # sizeof(MoeCommFifoConnInfo): two or three uint64 counters, alignas(256)
_GROUPS_PER_BLOCK = 8  # AllToAllChannelCommunicatorBase::GROUP_COUNT_PER_BLOCK


def flashinfer_two_sided_workspace_bytes(ep_size: int, sm_count: int) -> int:
    """The two MNNVL allocations FlashInfer's two-sided all-to-all keeps on each rank, shared by every MoE layer of
    the process: vLLM 0.32 makes them at the first dispatch (in the profiling run), vLLM 0.34 when the layers'
    ``FlashInferNVLinkTwoSidedPrepareAndFinalize`` is built at model load; both after the start-up snapshot and
    outside torch's allocator (cuMemCreate), so vLLM counts them as non-torch memory.

    vLLM 0.32 ``FlashInferNVLinkTwoSidedManager.initialize`` (all2all.py) calls ``MnnvlMoe.get_moe_workspaces`` and
    ``get_moe_prepare_workspace`` with ``Mapping(tp_size=ep world size)``; vLLM 0.34 ``get_communication`` builds
    ``flashinfer.moe_ep.NVLinkTwoSidedAlltoAll``, whose ``_acquire_workspaces`` (one pair per process) makes the same
    two ``MnnvlMemory`` allocations. Sizes from FlashInfer 0.7.4 (vLLM 0.34 pins 0.7.3, not downloadable here)
    ``data/csrc/nvlink_two_sided_alltoall.cuh`` ``getMoeCommWorkspaceSize`` and ``nvlink_two_sided_prepare.cu``
    ``getMoePrepareWorkspaceSize``, the same constants as the 0.6.18 tree's ``include/flashinfer/comm/
    trtllm_alltoall.cuh`` / ``csrc/trtllm_alltoall_prepare.cu`` that vLLM 0.32's ``flashinfer.comm.trtllm_alltoall``
    imports:

    * comm: (8 x 256 KiB FIFO + 256 B connection info) x ep x channels, with ``computeMoeCommChannelCount``'s
      channels = max(SMs / 2 / (2 x ceil(ep / 8)), 1) (half the SMs, a send and a receive block per 8 peers);
    * prepare: (1 MiB FIFO + 256 B) x ep;

    each rounded up by ``MnnvlMemory.open_mnnvl_memory`` to the allocation granularity. A rank creates only its own
    segment; the peers' are mapped, not allocated again."""
    blocks_per_channel = 2 * -(-ep_size // _GROUPS_PER_BLOCK)
    channels = max(sm_count // 2 // blocks_per_channel, 1)
    comm = (_TWO_SIDED_FIFO_BYTES + _FIFO_CONN_INFO_BYTES) * ep_size * channels
    prepare = (_TWO_SIDED_PREPARE_FIFO_BYTES + _FIFO_CONN_INFO_BYTES) * ep_size
    return round_up(comm, VMM_GRANULARITY) + round_up(prepare, VMM_GRANULARITY)


def _blockwise_fp8(quantization: QuantizationSpec | None) -> bool:
    """vLLM's ``use_fp8_dispatch`` for DeepEP v2: FP8 activations quantized in blocks."""
    return quantization is not None and quantization.method == "fp8" and quantization.weight_block_size is not None


def uses_all2all(spec: ModelSpec, *, data_parallel_size: int, enable_expert_parallel: bool) -> bool:
    """vLLM's ``use_all2all_kernels``: an MoE model with expert parallelism over more than one DP rank."""
    return spec.moe is not None and enable_expert_parallel and data_parallel_size > 1


# NOTE: vLLM 0.20-0.32 engine/arg_utils.py ``_set_default_max_num_seqs_and_batched_tokens_args``: with
# ``parallel_config.use_batched_dp_moe`` (these backends, EP, DP > 1) the default batch budget is
# ``SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP``, which also sizes their buffers.
BATCHED_DP_MOE_BACKENDS = frozenset({"deepep_low_latency", "nixl_ep"})
BATCHED_DP_MOE_BATCHED_TOKENS = 256


MOE_DP_CHUNK_SIZE = 256  # envs.VLLM_MOE_DP_CHUNK_SIZE's default


def moe_max_num_tokens(version: VllmVersion, max_num_batched_tokens: int) -> int:
    """``FusedMoEConfig.max_num_tokens``, the tokens per rank the DeepEP low-latency and NIXL-EP buffers are sized
    for: ``fused_moe/layer.py`` passes the batch budget from 0.20 and ``VLLM_MOE_DP_CHUNK_SIZE`` up to 0.19 (read in
    the 0.18, 0.19, 0.20, 0.21, 0.22 and 0.27 wheels and the 0.28-0.32 CPU builds)."""
    return max_num_batched_tokens if version.at_least(20) else MOE_DP_CHUNK_SIZE


def batched_dp_moe(backend: All2AllBackend | None, *, data_parallel_size: int, enable_expert_parallel: bool) -> bool:
    """vLLM's ``ParallelConfig.use_batched_dp_moe`` (it does not look at the model)."""
    return backend in BATCHED_DP_MOE_BACKENDS and enable_expert_parallel and data_parallel_size > 1


def moe_token_factor(spec: ModelSpec, *, data_parallel_size: int) -> int:
    """How many ranks' tokens each MoE layer works on in the profiled forward pass (dp for an MoE model)."""
    return data_parallel_size if spec.moe is not None else 1


def deepep_v2_domains(ep_size: int, gpus_per_node: int) -> tuple[int, int] | None:
    """(scale-out, scale-up) ranks of DeepEP v2's hybrid mode: the nodes, and the GPUs of one node on NVLink; None
    where the EP group does not fill whole nodes (NCCL's LSA teams would differ in size, which DeepEP asserts
    against)."""
    if ep_size <= gpus_per_node:
        return 1, ep_size
    return (ep_size // gpus_per_node, gpus_per_node) if ep_size % gpus_per_node == 0 else None


def all2all_buffer_bytes(backend: All2AllBackend | None, spec: ModelSpec, *, version: VllmVersion,
                         data_parallel_size: int, enable_expert_parallel: bool, tensor_parallel_size: int,
                         max_num_batched_tokens: int, quantization: QuantizationSpec | None,
                         sm_count: int | None = None, gpus_per_node: int = DEFAULT_GPUS_PER_NODE) -> int:
    """The all-to-all backend's persistent buffers on one rank (non-torch memory, made during profiling); the EP
    group is tp x dp ranks. ``sm_count`` is the GPU's (the FlashInfer two-sided size needs it; 0 without it)."""
    if spec.moe is None or not uses_all2all(spec, data_parallel_size=data_parallel_size,
                                            enable_expert_parallel=enable_expert_parallel):
        return 0
    backend = backend or DEFAULT_ALL2ALL_BACKEND
    if backend == "deepep_high_throughput":
        # DeepEPHTAll2AllManager._make_all2all_kwargs: num_nvl_bytes, and num_rdma_bytes = 0 on one node
        return DEEPEP_BUFFER_BYTES
    if backend == "deepep_low_latency":
        # DeepEPLLAll2AllManager._make_all2all_kwargs: the NVL buffer plus the low-latency RDMA buffer
        return DEEPEP_BUFFER_BYTES + deepep_low_latency_rdma_bytes(
            moe_max_num_tokens(version, max_num_batched_tokens), spec.hidden_size, spec.moe.num_experts)
    if backend == "deepep_v2":
        # all2all_utils.py maybe_make_prepare_finalize: max_num_tokens, the hidden size rounded up to 512 bytes of
        # bf16 (maybe_roundup_layer_hidden_size), top-k, FP8 dispatch for blockwise FP8; one buffer for all layers
        domains = deepep_v2_domains(tensor_parallel_size * data_parallel_size, gpus_per_node)
        if domains is None:
            return 0
        return deepep_v2_buffer_bytes(
            moe_max_num_tokens(version, max_num_batched_tokens), -(-spec.hidden_size // 256) * 256,
            spec.moe.experts_per_token, use_fp8_dispatch=_blockwise_fp8(quantization),
            num_scaleout_ranks=domains[0], num_scaleup_ranks=domains[1])
    if backend == "nixl_ep":
        # NixlEPAll2AllManager._init_buffer: Buffer.get_rdma_size_hint for ep ranks x their local experts (no
        # elastic EP); NIXL's examples/device/ep/csrc/config.hpp EPLayout is DeepEP's LowLatencyLayout verbatim.
        # It keeps no NVL buffer.
        ep_size = tensor_parallel_size * data_parallel_size
        return deepep_low_latency_rdma_bytes(moe_max_num_tokens(version, max_num_batched_tokens), spec.hidden_size,
                                             -(-spec.moe.num_experts // ep_size) * ep_size)
    if backend == "flashinfer_nvlink_one_sided":
        # NOTE: all2all_utils.py hands it the scheduler's max_num_batched_tokens itself, not max_num_tokens
        # NOTE: an activation format not mapped is sized as bf16, the largest payload; all2all_warning says so
        return flashinfer_one_sided_workspace_bytes(
            tensor_parallel_size * data_parallel_size, max_num_batched_tokens, spec.hidden_size,
            spec.moe.experts_per_token, one_sided_token_bytes(spec.hidden_size, quantization) or spec.hidden_size * 2,
            version=version)
    if backend in TWO_SIDED_BACKENDS and sm_count is not None:
        return flashinfer_two_sided_workspace_bytes(tensor_parallel_size * data_parallel_size, sm_count)
    if backend == "moonep":
        # MoonEPAll2AllManager.get_handle: one MoonEPBufferPool for every MoE layer; the profiling run's full batch
        # makes its largest buffer (max_num_tokens per DP rank) before vLLM sizes the KV cache
        ep_size = tensor_parallel_size * data_parallel_size
        if spec.moe.num_experts % ep_size:
            return 0  # vLLM refuses it at load; all2all_warning says so
        return moonep_buffer_bytes(moe_max_num_tokens(version, max_num_batched_tokens), spec.hidden_size,
                                   spec.moe.experts_per_token, spec.moe.num_experts, ep_size)
    return 0


def moonep_later_buffers_warning(backend: All2AllBackend | None, spec: ModelSpec, *, version: VllmVersion,
                                 data_parallel_size: int, enable_expert_parallel: bool, tensor_parallel_size: int,
                                 max_num_batched_tokens: int) -> str | None:
    """The MoonEP pool's smaller buffers (one per power-of-two step size below the batch budget, made lazily by
    the first step of each size, after vLLM has sized the KV cache), which come out of the memory vLLM leaves
    outside its budget; None where MoonEP does not dispatch or none is made."""
    ep_size = tensor_parallel_size * data_parallel_size
    if (backend != "moonep" or spec.moe is None or spec.moe.num_experts % ep_size
            or not uses_all2all(spec, data_parallel_size=data_parallel_size,
                                enable_expert_parallel=enable_expert_parallel)):
        return None
    tokens = moe_max_num_tokens(version, max_num_batched_tokens)
    smaller = moonep_pool_capacities(tokens)[:-1]
    if not smaller:
        return None
    later = sum(moonep_buffer_bytes(capacity, spec.hidden_size, spec.moe.experts_per_token, spec.moe.num_experts,
                                    ep_size) for capacity in smaller)
    return (f"--all2all-backend moonep: MoonEP makes one more buffer for each smaller power-of-two step size "
            f"({smaller[0]} to {smaller[-1]} tokens) the first time a step of that size runs, after vLLM has sized "
            f"the KV cache: up to {later / GIB:.2f} GiB more per GPU, outside the gpu_memory_utilization budget")


def all2all_warning(backend: All2AllBackend | None, spec: ModelSpec, *, data_parallel_size: int,
                    enable_expert_parallel: bool, quantization: QuantizationSpec | None = None,
                    sm_count: int | None = None, tensor_parallel_size: int = 1,
                    gpus_per_node: int = DEFAULT_GPUS_PER_NODE) -> str | None:
    """A sentence where the chosen backend keeps buffers this planner does not size, or is never used."""
    if backend is None:
        return None
    if not uses_all2all(spec, data_parallel_size=data_parallel_size, enable_expert_parallel=enable_expert_parallel):
        return (f"--all2all-backend {backend} is unused here: vLLM dispatches MoE tokens with it only under "
                "--enable-expert-parallel with --data-parallel-size > 1")
    if backend == "flashinfer_nvlink_one_sided" and one_sided_token_bytes(spec.hidden_size, quantization) is None:
        return (f"--all2all-backend {backend}: the dispatch payload of {quantization.method if quantization else ''} "
                "activations is sized as bf16 (the largest)")
    if backend in TWO_SIDED_BACKENDS and sm_count is None:
        return (f"--all2all-backend {backend}: FlashInfer's MNNVL workspace (FIFOs per peer and per channel, the "
                "channels set by the GPU's SM count) is not modelled: this GPU has no SM count in the catalog; the KV "
                "cache may be smaller than shown")
    if backend == "deepep_v2" and deepep_v2_domains(tensor_parallel_size * data_parallel_size, gpus_per_node) is None:
        return (f"--all2all-backend deepep_v2: {tensor_parallel_size * data_parallel_size} EP ranks do not fill whole "
                f"nodes of {gpus_per_node} GPUs, so DeepEP v2's ElasticBuffer (sized by the NVLink team NCCL finds "
                "on each node) is not modelled; the KV cache may be smaller than shown")
    if backend == "moonep" and spec.moe.num_experts % (ep_size := tensor_parallel_size * data_parallel_size):
        # vLLM 0.32 / 0.34 gather_moonep_weight_layout's NotImplementedError (MoonEP asserts E % R == 0 too)
        return ("MoonEP PoC requires num_experts to be evenly divisible across EP ranks: "
                f"{spec.moe.num_experts} experts, {ep_size} ranks")
    return None
