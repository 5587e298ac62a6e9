"""Share links: only non-defaults are written, a link restores the same inputs, bad parts fall back."""

from __future__ import annotations

from calculator import Scenario, Workload, estimate
from calculator.speed.inputs import SpeedInputs
from calculator.url_state import (
    from_query_params,
    parse_price_list,
    price_list_text,
    read_link,
    read_recommend_link,
    recommend_query_params,
    to_query_params,
)


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
    "adj": "-1.5", "dp": "4", "ep": "1", "offload": "2.5", "pc": "0", "cgs": "1,2,4,8", "link": "nvlink", "inst": "docker", "a2a": "deepep_high_throughput",
    "cp": "0", "eplb": "1", "redundant": "32",
    "lora": "1", "loras": "4096", "lrank": "512", "cpuloras": "4096", "ldt": "bfloat16", "lshard": "1",
    "spec": "draft_model", "draft": "meta-llama/Llama-3.2-1B-Instruct", "ntok": "128", "dtp": "1", "accept": "0.99",
    "hfo": '{"num_hidden_layers":16}',
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


# Issues 25 (items 6, 7, 10) and 28 (items 4, 6): a link asks only for what the page's widgets can show, a rule
# across fields drops only the field it blames, and every change is named.
def test_a_cross_field_failure_keeps_the_valid_model_and_names_what_it_dropped():
    link = read_link({"m": "Qwen/Qwen2.5-7B-Instruct", "g": "none", "mem": "nan"})
    assert link.scenario == Scenario(model="Qwen/Qwen2.5-7B-Instruct")
    assert link.warnings == (
        "ignored link value mem='nan': not a finite number; using the default",
        "ignored link value g='none': give a GPU from the catalog or its memory (mem); using the default")


def test_a_rule_across_workload_fields_drops_the_dependent_field_only():
    link = read_link({"in": "100", "prefix": "200", "out": "7"})
    assert link.workload == Workload(prompt_tokens_mean=100, output_tokens_mean=7)
    assert link.warnings == ("ignored link value prefix='200': shared_prefix_tokens cannot exceed the mean prompt "
                             "length; using the default",)


def test_none_is_read_in_any_case():
    assert read_link({"g": "None", "mem": "24"}).scenario == read_link({"g": "none", "mem": "24"}).scenario == \
        Scenario(gpu=None, gpu_memory_gib=24)
    assert read_link({"len": "NONE"}).warnings == ()


def test_a_utilization_below_the_slider_is_named_not_a_crash():
    link = read_link({"u": "0.005"})
    assert link.scenario.gpu_memory_utilization is None
    assert link.warnings == ("ignored link value u='0.005': below 0.01, the least the Plan page's slider takes; using "
                             "the default",)


def test_gpu_memory_below_what_the_engine_plans_for_is_named():
    assert read_link({"mem": "0.1", "g": "none"}).warnings[0] == (
        "ignored link value mem='0.1': input should be greater than or equal to 0.25; using the default")


def test_tiny_positive_rates_are_refused_by_name():
    for key, floor in (("rate", "0.000001"), ("mbu", "0.000001"), ("mfu", "0.000001"), ("tflops", "0.001"),
                       ("bw", "1"), ("price", "0.01"), ("itl", "0.001"), ("ttft", "0.001"), ("toks", "0.001"),
                       ("e2e", "0.000001")):
        for tiny in ("5e-324", "1e-300"):
            link = read_link({key: tiny})
            assert link.speed == SpeedInputs()
            assert link.warnings == (f"ignored link value {key}={tiny!r}: input should be greater than or equal to "
                                     f"{floor}; using the default",), key


def test_recommend_says_it_dropped_a_zero_output_length():
    link = read_recommend_link({"out": "0", "out95": "0"})
    assert link.workload == Workload()
    assert link.warnings == (
        "ignored link value out='0': below 1, the least the Recommend page takes; using the default",
        "ignored link value out95='0': below 1, the least the Recommend page takes; using the default")


def test_prices_round_trip_exactly():
    warnings: list[str] = []
    prices = parse_price_list("h100:2.123456789,l40s:1", warnings)
    assert price_list_text(prices) == "h100-sxm-80gb:2.123456789,l40s-48gb:1" and warnings == []
    link = read_recommend_link({"prices": "h100:2.123456789"})
    assert recommend_query_params(link.request, link.workload, link.speed)["prices"] == "h100-sxm-80gb:2.123456789"
    parse_price_list("h100:1e-300", warnings)
    assert warnings == ["ignored price 'h100:1e-300' in the link: dollars per GPU-hour must be at least 0.01 and "
                        "below 10,000"]


def test_capture_sizes_a_link_cannot_read_are_dropped_with_a_warning():
    scenario, _, _, warnings = from_query_params({"cgs": "1,x", "tp": "2"})
    assert scenario.cudagraph_capture_sizes is None and scenario.tensor_parallel_size == 2
    assert warnings == ["ignored link value cgs='1,x': not a list of batch sizes (1 to 100,000,000): '1,x'"]


def test_a_link_takes_the_size_suffixes_the_cli_and_vllm_take():
    """Issue 29 item 7: `--max-model-len 128k` works on the CLI, so `len=128k` works in a link (vLLM's
    human_readable_int: k = x1000, K = x1024)."""
    assert read_link({"len": "128k"}).scenario.max_model_len == 128_000
    assert read_link({"len": "128K", "mbt": "8k"}).scenario.max_model_len == 131_072
    assert read_link({"mbt": "8k"}).scenario.max_num_batched_tokens == 8_000
    assert read_recommend_link({"len": "32k"}).request.max_model_len == 32_000
    bad = read_link({"len": "12x"})
    assert bad.scenario.max_model_len is None and bad.warnings[0].startswith("ignored link value len='12x'")


def test_the_install_round_trips_and_an_unknown_one_falls_back_to_pip():
    scenario, _, _, warnings = from_query_params({"inst": "docker", "v": "0.11.0"})
    assert (scenario.install, warnings) == ("docker", [])
    assert to_query_params(scenario, Workload())["inst"] == "docker"
    scenario, _, _, warnings = from_query_params({"inst": "conda"})
    assert scenario.install == "pip" and any("inst" in w for w in warnings)
