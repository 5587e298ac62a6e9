"""What tensor parallelism costs in memory on each interconnect: NCCL's buffers and vLLM's custom all-reduce.

Read from vLLM's source (0.28-0.32 CPU builds' site-packages; the same code in 0.17+ releases):

* ``v1/worker/gpu_worker.py`` ``init_device``: ``init_worker_distributed_environment`` runs before the memory
  snapshot ("This ensures NCCL buffers are allocated before we measure"), so what it allocates is outside the budget:
  the communicators and the custom all-reduce's IPC buffers. NCCL itself connects its peers lazily (NCCL 2.22+
  ``NCCL_RUNTIME_CONNECT=1``, the default in the NCCL that torch 2.8+ ships): its transport buffers, and the NVLink
  SHARP (NVLS) buffers on NVSwitch systems, are made by the first all-reduce, inside the profiling run, so vLLM
  counts them as non-torch memory.
* ``distributed/device_communicators/custom_all_reduce.py`` ``CustomAllreduce.__init__``: enabled only for world
  sizes 2, 4, 6, 8 (16 in 0.32), on fully NVLink-connected GPUs or on exactly two PCIe GPUs ("Custom allreduce is
  disabled because it's not supported on more than two PCIe-only GPUs"), and only where P2P works. It allocates an
  IPC buffer of ``meta_size() + max_size``, one of ``max(max_size, max_all_gather_size, max_reduce_scatter_size)``
  (2 and 16 MiB defaults from 0.28; ``max_size`` alone before) and an 8 MiB ``rank_data`` tensor, before the
  snapshot. ``max_size`` is 8 MiB, capped by ``all_reduce_utils.CUSTOM_ALL_REDUCE_MAX_SIZES`` where the symmetric-memory
  all-reduce runs.
* ``symm_mem.py`` ``SymmMemCommunicator`` (``VLLM_ALLREDUCE_USE_SYMM_MEM``, on by default from 0.11): on Hopper and
  Blackwell GPUs linked by NVLink, a ``torch_symm_mem.empty`` buffer of ``SYMM_MEM_ALL_REDUCE_MAX_SIZES[cc][tp]``
  per rank, also before the snapshot.

NCCL's buffers depend on the transport it picks: NVLS exists only on NVSwitch systems with Hopper or later GPUs
(multicast objects); elsewhere it uses P2P (NVLink or PCIe) or SHM with ring/tree channels, each rank connected to
two or three neighbours whatever the TP size, and fewer channels over PCIe than over NVLink.
"""

from __future__ import annotations

from ..gpus import GpuSpec, Interconnect
from ..units import GIB, MIB
from .vllm_versions import Device, VllmVersion

INTERCONNECT_LABELS: dict[Interconnect, str] = {
    "nvswitch": "NVSwitch (HGX / DGX: every GPU on NVLink through switches)",
    "nvlink": "NVLink bridge or mesh (no switch)",
    "pcie": "PCIe only (no NVLink)",
    "xgmi": "AMD Infinity Fabric (xGMI)",
}
# NOTE: the overhead functions' default where no link is passed: the NVSwitch figures, the largest.
UNKNOWN_INTERCONNECT: Interconnect = "nvswitch"
# NOTE: a GPU outside the catalog, link not stated, is taken as PCIe. NVSwitch boards take SXM/OAM modules, and every
# one that NCCL builds NVLS buffers on (Hopper or later: H100, H200, H20, B200, B300) is in the catalog by name; the
# cards left out are PCIe cards (consumer, workstation, older data-centre), some with an NVLink bridge. Evidence: the
# Turing TP 2 record (file-2xturing24g-..., vLLM 0.28.1rc1) printed 0.21 GiB non-torch with vLLM's custom all-reduce
# on (two GPUs), where NVSwitch with NVLS would be 2.56 GiB. The page and the CLI say so (``custom_gpu_link_note``).
CUSTOM_GPU_INTERCONNECT: Interconnect = "pcie"
NVLS_MIN_COMPUTE_CAPABILITY = (9, 0)  # NVLink SHARP multicast: Hopper and later on an NVSwitch fabric

# custom_all_reduce.py (0.28-0.32): ``_SUPPORTED_WORLD_SIZES``, ``max_size=8192 * 1024``, ``rank_data`` and the
# all-gather / reduce-scatter defaults (0.28+).
CUSTOM_ALL_REDUCE_WORLD_SIZES = frozenset({2, 4, 6, 8, 16})
CUSTOM_ALL_REDUCE_MAX_SIZE_BYTES = 8 * MIB
CUSTOM_ALL_REDUCE_RANK_DATA_BYTES = 8 * MIB
CUSTOM_ALL_GATHER_MAX_BYTES, CUSTOM_REDUCE_SCATTER_MAX_BYTES = 2 * MIB, 16 * MIB
# all_reduce_utils.py (0.28-0.32), per compute capability and TP size.
CUSTOM_ALL_REDUCE_MAX_SIZES: dict[tuple[int, int], dict[int, int]] = {
    (9, 0): {2: 64 * MIB, 4: 32 * MIB, 6: MIB // 2, 8: MIB // 4},
    (10, 0): {2: 2 * MIB, 4: 2 * MIB, 6: MIB, 8: MIB},
    (10, 3): {2: 4 * MIB, 4: 4 * MIB, 6: 8 * MIB, 8: 4 * MIB},
}
SYMM_MEM_ALL_REDUCE_MAX_SIZES: dict[tuple[int, int], dict[int, int]] = {
    (9, 0): {2: 64 * MIB, 4: 32 * MIB, 6: 64 * MIB, 8: 64 * MIB},
    (10, 0): {2: 8 * MIB, 4: 32 * MIB, 6: 128 * MIB, 8: 128 * MIB},
    (10, 3): {2: 4 * MIB, 4: 32 * MIB, 6: 32 * MIB, 8: 64 * MIB},
}
SYMM_MEM_DEFAULT_FROM_MINOR = 11  # envs.VLLM_ALLREDUCE_USE_SYMM_MEM defaults to on
REDUCE_SCATTER_BUFFER_FROM_MINOR = 28

# NCCL's buffers made after the snapshot without NVLS, per rank, whatever the TP size (ring and tree neighbours do
# not grow with it). PCIe: vllm-project/vllm#13061, 2 x RTX 4090, vLLM 0.7 (V0), TP 2 printed "non_torch_memory
# takes 0.25GiB", 0.12 above the TP = 1 figure of the era (0.13). NVLink P2P without NVLS: vllm-16570 (4 x A100
# 40GB SXM, NVSwitch but no NVLS before Hopper) grew 0.25 GiB at TP 4; more channels than PCIe.
# NOTE: why these are small and do not grow with TP (NCCL v2.27.7 src/): each connection's buffers are
# ``init.cc`` DEFAULT_LL_BUFFSIZE 512 KiB (8 lines x 512 threads x 8 steps x 16 B) + DEFAULT_LL128_BUFFSIZE 4.69 MiB
# (120 x 640 x 8 x 8 B) + DEFAULT_BUFFSIZE 4 MiB, on device only over P2P; ``graph/paths.cc`` disables P2P past a
# PCIe host bridge by default (``p2pLevel = PATH_PXB``; PATH_SYS only for <= 2 GPUs on AMD CPUs), and the SHM
# transport then used keeps its buffers in host memory (``transport/shm.cc``: ncclCuMemHostAlloc / ncclShmOpen).
# So NCCL's buffers do not explain the 4 x RTX PRO 6000 (SYS) TP 4 record's 1.70 GiB non-torch (0.83 above ours).
P2P_BUFFER_BYTES: dict[Interconnect, int] = {
    "pcie": int(0.12 * GIB),
    "nvlink": int(0.25 * GIB),
    "nvswitch": int(0.25 * GIB),
    # NOTE: no record of ours prints RCCL's figure at TP > 1; xGMI is P2P between every pair, like NVLink.
    "xgmi": int(0.25 * GIB),
}


def resolve_interconnect(requested: Interconnect | None, gpu: GpuSpec | None) -> Interconnect:
    """The link between the GPUs: the one asked for, else the usual one for the card."""
    if requested is not None:
        return requested
    if gpu is None or gpu.family is None:
        return CUSTOM_GPU_INTERCONNECT
    return gpu.topologies[0]


def custom_gpu_link_note(requested: Interconnect | None, gpu: GpuSpec | None, world_size: int) -> str | None:
    """A sentence when a GPU outside the catalog runs TP/PP > 1 and no link was chosen: PCIe is assumed."""
    if requested is not None or world_size <= 1 or (gpu is not None and gpu.family is not None):
        return None
    return (f"the link between GPUs outside the catalog is not known: {INTERCONNECT_LABELS[CUSTOM_GPU_INTERCONNECT]} "
            "is assumed (every NVSwitch system, where NCCL's NVLS buffers take 1-2 GiB per GPU, is in the catalog by "
            "name); choose the interconnect (--interconnect nvswitch|nvlink|pcie|xgmi) if yours differs")


def interconnect_warning(interconnect: Interconnect, gpu: GpuSpec | None, world_size: int) -> str | None:
    """A sentence when the chosen link is not one the card is sold with."""
    if gpu is None or gpu.family is None or world_size <= 1 or interconnect in gpu.topologies:
        return None
    sold = " or ".join(INTERCONNECT_LABELS[t] for t in gpu.topologies)
    return (f"{gpu.name} is sold with {sold}; the NCCL and all-reduce memory here assumes "
            f"{INTERCONNECT_LABELS[interconnect]}, as chosen")


def has_nvls(interconnect: Interconnect, gpu: GpuSpec | None) -> bool:
    """Whether NCCL builds NVLink SHARP buffers: an NVSwitch fabric of Hopper-or-later NVIDIA GPUs."""
    if interconnect != "nvswitch":
        return False
    if gpu is None or gpu.compute_capability is None:
        return True  # NOTE: unknown GPU on NVSwitch: assume the larger (NVLS) figure
    return gpu.vendor == "nvidia" and tuple(gpu.compute_capability) >= NVLS_MIN_COMPUTE_CAPABILITY


def custom_all_reduce_enabled(interconnect: Interconnect, world_size: int, device: Device) -> bool:
    """vLLM's rule (custom_all_reduce.py): a supported world size, and NVLink/xGMI or exactly two PCIe GPUs."""
    if device == "cpu" or world_size not in CUSTOM_ALL_REDUCE_WORLD_SIZES:
        return False
    return interconnect != "pcie" or world_size == 2


def symm_mem_bytes(interconnect: Interconnect, world_size: int, device: Device, *,
                   compute_capability: tuple[int, int] | None, version: VllmVersion | None) -> int:
    """The symmetric-memory all-reduce buffer per rank (0 where vLLM does not build it)."""
    sizes = SYMM_MEM_ALL_REDUCE_MAX_SIZES.get(tuple(compute_capability) if compute_capability else (0, 0), {})
    if (device != "cuda" or interconnect not in ("nvswitch", "nvlink") or version is None
            or not version.at_least(SYMM_MEM_DEFAULT_FROM_MINOR)):
        return 0
    return sizes.get(world_size, 0)


def custom_all_reduce_bytes(interconnect: Interconnect, world_size: int, device: Device, *,
                            compute_capability: tuple[int, int] | None = None,
                            version: VllmVersion | None = None) -> int:
    """Per rank, before the snapshot: the two IPC buffers and ``rank_data`` (meta_size, a few KiB, left out)."""
    if not custom_all_reduce_enabled(interconnect, world_size, device):
        return 0
    max_size = CUSTOM_ALL_REDUCE_MAX_SIZE_BYTES
    if symm_mem_bytes(interconnect, world_size, device, compute_capability=compute_capability, version=version):
        caps = CUSTOM_ALL_REDUCE_MAX_SIZES.get(tuple(compute_capability), {})  # type: ignore[arg-type]
        max_size = min(caps.get(world_size, max_size), max_size)
    second = max_size
    if version is None or version.at_least(REDUCE_SCATTER_BUFFER_FROM_MINOR):
        second = max(max_size, CUSTOM_ALL_GATHER_MAX_BYTES, CUSTOM_REDUCE_SCATTER_MAX_BYTES)
    return max_size + second + CUSTOM_ALL_REDUCE_RANK_DATA_BYTES


def all_reduce_buffer_bytes(interconnect: Interconnect, world_size: int, device: Device, *,
                            compute_capability: tuple[int, int] | None = None,
                            version: VllmVersion | None = None) -> int:
    """Everything the TP all-reduce paths allocate before the snapshot: custom all-reduce and symmetric memory."""
    return (custom_all_reduce_bytes(interconnect, world_size, device, compute_capability=compute_capability,
                                    version=version)
            + symm_mem_bytes(interconnect, world_size, device, compute_capability=compute_capability,
                             version=version))


def nccl_buffer_bytes(*, interconnect: Interconnect, nvls: bool, tensor_parallel_size: int,
                      first_peer_nvls_bytes: int, extra_peer_nvls_bytes: int) -> int:
    """NCCL's buffers counted as non-torch memory at TP > 1.

    With NVLS the era's measured NVSwitch figures (``overheads.ERA_CONSTANTS``) apply; they grow a little with each
    peer. Without it, P2P/SHM ring and tree buffers, the same for any TP size and era.
    """
    if tensor_parallel_size <= 1:
        return 0
    if nvls:
        return first_peer_nvls_bytes + extra_peer_nvls_bytes * (tensor_parallel_size - 2)
    return P2P_BUFFER_BYTES[interconnect]
