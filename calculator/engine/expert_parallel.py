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
* ``distributed/device_communicators/all2all.py``: only the DeepEP backends keep persistent buffers, a
  ``deep_ep.Buffer`` of ``VLLM_DEEPEP_BUFFER_SIZE_MB`` (1024 MiB, ``envs.py``) of NVLink memory per rank, made at the
  first dispatch inside the profiling run (so vLLM counts it as non-torch memory). On one node the high-throughput
  kernels take no RDMA buffer (``num_rdma_bytes = 0``); the low-latency ones add one sized by
  ``deep_ep.Buffer.get_low_latency_rdma_size_hint``, which this planner does not model (it says so).
  ``allgather_reducescatter`` and the NCCL-based backends keep none; FlashInfer's and MORI's workspaces are not
  modelled either.
"""

from __future__ import annotations

from typing import Literal

from ..model.spec import ModelSpec
from ..units import MIB

All2AllBackend = Literal[
    "allgather_reducescatter", "naive", "pplx", "deepep_high_throughput", "deepep_low_latency", "deepep_v2",
    "mori_high_throughput", "mori_low_latency", "moonep", "nixl_ep", "flashinfer_all2allv",
    "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided", "passthrough",
]
DEFAULT_ALL2ALL_BACKEND: All2AllBackend = "allgather_reducescatter"
DEEPEP_BUFFER_BYTES = 1024 * MIB  # envs.VLLM_DEEPEP_BUFFER_SIZE_MB
_DEEPEP = frozenset({"deepep_high_throughput", "deepep_low_latency", "deepep_v2"})
_UNMODELLED = frozenset({"deepep_low_latency", "mori_high_throughput", "mori_low_latency", "moonep", "nixl_ep",
                         "flashinfer_all2allv", "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided"})


def uses_all2all(spec: ModelSpec, *, data_parallel_size: int, enable_expert_parallel: bool) -> bool:
    """vLLM's ``use_all2all_kernels``: an MoE model with expert parallelism over more than one DP rank."""
    return spec.moe is not None and enable_expert_parallel and data_parallel_size > 1


def moe_token_factor(spec: ModelSpec, *, data_parallel_size: int) -> int:
    """How many ranks' tokens each MoE layer works on in the profiled forward pass (dp for an MoE model)."""
    return data_parallel_size if spec.moe is not None else 1


def all2all_buffer_bytes(backend: All2AllBackend | None, spec: ModelSpec, *, data_parallel_size: int,
                         enable_expert_parallel: bool) -> int:
    """The all-to-all backend's persistent buffers on one rank (non-torch memory, made during profiling)."""
    if not uses_all2all(spec, data_parallel_size=data_parallel_size, enable_expert_parallel=enable_expert_parallel):
        return 0
    return DEEPEP_BUFFER_BYTES if (backend or DEFAULT_ALL2ALL_BACKEND) in _DEEPEP else 0


def all2all_warning(backend: All2AllBackend | None, spec: ModelSpec, *, data_parallel_size: int,
                    enable_expert_parallel: bool) -> str | None:
    """A sentence where the chosen backend keeps buffers this planner does not size, or is never used."""
    if backend is None:
        return None
    if not uses_all2all(spec, data_parallel_size=data_parallel_size, enable_expert_parallel=enable_expert_parallel):
        return (f"--all2all-backend {backend} is unused here: vLLM dispatches MoE tokens with it only under "
                "--enable-expert-parallel with --data-parallel-size > 1")
    if backend in _UNMODELLED:
        return (f"--all2all-backend {backend}: its workspace beyond DeepEP's 1 GiB NVLink buffer (RDMA buffers, "
                "FlashInfer/MORI workspaces) is not modelled; the KV cache may be smaller than shown")
    return None
