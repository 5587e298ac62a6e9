"""The GPU catalog: the data holds together, names resolve, and measured memory matches vLLM's logs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from calculator import gpus
from calculator.errors import InvalidInput, UnknownGpu
from calculator.gpus import GpuSpec, custom_gpu, find_gpu, gpu_catalog

# NOTE: the benchmark's verbatim copy of shared/data/vllm-startup-logs/calibration.jsonl (benchmarks/data/README.md).
CALIBRATION = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "calibration.jsonl"
MIB = 1 << 20

# (calibration record id, catalog key, total GiB that vLLM/PyTorch printed in that record)
CALIBRATED_TOTALS = [
    ("llmd-h100-mistral-small-3.2-24b-v0110", "h100-sxm-80gb", 79.19),
    ("file-80gb-llava16-mistral-7b-v0102", "h100-sxm-80gb", 79.19),
    ("file-8xh200-glm53-flash-tp8", "h200-141gb", 139.80),
    ("file-h200-rho-1b-v064", "h200-141gb", 139.80),
    ("file-mi300x-gemma4-e2b-v0291", "mi300x-192gb", 191.69),
    ("file-rtx3090-qwen38-27b-fp8kv", "rtx-3090", 23.56),
    ("file-a10g-phi35-vision-v061-30k-failed", "a10g-24gb", 21.98),
    ("vllm-16570-4xa100-40g-qwen25-vl-72b-tp4", "a100-sxm-40gb", 39.38),
    ("file-80gb-phi4-bnb-lora-util070", "a100-sxm-80gb", 79.15),
]
DRIVER_NAME_PREFIXES = ("NVIDIA ", "Tesla ", "AMD Instinct ")


def _driver_names() -> list[tuple[str, str]]:
    return [
        (alias, gpu.key) for gpu in gpu_catalog() for alias in gpu.aliases if alias.startswith(DRIVER_NAME_PREFIXES)
    ]


def _calibration_records() -> dict[str, dict]:
    lines = CALIBRATION.read_text(encoding="utf-8").splitlines()
    return {record["id"]: record for record in map(json.loads, filter(None, lines))}


# --- the data holds together


def test_catalog_has_at_least_25_accelerators() -> None:
    assert len(gpu_catalog()) >= 25


def test_keys_and_display_names_are_unique() -> None:
    keys = [gpu.key for gpu in gpu_catalog()]
    names = [gpu.name for gpu in gpu_catalog()]
    assert len(set(keys)) == len(keys)
    assert len(set(names)) == len(names)


def test_no_spelling_names_two_gpus() -> None:
    owner: dict[str, str] = {}
    for gpu in gpu_catalog():
        for spelling in (gpu.key, gpu.name, *gpu.aliases):
            normalized = gpus._normalized(spelling)
            assert owner.setdefault(normalized, gpu.key) == gpu.key, f"{spelling!r} is also {owner[normalized]}"


def test_vendor_platform_family_and_capability_agree() -> None:
    for gpu in gpu_catalog():
        if gpu.vendor == "amd":
            assert (gpu.platform, gpu.compute_capability) == ("rocm", None), gpu.key
            assert gpu.family in {"cdna2", "cdna3", "cdna4"}, gpu.key
        else:
            assert (gpu.vendor, gpu.platform) == ("nvidia", "cuda"), gpu.key
            assert gpu.compute_capability is not None, gpu.key
            assert gpu.family not in {"cdna2", "cdna3", "cdna4"}, gpu.key


def test_datacenter_blackwell_is_its_own_family() -> None:
    assert {find_gpu(name).family for name in ("B200", "B300")} == {"blackwell"}
    assert {find_gpu(name).family for name in ("RTX 5090", "RTX PRO 6000")} == {"blackwell-rtx"}
    assert find_gpu("B300").compute_capability == (10, 3)
    assert find_gpu("RTX 5090").compute_capability == (12, 0)


def test_usable_memory_is_a_little_below_the_number_on_the_box() -> None:
    # NOTE: vendors' "80 GB" is binary (80 GiB of HBM); the driver keeps some of it, and B300's 288 GB
    # is decimal, so usable memory lands between 90% and 100% of the box figure read as GiB.
    for gpu in gpu_catalog():
        assert gpu.marketed_memory_gb is not None
        assert 0.9 <= gpu.memory_gib / gpu.marketed_memory_gb <= 1.0, gpu.key


def test_every_entry_says_where_its_numbers_come_from() -> None:
    for gpu in gpu_catalog():
        assert gpu.source.startswith(("Memory:", "One MI250X")), gpu.key
        assert gpu.memory_bandwidth_gb_s and gpu.bf16_dense_tflops, gpu.key


# --- names resolve


@pytest.mark.parametrize(("driver_name", "key"), _driver_names())
def test_every_driver_name_resolves_to_its_gpu(driver_name: str, key: str) -> None:
    assert find_gpu(driver_name).key == key


def test_catalog_covers_the_names_nvidia_smi_prints_for_common_gpus() -> None:
    names = {alias for alias, _ in _driver_names()}
    assert {
        "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090", "AMD Instinct MI300X",
        "NVIDIA H200", "NVIDIA B200", "NVIDIA L40S", "NVIDIA A10G", "Tesla T4", "NVIDIA RTX A6000",
    } <= names


@pytest.mark.parametrize(
    ("typed", "key"),
    [
        ("h100", "h100-sxm-80gb"),
        ("H100-80GB", "h100-sxm-80gb"),
        ("h100_sxm_80gb", "h100-sxm-80gb"),
        ("  nvidia h100 80gb hbm3 ", "h100-sxm-80gb"),
        ("a100-80g", "a100-sxm-80gb"),
        ("A100 80GB PCIe", "a100-pcie-80gb"),
        ("GEFORCE RTX 4090", "rtx-4090"),
        ("rtx4090", "rtx-4090"),
        ("nvidia l4", "l4-24gb"),
        ("mi300x", "mi300x-192gb"),
        ("AMD Instinct MI250X/MI250", "mi250x-gcd-64gb"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "rtx-pro-6000-blackwell"),
    ],
)
def test_lookup_ignores_case_separators_and_brand_words(typed: str, key: str) -> None:
    assert find_gpu(typed).key == key


def test_unknown_name_raises_with_close_matches_and_the_custom_memory_escape() -> None:
    with pytest.raises(UnknownGpu) as excinfo:
        find_gpu("rtx 4900")
    message = str(excinfo.value)
    assert "'rtx 4900'" in message
    assert "Did you mean RTX 4090" in message
    assert "--gpu-memory-gib" in message


def test_unknown_name_without_close_matches_still_points_to_custom_memory() -> None:
    with pytest.raises(UnknownGpu, match=r"^Unknown GPU 'banana'\. The catalog has \d+ GPUs.*--gpu-memory-gib"):
        find_gpu("banana")
    with pytest.raises(UnknownGpu):
        find_gpu("NVIDIA")


def test_catalog_loads_from_package_data_not_the_working_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    gpu_catalog.cache_clear()
    gpus._name_index.cache_clear()
    assert find_gpu("h200").memory_gib == 139.80


# --- memory figures


def test_h100_reports_what_vllm_prints() -> None:
    h100 = find_gpu("NVIDIA H100 80GB HBM3")
    assert h100.memory_gib == 79.19
    assert h100.marketed_memory_gb == 80
    assert h100.memory_bytes == 85_029_615_042  # int(79.19 * 2**30)


@pytest.mark.parametrize(("record_id", "key", "total_gib"), CALIBRATED_TOTALS)
def test_memory_equals_the_total_printed_in_calibration_logs(record_id: str, key: str, total_gib: float) -> None:
    assert find_gpu(key).memory_gib == total_gib
    assert _calibration_records()[record_id]["gpu_total_memory_gib"] == total_gib


def test_calibration_gpu_names_resolve() -> None:
    plain_names = {
        record["gpu_name"]
        for record in _calibration_records().values()
        if record["gpu_name"] and "(" not in record["gpu_name"] and "GPU" not in record["gpu_name"]
    }
    assert len(plain_names) >= 10
    for name in plain_names:
        find_gpu(name)


def test_nvidia_smi_figures_convert_mib_exactly() -> None:
    assert find_gpu("NVIDIA RTX A6000").memory_bytes == 49140 * MIB == 51_527_024_640
    assert find_gpu("NVIDIA B300 SXM6 AC").memory_gib == 268.59375  # 275040 MiB
    assert find_gpu("NVIDIA GeForce RTX 5090").memory_gib == 31.8427734375  # 32607 MiB


def test_other_measured_totals() -> None:
    # the totals vLLM prints (issue 20): 0.44-0.60 GiB below nvidia-smi's 23034, 46068 and 24564 MiB
    assert (find_gpu("NVIDIA L4").memory_gib, find_gpu("NVIDIA L40S").memory_gib) == (22.05, 44.39)
    assert find_gpu("NVIDIA GeForce RTX 4090").memory_gib == 23.55  # 23.08 usable at 0.98 (vllm#13061)
    assert find_gpu("B200").memory_gib == 178.35
    assert find_gpu("Tesla T4").memory_gib == 14.74
    assert find_gpu("MI355X").memory_gib == 287.98


# --- custom GPUs


def test_custom_gpu_carries_only_the_memory_given() -> None:
    gpu = custom_gpu(24)
    assert (gpu.name, gpu.key, gpu.memory_gib, gpu.memory_bytes) == ("Custom GPU", "custom", 24.0, 25_769_803_776)
    assert gpu.memory_bandwidth_gb_s is None and gpu.bf16_dense_tflops is None and gpu.vendor is None
    assert custom_gpu(47.5, name="My L40S").name == "My L40S"


@pytest.mark.parametrize("memory_gib", [0, -1.0, 10_000, 1e12, math.nan, math.inf, True])
def test_custom_gpu_rejects_memory_out_of_range(memory_gib: float) -> None:
    with pytest.raises(InvalidInput, match="GiB"):
        custom_gpu(memory_gib)


# --- the model


def test_gpu_spec_is_frozen_and_strict() -> None:
    h100 = find_gpu("h100")
    with pytest.raises(ValidationError):
        h100.memory_gib = 80.0  # type: ignore[misc]
    fields = h100.model_dump(exclude={"memory_bytes"})
    with pytest.raises(ValidationError):
        GpuSpec.model_validate({**fields, "tdp_w": 700})
    with pytest.raises(ValidationError):
        GpuSpec.model_validate({**fields, "key": "H100 SXM"})


def test_public_names_are_sorted() -> None:
    assert gpus.__all__ == sorted(gpus.__all__)


def test_suggestions_rank_by_chip_and_memory():
    """Issue 29 item 7: an H100 with 96 GB suggests the H100s first, the 94 GB NVL among them, not a V100."""
    with pytest.raises(UnknownGpu) as excinfo:
        find_gpu("h100-sxm-96gb")
    assert "Did you mean H100 SXM 80GB, H100 NVL 94GB, A100 SXM 80GB?" in str(excinfo.value)
