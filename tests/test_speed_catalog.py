"""Every catalog GPU carries what the speed model needs, with a price; prices can be overridden."""

from __future__ import annotations

import json

import pytest

from calculator import find_gpu, gpu_catalog, gpu_price, price_table
from calculator.errors import InvalidInput
from calculator.speed.prices import PRICES_ENV, default_prices, parse_price_overrides

FP8_FAMILIES = {"ada", "hopper", "blackwell", "blackwell-rtx", "cdna3", "cdna4"}


@pytest.mark.parametrize("gpu", gpu_catalog(), ids=lambda g: g.key)
def test_every_catalog_gpu_has_speed_data_and_a_price(gpu) -> None:
    # NOTE: parametrised over the catalog as loaded, so entries added later are covered too.
    assert gpu.memory_bandwidth_gb_s and gpu.bf16_dense_tflops, gpu.key
    assert gpu.interconnect and gpu.interconnect_gb_s and gpu.speed_source, gpu.key
    if gpu.family in FP8_FAMILIES:
        assert gpu.fp8_dense_tflops and gpu.fp8_dense_tflops >= gpu.bf16_dense_tflops, gpu.key
    else:
        assert gpu.fp8_dense_tflops is None, gpu.key
    price = default_prices().get(gpu.key or "") or default_prices().get(gpu.variant_of or "")
    assert price and price.usd_per_gpu_hour > 0 and price.as_of and price.source, gpu.key
    assert gpu_price(gpu) == price, gpu.key  # a memory-mode variant costs what its hardware costs


def test_a_memory_mode_variant_is_ranked_only_on_request() -> None:
    numa = find_gpu("GH200 NUMA mode")
    assert numa.variant_of == "gh200-96gb" and gpu_price(numa) == gpu_price(find_gpu("GH200"))


def test_datasheet_figures() -> None:
    h100 = find_gpu("h100")
    assert (h100.fp8_dense_tflops, h100.int8_dense_tops, h100.interconnect_gb_s) == (1979, 1979, 450)
    b200 = find_gpu("b200")
    assert (b200.fp8_dense_tflops, b200.fp4_dense_tflops, b200.interconnect_gb_s) == (4500, 9000, 900)
    assert find_gpu("l4").interconnect == "PCIe 4.0 x16" and find_gpu("l4").interconnect_gb_s == 32


def test_prices_from_the_environment_replace_the_defaults(tmp_path, monkeypatch) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"NVIDIA H100 80GB HBM3": 1.85, "l4": {"usd_per_gpu_hour": 0.3}}))
    monkeypatch.setenv(PRICES_ENV, str(path))
    table = price_table()
    assert table["h100-sxm-80gb"].usd_per_gpu_hour == 1.85 and table["l4-24gb"].usd_per_gpu_hour == 0.3
    assert table["a100-sxm-80gb"] == default_prices()["a100-sxm-80gb"]
    assert gpu_price(find_gpu("h100")).usd_per_gpu_hour == 1.85


@pytest.mark.parametrize(("content", "message"), [
    ("not json", "cannot read a JSON price file"),
    ('["h100"]', "expected a JSON object"),
    ('{"h100": -1}', "must be a positive number"),
    ('{"h100": true}', "must be a positive number"),
    ('{"no-such-gpu": 2}', "Unknown GPU"),
])
def test_a_bad_price_file_is_an_error_not_a_fallback(tmp_path, monkeypatch, content, message) -> None:
    path = tmp_path / "prices.json"
    path.write_text(content)
    monkeypatch.setenv(PRICES_ENV, str(path))
    with pytest.raises(InvalidInput, match=message):
        price_table()


def test_dashboard_prices_override_everything() -> None:
    edited = parse_price_overrides({"h100": 9.5}, "dashboard")
    assert price_table(edited)["h100-sxm-80gb"].usd_per_gpu_hour == 9.5


# Measured matmul ceilings (calculator/speed/hardware.py): the figures of Stas Bekman's MAMF table (ml-engineering
# at 744d01e, "Maximum Achievable Matmul FLOPS comparison table") and of zzc0721/torch-performance-test-data.
MAMF_BF16 = {"h100-sxm-80gb": 794.5, "a100-sxm-80gb": 271.2, "b200-180gb": 1745.0, "mi300x-192gb": 668.4}


@pytest.mark.parametrize("gpu", [g for g in gpu_catalog() if g.measured_bf16_tflops], ids=lambda g: g.key)
def test_a_measured_ceiling_names_its_source_and_stays_near_the_datasheet(gpu) -> None:
    # NOTE: 0.5-1.2 of the datasheet: below, the card throttles (MI300X 0.51 is the lowest measured); above, a
    # GeForce card's sustained clock over its rated boost (RTX 5090 1.14) is the most any source shows
    assert gpu.measured_compute_source and "http" in gpu.measured_compute_source, gpu.key
    assert 0.5 <= gpu.measured_bf16_tflops / gpu.bf16_dense_tflops <= 1.2, gpu.key
    if gpu.measured_fp8_tflops:
        assert gpu.fp8_dense_tflops and gpu.measured_fp8_tflops < gpu.fp8_dense_tflops, gpu.key


def test_the_speed_model_divides_by_the_measured_ceiling_or_says_it_had_none() -> None:
    from calculator.model.spec import QuantizationSpec
    from calculator.speed.hardware import gpu_rates

    for key, tflops in MAMF_BF16.items():
        rates = gpu_rates(find_gpu(key), None)
        assert (rates.achievable_flops, rates.ceiling_measured) == (tflops * 1e12, True), key
    nvfp4 = QuantizationSpec(method="modelopt_fp4", weight_bits=4, scale_bytes=1, group_size=16)
    # vLLM's NVFP4 linear layer timed on a B200 at 2.17x its BF16 one: 1,745 x 2.17, where the datasheet's FP4 peak
    # at the BF16 share (1,745 / 2,250) would give 6,980
    fp4 = gpu_rates(find_gpu("b200"), nvfp4)
    assert (fp4.compute_path, fp4.achievable_flops, fp4.speedup_over_bf16) == (
        "fp4", pytest.approx(1745e12 * 2.17, rel=1e-12), 2.17)
    # no FP4 timing of an RTX 5090, but one of the RTX PRO 6000 Blackwell, the same GB202 chip: 1,119 / 391 TFLOPS
    # (2.86x) over the 238 measured on the 5090, not the BF16 share (238 / 209.5) of its 1,676 TFLOPS FP4 peak (1,904,
    # more than the PRO 6000's 188 SMs reached with 170 of them)
    fp4 = gpu_rates(find_gpu("rtx-5090"), nvfp4)
    assert (fp4.compute_path, fp4.achievable_flops, fp4.speedup_over_bf16, fp4.speedup_timed_on) == (
        "fp4", pytest.approx(238e12 * 2.86, rel=1e-12), 2.86, "RTX PRO 6000 Blackwell")
    assert gpu_rates(find_gpu("rtx-pro-6000-blackwell"), nvfp4).speedup_timed_on is None  # timed on itself
    # no FP4 timing on its chip at all (MI355X): the BF16 share measured on it (1,565 / 2,516.6) of its FP4 peak
    mxfp4 = QuantizationSpec(method="mxfp4", weight_bits=4, scale_bytes=1, group_size=32)
    fp4 = gpu_rates(find_gpu("mi355x"), mxfp4)
    assert (fp4.compute_path, fp4.achievable_flops, fp4.speedup_over_bf16) == (
        "fp4", pytest.approx(10066.3e12 * 1565 / 2516.6, rel=1e-12), None)
    a30 = gpu_rates(find_gpu("a30"), None)  # nobody published an A30 matmul: 0.80 of its 165 TFLOPS
    assert (a30.achievable_flops, a30.ceiling_measured) == (pytest.approx(132e12, rel=1e-12), False)
    given = gpu_rates(find_gpu("h100").with_rates(bf16_dense_tflops=500.0), None)  # the user's card, not MAMF's
    assert (given.peak_flops, given.achievable_flops, given.ceiling_measured) == (
        500e12, pytest.approx(400e12, rel=1e-12), False)
    bandwidth_only = find_gpu("h100").with_rates(memory_bandwidth_gb_s=3000.0)
    assert gpu_rates(bandwidth_only, None).achievable_flops == 794.5e12


def test_a_card_takes_timed_speedups_only_from_a_timed_card_of_its_chip() -> None:
    borrowers = [gpu for gpu in gpu_catalog() if gpu.speedups_timed_on]
    assert [gpu.key for gpu in borrowers] == ["rtx-5090"]
    for gpu in borrowers:
        donor = find_gpu(gpu.speedups_timed_on)
        assert donor.speedups_timed_on is None and donor.measured_fp8_speedup and donor.measured_fp4_speedup
        assert (donor.family, donor.compute_capability) == (gpu.family, gpu.compute_capability), gpu.key
        assert gpu.measured_fp8_speedup is gpu.measured_fp4_speedup is None, gpu.key  # its own, where timed, win
