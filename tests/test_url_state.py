"""Share links: only non-defaults are written, a link restores the same inputs, bad parts fall back."""

from __future__ import annotations

from calculator import Scenario, Workload
from calculator.url_state import from_query_params, to_query_params


def test_defaults_make_an_empty_link():
    assert to_query_params(Scenario(), Workload()) == {}


def test_short_readable_keys_for_changed_values():
    params = to_query_params(Scenario(model="Qwen/Qwen3-8B", tensor_parallel_size=2, gpu_memory_utilization=0.85,
                                      enforce_eager=True), Workload(prompt_tokens_mean=2000, parallel_samples=4))
    assert params == {"m": "Qwen/Qwen3-8B", "tp": "2", "u": "0.85", "eager": "1", "in": "2000", "n": "4"}


def test_round_trip_restores_exactly():
    scenario = Scenario(model="google/gemma-3-27b-it", gpu=None, gpu_memory_gib=47.5, max_model_len=32768,
                        kv_cache_dtype="fp8", vllm_version="0.30.0", other_processes_memory_gib=2.0,
                        enable_extensible_kv_cache=False)
    workload = Workload(prompt_tokens_mean=900, output_tokens_mean=300, prompt_tokens_p95=4000,
                        shared_prefix_tokens=512, target_concurrent_requests=64)
    restored, restored_workload, view, warnings = from_query_params(
        to_query_params(scenario, workload, view={"sweep": "tp"}))
    assert (restored, restored_workload, view, warnings) == (scenario, workload, {"sweep": "tp"}, [])


def test_bad_values_fall_back_to_defaults_with_warnings():
    scenario, workload, _, warnings = from_query_params({"tp": "zero", "u": "1.7", "len": "4096", "n": "-3",
                                                         "zzz": "1"})
    assert scenario == Scenario(max_model_len=4096)
    assert workload == Workload()
    assert len(warnings) == 4
    assert any("zzz" in w for w in warnings) and any("u=" in w for w in warnings)


def test_secrets_never_enter_a_link():
    params = to_query_params(Scenario(), view={"token": "hf_secret", "sweep": "len"})
    assert params == {"sweep": "len"}
    _, _, view, warnings = from_query_params({"token": "hf_secret"})
    assert view == {} and warnings == []
