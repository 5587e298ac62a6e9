"""The Compare page: side-by-side scenarios equal the engine's numbers, and the link restores them."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from support.apptest import run_with_link

from calculator import Scenario, estimate, find_gpu
from calculator.engine.uncertainty import verdict
from calculator.explain import verdict_word

PAGE = str(Path(__file__).resolve().parents[1] / "pages" / "compare.py")


@pytest.fixture(autouse=True)
def fresh_caches():
    st.cache_data.clear()


run_page = partial(run_with_link, PAGE)


def table(app: AppTest) -> dict[str, list[str]]:
    """Figure label -> one value per scenario."""
    frame = app.table[0].value
    return {row[""]: [row[column] for column in frame.columns if column != ""] for row in frame.to_dict("records")}


def link(app: AppTest) -> dict[str, str]:
    return {key: (value[-1] if isinstance(value, list) else value) for key, value in app.query_params.items()}


def test_two_default_scenarios_match_the_engine():
    rows = table(run_page())
    expected = estimate(Scenario(model="RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", gpu="h100-sxm-80gb",
                                 tensor_parallel_size=2, max_model_len=32768))
    assert len(rows["KV cache tokens"]) == 2
    assert rows["KV cache tokens"][1] == f"{expected.capacity.kv_cache_tokens:,}"
    assert rows["max concurrency @ max_model_len"][1] == f"{expected.capacity.max_concurrency:,.2f}x"
    assert rows["verdict"][1] == verdict_word(verdict(expected))


def test_effective_batch_limits_and_activation_peak_explain_a100_vs_h100():
    # vLLM 0.11+: 1,024 seqs / 8,192 batched tokens on >= 70 GiB GPUs other than the A100 (256 / 2,048 there).
    query = {"a.m": "meta-llama/Llama-3.1-70B-Instruct", "a.g": "a100-sxm-80gb", "a.tp": "2", "a.len": "32768",
             "b.m": "meta-llama/Llama-3.1-70B-Instruct", "b.g": "h100-sxm-80gb", "b.tp": "2", "b.len": "32768"}
    rows = table(run_page(query))
    assert rows["max_num_seqs (effective)"] == ["256", "1,024"]
    assert rows["max_num_batched_tokens (effective)"] == ["2,048", "8,192"]
    a100 = estimate(Scenario(model="meta-llama/Llama-3.1-70B-Instruct", gpu="a100-sxm-80gb", tensor_parallel_size=2,
                             max_model_len=32768))
    h100 = a100.scenario.replace(gpu="h100-sxm-80gb")
    assert rows["verdict"] == [verdict_word(verdict(a100)), verdict_word(verdict(estimate(h100)))]
    assert rows["activation peak / GPU"][0] == f"{a100.budget.activation_bytes / 2**30:,.2f} GiB"
    assert "differ by GPU memory tier" in " ".join(c.value for c in run_page(query).caption)



def test_requests_at_once_is_capped_by_max_num_seqs_and_names_the_limit():
    # Issue 9 item 1: 60 GiB of KV cache hold 3.75 requests of Llama-3.1-8B's full 131,072 tokens (491,520 tokens,
    # vLLM 0.34 on an H100); with max_num_seqs 2 the scheduler runs only two of them.
    query = {"a.m": "meta-llama/Llama-3.1-8B-Instruct", "a.g": "h100-sxm-80gb", "a.kvb": "60G", "a.v": "0.34.0",
             "b.m": "meta-llama/Llama-3.1-8B-Instruct", "b.g": "h100-sxm-80gb", "b.kvb": "60G", "b.v": "0.34.0",
             "b.seqs": "2"}
    rows = table(run_page(query))
    assert rows["requests at once @ max_model_len"] == ["3 (kv cache)", "2 (max num seqs)"]

def test_editing_a_scenario_and_reopening_its_link():
    app = run_page()
    app.segmented_control(key="cmp_count").set_value(3)
    app.run()
    app.selectbox(key="cmp_c_model").set_value("Qwen/Qwen3-8B")
    app.selectbox(key="cmp_c_gpu").set_value(find_gpu("l4").key)
    app.number_input(key="cmp_c_max_model_len").set_value(8192)
    app.run()
    rows = table(app)
    assert len(rows["verdict"]) == 3
    params = link(app)
    assert params["k"] == "3" and params["c.m"] == "Qwen/Qwen3-8B" and params["c.g"] == find_gpu("l4").key
    assert table(run_page(params)) == rows
    expected = estimate(Scenario(model="Qwen/Qwen3-8B", gpu="l4", max_model_len=8192, tensor_parallel_size=2))
    assert rows["GPUs (TP × PP)"][2] == f"2 × {find_gpu('l4').name}"
    assert rows["KV cache tokens"][2] == f"{expected.capacity.kv_cache_tokens:,}"


def test_settings_compare_does_not_edit_survive_its_link():
    query = {"a.m": "Qwen/Qwen3-8B", "a.seqs": "64", "a.u": "0.5", "a.adj": "1.5", "a.dp": "2"}
    app = run_page(query)
    assert {k: v for k, v in link(app).items() if k.startswith("a.")} == query
    rows = table(app)
    assert rows["max_num_seqs (effective)"][0] == "64"


def test_a_bad_link_falls_back_with_warnings_and_names_the_substitute():
    app = run_page({"k": "9", "a.tp": "-1", "b.m": "nope/nope"})
    text = " ".join(w.value for w in app.warning)
    assert "k='9'" in text and "tp=" in text and "nope/nope is not a bundled preset" in text
    assert len(table(app)["verdict"]) == 2
    assert "Substituted for nope/nope" in " ".join(e.value for kind in (app.warning, app.success, app.error) for e in kind)
    assert link(app)["b.m"] == "nope/nope"


def test_each_scenario_names_its_deployment():
    app = run_page()
    headers = [c.value for c in app.caption if "·" in c.value]
    assert headers[0] == ("**meta-llama/Llama-3.1-70B-Instruct · H100 SXM 80GB × 4 · TP 4 / PP 1 · max_model_len "
                          "32,768 · weights bfloat16 / KV auto (bfloat16) · vLLM 0.34.0**")


def test_a_command_imports_into_the_chosen_scenario_with_its_report():
    app = run_page()
    app.segmented_control(key="cmp_import_into").set_value("b")
    app.text_area(key="cmp_import_text").set_value("docker run vllm/vllm-openai --model Qwen/Qwen3-8B -tp 2 "
                                                   "--max-num-seqs 32")
    app.button(key="cmp_import_button").click()
    app.run()
    assert app.selectbox(key="cmp_b_model").value == "Qwen/Qwen3-8B"
    assert table(app)["max_num_seqs (effective)"][1] == "32"
    assert any("Imported" in s.value and "--max-num-seqs 32" in s.value for s in app.success)


# Issue 28 item 6: a link's scenario C is shown (k=2 was left as it was), and a custom GPU is not named after H100.
def test_a_scenario_past_k_is_shown_and_said() -> None:
    app = run_page({"k": "2", "c.m": "Qwen/Qwen3-32B"})
    assert [w.value for w in app.warning if w.value.startswith("Share link")] == [
        "Share link: k='2', but the link sets scenario C; showing 3 scenarios"]
    assert app.selectbox(key="cmp_c_model").value == "Qwen/Qwen3-32B"
    assert link(app)["c.m"] == "Qwen/Qwen3-32B" and link(app)["k"] == "3"


def test_a_custom_gpu_is_named_as_custom() -> None:
    app = run_page({"a.g": "none", "a.mem": "24"})
    assert app.selectbox(key="cmp_a_gpu").value == "custom"
    assert list(app.table[0].value.columns[:2]) == ["", "A: Llama-3.1-8B-Instruct on 1× custom 24 GiB GPU"]
    assert table(app)["GPUs (TP × PP)"][0] == "1 × Custom GPU"
    assert link(app)["a.g"] == "none" and link(app)["a.mem"] == "24"


def test_lora_slots_and_a_draft_model_from_a_link_are_compared_with_the_engines_numbers() -> None:
    query = {"a.m": "meta-llama/Llama-3.1-8B-Instruct", "a.lora": "1", "a.loras": "4", "a.lrank": "64",
             "b.m": "meta-llama/Llama-3.1-8B-Instruct", "b.spec": "draft_model",
             "b.draft": "meta-llama/Llama-3.2-1B-Instruct", "b.ntok": "4"}
    app = run_page(query)
    # NOTE: Llama-3.1-8B is the default model, which a link leaves out.
    assert {k: v for k, v in link(app).items() if k in query} == {k: v for k, v in query.items() if k[2:] != "m"}
    rows = table(app)
    lora = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", enable_lora=True, max_loras=4,
                             max_lora_rank=64))
    draft = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", speculative_method="draft_model",
                              speculative_model="meta-llama/Llama-3.2-1B-Instruct", num_speculative_tokens=4))
    assert rows["LoRA slots / GPU"] == [f"{lora.budget.lora_bytes / 2**30:,.2f} GiB", "—"]
    assert rows["speculative proposer / GPU"] == ["—", "2.30 GiB (draft_model, 4 tokens)"]
    assert rows["KV cache tokens"] == [f"{lora.capacity.kv_cache_tokens:,}", f"{draft.capacity.kv_cache_tokens:,}"]
