"""Named fake NVML machines for ``calculator.observe.nvml.read_gpus(backend=...)``; they raise pynvml's real errors.

Numbers are nvidia-smi-like: totals in MiB as nvidia-smi prints them, power in mW as NVML reports it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

MIB = 1 << 20
GIB = 1 << 30


def not_supported() -> pynvml.NVMLError:
    return pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # pynvml returns the NotSupported subclass


@dataclass(frozen=True)
class FakeGpu:
    name: str
    total_bytes: int
    used_bytes: int
    utilization_percent: int | None = 0  # None: the query raises NotSupported (as for every None below)
    temperature_c: int | None = 35
    power_mw: int | None = 70_000
    power_limit_mw: int | None = 700_000
    mig_current: int | None = 0
    compute: tuple[tuple[int, int | None], ...] | None = ()  # (pid, used bytes or None)
    graphics: tuple[tuple[int, int | None], ...] | None = ()


@dataclass
class FakeNvml:
    """Implements ``NvmlBackend``; ``calls`` records init/shutdown so tests can check the pairing."""

    gpus: tuple[FakeGpu, ...]
    process_names: dict[int, str] = field(default_factory=dict)
    driver_version: str = "550.54.15"
    cuda_driver_version: int = 12040
    calls: list[str] = field(default_factory=list)

    def nvmlInit(self) -> None:
        self.calls.append("init")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda_driver_version

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        if pid not in self.process_names:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)  # e.g. a process in another container
        return self.process_names[pid]

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        return handle.name

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return f"GPU-fake-{self.gpus.index(handle)}"

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> Any:
        free = handle.total_bytes - handle.used_bytes
        return SimpleNamespace(total=handle.total_bytes, used=handle.used_bytes, free=free)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> Any:
        return SimpleNamespace(gpu=_answer(handle.utilization_percent), memory=0)

    def nvmlDeviceGetTemperature(self, handle: FakeGpu, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return _answer(handle.temperature_c)

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        return _answer(handle.power_mw)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeGpu) -> int:
        return _answer(handle.power_limit_mw)

    def nvmlDeviceGetMigMode(self, handle: FakeGpu) -> list[int]:
        return [_answer(handle.mig_current), _answer(handle.mig_current)]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu) -> list[Any]:
        return _process_infos(_answer(handle.compute))

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeGpu) -> list[Any]:
        return _process_infos(_answer(handle.graphics))


def _answer(value: Any) -> Any:
    if value is None:
        raise not_supported()
    return value


def _process_infos(processes: tuple[tuple[int, int | None], ...]) -> list[Any]:
    return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in processes]


H100_TOTAL_BYTES = 81_559 * MIB  # nvidia-smi's total for "NVIDIA H100 80GB HBM3"
H100_RESERVED_BYTES = 346 * MIB  # what an idle H100 shows as used: the driver's reserve

SCENARIOS: dict[str, FakeNvml] = {
    "one_h100_busy": FakeNvml(
        gpus=(FakeGpu("NVIDIA H100 80GB HBM3", H100_TOTAL_BYTES, used_bytes=20 * GIB + 512 * MIB,
                      utilization_percent=87, temperature_c=64, power_mw=512_345, power_limit_mw=700_000,
                      compute=((4242, 16 * GIB), (5151, 4 * GIB))),),
        process_names={4242: "python3 -m vllm.entrypoints.openai.api_server", 5151: "python3 train.py"},
    ),
    "gpu_answers_not_supported": FakeNvml(
        gpus=(FakeGpu("NVIDIA GeForce RTX 4090", 24_564 * MIB, used_bytes=1 * GIB, utilization_percent=None,
                      temperature_c=None, power_mw=None, power_limit_mw=None, mig_current=None,
                      compute=None, graphics=None),),
    ),
    "mig_enabled": FakeNvml(
        gpus=(FakeGpu("NVIDIA A100-SXM4-80GB", 81_920 * MIB, used_bytes=10 * GIB, mig_current=1,
                      compute=((777, None),)),),  # MIG hides per-process memory
    ),
    "no_processes": FakeNvml(
        gpus=(FakeGpu("NVIDIA H100 80GB HBM3", H100_TOTAL_BYTES, used_bytes=H100_RESERVED_BYTES),),
    ),
    "two_gpus_mixed": FakeNvml(
        gpus=(FakeGpu("NVIDIA A100-SXM4-40GB", 40_960 * MIB, used_bytes=8 * GIB, compute=((10, 7 * GIB),),
                      graphics=((10, 7 * GIB), (11, 256 * MIB))),
              FakeGpu("NVIDIA Mystery X1", 24 * GIB, used_bytes=6 * GIB, compute=((12, 6 * GIB),))),
        process_names={10: "ollama", 11: "Xorg"},
    ),
}


def replay(reading: dict) -> FakeNvml:
    """A machine that answers what a real one answered (one reading of ``benchmarks/gpu_capture.py``: raw NVML values,
    ``{"nvml_error": ...}`` where the GPU refused a query)."""
    def answered(value: Any) -> Any:
        return None if isinstance(value, dict) else value

    def processes(listed: Any) -> tuple[tuple[int, int | None], ...] | None:
        return None if isinstance(listed, dict) else tuple((p["pid"], p["used_bytes"]) for p in listed)

    gpus = tuple(FakeGpu(gpu["name"], gpu["memory"]["total"], gpu["memory"]["used"],
                         utilization_percent=answered(gpu["utilization_percent"]),
                         temperature_c=answered(gpu["temperature_c"]), power_mw=answered(gpu["power_mw"]),
                         power_limit_mw=answered(gpu["power_limit_mw"]),
                         mig_current=None if isinstance(gpu["mig_mode"], dict) else gpu["mig_mode"][0],
                         compute=processes(gpu["compute"]), graphics=processes(gpu["graphics"]))
                 for gpu in reading["gpus"])
    names = {p["pid"]: p["name"] for gpu in reading["gpus"] for kind in ("compute", "graphics")
             if not isinstance(gpu[kind], dict) for p in gpu[kind] if isinstance(p["name"], str)}
    uuids = tuple(gpu["uuid"] for gpu in reading["gpus"])
    return _Replayed(gpus=gpus, process_names=names, driver_version=reading["driver_version"],
                     cuda_driver_version=reading["cuda_driver_version"], uuids=uuids)


@dataclass
class _Replayed(FakeNvml):
    uuids: tuple[str, ...] = ()

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return self.uuids[self.gpus.index(handle)]


def fake(name: str) -> FakeNvml:
    """A fresh copy of the scenario called ``name`` (its ``calls`` start empty)."""
    return copy.deepcopy(SCENARIOS[name])
