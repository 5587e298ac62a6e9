"""The link between the GPUs decides NCCL's buffers and vLLM's custom all-reduce (calculator/engine/interconnect.py).

Expected figures are computed by hand from the constants' sources: vLLM 0.32's custom_all_reduce.py (8 MiB
``max_size``, two IPC buffers and an 8 MiB ``rank_data``; world sizes 2/4/6/8/16; more than two PCIe GPUs refused),
the TP = 1 non-torch figure of 0.17+ (0.26 GiB), the 0.27+ free-drop term (0.49 GiB), the NVLS figures measured on
H100 SXM (1.81 GiB at TP 2, 0.03 per peer beyond) and the P2P figures (PCIe 0.12 GiB from vllm#13061, NVLink 0.25).
"""

from __future__ import annotations

import json

import pytest

from calculator.cli import main
from calculator.engine.estimate import estimate
from calculator.engine.interconnect import custom_all_reduce_enabled, has_nvls, resolve_interconnect
from calculator.gpus import find_gpu, gpu_catalog
from calculator.scenario import Scenario
from calculator.url_state import from_query_params, to_query_params
from calculator.units import GIB, MIB

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _budget(gpu: str, tp: int, version: str = "0.32.0", **extra):
    return estimate(Scenario(model=MODEL, gpu=gpu, tensor_parallel_size=tp, vllm_version=version, **extra))


@pytest.mark.parametrize(("link", "world", "enabled"), [
    ("pcie", 2, True), ("pcie", 4, False), ("pcie", 8, False), ("nvlink", 6, True), ("nvswitch", 8, True),
    ("nvswitch", 3, False), ("xgmi", 8, True), ("nvswitch", 1, False), ("nvswitch", 16, True), ("nvswitch", 32, False),
])
def test_custom_all_reduce_runs_on_nvlink_or_exactly_two_pcie_gpus(link, world, enabled):
    assert custom_all_reduce_enabled(link, world, "cuda") is enabled
    assert custom_all_reduce_enabled(link, world, "cpu") is False


def test_pcie_tp2_non_torch_is_the_p2p_buffers_and_the_context_holds_the_custom_all_reduce():
    result = _budget("l40s-48gb", 2)
    assert result.settings.interconnect == "pcie"
    # 0.26 (cuBLAS, TP 1) + 0.49 (0.27+ free drop) + 0.12 (NCCL P2P over PCIe)
    assert result.budget.non_torch_bytes == int(0.26 * GIB) + int(0.49 * GIB) + int(0.12 * GIB)
    # CUDA context 0.50 + communicators 0.25 + custom all-reduce: 8 MiB max_size + the 16 MiB reduce-scatter buffer +
    # 8 MiB rank_data (no symmetric memory over PCIe)
    assert result.budget.context_bytes == int(0.50 * GIB) + int(0.25 * GIB) + 32 * MIB


def test_more_than_two_pcie_gpus_run_no_custom_all_reduce_and_the_buffers_do_not_grow():
    two, eight = _budget("l40s-48gb", 2), _budget("l40s-48gb", 8)
    assert eight.budget.non_torch_bytes == two.budget.non_torch_bytes
    assert eight.budget.context_bytes == int(0.50 * GIB) + int(0.25 * GIB)


@pytest.mark.parametrize(("gpu", "tp", "all_reduce_mib"), [
    ("h100-sxm-80gb", 2, 64 + 8 + 16 + 8),  # symmetric memory 64 MiB; custom all-reduce max_size min(64, 8) MiB
    ("h100-sxm-80gb", 8, 64 + 0.25 + 16 + 8),  # Hopper TP 8 caps the custom all-reduce at 256 KiB
    ("b200-180gb", 8, 128 + 1 + 16 + 8),  # Blackwell TP 8: 128 MiB of symmetric memory, 1 MiB cap
])
def test_hopper_and_blackwell_on_nvlink_add_the_symmetric_memory_buffer(gpu, tp, all_reduce_mib):
    result = _budget(gpu, tp)
    assert result.budget.context_bytes == int(0.50 * GIB) + int(0.25 * GIB) + int(all_reduce_mib * MIB)
    # before 0.11 no symmetric memory, before 0.28 no reduce-scatter buffer: 8 + 8 + 8 MiB
    older = _budget(gpu, tp, "0.10.2")
    assert older.budget.context_bytes == int(0.50 * GIB) + int(0.25 * GIB) + 24 * MIB


def test_nvswitch_hopper_counts_the_nvls_buffers_per_peer():
    result = _budget("h100-sxm-80gb", 4)
    assert result.settings.interconnect == "nvswitch"
    # 0.26 + 0.49 + 1.81 (TP 2) + 2 x 0.03 (peers 3 and 4)
    expected = int(0.26 * GIB) + int(0.49 * GIB) + int(1.81 * GIB) + 2 * int(0.03 * GIB)
    assert result.budget.non_torch_bytes == expected


def test_an_ampere_nvswitch_system_has_no_nvls_and_gets_the_nvlink_p2p_buffers():
    a100 = find_gpu("a100-sxm-80gb")
    assert not has_nvls("nvswitch", a100)
    assert has_nvls("nvswitch", find_gpu("h200-141gb"))
    result = _budget("a100-sxm-80gb", 2)
    assert result.budget.non_torch_bytes == int(0.26 * GIB) + int(0.49 * GIB) + int(0.25 * GIB)


def test_choosing_pcie_for_an_sxm_card_frees_the_nvls_memory_for_the_kv_cache_and_says_so():
    nvswitch, pcie = _budget("h100-sxm-80gb", 2), _budget("h100-sxm-80gb", 2, interconnect="pcie")
    assert pcie.budget.kv_cache_bytes - nvswitch.budget.kv_cache_bytes == int(1.81 * GIB) - int(0.12 * GIB)
    assert any("H100 SXM 80GB is sold with NVSwitch" in w and "PCIe only" in w for w in pcie.warnings)
    assert not any("is sold with" in w for w in nvswitch.warnings)


def test_a_gpu_outside_the_catalog_is_taken_as_pcie_and_the_warning_says_so():
    # Every NVSwitch system with NVLS (Hopper+) is in the catalog by name; a card outside it is a PCIe card. The
    # Turing TP 2 record (vLLM 0.28.1rc1, two 24 GB cards) printed 0.21 GiB non-torch with custom all-reduce on,
    # where NVSwitch with NVLS would be 1.81 GiB more than the TP 1 terms.
    custom = estimate(Scenario(model=MODEL, gpu=None, gpu_memory_gib=23.47, tensor_parallel_size=2,
                               vllm_version="0.32.0"))
    assert custom.settings.interconnect == "pcie"
    # as the L40S at TP 2: 0.26 (cuBLAS, TP 1) + 0.49 (0.27+ free drop) + 0.12 (NCCL P2P over PCIe)
    assert custom.budget.non_torch_bytes == int(0.26 * GIB) + int(0.49 * GIB) + int(0.12 * GIB)
    # context 0.50 + communicators 0.25 + custom all-reduce (two PCIe GPUs): 8 + 16 + 8 MiB
    assert custom.budget.context_bytes == int(0.50 * GIB) + int(0.25 * GIB) + 32 * MIB
    assert any("outside the catalog is not known: PCIe only" in w and "--interconnect" in w for w in custom.warnings)
    chosen = estimate(Scenario(model=MODEL, gpu=None, gpu_memory_gib=23.47, tensor_parallel_size=2,
                               vllm_version="0.32.0", interconnect="nvlink"))
    assert chosen.settings.interconnect == "nvlink"
    assert not any("outside the catalog" in w for w in chosen.warnings)
    alone = estimate(Scenario(model=MODEL, gpu=None, gpu_memory_gib=23.47, vllm_version="0.32.0"))
    assert not any("outside the catalog" in w for w in alone.warnings)


def test_the_link_does_not_matter_on_one_gpu():
    assert _budget("h100-sxm-80gb", 1).budget == _budget("h100-sxm-80gb", 1, interconnect="pcie").budget
    assert not any("is sold with" in w for w in _budget("h100-sxm-80gb", 1, interconnect="pcie").warnings)


def test_v0_pcie_tp2_matches_the_two_rtx_4090_start_up():
    # vllm-project/vllm#13061 (2 x RTX 4090, vLLM 0.7, V0): "non_torch_memory takes 0.25GiB" = 0.13 + 0.12
    result = _budget("rtx-4090", 2, "0.7.3")
    assert result.budget.non_torch_bytes == int(0.13 * GIB) + int(0.12 * GIB)


def test_every_card_sold_both_ways_defaults_to_its_usual_link_and_offers_the_other():
    both = {gpu.key: gpu.topologies for gpu in gpu_catalog() if len(gpu.topologies) > 1}
    assert both["rtx-a6000"] == ("pcie", "nvlink")
    assert both["h100-nvl-94gb"] == ("nvlink", "pcie")
    assert resolve_interconnect(None, find_gpu("rtx-a6000")) == "pcie"
    assert resolve_interconnect("nvlink", find_gpu("rtx-a6000")) == "nvlink"
    assert all(gpu.topologies == ("xgmi",) for gpu in gpu_catalog() if gpu.vendor == "amd")


def test_the_link_travels_in_the_share_link():
    scenario = Scenario(model=MODEL, tensor_parallel_size=2, interconnect="pcie")
    params = to_query_params(scenario)
    assert params["link"] == "pcie"
    assert from_query_params(params)[0].interconnect == "pcie"
    _, _, _, warnings = from_query_params({"link": "ethernet"})
    assert warnings == ["ignored link value link='ethernet': input should be 'nvswitch', 'nvlink', 'pcie' or "
                        "'xgmi'; using the default"]


def test_cli_interconnect_flag(capsys):
    assert main(["estimate", "--model", MODEL, "--gpu", "l40s", "-tp", "2", "--vllm-version", "0.32.0",
                 "--interconnect", "pcie", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["interconnect"] == "pcie"
    assert out["non_torch_bytes"] == int(0.26 * GIB) + int(0.49 * GIB) + int(0.12 * GIB)
    with pytest.raises(SystemExit) as exit_info:
        main(["estimate", "--model", MODEL, "--interconnect", "infiniband"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'infiniband'" in capsys.readouterr().err


def test_the_plan_page_offers_the_link_and_says_when_the_band_widens():
    from pathlib import Path

    from support.apptest import metrics, run_with_link

    app_file = str(Path(__file__).resolve().parents[1] / "app.py")
    link = {"m": MODEL, "g": "h100-sxm-80gb", "tp": "2", "v": "0.32.0"}
    nvswitch, pcie = run_with_link(app_file, link), run_with_link(app_file, {**link, "link": "pcie"})
    assert pcie.selectbox(key="plan_interconnect_choice").value == "PCIe only (no NVLink)"
    tokens = [int(metrics(app)["KV cache tokens"].replace(",", "")) for app in (nvswitch, pcie)]
    expected = [_budget("h100-sxm-80gb", 2).capacity.kv_cache_tokens,
                _budget("h100-sxm-80gb", 2, interconnect="pcie").capacity.kv_cache_tokens]
    assert tokens == expected and tokens[1] > tokens[0]  # 1.69 GiB less NCCL memory over PCIe
    assert any("H100 SXM 80GB is sold with NVSwitch" in w.value for w in pcie.warning)
    bridge = run_with_link(app_file, {**link, "link": "nvlink"})
    assert any("Outside the calibration records (interconnect: nvlink at TP 2)" in c.value for c in bridge.caption)
