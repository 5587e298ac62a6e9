"""Deployments outside what the calibration records cover are said to be, and their band widens by what the gap
leaves unmeasured (calculator/engine/coverage.py, issue 20 item 3)."""

from __future__ import annotations

import json
import math

from calculator.cli import main
from calculator.engine.coverage import coverage_extra_bytes, coverage_gaps
from calculator.engine.estimate import estimate
from calculator.engine.uncertainty import band_table, confidence, coverage_notes, kv_band, kv_uncertainty_bytes
from calculator.scenario import Scenario
from calculator.units import GIB

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
EVERYTHING = {"interconnects": ["nvswitch", "pcie", "nvlink", "xgmi"],
              "eras": ["v0", "v0_used_memory", "v1", "v1_0_17"],
              "quantizations": ["none", "gptq"], "architectures": ["dense", "moe", "mla", "hybrid"]}


def test_what_the_records_cover_is_written_by_the_benchmark():
    covered = band_table()["coverage"]
    # the scored start-ups run over NVSwitch, PCIe and (two MI300X runs at TP 8) AMD's xGMI at TP > 1; none over a
    # bridge
    assert covered["interconnects"] == ["nvswitch", "pcie", "xgmi"]
    assert covered["eras"] == ["v0", "v0_used_memory", "v1", "v1_0_17"]
    assert "none" in covered["quantizations"] and "gptq" not in covered["quantizations"]


def test_a_covered_deployment_keeps_the_calibrated_band():
    result = estimate(Scenario(model=LLAMA, gpu="h100-sxm-80gb", vllm_version="0.32.0"))
    assert coverage_gaps(result, band_table()["coverage"]) == ()
    assert confidence(result) == "calibrated" and coverage_notes(result) == []


def test_an_unmeasured_link_widens_the_band_by_the_nccl_spread():
    result = estimate(Scenario(model=LLAMA, gpu="h100-sxm-80gb", tensor_parallel_size=2, vllm_version="0.32.0",
                               interconnect="nvlink"))
    assert confidence(result) == "outside the records"
    assert coverage_notes(result) == [
        "Outside the calibration records (interconnect: nvlink at TP 2): no start-up record measured NCCL's buffers "
        "over nvlink at TP > 1; the band spans the PCIe to NVSwitch figures."]
    # NVLS at TP 2 in 0.17+ (1.81 GiB) against the P2P buffers over PCIe (0.12 GiB)
    extra = int(1.81 * GIB) - int(0.12 * GIB)
    budget = result.budget
    assert coverage_extra_bytes(result, budget, coverage_gaps(result, band_table()["coverage"]), {}) == extra
    half = int(math.hypot(kv_uncertainty_bytes(budget, "v1_0_17"), extra))
    low, high, _, _ = kv_band(result)
    assert (low, high) == (budget.kv_cache_bytes - half, budget.kv_cache_bytes + half)


def test_each_gap_is_named_once_and_nothing_is_a_gap_where_everything_is_covered():
    result = estimate(Scenario(model="Qwen/Qwen3-30B-A3B", gpu="mi300x", tensor_parallel_size=4,
                               vllm_version="0.32.0"))
    gaps = coverage_gaps(result, {"interconnects": ["pcie"], "eras": ["v1"], "quantizations": ["fp8"],
                                  "architectures": ["dense"]})
    assert [(gap.dimension, gap.value) for gap in gaps] == [
        ("interconnect", "xgmi at TP 4"), ("overhead era", "v1_0_17"), ("quantization", "none"),
        ("architecture", "moe")]
    assert coverage_gaps(result, EVERYTHING) == ()
    assert coverage_gaps(result, {}) == ()  # no coverage written: nothing is claimed either way


def test_an_unmeasured_quantization_counts_the_weights_band_once_more():
    result = estimate(Scenario(model="Qwen/Qwen2.5-32B-Instruct-GPTQ-Int4", gpu="h100-sxm-80gb",
                               vllm_version="0.32.0"))
    gaps = coverage_gaps(result, band_table()["coverage"])
    assert [gap.dimension for gap in gaps] == ["quantization"]
    extra = coverage_extra_bytes(result, result.budget, gaps, {"weights_rel": 0.01})
    assert extra == int(result.budget.weights_bytes * 0.01)


def test_the_cli_and_the_json_say_so(capsys):
    args = ["estimate", "--model", LLAMA, "--gpu", "h100-sxm-80gb", "-tp", "2", "--vllm-version", "0.32.0",
            "--interconnect", "nvlink"]
    assert main(args) == 0
    assert "band widened: Outside the calibration records (interconnect: nvlink at TP 2)" in capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["confidence"] == "outside the records"
    assert out["coverage_gaps"][0].startswith("Outside the calibration records (interconnect: nvlink at TP 2)")
