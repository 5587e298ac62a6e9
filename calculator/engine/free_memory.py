"""Where vLLM reads a GPU's "free memory" from, per memory architecture and version (§1.2-1.3).

``MemorySnapshot.measure`` (``vllm/utils/mem_utils.py``; ``vllm/utils/__init__.py`` up to 0.11.0) takes the free
memory that the start-up check (``free >= total x utilization``) and the non-torch measurement use:

- up to 0.11.0: ``torch.cuda.mem_get_info()`` on every GPU;
- 0.11.1-0.19: ``psutil.virtual_memory().available`` when the compute capability is one of Orin, Thor or Spark
  (``shared_sysmem_device_mem_sms = ((8, 7), (11, 0), (12, 1))``), else ``mem_get_info``;
- from 0.20: ``psutil`` when ``current_platform.is_integrated_gpu`` (``cudaDevAttrIntegrated``; vllm#35356, which
  names GH200 beside DGX Spark and Jetson and fixes the GH200 report vllm#35313), else ``mem_get_info``.

On an integrated GPU (GB10) ``mem_get_info``'s free memory is the kernel's MemFree, which counts the page cache as
used; on a GH200 whose HBM the OS onlines as a NUMA node (NUMA, or "unified", mode) it counts the kernel's pages on
that node, the page cache of the checkpoint it just read among them, as used (vllm#35313: 74.9 of 142.5 GiB free).
Pure: no I/O.
"""

from __future__ import annotations

from typing import Literal

from ..gpus import GpuSpec
from ..units import GIB
from .overheads import UMA_HOST_BASELINE_BYTES, UMA_HOST_GROWTH_BYTES
from .vllm_versions import VersionRules

__all__ = ["FreeMemoryReading", "free_memory_reading", "host_pool_free_bytes", "host_use_counts", "page_cache_counts",
           "page_cache_reason", "unified_memory_warning"]

# "device": the GPU's own memory (cudaMemGetInfo); "device_with_os_pages": the same on a NUMA-mode GH200, where the
# kernel's pages on the HBM node count as used; "host_free": an integrated GPU read through cudaMemGetInfo (MemFree,
# the page cache counts as used); "host_available": psutil's MemAvailable of the host pool.
FreeMemoryReading = Literal["device", "device_with_os_pages", "host_free", "host_available"]

DROP_CACHES = "sync; echo 3 > /proc/sys/vm/drop_caches"


def free_memory_reading(gpu: GpuSpec | None, rules: VersionRules, device: str) -> FreeMemoryReading:
    """Which free memory this version of vLLM reads on ``gpu`` (see the module docstring)."""
    if device != "cuda" or gpu is None:
        return "device"
    if gpu.memory_architecture == "integrated":
        return "host_available" if rules.version.at_least(11, 1) else "host_free"
    if gpu.memory_architecture == "coherent-numa":
        return "host_available" if rules.version.at_least(20) else "device_with_os_pages"
    return "device"


def host_use_counts(reading: FreeMemoryReading) -> bool:
    """The host's own memory use lowers the free memory vLLM reads (at start, and while it profiles)."""
    return reading in ("host_free", "host_available")


def host_pool_free_bytes(gpu: GpuSpec | None, reading: FreeMemoryReading) -> int | None:
    """MemAvailable before vLLM starts where vLLM reads it from a host pool beyond the GPU's memory (else None).

    On an integrated GPU the pool is the GPU's memory, and the host's use is charged as context memory instead.
    """
    if gpu is None or reading != "host_available" or gpu.system_memory_gib is None:
        return None
    return int(gpu.system_memory_gib * GIB) - UMA_HOST_BASELINE_BYTES


def page_cache_counts(reading: FreeMemoryReading) -> bool:
    """Reclaimable pages (the checkpoint's page cache) count as used in the free memory vLLM reads."""
    return reading in ("host_free", "device_with_os_pages")


def page_cache_reason(gpu: GpuSpec, rules: VersionRules, *, free_at_start_bytes: int, requested_bytes: int,
                      checkpoint_bytes: int) -> str | None:
    """Why the start-up check can fail once the checkpoint's files sit in the page cache (None when it cannot)."""
    if free_at_start_bytes - checkpoint_bytes >= requested_bytes:
        return None
    if gpu.memory_architecture == "coherent-numa":
        where, seen = "the kernel's pages on the HBM NUMA node", "vllm#35313: 74.9 of 142.5 GiB free on a GH200"
    else:
        where, seen = "the host's page cache", "it reports MemFree: NVIDIA's CUDA for Tegra app note"
    return (f"On {gpu.name}, vLLM {rules.version} reads free memory through cudaMemGetInfo, which counts {where} "
            f"as used ({seen}): with the checkpoint's {checkpoint_bytes / GIB:.1f} GiB cached, less than the "
            f"{requested_bytes / GIB:.2f} GiB it asks for can be free at start; drop the page cache before starting "
            f"({DROP_CACHES}).")


def unified_memory_warning(gpu: GpuSpec, rules: VersionRules, reading: FreeMemoryReading) -> str | None:
    """What the free-memory reading means for this deployment, or None on a GPU with memory of its own."""
    baseline, growth = UMA_HOST_BASELINE_BYTES / GIB, UMA_HOST_GROWTH_BYTES / GIB
    if reading == "host_available" and gpu.memory_architecture == "integrated":
        return (f"{gpu.name} shares one memory pool with the host: vLLM reads free memory as the host's available "
                f"memory, so the OS and vLLM's own processes ({baseline:.1f} GiB assumed) count as used at start and "
                f"what the host side grows by later ({growth:.1f} GiB assumed) as non-torch memory; other programs "
                "on the box lower both (other_processes_memory_gib).")
    if reading == "host_free":
        return (f"{gpu.name} shares one memory pool with the host, and vLLM {rules.version} reads its free memory "
                "through cudaMemGetInfo (MemFree): the host's use and its page cache count as used at start "
                f"({baseline:.1f} GiB assumed, plus the checkpoint's cached files until the cache is dropped), the "
                f"host side's later growth ({growth:.1f} GiB assumed) as non-torch memory. 0.11.1+ read MemAvailable.")
    if reading == "host_available":
        system = (gpu.system_memory_gib or gpu.memory_gib)
        return (f"{gpu.name}: vLLM {rules.version} takes the GPU as integrated and reads free memory as the host's "
                f"available memory ({system:.0f} GiB of LPDDR5X and HBM, {baseline:.1f} GiB assumed in use), so the "
                "start-up check passes whatever the HBM holds, and the host side's growth while it profiles "
                f"({growth:.1f} GiB assumed) counts as non-torch memory; the KV cache is still sized from "
                f"{gpu.memory_gib:.2f} GiB of HBM x gpu_memory_utilization.")
    if reading == "device_with_os_pages":
        return (f"{gpu.name}: vLLM {rules.version} reads free memory through cudaMemGetInfo, which counts the "
                "kernel's pages on the HBM NUMA node (the page cache of the checkpoint it read) as used; 0.20+ "
                f"read the host's available memory instead. Drop the page cache before starting ({DROP_CACHES}).")
    return None
