"""Capture what a real NVIDIA machine answers: NVML's raw readings (idle, then while this process holds memory) and
what CUDA itself reports as the device's total (the figure vLLM prints as ``total_gpu_memory``), for the GPU page's
tests (tests/data/nvml/) and the GPU catalog.

Run on a machine with a driver (and PyTorch for the CUDA half): ``python benchmarks/gpu_capture.py OUT.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

HELD_BYTES = 8 << 30  # what the "busy" reading holds on the GPU, so NVML lists this process with a known amount


def _answer(query) -> Any:
    """A query's answer, or None where the GPU answers NotSupported / NoPermission (as the GPU page reads it)."""
    import pynvml

    try:
        return query()
    except pynvml.NVMLError as exc:
        return {"nvml_error": str(exc)}


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def nvml_reading() -> dict:
    """Every NVML answer the GPU page asks for, raw (bytes, mW, pids)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            utilization = _answer(lambda: pynvml.nvmlDeviceGetUtilizationRates(handle))

            def processes(query) -> Any:
                answer = _answer(lambda: query(handle))
                if isinstance(answer, dict):
                    return answer
                return [{"pid": p.pid, "used_bytes": p.usedGpuMemory,
                         "name": _answer(lambda p=p: _text(pynvml.nvmlSystemGetProcessName(p.pid)))}
                        for p in answer]

            gpus.append({
                "name": _text(pynvml.nvmlDeviceGetName(handle)),
                "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                "memory": {"total": memory.total, "used": memory.used, "free": memory.free},
                "utilization_percent": utilization if isinstance(utilization, dict) else utilization.gpu,
                "temperature_c": _answer(lambda: pynvml.nvmlDeviceGetTemperature(handle,
                                                                                pynvml.NVML_TEMPERATURE_GPU)),
                "power_mw": _answer(lambda: pynvml.nvmlDeviceGetPowerUsage(handle)),
                "power_limit_mw": _answer(lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle)),
                "mig_mode": _answer(lambda: list(pynvml.nvmlDeviceGetMigMode(handle))),
                "compute": processes(pynvml.nvmlDeviceGetComputeRunningProcesses),
                "graphics": processes(pynvml.nvmlDeviceGetGraphicsRunningProcesses),
            })
        return {"driver_version": _text(pynvml.nvmlSystemGetDriverVersion()),
                "cuda_driver_version": pynvml.nvmlSystemGetCudaDriverVersion(), "gpus": gpus}
    finally:
        pynvml.nvmlShutdown()


def cuda_reading() -> dict:
    """CUDA's free/total (torch.cuda.mem_get_info, as vLLM reads them), then after this process holds
    ``HELD_BYTES`` through PyTorch's allocator and one bf16 matmul (the CUDA context and cuBLAS's workspace)."""
    import torch

    free, total = torch.cuda.mem_get_info()
    reading: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                               "device": torch.cuda.get_device_name(0), "mem_get_info_total": total,
                               "mem_get_info_free_after_context": free}
    held = torch.empty(HELD_BYTES, dtype=torch.uint8, device="cuda")
    a = torch.randn(4096, 4096, dtype=torch.bfloat16, device="cuda")
    (a @ a).sum().item()
    torch.cuda.synchronize()
    free_busy, _ = torch.cuda.mem_get_info()
    reading.update(held_bytes=held.numel(), torch_reserved=torch.cuda.memory_reserved(),
                   torch_allocated=torch.cuda.memory_allocated(), mem_get_info_free_busy=free_busy,
                   pid=os.getpid())
    reading["_keep"] = (held, a)
    return reading


def main(out: str) -> None:
    capture: dict[str, Any] = {"captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "idle": nvml_reading()}
    try:
        cuda = cuda_reading()
    except Exception as exc:  # NOTE: the NVML half stands alone on a machine without PyTorch
        capture["cuda_error"] = repr(exc)
    else:
        kept = cuda.pop("_keep")
        capture["cuda"] = cuda
        capture["busy"] = nvml_reading()  # this process now holds memory: NVML lists it
        del kept
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(capture, handle, indent=1)
    print(json.dumps(capture, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
