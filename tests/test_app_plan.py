"""The Plan page through Streamlit's AppTest: values equal the engine's, links round-trip, bad input is handled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from support.local_hub import LocalHub

from calculator import Scenario, Workload, estimate, workload_capacity
from calculator.model.architecture import build_model_spec
from calculator.serve_command import parse_serve_command
from calculator.summary import estimate_summary

APP = str(Path(__file__).resolve().parents[1] / "app.py")


@pytest.fixture(autouse=True)
def fresh_caches():
    st.cache_data.clear()
    st.cache_resource.clear()


def run_app(query: dict[str, str] | None = None) -> AppTest:
    app = AppTest.from_file(APP, default_timeout=120)
    for key, value in (query or {}).items():
        app.query_params[key] = value
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def metrics(app: AppTest) -> dict[str, str]:
    return {metric.label: metric.value for metric in app.metric}


def link_of(app: AppTest) -> dict[str, str]:
    """The page's share-link parameters (AppTest may hold a value or a list of values per key)."""
    return {key: value[-1] if isinstance(value, list) else value for key, value in app.query_params.items()}


def expected_kpis(scenario: Scenario, workload: Workload = Workload()) -> dict[str, str]:
    result = estimate(scenario)
    return {
        "KV cache tokens": f"{result.capacity.kv_cache_tokens:,}",
        f"Max concurrency @ {result.settings.max_model_len:,}": f"{result.capacity.max_concurrency:,.2f}x",
        "Workload concurrency": f"{workload_capacity(result, workload).concurrency_p95:,}",
        "GPU blocks": f"{result.capacity.num_gpu_blocks:,}",
        "Largest max_model_len": f"{result.max_fitting_model_len:,}",
    }


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
    app.number_input(key="plan_tensor_parallel_size").set_value(2)
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
    assert "Does not fit" in message and "No available memory for the cache blocks" in message
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
    app = run_app({"tp": "zero", "u": "7", "len": "4096", "m": "nobody/no-such-model-xyz", "zzz": "1", "kv": "int3"})
    warnings = " ".join(w.value for w in app.warning)
    assert "tp=" in warnings and "u=" in warnings and "zzz" in warnings and "kv_cache_dtype" in warnings
    assert "meta-llama/Llama-3.1-8B-Instruct instead" in warnings
    shown = metrics(app)
    assert shown["Max concurrency @ 4,096"] == expected_kpis(Scenario(max_model_len=4096))["Max concurrency @ 4,096"]


def test_vllm_serve_import_fills_the_page_and_exports_the_same_command():
    app = run_app()
    command = ("vllm serve Qwen/Qwen3-8B --tensor-parallel-size 2 --max-model-len 16384 "
               "--gpu-memory-utilization 0.85 --kv-cache-dtype fp8 --enforce-eager")
    app.text_area(key="plan_import_text").set_value(command)
    app.button(key="plan_import_button").click()
    app.run()
    assert app.selectbox(key="plan_preset").value == "Qwen/Qwen3-8B"
    assert app.number_input(key="plan_tensor_parallel_size").value == 2
    assert app.slider(key="plan_util").value == 0.85
    exported = next(code.value for code in app.code if code.value.startswith("vllm serve"))
    assert parse_serve_command(exported)[0] == parse_serve_command(command)[0]
    scenario = Scenario(model="Qwen/Qwen3-8B", tensor_parallel_size=2, max_model_len=16384,
                        gpu_memory_utilization=0.85, kv_cache_dtype="fp8", enforce_eager=True)
    assert metrics(app)["KV cache tokens"] == expected_kpis(scenario)["KV cache tokens"]


def test_estimate_json_export_matches_the_engine():
    app = run_app({"m": "Qwen/Qwen3-8B"})
    assert any(code.value.startswith("vllm serve Qwen/Qwen3-8B") for code in app.code)
    summary = estimate_summary(estimate(Scenario(model="Qwen/Qwen3-8B")))
    assert json.loads(json.dumps(summary))["kv_cache_tokens"] == int(metrics(app)["KV cache tokens"].replace(",", ""))


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
        text = " ".join(w.value for w in app.warning)
        assert "accept its licence" in text and "hf_secret_token_value" not in text

    def test_missing_model_says_so(self, monkeypatch, hub):
        app = self.open_hub_model(monkeypatch, hub, "acme/nothing-here")
        assert "No such model on the Hub: acme/nothing-here" in " ".join(w.value for w in app.warning)

    def test_unreachable_hub_offers_the_presets(self, monkeypatch):
        monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
        app = run_app()
        app.radio(key="plan_source").set_value("Hugging Face id")
        app.run()
        app.text_input(key="plan_hub_id").set_value("acme/anything")
        app.run()
        assert "pick a bundled preset" in " ".join(w.value for w in app.warning)


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
