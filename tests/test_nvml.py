"""calculator.observe.nvml: the real pynvml path (no driver here, a driver on GPU machines) and named fake machines."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pynvml
import pytest
from support.fake_nvml import GIB, MIB, FakeGpu, FakeNvml, fake, replay

from calculator import Scenario
from calculator.errors import NvmlUnavailable
from calculator.gpus import find_gpu
from calculator.observe.nvml import GpuProcess, GpuStatus, plan_scenario, read_gpus
from calculator.url_state import to_query_params


def driver_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


HAS_DRIVER = driver_present()


def raises(code: int) -> Callable[..., NoReturn]:
    def query(*_: object) -> NoReturn:
        raise pynvml.NVMLError(code)
    return query


@pytest.mark.skipif(HAS_DRIVER, reason="an NVIDIA driver is present; test_real_nvml_reads_this_machine runs instead")
def test_real_nvml_without_a_driver_says_so_without_a_traceback():
    with pytest.raises(NvmlUnavailable, match="No NVIDIA driver on this machine") as caught:
        read_gpus()
    assert isinstance(caught.value.__cause__, (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded))
    assert "nvidia-smi" in str(caught.value)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_DRIVER, reason="needs an NVIDIA driver (libnvidia-ml.so); none on this machine")
def test_real_nvml_reads_this_machine():
    snapshot = read_gpus()
    assert snapshot.driver_version and snapshot.gpus
    for gpu in snapshot.gpus:
        assert gpu.uuid.startswith(("GPU-", "MIG-"))
        assert gpu.memory_total_bytes > GIB
        assert gpu.memory_used_bytes + gpu.memory_free_bytes <= gpu.memory_total_bytes
        assert gpu.utilization_gpu_percent is None or 0 <= gpu.utilization_gpu_percent <= 100
        assert gpu.temperature_c is None or 0 < gpu.temperature_c < 120
        assert gpu.power_w is None or 0 < gpu.power_w < 2_000
        plan = plan_scenario(gpu, Scenario())
        assert (plan.gpu, plan.gpu_memory_gib is None) in ((gpu.catalog_key, True), (None, False))


def test_every_call_the_gpu_page_makes_exists_in_the_real_pynvml_and_in_the_fakes():
    # The reproduction: the page asked pynvml for nvmlDeviceGetEnforcedPowerManagementLimit, a name pynvml never had
    # (it is nvmlDeviceGetEnforcedPowerLimit); the fakes spelled it the same way, so every test passed while the first
    # real driver (an H200, driver 580.159.04) answered with an AttributeError traceback.
    from calculator.observe.nvml import NvmlBackend

    calls = [name for name in vars(NvmlBackend) if name.startswith("nvml")]
    assert len(calls) == 17  # the Protocol lists them: init, shutdown, 3 system and 12 device queries
    assert [name for name in calls if not callable(getattr(pynvml, name, None))] == []
    assert [name for name in calls if not callable(getattr(FakeNvml, name, None))] == []


def test_missing_nvidia_ml_py_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(NvmlUnavailable, match="pip install nvidia-ml-py"):
        read_gpus()


H200_CAPTURE = json.loads((Path(__file__).parent / "data" / "nvml" / "h200-driver-580.159.04.json").read_text())


def test_a_real_h200_reads_as_its_driver_answered_and_the_catalog_holds_cudas_total():
    # A real machine's answers (benchmarks/gpu_capture.py on an H200, driver 580.159.04, torch 2.11 / CUDA 13.0).
    # nvidia-smi printed the same minutes: "NVIDIA H200 ... 79W / 700W | 0MiB / 143771MiB", "Reserved : 616 MiB".
    snapshot = read_gpus(replay(H200_CAPTURE["idle"]))
    assert (snapshot.driver_version, snapshot.cuda_driver_version) == ("580.159.04", "13.0")
    gpu = snapshot.gpus[0]
    assert (gpu.name, gpu.catalog_key, gpu.mig_mode, gpu.processes) == ("NVIDIA H200", "h200-141gb", "disabled", ())
    assert gpu.memory_total_bytes == 143_771 * MIB
    assert (gpu.power_w, gpu.power_limit_w) == (78.683, 700.0)
    # CUDA's total (what vLLM budgets on and prints as total_gpu_memory) is NVML's total less the driver's reserve,
    # 139.80 GiB: the catalog's figure, which came from vLLM's printed logs
    cuda_total = H200_CAPTURE["cuda"]["mem_get_info_total"]
    assert cuda_total == gpu.memory_free_bytes == 150_109_880_320
    assert round(cuda_total / GIB, 2) == find_gpu("h200-141gb").memory_gib == 139.8
    assert plan_scenario(gpu, Scenario()) == Scenario(gpu="h200-141gb")  # nothing held by others


def test_a_real_h200_with_a_process_holding_memory_plans_on_what_is_left():
    busy = read_gpus(replay(H200_CAPTURE["busy"])).gpus[0]
    cuda = H200_CAPTURE["cuda"]
    assert busy.processes == (GpuProcess(pid=cuda["pid"], name="python3", used_memory_bytes=9_401_532_416),)
    # the process held 8 GiB of tensors (8,692,695,040 B reserved by PyTorch) plus its CUDA context and cuBLAS
    # workspace; CUDA saw 150,109,880,320 - 140,699,107,328 = 9,410,772,992 B (8.76 GiB) gone, and the plan's
    # other-processes memory is the catalog's 139.8 GiB less NVML's free 140,699,107,328 B = 8.76 GiB
    assert cuda["mem_get_info_total"] - cuda["mem_get_info_free_busy"] == 9_410_772_992
    assert plan_scenario(busy, Scenario()).other_processes_memory_gib == 8.76


def test_one_h100_busy():
    snapshot = read_gpus(fake("one_h100_busy"))
    assert (snapshot.driver_version, snapshot.cuda_driver_version) == ("550.54.15", "12.4")
    assert snapshot.gpus == (GpuStatus(
        index=0, name="NVIDIA H100 80GB HBM3", uuid="GPU-fake-0", memory_total_bytes=85_520_809_984,
        memory_used_bytes=22_011_707_392, memory_free_bytes=63_509_102_592, utilization_gpu_percent=87,
        temperature_c=64, power_w=512.345, power_limit_w=700.0, mig_mode="disabled",
        processes=(GpuProcess(pid=4242, name="python3 -m vllm.entrypoints.openai.api_server",
                              used_memory_bytes=17_179_869_184),
                   GpuProcess(pid=5151, name="python3 train.py", used_memory_bytes=4_294_967_296)),
        catalog_key="h100-sxm-80gb",
    ),)
    plan = plan_scenario(snapshot.gpus[0], Scenario())
    # the catalog's CUDA total (79.19 GiB) minus NVML's free 60,567 MiB (59.1475 GiB)
    assert (plan.gpu, plan.gpu_memory_gib, plan.other_processes_memory_gib) == ("h100-sxm-80gb", None, 20.04)


def test_gpu_answers_not_supported():
    backend = fake("gpu_answers_not_supported")
    gpu = read_gpus(backend).gpus[0]
    assert (gpu.utilization_gpu_percent, gpu.temperature_c, gpu.power_w, gpu.power_limit_w) == (None,) * 4
    assert (gpu.mig_mode, gpu.processes, gpu.catalog_key) == ("unsupported", None, "rtx-4090")
    assert gpu.memory_total_bytes == 24_564 * MIB
    plan = plan_scenario(gpu, Scenario())
    # the catalog's CUDA total (23.55 GiB) minus NVML's free 23,540 MiB (22.9883 GiB)
    assert (plan.gpu, plan.gpu_memory_gib, plan.other_processes_memory_gib) == ("rtx-4090", None, 0.56)
    assert backend.calls == ["init", "shutdown"]


def test_mig_enabled():
    gpu = read_gpus(fake("mig_enabled")).gpus[0]
    assert (gpu.mig_mode, gpu.catalog_key) == ("enabled", "a100-sxm-80gb")
    assert gpu.processes == (GpuProcess(pid=777, name=None, used_memory_bytes=None),)
    plan = plan_scenario(gpu, Scenario())
    assert (plan.gpu, plan.other_processes_memory_gib) == ("a100-sxm-80gb", 9.15)  # 79.15 - 70 GiB free


def test_no_processes_plans_the_default_scenario():
    gpu = read_gpus(fake("no_processes")).gpus[0]
    assert gpu.processes == ()
    # NVML's free (79.31 GiB, only the driver's reserve used) exceeds the CUDA total: nothing held by others.
    assert plan_scenario(gpu, Scenario()) == Scenario()
    assert to_query_params(plan_scenario(gpu, Scenario())) == {}


def test_two_gpus_mixed():
    known, unknown = read_gpus(fake("two_gpus_mixed")).gpus
    assert known.catalog_key == "a100-sxm-40gb" and unknown.catalog_key is None
    assert known.processes == (GpuProcess(pid=10, name="ollama", used_memory_bytes=7 * GIB),
                               GpuProcess(pid=11, name="Xorg", used_memory_bytes=256 * MIB))
    assert to_query_params(plan_scenario(known, Scenario())) == {"g": "a100-sxm-40gb", "other": "7.38"}
    assert to_query_params(plan_scenario(unknown, Scenario())) == {"g": "none", "mem": "24", "other": "6"}


def test_a_catalog_name_with_other_memory_plans_on_the_real_memory():
    odd_h100 = FakeGpu("NVIDIA H100 80GB HBM3", total_bytes=70 * GIB, used_bytes=0)
    gpu = read_gpus(FakeNvml(gpus=(odd_h100,))).gpus[0]
    plan = plan_scenario(gpu, Scenario(max_model_len=8192))
    assert (plan.gpu, plan.gpu_memory_gib, plan.max_model_len) == (None, 70.0, 8192)


def test_init_errors_other_than_no_driver_carry_nvml_text():
    backend = fake("no_processes")
    backend.nvmlInit = raises(pynvml.NVML_ERROR_NO_PERMISSION)
    with pytest.raises(NvmlUnavailable, match="NVML failed to start: Insufficient Permissions"):
        read_gpus(backend)
    assert backend.calls == []  # no shutdown without a successful init


def test_a_failing_required_query_still_shuts_nvml_down():
    backend = fake("one_h100_busy")
    backend.nvmlDeviceGetMemoryInfo = raises(pynvml.NVML_ERROR_GPU_IS_LOST)
    with pytest.raises(NvmlUnavailable, match="GPU is lost"):
        read_gpus(backend)
    assert backend.calls == ["init", "shutdown"]
