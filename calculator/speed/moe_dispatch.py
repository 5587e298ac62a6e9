"""The time each MoE layer spends moving tokens between data-parallel engines (dispatch before the experts,
combine after them), read from vLLM 0.32's ``distributed/device_communicators/all2all.py``:

* ``allgather_reducescatter`` (the default ``all2all_backend``) and ``naive``, and every DP > 1 server without
  expert parallelism (the experts are tensor-parallel over tp x dp GPUs and the layer gathers its input across the
  DP group): ``AgRsAll2AllManager.dispatch`` all-gathers the hidden states of all dp ranks, ``combine``
  reduce-scatters the output back. Each rank receives the other dp - 1 ranks' tokens and sends (dp - 1) / dp of
  the dp x tokens it reduced: 2 x (dp - 1) x hidden x dtype bytes per local token.
* the true all-to-all backends (DeepEP, pplx, MORI, FlashInfer, NIXL): each token's hidden state goes to the ranks
  of its top-k experts, (ep - 1) / ep of them remote (ep = tp x dp), and comes back weighted:
  2 x top_k x (ep - 1) / ep x hidden x dtype bytes per local token.
* ``passthrough`` moves nothing.

# NOTE: the router's top-k weights and ids (8 bytes per routed expert) ride along with the hidden state; next to
# hidden x 2 bytes (4 KiB and up) they are under 1 % and left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..engine.expert_parallel import DEFAULT_ALL2ALL_BACKEND, All2AllBackend
from ..model.spec import ModelSpec

if TYPE_CHECKING:  # costs.py imports this module
    from .calibration import SpeedConstants
    from .costs import ForwardCosts
    from .hardware import GpuRates

_GATHERING = frozenset({"allgather_reducescatter", "naive"})


def moe_dispatch_bytes_per_token(spec: ModelSpec, *, tensor_parallel_size: int, data_parallel_size: int,
                                 enable_expert_parallel: bool, all2all_backend: All2AllBackend | None,
                                 dtype_bytes: int) -> float:
    """Bytes crossing one rank's link per token of its engine and per MoE layer (dispatch plus combine)."""
    dp = data_parallel_size
    if spec.moe is None or dp == 1:
        return 0.0
    hidden = spec.hidden_size * dtype_bytes
    backend = all2all_backend or DEFAULT_ALL2ALL_BACKEND
    if not enable_expert_parallel or backend in _GATHERING:
        return 2.0 * (dp - 1) * hidden
    if backend == "passthrough":
        return 0.0
    ep = tensor_parallel_size * dp
    return 2.0 * spec.moe.experts_per_token * (ep - 1) / ep * hidden


def moe_dispatch_s(costs: ForwardCosts, rates: GpuRates, constants: SpeedConstants, tokens: float) -> float:
    """Dispatch and combine of ``tokens`` over every MoE layer of the stage: two collective calls per layer, each
    a fixed latency plus its bytes over the GPU's link."""
    if not costs.moe_dispatch_bytes_per_token:
        return 0.0
    link = rates.interconnect_bytes_s or constants.fallback_interconnect_bytes_s
    # NOTE: the same latency and link efficiency as the TP all-reduce: NCCL's (or DeepEP's NVLink) collectives over
    # the same link; no DP record calibrates them separately.
    payload = tokens * costs.moe_dispatch_bytes_per_token / (link * constants.all_reduce_efficiency)
    return costs.moe_layers * (2 * constants.all_reduce_latency_s + payload)
