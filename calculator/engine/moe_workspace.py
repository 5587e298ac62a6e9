"""The fused-MoE kernel's buffers in the profiled forward pass: what one MoE layer allocates per routed token.

Read in vLLM's source (``model_executor/layers/fused_moe/``). ``N`` is the gate-and-up projection's width on the rank
(2 x the expert's intermediate width there), ``K`` the hidden size, ``M`` the tokens (``max_num_batched_tokens`` in the
profile run, x dp when the MoE layers gather every DP rank's tokens):

* 0.14+ (read in 0.14.0, 0.20.0, 0.27.1 and the 0.28-0.32 builds): every layer runs ``FusedMoEModularKernel``, whose
  default experts are ``TritonExperts`` (the fallback of every oracle; the unquantized path, block FP8 on Hopper at
  TP, and on sm_120 with ``VLLM_USE_DEEP_GEMM=0``). ``TritonExperts.workspace_shapes`` asks for workspace13
  [M, top_k, max(N / 2, K)] and workspace2 [M, top_k, max(N, K)] (``experts/triton_moe.py`` from 0.27; ``fused_moe.py``
  before), both from the worker's ``WorkspaceManager`` (``v1/worker/workspace.py``) and alive together
  (``get_simultaneous``); the [M, K] output reuses workspace13 (``modular_kernel.py``: "Reuse workspace13 for the
  output"). Since ``max(., K)`` takes the hidden size, the workspace does not shrink with TP: Qwen3-235B-A22B
  (K 4,096, width 1,536, top 8) needs 8 x (4,096 + 4,096) values per token at TP 1 and at TP 4 alike.
* up to 0.13 (read in 0.10.2 ``fused_moe.py`` ``fused_experts_impl``; 0.11-0.13 not read): ``cache13``
  [M, top_k, max(N, K)] shared by the gate-and-up output and the down output, ``intermediate_cache2``
  [M x top_k, N / 2]; the unquantized layer writes its output in place (``layer.py``: ``inplace=True``; the FP8
  method's extra [M, K] output, ``inplace=False`` in ``fp8.py``, is left out).

Other experts (DeepGEMM, CUTLASS, FlashInfer, Marlin) size theirs differently; the Triton shapes stand for them.
"""

from __future__ import annotations

from ..model.spec import ModelSpec
from .expert_parallel import moe_token_factor
from .vllm_versions import VersionRules, VllmVersion

MODULAR_KERNEL_FROM_MINOR = 14  # unquantized_fused_moe_method.py 0.14.0: ``mk.FusedMoEModularKernel(..., TritonExperts)``


def routed_workspace_elements_per_token(*, hidden_size: int, expert_width_per_rank: float, experts_per_token: int,
                                        version: VllmVersion | None = None) -> float:
    """Values (of the activation dtype) the fused-MoE kernel holds per token routed to the rank's MoE layer.

    ``expert_width_per_rank``: one expert's intermediate width on this rank (whole under expert parallelism).
    ``version`` None: the current layout. Qwen3-235B-A22B at TP 4: 8 x (max(384, 4,096) + max(768, 4,096)) = 65,536.
    """
    width, gate_up = expert_width_per_rank, 2 * expert_width_per_rank
    if version is None or version.at_least(MODULAR_KERNEL_FROM_MINOR):
        return experts_per_token * (max(width, hidden_size) + max(gate_up, hidden_size))
    return experts_per_token * (max(gate_up, hidden_size) + width)


def workspace_kept(version: VllmVersion | None) -> bool:
    """Whether the workspace outlives the forward pass: the ``WorkspaceManager`` (``v1/worker/workspace.py``, in 0.14.0
    and every later build read) holds one buffer per micro-batch and only grows it; ``fused_experts_impl`` (0.10.2)
    allocates its caches per call and frees them."""
    return version is None or version.at_least(MODULAR_KERNEL_FROM_MINOR)


# NOTE: with DP the MoE layers work on the tokens of every DP rank, gathered (``expert_parallel.moe_token_factor``),
# through a prepare/finalize and experts (DeepEP, FlashInfer, batched formats) whose buffers were not read here: there
# each routed token keeps three tensors of the expert's width on the rank, the estimate before the workspace was read.
GATHERED_ROUTED_TENSORS = 3


def expert_width_per_rank(spec: ModelSpec, *, tensor_parallel_size: int, data_parallel_size: int = 1,
                          enable_expert_parallel: bool = False) -> float:
    """One routed expert's intermediate width on a rank: split over tp x dp ranks (``FusedMoEParallelConfig``
    flattens TP across DP), whole under expert parallelism."""
    assert spec.moe is not None
    if enable_expert_parallel and tensor_parallel_size * data_parallel_size > 1:
        return float(spec.moe.expert_intermediate_size)
    return spec.moe.expert_intermediate_size / (tensor_parallel_size * data_parallel_size)


def moe_workspace_bytes(spec: ModelSpec, *, max_num_batched_tokens: int, activation_dtype_bytes: int,
                        tensor_parallel_size: int, data_parallel_size: int = 1, enable_expert_parallel: bool = False,
                        rules: VersionRules | None = None) -> int:
    """The fused-MoE kernel's buffers for the profiled batch; 0 for a dense model.

    Qwen3-235B-A22B at TP 4, 8,192 tokens, bf16 activations: 8,192 x 65,536 x 2 bytes = 1 GiB.
    """
    if spec.moe is None:
        return 0
    width = expert_width_per_rank(spec, tensor_parallel_size=tensor_parallel_size,
                                  data_parallel_size=data_parallel_size, enable_expert_parallel=enable_expert_parallel)
    gathered = moe_token_factor(spec, data_parallel_size=data_parallel_size)
    if gathered > 1:
        per_token = GATHERED_ROUTED_TENSORS * spec.moe.experts_per_token * width
    else:
        per_token = routed_workspace_elements_per_token(
            hidden_size=spec.hidden_size, expert_width_per_rank=width, experts_per_token=spec.moe.experts_per_token,
            version=rules.version if rules else None)
    return int(max_num_batched_tokens * gathered * per_token * activation_dtype_bytes)


def kept_moe_workspace_bytes(spec: ModelSpec, *, max_num_batched_tokens: int, activation_dtype_bytes: int,
                             tensor_parallel_size: int, data_parallel_size: int = 1,
                             enable_expert_parallel: bool = False, rules: VersionRules | None = None) -> int:
    """The workspace where the ``WorkspaceManager`` keeps it after the forward pass (``workspace_kept``; one engine):
    still allocated while the sampler warms up, and from 0.27 part of the memory vLLM prints as consumed
    (weights + non-torch) rather than as peak activation."""
    gathered = moe_token_factor(spec, data_parallel_size=data_parallel_size) > 1
    if gathered or not workspace_kept(rules.version if rules else None):
        return 0
    return moe_workspace_bytes(spec, max_num_batched_tokens=max_num_batched_tokens,
                               activation_dtype_bytes=activation_dtype_bytes, tensor_parallel_size=tensor_parallel_size,
                               data_parallel_size=data_parallel_size, enable_expert_parallel=enable_expert_parallel,
                               rules=rules)
