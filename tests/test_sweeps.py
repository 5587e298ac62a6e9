"""Sweeps reproduce single estimates point by point and mark where the model stops fitting."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

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


def test_the_max_model_len_sweeps_boundary_is_the_headlines_largest_max_model_len():
    # Issue 26 item 3: a 40-point grid (steps of 3,276) put the boundary at 19,656 for a headline of 21,248.
    # Here: 8 GiB of KV cache in 2 MiB blocks of 16 tokens, minus the null block, hold 4,095 x 16 = 65,520 tokens,
    # the longest request vLLM starts with; the grid's own points around it are 62,244 and 65,535.
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    values = default_values("max_model_len", SCENARIO, spec)
    assert 65520 in values
    assert fit_boundary(sweep(SCENARIO, "max_model_len", values, spec)) == 65520
    assert estimate(SCENARIO, spec).max_fitting_model_len == 65520


def test_no_max_model_len_above_the_models_own_fits():
    # Issue 26 item 2: vLLM refuses 65,536 for Qwen3-30B-A3B (40,960 in its config.json), however much KV cache is
    # free, so the largest max_model_len is 40,960 and the fix says so, with VLLM_ALLOW_LONG_MAX_MODEL_LEN as the other.
    from calculator.engine.advice import fixes

    scenario = Scenario(model="Qwen/Qwen3-30B-A3B", gpu="h100-sxm-80gb", tensor_parallel_size=2, quantization="fp8",
                        max_model_len=65536)
    result = estimate(scenario, load_model_spec(scenario.model))
    assert not result.fits and result.max_fitting_model_len == 40960
    options = {fix.description.split(" (")[0]: fix for fix in fixes(result)}
    assert options["lower max_model_len to 40,960"].changes == {"max_model_len": 40960}
    allow = options["set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 to keep max_model_len 65,536"]
    assert allow.environment == {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"} and allow.changes == {}


def test_a_sweep_point_is_the_scenario_built_afresh_with_the_one_field_changed():
    base = Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb", hf_overrides={"rope_theta": 1000},
                    cudagraph_capture_sizes=(1, 2, 4), enable_lora=True)
    assert base.replace(max_model_len=2048) == Scenario(
        model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb", hf_overrides='{"rope_theta": 1000}',
        cudagraph_capture_sizes=(1, 2, 4), enable_lora=True, max_model_len=2048)
    with pytest.raises(ValidationError, match="max_num_seqs"):
        base.replace(max_num_seqs=0)
    with pytest.raises(ValidationError, match="give a GPU from the catalog"):
        base.replace(gpu=None)


def test_what_is_computed_once_per_deployment_never_leaks_into_another_deployment():
    # NOTE: the estimate memoises what a sweep leaves unchanged (calculator.engine.estimate._DEPLOYMENTS and
    # _deployment_terms, calculator.engine.settings.deployment_settings); each variant below changes one of their
    # inputs, so a key that missed one would hand a variant the previous deployment's numbers or warnings.
    from calculator.engine.estimate import clear_caches

    base = dict(model="Qwen/Qwen3-30B-A3B", gpu="h100-sxm-80gb", vllm_version="0.32.0")
    variants = [{}, {"dtype": "float16"}, {"kv_cache_dtype": "fp8"}, {"quantization": "fp8"},
                {"interconnect": "pcie", "tensor_parallel_size": 2}, {"tensor_parallel_size": 2},
                {"pipeline_parallel_size": 2}, {"cpu_offload_gb": 4.0}, {"enforce_eager": True},
                {"data_parallel_size": 2, "enable_expert_parallel": True}, {"gpu_memory_gib": 60.0},
                {"gpu": "a100-sxm-80gb"}, {"vllm_version": "0.10.0"}, {"device": "cpu"}, {"block_size": 32},
                {"speculative_method": "ngram", "num_speculative_tokens": 3}, {"enable_prefix_caching": False},
                {"hf_overrides": '{"max_position_embeddings": 8192}'}]
    warm = [estimate(Scenario(**{**base, **variant})).model_dump_json() for variant in variants]
    for variant, seen in zip(variants, warm):
        clear_caches()
        assert estimate(Scenario(**{**base, **variant})).model_dump_json() == seen, variant


def test_a_v0_refusal_that_reads_max_model_len_follows_each_point_of_one_deployment():
    # NOTE: V0 without chunked prefill refuses a batch shorter than max_model_len (SchedulerConfig._verify_args), the
    # one engine check that reads a point's value: the deployment's memoised choices must not carry it across points.
    from calculator.engine.estimate import clear_caches

    base = Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="a100-sxm-80gb", vllm_version="0.6.6",
                    max_num_batched_tokens=4096, max_model_len=2048)
    short, long = estimate(base), estimate(base.replace(max_model_len=8192))
    assert short.error is None and short.settings.engine == "v0"
    assert long.error is not None and "max_num_batched_tokens (4096) is smaller than max_model_len (8192)" in long.error
    clear_caches()
    assert estimate(base.replace(max_model_len=8192)).model_dump_json() == long.model_dump_json()
    assert estimate(base).model_dump_json() == short.model_dump_json()
