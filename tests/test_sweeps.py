"""Sweeps reproduce single estimates point by point and mark where the model stops fitting."""

from __future__ import annotations

from calculator import Scenario, estimate, load_model_spec
from calculator.sweeps import default_values, fit_boundary, points_to_csv, sweep
from calculator.units import GIB

SCENARIO = Scenario(model="meta-llama/Llama-3.1-8B-Instruct", vllm_version="0.32.0", kv_cache_memory_bytes=8 * GIB,
                    block_size=16)


def test_each_point_equals_the_single_estimate():
    points = sweep(SCENARIO, "max_model_len", [1024, 4096, 65536])
    # 8 GiB / 2 MiB per block = 4096 blocks; concurrency = 4096 / cdiv(L, 16)
    assert [p.max_concurrency for p in points] == [64.0, 16.0, 1.0]
    single = estimate(SCENARIO.replace(max_model_len=4096))
    assert points[1].kv_cache_tokens == single.capacity.kv_cache_tokens


def test_boundary_is_the_last_fitting_length():
    points = sweep(SCENARIO, "max_model_len", [32768, 65535, 65536, 65537, 131072])
    # 4096 blocks minus the null block hold 65,520 tokens: 65,535 needs 4,096 blocks, one too many.
    assert fit_boundary(points) == 32768
    assert [p.fits for p in points] == [True, False, False, False, False]


def test_invalid_values_become_non_fitting_points():
    points = sweep(SCENARIO.replace(max_model_len=4096), "tensor_parallel_size", [1, 3])
    assert points[0].fits and not points[1].fits
    assert "divisible" in points[1].error


def test_default_ranges_and_csv():
    spec = load_model_spec("deepseek-ai/DeepSeek-V3")
    assert default_values("kv_cache_dtype", SCENARIO, spec) == ["auto", "fp8", "fp8_ds_mla"]
    csv_text = points_to_csv(sweep(SCENARIO, "max_model_len", [1024]), "max_model_len")
    assert csv_text.splitlines()[0].startswith("max_model_len,fits,num_gpus")
    assert csv_text.splitlines()[1].startswith("1024,True,1,4096,")
