"""I/O edge: the GPUs of this machine through NVML (``nvidia-ml-py``, imported lazily).

``read_gpus()`` asks NVML once and returns a frozen ``NvmlSnapshot``; ``plan_scenario()`` turns one GPU into
the Scenario vLLM would start on. Every pynvml call goes through ``NvmlBackend``, so tests answer with fakes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from ..errors import NvmlUnavailable, UnknownGpu
from ..gpus import GpuSpec, find_gpu
from ..scenario import Scenario
from ..units import GIB, gib

__all__ = ["GpuProcess", "GpuStatus", "MigMode", "NvmlBackend", "NvmlSnapshot", "plan_scenario", "read_gpus"]

MigMode = Literal["enabled", "disabled", "unsupported"]
MILLIWATTS_PER_WATT = 1000  # NVML reports power in mW
NVML_TEMPERATURE_GPU = 0  # pynvml.NVML_TEMPERATURE_GPU: the GPU die sensor
NVML_DEVICE_MIG_ENABLE = 1  # pynvml.NVML_DEVICE_MIG_ENABLE
# NOTE: nvidia-smi's total runs 0.4-0.6 GiB above the CUDA total the catalog holds (see data/gpus.json); a
# larger gap means the name matched but the memory does not (ECC on a GDDR card, a vGPU profile).
CATALOG_MEMORY_TOLERANCE_GIB = 1.0
_T = TypeVar("_T")


class NvmlBackend(Protocol):
    """The pynvml calls ``read_gpus`` makes; the ``pynvml`` module itself is the real backend."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...
    def nvmlSystemGetProcessName(self, pid: int) -> str | bytes: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...  # .total, .free, .used in bytes
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...  # .gpu in percent
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int: ...
    def nvmlDeviceGetMigMode(self, handle: Any) -> Sequence[int]: ...  # [current, pending]
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> Sequence[Any]: ...  # .pid, .usedGpuMemory
    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> Sequence[Any]: ...


class GpuProcess(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    pid: int
    name: str | None  # None when NVML cannot see it (another PID namespace, e.g. a container)
    used_memory_bytes: int | None  # None where the driver does not account per process (Windows WDDM, MIG)


class GpuStatus(BaseModel):
    """One GPU as NVML reports it now. ``None`` means the GPU does not answer that query."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int
    name: str  # as nvidia-smi prints it, e.g. "NVIDIA H100 80GB HBM3"
    uuid: str
    memory_total_bytes: int
    memory_used_bytes: int
    memory_free_bytes: int
    utilization_gpu_percent: int | None
    temperature_c: int | None
    power_w: float | None
    power_limit_w: float | None
    mig_mode: MigMode
    processes: tuple[GpuProcess, ...] | None  # () = none hold memory; None = the GPU does not list them
    catalog_key: str | None  # find_gpu(name).key; None when the catalog lacks this GPU


class NvmlSnapshot(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    driver_version: str
    cuda_driver_version: str | None  # e.g. "12.4"
    gpus: tuple[GpuStatus, ...]


def default_backend() -> NvmlBackend:
    """The real backend: the pynvml module (tests replace this function to inject a fake)."""
    return _import_pynvml()


def read_gpus(backend: NvmlBackend | None = None) -> NvmlSnapshot:
    """Every GPU's memory, load, MIG mode and processes. Raises ``NvmlUnavailable`` with what to do."""
    pynvml = _import_pynvml()  # for its exception classes, whichever backend answers
    nvml = backend or default_backend()
    try:
        nvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(_init_failure_message(pynvml, exc)) from exc
    try:
        return _snapshot(nvml, pynvml.NVMLError)
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML could not read the GPUs: {exc}. Check that `nvidia-smi` works.") from exc
    finally:
        nvml.nvmlShutdown()


def plan_scenario(status: GpuStatus, base: Scenario) -> Scenario:
    """``base`` on this GPU: its memory, less what other processes already hold."""
    spec = _catalog_spec(status)
    total_bytes = spec.memory_bytes if spec else status.memory_total_bytes
    # NOTE: vLLM's start-up check compares CUDA's free memory with total × utilization, so whatever is not
    # free counts as held by others: processes in other containers NVML cannot list, and (on an unknown GPU)
    # the driver's reserve. That is total − free (NVML's used memory for an unknown GPU), not a sum of
    # the processes listed.
    other_bytes = max(0, total_bytes - status.memory_free_bytes)
    return base.replace(
        gpu=spec.key if spec else None,
        gpu_memory_gib=None if spec else round(gib(status.memory_total_bytes), 2),
        other_processes_memory_gib=round(gib(other_bytes), 2),
    )


def _catalog_spec(status: GpuStatus) -> GpuSpec | None:
    """The catalog GPU when its memory agrees with NVML's: its CUDA total is the one vLLM budgets on,
    while NVML's total also counts memory the driver reserves."""
    if status.catalog_key is None:
        return None
    spec = find_gpu(status.catalog_key)
    gap_gib = abs(status.memory_total_bytes - spec.memory_bytes) / GIB
    return spec if gap_gib <= CATALOG_MEMORY_TOLERANCE_GIB else None


def _import_pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable(
            "nvidia-ml-py is not installed, so the GPUs cannot be read: pip install nvidia-ml-py"
        ) from exc
    return pynvml


def _init_failure_message(pynvml: ModuleType, exc: Exception) -> str:
    if isinstance(exc, (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded)):
        return (
            f"No NVIDIA driver on this machine (libnvidia-ml.so not found or not loaded: {exc}). "
            "Run this where `nvidia-smi` works, or plan with a catalog GPU."
        )
    return f"NVML failed to start: {exc}. Check that `nvidia-smi` works on this machine."


def _snapshot(nvml: NvmlBackend, nvml_error: type[Exception]) -> NvmlSnapshot:
    cuda = _optional(nvml.nvmlSystemGetCudaDriverVersion, nvml_error)
    return NvmlSnapshot(
        driver_version=_text(nvml.nvmlSystemGetDriverVersion()),
        cuda_driver_version=None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}",
        gpus=tuple(_gpu_status(nvml, index, nvml_error) for index in range(nvml.nvmlDeviceGetCount())),
    )


def _gpu_status(nvml: NvmlBackend, index: int, nvml_error: type[Exception]) -> GpuStatus:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    name = _text(nvml.nvmlDeviceGetName(handle))
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    utilization = _optional(lambda: nvml.nvmlDeviceGetUtilizationRates(handle), nvml_error)
    power_mw = _optional(lambda: nvml.nvmlDeviceGetPowerUsage(handle), nvml_error)
    limit_mw = _optional(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle), nvml_error)
    mig = _optional(lambda: nvml.nvmlDeviceGetMigMode(handle), nvml_error)
    return GpuStatus(
        index=index,
        name=name,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        memory_total_bytes=memory.total,
        memory_used_bytes=memory.used,
        memory_free_bytes=memory.free,
        utilization_gpu_percent=None if utilization is None else utilization.gpu,
        temperature_c=_optional(lambda: nvml.nvmlDeviceGetTemperature(handle, NVML_TEMPERATURE_GPU), nvml_error),
        power_w=None if power_mw is None else power_mw / MILLIWATTS_PER_WATT,
        power_limit_w=None if limit_mw is None else limit_mw / MILLIWATTS_PER_WATT,
        mig_mode="unsupported" if mig is None else "enabled" if mig[0] == NVML_DEVICE_MIG_ENABLE else "disabled",
        processes=_processes(nvml, handle, nvml_error),
        catalog_key=_catalog_key(name),
    )


def _processes(nvml: NvmlBackend, handle: Any, nvml_error: type[Exception]) -> tuple[GpuProcess, ...] | None:
    compute = _optional(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle), nvml_error)
    graphics = _optional(lambda: nvml.nvmlDeviceGetGraphicsRunningProcesses(handle), nvml_error)
    if compute is None and graphics is None:
        return None
    by_pid = {info.pid: info for info in (*(graphics or ()), *(compute or ()))}  # one row per pid
    return tuple(
        GpuProcess(
            pid=pid,
            name=_optional(lambda: _text(nvml.nvmlSystemGetProcessName(pid)), nvml_error),
            used_memory_bytes=info.usedGpuMemory,  # pynvml turns "not available" into None
        )
        for pid, info in sorted(by_pid.items())
    )


def _optional(query: Callable[[], _T], nvml_error: type[Exception]) -> _T | None:
    """A query some GPUs do not answer (NotSupported on consumer cards, NoPermission in containers)."""
    try:
        return query()
    except nvml_error:
        return None


def _catalog_key(name: str) -> str | None:
    try:
        return find_gpu(name).key
    except UnknownGpu:
        return None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value  # pynvml < 11.5 returns bytes
