"""Share links: only non-defaults are written, a link restores the same inputs, bad parts fall back."""

from __future__ import annotations

from calculator import Scenario, Workload, estimate
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


# One non-default value per link key, at the edges the engine accepts (the values among them).
EVERY_KEY = {
    "m": "Qwen/Qwen3-8B", "g": "a100-sxm-80gb", "mem": "5000", "dev": "rocm", "tp": "2", "pp": "2", "u": "0.1",
    "len": "50000000", "seqs": "500000", "mbt": "50000000", "bs": "32", "dt": "float16", "kv": "fp8", "q": "fp8",
    "kvb": "8589934592", "blocks": "1000", "eager": "1", "ext": "0", "async": "0", "v": "0.30.0", "other": "5000",
    "adj": "-1.5", "dp": "4", "ep": "1", "offload": "2.5", "pc": "0",
    "in": "2000", "out": "300", "in95": "4000", "out95": "600", "prefix": "512", "n": "4", "users": "64",
}


def test_every_key_round_trips_exactly():
    from calculator.url_state import SCENARIO_KEYS, WORKLOAD_KEYS

    assert set(EVERY_KEY) == {*SCENARIO_KEYS.values(), *WORKLOAD_KEYS.values()}
    scenario, workload, _, warnings = from_query_params(EVERY_KEY)
    assert warnings == []
    assert to_query_params(scenario, workload) == EVERY_KEY


def test_gpu_names_as_nvidia_smi_prints_them_resolve_to_the_catalog():
    scenario, _, _, warnings = from_query_params({"g": "NVIDIA H100 80GB HBM3"})
    assert scenario.gpu == "h100-sxm-80gb" and warnings == []
    assert from_query_params({"g": "NVIDIA A100-SXM4-40GB"})[0].gpu == "a100-sxm-40gb"


def test_an_unknown_gpu_is_reported_as_substituted():
    from calculator.url_state import read_link

    state = read_link({"g": "tpu-v5"})
    assert state.substituted == {"gpu": "tpu-v5"}
    assert state.scenario.gpu == "h100-sxm-80gb"
    assert state.warnings == ("Unknown GPU 'tpu-v5'. The numbers are for the default GPU (H100 SXM 80GB) instead",)
    typo = read_link({"g": "h100-80gbX"})
    assert "Did you mean" in typo.warnings[0] and typo.substituted == {"gpu": "h100-80gbX"}


def test_low_gpu_memory_utilization_is_accepted_like_vllm():
    assert from_query_params({"u": "0.1"})[0].gpu_memory_utilization == 0.1


def test_dtype_spellings_vllm_accepts():
    assert from_query_params({"dt": "half"})[0].dtype == "float16"
    scenario, _, _, warnings = from_query_params({"dt": "int3", "q": "awq4", "kv": "fp3"})
    assert (scenario.dtype, scenario.quantization, scenario.kv_cache_dtype) == ("auto", None, "auto")
    assert [w.split(":")[0] for w in warnings] == ["ignored link value dt='int3'", "ignored link value kv='fp3'",
                                                   "ignored link value q='awq4'"]


def test_a_version_newer_than_modelled_is_kept_and_the_estimate_says_whose_rules_apply():
    for written, shown in (("1.0", "1.0.0"), ("0.35.0", "0.35.0")):
        scenario, _, _, warnings = from_query_params({"v": written})
        assert scenario.vllm_version == shown and warnings == []
        assert (f"vLLM {shown} is newer than the newest release modelled (0.34): its figures use vLLM 0.34's rules, "
                "which may have changed since") in estimate(scenario).warnings


def test_a_version_vllm_cannot_have_is_refused_with_a_warning():
    scenario, _, _, warnings = from_query_params({"v": "99.0"})
    assert scenario.vllm_version == "0.34.0" and warnings[0].startswith("ignored link value v='99.0'")


def test_an_unreadable_version_falls_back_with_a_warning():
    scenario, _, _, warnings = from_query_params({"v": "1e20.0"})
    assert scenario.vllm_version == "0.34.0" and warnings[0].startswith("ignored link value v='1e20.0'")
