"""The Plan page through Streamlit's AppTest: values equal the engine's, links round-trip, bad input is handled."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from support.apptest import metrics, run_with_link
from support.local_hub import LocalHub

from calculator import Scenario, Workload, estimate, find_gpu, workload_capacity
from calculator.model.architecture import build_model_spec
from calculator.serve_command import parse_serve_command
from calculator.summary import estimate_summary

APP = str(Path(__file__).resolve().parents[1] / "app.py")


@pytest.fixture(autouse=True)
def fresh_caches():
    st.cache_data.clear()
    st.cache_resource.clear()


run_app = partial(run_with_link, APP)


def link_of(app: AppTest) -> dict[str, str]:
    """The page's share-link parameters (AppTest may hold a value or a list of values per key)."""
    return {key: value[-1] if isinstance(value, list) else value for key, value in app.query_params.items()}


def expected_kpis(scenario: Scenario, workload: Workload = Workload()) -> dict[str, str]:
    result = estimate(scenario)
    return {
        "KV cache tokens": f"{result.capacity.kv_cache_tokens:,}",
        "Max concurrency": f"{result.capacity.max_concurrency:,.2f}x",
        "Workload concurrency": f"{workload_capacity(result, workload).concurrency_p95:,}",
        "GPU blocks": f"{result.capacity.num_gpu_blocks:,}",
        "Largest max_model_len": f"{result.max_fitting_model_len:,}",
    }


def text_of(app: AppTest) -> str:
    return " ".join(e.value for kind in ("markdown", "success", "warning", "error", "info", "caption")
                    for e in getattr(app, kind))


def commands(app: AppTest) -> list[str]:
    return [code.value for code in app.code if code.value.startswith("vllm serve")]


def open_sections(app: AppTest, *keys: str) -> AppTest:
    """Open expanders whose widgets are drawn only while open (``inputs.lazy_expander``), as a click does."""
    for key in keys:
        app.session_state[key] = True
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def import_command(app: AppTest, command: str) -> AppTest:
    app.text_area(key="plan_import_text").set_value(command)
    app.button(key="plan_import_button").click()
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def test_default_view_shows_the_engine_numbers():
    app = run_app()
    shown = metrics(app)
    for label, value in expected_kpis(Scenario()).items():
        assert shown[label] == value
    assert app.success and "Fits" in app.success[0].value


def test_changing_inputs_changes_the_kpis_like_the_engine():
    app = run_app()
    app.selectbox(key="plan_preset").set_value("Qwen/Qwen3-32B")
    app.selectbox(key="plan_gpu").set_value("a100-sxm-80gb")
    app.selectbox(key="plan_tensor_parallel_size").set_value(2)
    app.number_input(key="plan_max_model_len").set_value(32768)
    app.selectbox(key="plan_kv_cache_dtype").set_value("fp8")
    app.run()
    scenario = Scenario(model="Qwen/Qwen3-32B", gpu="a100-sxm-80gb", tensor_parallel_size=2, max_model_len=32768,
                        kv_cache_dtype="fp8")
    shown = metrics(app)
    for label, value in expected_kpis(scenario).items():
        assert shown[label] == value
    assert link_of(app)["m"] == "Qwen/Qwen3-32B" and link_of(app)["kv"] == "fp8"


def test_a_model_that_does_not_fit_shows_vllms_error_and_the_fixes():
    app = run_app({"m": "meta-llama/Llama-3.1-70B-Instruct", "g": "l40s", "v": "0.32.0"})
    assert app.error
    message = app.error[0].value
    # 70,553,706,496 x 2 B = 131.42 GiB of weights on a 44.39 GiB card: torch's allocator raises while they load,
    # before vLLM sizes any KV cache (so never "No available memory for the cache blocks").
    assert "Does not fit" in message and "CUDA out of memory while loading the weights" in message
    assert any("tensor parallelism" in md.value for md in app.markdown)


def test_share_link_round_trip_restores_the_same_numbers():
    app = run_app()
    app.selectbox(key="plan_preset").set_value("google/gemma-3-27b-it")
    app.selectbox(key="plan_vllm_version").set_value("0.30.0")
    app.number_input(key="plan_max_model_len").set_value(65536)
    app.number_input(key="plan_shared_prefix_tokens").set_value(512)
    app.run()
    before = metrics(app)
    link = link_of(app)
    assert link == {"m": "google/gemma-3-27b-it", "v": "0.30.0", "len": "65536", "prefix": "512"}
    reopened = run_app(link)
    assert metrics(reopened) == before
    assert any("len=65536" in code.value for code in reopened.code)


def test_bad_link_opens_with_defaults_and_visible_warnings():
    app = run_app({"tp": "zero", "u": "7", "len": "4096", "zzz": "1", "kv": "int3"})
    warnings = " ".join(w.value for w in app.warning)
    assert "tp=" in warnings and "u=" in warnings and "zzz" in warnings and "kv=" in warnings
    shown = metrics(app)
    assert shown["Max concurrency"] == expected_kpis(Scenario(max_model_len=4096))["Max concurrency"]


def test_an_unknown_model_in_a_link_is_named_and_gets_no_command_or_link():
    app = run_app({"m": "nobody/no-such-model-xyz"})
    assert "Showing meta-llama/Llama-3.1-8B-Instruct instead" in app.error[0].value
    assert "Substituted (model 'nobody/no-such-model-xyz' not available)" in text_of(app)
    assert commands(app) == [] and not any("http" in code.value for code in app.code)
    assert link_of(app)["m"] == "nobody/no-such-model-xyz"  # the address bar keeps what was asked


def test_an_unknown_gpu_in_a_link_is_a_named_substitution():
    app = run_app({"g": "tpu-v5", "m": "Qwen/Qwen3-8B"})
    assert "Unknown GPU 'tpu-v5'" in " ".join(w.value for w in app.warning)
    assert "Substituted (gpu 'tpu-v5' not available)" in app.success[0].value
    assert commands(app) == []
    assert link_of(app)["g"] == "tpu-v5"  # issue 29 item 7: re-copying the address keeps the warning
    app.selectbox(key="plan_gpu").set_value(find_gpu("l40s").key)
    app.run()
    assert "Substituted" not in app.success[0].value and commands(app)


def test_an_nvidia_smi_gpu_name_in_a_link_is_resolved():
    app = run_app({"g": "NVIDIA H100 80GB HBM3", "m": "Qwen/Qwen3-8B"})
    assert not app.warning
    assert app.selectbox(key="plan_gpu").value == "h100-sxm-80gb"


def test_every_page_says_which_deployment_its_numbers_are_about():
    app = run_app({"m": "meta-llama/Llama-3.1-70B-Instruct", "tp": "2", "len": "32768", "kv": "fp8",
                   "v": "0.32.0"})
    header = next(md.value for md in app.markdown if "·" in md.value)
    assert header == ("**meta-llama/Llama-3.1-70B-Instruct · H100 SXM 80GB × 2 · TP 2 / PP 1 · max_model_len "
                      "32,768 · weights bfloat16 / KV fp8 · vLLM 0.32.0**")


def test_the_header_names_the_docker_image_when_the_link_says_so():
    app = run_app({"m": "mistralai/Mistral-7B-Instruct-v0.3", "v": "0.11.0", "inst": "docker"})
    header = next(md.value for md in app.markdown if "·" in md.value)
    assert header.endswith("· vLLM 0.11.0 (Docker image)**")


def test_workload_concurrency_is_capped_by_max_num_seqs_and_names_the_limit():
    app = import_command(run_app(), "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 64")
    card = next(m for m in app.metric if m.label == "Workload concurrency")
    assert card.value == "64" and card.delta == "cap: max_num_seqs"
    plan = " ".join(md.value for md in app.markdown)
    assert "Memory ceiling: **1 replica** to hold 1 concurrent request (64 per replica at p95 lengths" in plan
    kv_holds = workload_capacity(estimate(Scenario(max_num_seqs=64)), Workload()).kv_concurrency_p95
    assert kv_holds > 64 and f"the KV cache holds {kv_holds:,}" in card.help


def test_import_sits_at_the_top_and_says_what_it_imported_assumed_and_ignored():
    app = import_command(run_app(), "sudo docker run --gpus all -p 8000:8000 vllm/vllm-openai:latest "
                                    "--model Qwen/Qwen3-8B --gpu-memory-utilisation 0.8 --kv-offloading-size 64 -tp 2")
    report = next(s.value for s in app.warning if "Imported" in s.value)
    assert "`--tensor-parallel-size 2`" in report
    assert "Assumed**: GPU H100 SXM 80GB: a launch line does not name it" in report  # its name, not its key
    assert "did you mean --gpu-memory-utilization?" in report
    assert "Ignored** `--kv-offloading-size 64`" in report
    assert app.selectbox(key="plan_preset").value == "Qwen/Qwen3-8B"
    assert app.selectbox(key="plan_tensor_parallel_size").value == 2


def test_imported_capture_sizes_reach_their_widget_and_the_link():
    app = import_command(run_app(), "vllm serve Qwen/Qwen3-8B --cudagraph-capture-sizes 8 1 2 4")
    assert app.query_params.get("cgs") in ("1,2,4,8", ["1,2,4,8"])  # closed, the section still plans the value
    open_sections(app, "plan_more_settings_open")
    assert app.text_input(key="plan_cudagraph_capture_sizes_text").value == "1 2 4 8"
    assert app.query_params.get("cgs") in ("1,2,4,8", ["1,2,4,8"])


def test_vllm_serve_import_fills_the_page_and_exports_the_same_command():
    app = run_app()
    command = ("vllm serve Qwen/Qwen3-8B --tensor-parallel-size 2 --max-model-len 16384 "
               "--gpu-memory-utilization 0.85 --kv-cache-dtype fp8 --enforce-eager")
    import_command(app, command)
    assert app.selectbox(key="plan_preset").value == "Qwen/Qwen3-8B"
    assert app.selectbox(key="plan_tensor_parallel_size").value == 2
    assert app.slider(key="plan_util").value == 0.85
    exported = commands(app)[0]
    assert parse_serve_command(exported)[0] == parse_serve_command(command)[0]
    scenario = Scenario(model="Qwen/Qwen3-8B", tensor_parallel_size=2, max_model_len=16384,
                        gpu_memory_utilization=0.85, kv_cache_dtype="fp8", enforce_eager=True)
    assert metrics(app)["KV cache tokens"] == expected_kpis(scenario)["KV cache tokens"]


def test_estimate_json_export_matches_the_engine():
    app = run_app({"m": "Qwen/Qwen3-8B"})
    assert any(code.value.startswith("vllm serve Qwen/Qwen3-8B") for code in app.code)
    summary = estimate_summary(estimate(Scenario(model="Qwen/Qwen3-8B")))
    assert json.loads(json.dumps(summary))["kv_cache_tokens"] == int(metrics(app)["KV cache tokens"].replace(",", ""))


def test_only_quantizations_this_checkpoint_loads_are_offered():
    app = run_app({"m": "Qwen/Qwen3-8B"})
    offered = app.selectbox(key="plan_quantization").options
    assert "awq" not in offered and "gptq" not in offered and "fp8" in offered
    awq = run_app({"m": "Qwen/Qwen3-14B-AWQ"})
    assert [o for o in awq.selectbox(key="plan_quantization").options if o != "from checkpoint"] == \
        ["awq", "awq_marlin"]


def test_tp_sizes_are_the_divisors_of_the_heads():
    app = run_app({"m": "meta-llama/Llama-3.1-70B-Instruct"})
    box = app.selectbox(key="plan_tensor_parallel_size")
    assert box.options == ["1", "2", "4", "8", "16", "32", "64"] and "64 attention heads" in box.help


def test_an_invalid_choice_keeps_the_inputs_and_greys_the_last_result():
    app = run_app({"m": "Qwen/Qwen3-8B"})
    before = metrics(app)
    app.number_input(key="plan_pipeline_parallel_size").set_value(100)
    app.run()
    assert "exceeds the model's 36 layers" in app.error[0].value and "greyed" in app.error[0].value
    assert app.number_input(key="plan_pipeline_parallel_size").value == 100
    assert metrics(app) == before  # the last valid numbers, drawn in the greyed container
    assert commands(app) == []


def test_a_link_with_an_impossible_tp_keeps_it_and_explains():
    app = run_app({"m": "meta-llama/Llama-3.1-70B-Instruct", "tp": "3"})
    assert app.selectbox(key="plan_tensor_parallel_size").value == 3
    assert "must be divisible by tensor parallel size (3)" in app.error[0].value


def test_weights_that_exceed_the_gpu_say_so_and_quantization_is_offered():
    # Qwen3-30B-A3B: 30,532,122,624 parameters x 2 B = 56.87 GiB of bf16 weights; an L40S reports 44.39 GiB.
    app = run_app({"m": "Qwen/Qwen3-30B-A3B", "g": "l40s"})
    assert "Does not fit: the weights alone (56.87 GiB per GPU) exceed the GPU (44.39 GiB)." in app.error[0].value
    fixes = " ".join(md.value for md in app.markdown)
    assert "quantize the weights to fp8 while loading (--quantization fp8)" in fixes
    assert "4-bit AWQ/GPTQ checkpoint" in fixes
    app.session_state["ladder_open"] = True  # NOTE: the ladder is built only while its expander is open
    app.run()
    ladder = next(e for e in app.expander if e.label.startswith("Quantization ladder")).dataframe[0].value.to_dict(
        "records")
    assert [row["precision"] for row in ladder] == ["bf16 (16-bit) ← now", "fp8", "4-bit (AWQ/GPTQ)"]
    assert [row["here"] for row in ladder][0] == "Does not fit" and ladder[1]["GPUs needed (TP)"] == "1"


def test_the_slider_says_when_utilization_changes_nothing():
    app = run_app({"m": "meta-llama/Llama-3.1-70B-Instruct", "tp": "2", "u": "0.98"})
    note = " ".join(c.value for c in app.sidebar.caption)
    assert "from 0.97 up, that binds before gpu_memory_utilization, so moving it changes nothing here" in note
    assert metrics(app) == metrics(run_app({"m": "meta-llama/Llama-3.1-70B-Instruct", "tp": "2", "u": "1"}))


def test_kpis_show_the_change_against_the_previous_run():
    app = run_app()
    assert all(not m.delta for m in app.metric[:10] if m.label != "Workload concurrency")
    app.selectbox(key="plan_kv_cache_dtype").set_value("fp8")
    app.run()
    before, after = estimate(Scenario()), estimate(Scenario(kv_cache_dtype="fp8"))
    card = next(m for m in app.metric if m.label == "KV cache tokens")
    assert card.delta == f"{after.capacity.kv_cache_tokens - before.capacity.kv_cache_tokens:+,}"
    assert app.success[0].value.startswith("**Fits: vLLM 0.34.0 starts")


# One non-default value per link key; the Plan page must show each and write it back unchanged.
EVERY_KEY = {
    "m": "Qwen/Qwen3-30B-A3B", "g": "a100-sxm-80gb", "mem": "5000", "dev": "rocm", "tp": "2", "pp": "2", "u": "0.1",
    "len": "50000000", "seqs": "500000", "mbt": "50000000", "bs": "32", "dt": "float16", "kv": "fp8", "q": "fp8",
    "kvb": "8589934592", "blocks": "1000", "eager": "1", "ext": "0", "async": "0", "v": "0.30.0", "other": "5000",
    "adj": "-1.5", "dp": "4", "ep": "1", "offload": "2.5", "pc": "0", "cgs": "1,2,4,8", "link": "nvlink", "inst": "docker",
    "a2a": "deepep_high_throughput", "eplb": "1", "redundant": "8", "cp": "0",
    "lora": "1", "loras": "4096", "lrank": "512", "cpuloras": "4096", "ldt": "bfloat16", "lshard": "1",
    "spec": "draft_model", "draft": "meta-llama/Llama-3.2-1B-Instruct", "ntok": "128", "dtp": "1", "accept": "0.99",
    "hfo": '{"num_hidden_layers":16}',
    "in": "2000", "out": "300", "in95": "4000", "out95": "600", "prefix": "512", "n": "4", "users": "64",
}


def test_every_link_key_is_read_and_written_back_unchanged():
    from calculator.url_state import SCENARIO_KEYS, WORKLOAD_KEYS

    assert set(EVERY_KEY) == {*SCENARIO_KEYS.values(), *WORKLOAD_KEYS.values()}
    app = run_app(EVERY_KEY)
    assert not [w.value for w in app.warning if w.value.startswith("Share link")]
    assert link_of(app) == EVERY_KEY


@pytest.mark.parametrize("key", ["adj", "kvb", "blocks", "ext", "async", "dev", "dp", "ep", "offload", "pc", "u", "cgs",
                                 "link", "inst", "a2a", "seqs", "mbt", "len", "mem", "other", "eplb", "redundant",
                                 "cp"])
def test_each_key_alone_survives_the_round_trip(key):
    query = {key: EVERY_KEY[key]} if key != "mem" else {"g": "none", "mem": "5000"}
    assert link_of(run_app(query)) == query


def test_a_version_newer_than_modelled_says_whose_rules_apply():
    app = run_app({"v": "0.35.0"})
    assert "vLLM 0.35.0 is newer than the newest release modelled (0.34)" in " ".join(w.value for w in app.warning)
    assert app.selectbox(key="plan_vllm_version").value == "0.35.0"
    assert "vLLM 0.35.0" in text_of(app) and link_of(app)["v"] == "0.35.0"


class TestHubErrors:
    """Hugging Face ids go through huggingface_hub to a local server speaking the Hub protocol (HF_ENDPOINT)."""

    CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
              "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000,
              "intermediate_size": 1024, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}

    def open_hub_model(self, monkeypatch, hub: LocalHub, repo: str) -> AppTest:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        app = run_app()
        app.radio(key="plan_source").set_value("Hugging Face id")
        app.run()
        app.text_input(key="plan_hub_id").set_value(repo)
        app.text_input(key="plan_hf_token").set_value("hf_secret_token_value")
        app.run()
        assert not app.exception
        return app

    @pytest.fixture()
    def hub(self):
        with LocalHub(public={"acme/tiny-llama": {"config.json": json.dumps(self.CONFIG).encode()}},
                      gated={"acme/gated"}) as server:
            yield server

    def test_a_hub_model_is_estimated(self, monkeypatch, hub):
        app = self.open_hub_model(monkeypatch, hub, "acme/tiny-llama")
        expected = estimate(Scenario(model="acme/tiny-llama"), build_model_spec(self.CONFIG, "acme/tiny-llama"))
        assert metrics(app)["KV cache tokens"] == f"{expected.capacity.kv_cache_tokens:,}"
        assert link_of(app)["m"] == "acme/tiny-llama"
        assert all("hf_secret_token_value" not in value for value in link_of(app).values())

    def test_gated_model_asks_for_the_licence(self, monkeypatch, hub):
        app = self.open_hub_model(monkeypatch, hub, "acme/gated")
        text = " ".join(e.value for e in app.error)
        assert "accept its licence" in text and "hf_secret_token_value" not in text

    def test_missing_model_says_so(self, monkeypatch, hub):
        app = self.open_hub_model(monkeypatch, hub, "acme/nothing-here")
        assert "No such model on the Hub: acme/nothing-here" in " ".join(e.value for e in app.error)

    def test_unreachable_hub_offers_the_presets(self, monkeypatch):
        monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
        app = run_app()
        app.radio(key="plan_source").set_value("Hugging Face id")
        app.run()
        app.text_input(key="plan_hub_id").set_value("acme/anything")
        app.run()
        assert "pick a bundled preset" in " ".join(e.value for e in app.error)


def test_borderline_verdict_shows_the_calibrated_band():
    from calculator.engine.uncertainty import kv_band, verdict

    scenario = Scenario(model="meta-llama/Llama-3.1-70B-Instruct", tensor_parallel_size=2, max_model_len=20000)
    result = estimate(scenario)
    assert verdict(result) == "borderline" and result.fits
    low_bytes, high_bytes, low_tokens, high_tokens = kv_band(result)
    app = run_app({"m": "meta-llama/Llama-3.1-70B-Instruct", "tp": "2", "len": "20000"})
    message = next(w.value for w in app.warning if "Borderline" in w.value)
    assert f"{low_tokens:,}–{high_tokens:,} tokens" in message
    assert f"{low_bytes / 2**30:,.2f}–{high_bytes / 2**30:,.2f} GiB" in message


def test_an_unknown_architecture_the_band_straddles_is_borderline_unknown_architecture(monkeypatch):
    # Qwen3-32B's config under a model_type nobody knows, at its default 40,960 tokens on the default H100: known, it
    # does not fit (about 4.5 GiB of KV for 10 GiB); estimated generically, the widened band's high end would hold it.
    config = {**json.loads((Path(__file__).resolve().parent.parent / "calculator" / "data" / "presets"
                            / "Qwen__Qwen3-32B.json").read_text()), "model_type": "mystery",
              "architectures": ["MysteryForCausalLM"]}
    with LocalHub(public={"acme/mystery-32b": {"config.json": json.dumps(config).encode()}}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        app = run_app()
        app.radio(key="plan_source").set_value("Hugging Face id")
        app.run()
        app.text_input(key="plan_hub_id").set_value("acme/mystery-32b")
        app.run()
    assert not app.exception
    message = next(w.value for w in app.warning if "Borderline" in w.value)
    assert message.startswith("**Borderline, unknown architecture: MysteryForCausalLM is estimated as a generic")
    assert "Why borderline: Unknown architecture MysteryForCausalLM: estimated as a generic decoder" in message
    assert "Error band (widened: unknown architecture)" in message


def test_switching_the_sweep_reruns_only_its_fragment_and_keeps_the_link():
    app = run_app({"m": "Qwen/Qwen3-8B"})
    app.segmented_control(key="plan_view_sweep").set_value("tensor_parallel_size")
    app.run()
    assert not app.exception
    assert link_of(app) == {"m": "Qwen/Qwen3-8B", "sweep": "tensor_parallel_size"}
    reopened = run_app(link_of(app))
    assert reopened.segmented_control(key="plan_view_sweep").value == "tensor_parallel_size"


def test_a_plain_command_after_a_docker_line_says_the_version_it_keeps():
    """Issue 29 item 7: the docker line's tag set vLLM 0.8.5; a plain `vllm serve` does not name one, and the page
    says that it keeps 0.8.5 from the previous command."""
    app = import_command(run_app(), "docker run --gpus all vllm/vllm-openai:v0.8.5 --model Qwen/Qwen3-8B")
    assert app.selectbox(key="plan_vllm_version").value == "0.8.5"
    app = import_command(app, "vllm serve Qwen/Qwen3-8B --max-model-len 8192")
    notes = " ".join(w.value for w in app.warning)
    assert ("This command names no vLLM version, so the page keeps vLLM 0.8.5, which the previous command's "
            "container tag set") in notes
    report = next(s.value for s in [*app.success, *app.warning] if "Imported" in s.value)
    assert report.startswith("**Imported** (vllm serve): `Qwen/Qwen3-8B`, `--max-model-len 8192`")


def test_imported_lora_and_speculative_decoding_reach_their_widgets_the_numbers_and_the_link():
    command = ("vllm serve meta-llama/Llama-3.1-8B-Instruct --enable-lora --max-loras 4 --max-lora-rank 64 "
               "--speculative-config '{\"method\": \"draft_model\", \"model\": \"meta-llama/Llama-3.2-1B-Instruct\", "
               "\"num_speculative_tokens\": 4}'")
    app = open_sections(import_command(run_app(), command), "plan_adapters_open")
    assert app.checkbox(key="plan_enable_lora").value is True
    assert (app.number_input(key="plan_max_loras").value, app.number_input(key="plan_max_lora_rank").value) == (4, 64)
    assert app.selectbox(key="plan_speculative_method_choice").value == "draft model"
    assert app.text_input(key="plan_speculative_model_text").value == "meta-llama/Llama-3.2-1B-Instruct"
    scenario = parse_serve_command(command)[0]
    assert metrics(app)["KV cache tokens"] == expected_kpis(scenario)["KV cache tokens"]
    assert {k: link_of(app).get(k) for k in ("lora", "loras", "lrank", "spec", "draft", "ntok")} == {
        "lora": "1", "loras": "4", "lrank": "64", "spec": "draft_model", "draft": "meta-llama/Llama-3.2-1B-Instruct",
        "ntok": "4"}
    assert parse_serve_command(commands(app)[0])[0] == scenario


def test_imported_hf_overrides_reach_their_field_the_numbers_the_link_and_the_command():
    # issue 25 item 4: modelled, so the page plans the 16-layer model the line starts
    command = "vllm serve meta-llama/Llama-3.1-8B-Instruct --hf-overrides '{\"num_hidden_layers\": 16}'"
    app = open_sections(import_command(run_app(), command), "plan_more_settings_open")
    assert app.text_input(key="plan_hf_overrides_text").value == '{"num_hidden_layers":16}'
    scenario = parse_serve_command(command)[0]
    expected = expected_kpis(scenario)
    assert {k: metrics(app)[k] for k in expected} == expected != expected_kpis(scenario.replace(hf_overrides=None))
    assert link_of(app).get("hfo") == '{"num_hidden_layers":16}'
    assert parse_serve_command(commands(app)[0])[0] == scenario
    assert not any("incomplete" in s.value for s in [*app.success, *app.warning])
    app.text_input(key="plan_hf_overrides_text").set_value("[16]").run()
    assert "hf_overrides: --hf-overrides must be a JSON object such as" in " ".join(e.value for e in app.error)


def test_a_hybrid_model_whose_state_pool_is_short_of_max_num_seqs_shows_vllms_refusal_and_the_fix():
    # Qwen3-Coder-Next at TP 4 with a 1 GiB pool: 321 blocks, 1,024 sequences asked (tests/test_hybrid_models.py).
    app = run_app({"m": "Qwen/Qwen3-Coder-Next", "g": "h100", "tp": "4", "len": "32768", "seqs": "1024",
                   "kvb": str(1024**3), "v": "0.32.0"})
    message = " ".join(e.value for e in app.error)
    assert "max_num_seqs (1024) exceeds available Mamba cache blocks (321)" in message
    assert "Fix: --max-num-seqs 321, or 2.19 GiB more KV cache per GPU" in message


def test_closed_expanders_hold_nothing_and_open_ones_show_their_content():
    """The quantization ladder, the other layouts' table and the calculation steps are built only while their
    expander is open (issue 21 item 3: a slider move reruns without them); opening one changes no figure or link."""
    app = run_app()
    expanders = {e.label.split(":")[0].split(" (")[0]: e for e in app.expander}
    for label in ("Quantization ladder", "Other layouts considered", "How it was calculated"):
        assert expanders[label].children == {}, label
    figures, link = metrics(app), link_of(app)

    for key in ("ladder_open", "layouts_open", "how_calculated_open"):
        app.session_state[key] = True
    app.run()
    assert not app.exception
    assert metrics(app) == figures and link_of(app) == link
    result = estimate(Scenario())
    opened = {e.label.split(":")[0].split(" (")[0]: e for e in app.expander}
    ladder = opened["Quantization ladder"].dataframe[0].value
    now = ladder[ladder["precision"].str.endswith(" ← now")]
    assert len(now) == 1
    assert now.iloc[0]["weights / GPU"] == f"{result.budget.weights_bytes / 2**30:,.2f} GiB"
    assert now.iloc[0]["KV tokens here"] == f"{result.capacity.kv_cache_tokens:,}"
    layouts = opened["Other layouts considered"]
    assert len(layouts.dataframe[0].value) == int(layouts.label.split("(")[1].split(")")[0])
    steps = opened["How it was calculated"].markdown
    assert steps[0].value.startswith(f"**GPU memory.** The driver reports **{result.budget.total_bytes / 2**30:,.2f}")


def test_closed_sidebar_sections_keep_and_plan_every_value():
    """The sidebar's rarer settings are drawn only while their expander is open (issue 21 item 3); closed, each
    value still reaches the numbers and the link, and a value set while open survives closing and reopening."""
    link = {"m": "meta-llama/Llama-3.1-8B-Instruct", "lora": "1", "loras": "4", "offload": "2"}
    app = run_app(link)
    assert [e.children for e in app.expander if e.label in ("More vLLM settings",
                                                            "LoRA adapters and speculative decoding")] == [{}, {}]
    scenario = Scenario(model="meta-llama/Llama-3.1-8B-Instruct", enable_lora=True, max_loras=4, cpu_offload_gb=2)
    assert {k: metrics(app)[k] for k in expected_kpis(scenario)} == expected_kpis(scenario)
    assert {k: link_of(app).get(k) for k in ("lora", "loras", "offload")} == {"lora": "1", "loras": "4", "offload": "2"}

    open_sections(app, "plan_adapters_open", "plan_more_settings_open")
    assert app.number_input(key="plan_max_loras").value == 4 and app.number_input(key="plan_cpu_offload_gb").value == 2
    app.number_input(key="plan_max_loras").set_value(8).run()
    app.session_state["plan_adapters_open"] = app.session_state["plan_more_settings_open"] = False
    app.run()
    assert link_of(app).get("loras") == "8" and link_of(app).get("offload") == "2"
    assert metrics(app) == metrics(run_app({**link, "loras": "8"}))
    assert open_sections(app, "plan_adapters_open").number_input(key="plan_max_loras").value == 8


def test_a_setting_that_does_not_parse_is_named_with_its_section_closed():
    # typed while "More vLLM settings" was open, "8 parsecs" is not used; closing the section must not hide why
    app = run_app({"m": "meta-llama/Llama-3.1-8B-Instruct"})
    open_sections(app, "plan_more_settings_open")
    app.text_input(key="plan_kv_cache_memory_text").set_value("8 parsecs").run()
    opened = [e.value for e in app.sidebar.error]
    app.session_state["plan_more_settings_open"] = False
    app.run()
    assert len(opened) == 1 and opened[0].startswith("kv_cache_memory_bytes: ")
    assert [e.value for e in app.sidebar.error] == [f"More vLLM settings: {opened[0]}"]
    assert not app.exception
