"""The Learn page explains with the engine's own numbers for exactly the Plan page's scenario."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from support.apptest import run_with_link

from calculator import Scenario, Workload, estimate, workload_capacity
from calculator.charts import samples_block_figure
from calculator.units import GIB

ROOT = Path(__file__).resolve().parents[1]
PAGE = str(ROOT / "pages" / "learn.py")


@pytest.fixture(autouse=True)
def fresh_caches():
    st.cache_data.clear()


run = partial(run_with_link, PAGE)


def text(app: AppTest) -> str:
    return " ".join(md.value for md in app.markdown)


def test_gqa_saving_for_llama_8b():
    # 32 layers x 32 heads x (128 + 128) x 2 B = 512 KiB as MHA; 8 KV heads -> 128 KiB.
    assert "**512 KiB per token**" in text(run()) and "**128.0 KiB**" in text(run()) and "4.0× less" in text(run())


def test_mla_saving_for_deepseek_v3():
    # MHA: 61 x 128 x (192 + 128) x 2 B = 4,880 KiB; MLA: 61 x 576 x 2 B = 68.6 KiB.
    shown = text(run({"m": "deepseek-ai/DeepSeek-V3", "g": "h200", "tp": "8"}))
    assert "**4,880 KiB per token**" in shown and "**68.6 KiB**" in shown


def test_paged_blocks_waste_only_the_last_block():
    app = run({"bs": "16"})
    # 70, 33, 120, 18 tokens at block 16: 5 + 3 + 8 + 2 blocks = 288 slots for 241 tokens.
    assert "hold 288 token slots for 241 tokens" in text(app) and "(16.3% waste)" in text(app)


def test_learn_follows_the_plan_page_exactly():
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    app.run()
    app.selectbox(key="plan_preset").set_value("meta-llama/Llama-3.1-70B-Instruct")
    app.selectbox(key="plan_tensor_parallel_size").set_value(2)
    app.number_input(key="plan_max_model_len").set_value(32768)
    app.run()
    app.switch_page("pages/learn.py")
    app.run()
    assert not app.exception
    plan = estimate(Scenario(model="meta-llama/Llama-3.1-70B-Instruct", tensor_parallel_size=2, max_model_len=32768))
    shown = text(app)
    assert (f"{plan.budget.gpu_memory_utilization:g} × {plan.budget.total_bytes / GIB:.2f} = "
            f"**{plan.budget.requested_bytes / GIB:.2f} GiB**") in shown
    assert f"{plan.kv_cache_bytes / GIB:.2f} GiB — becomes the KV cache" in shown
    assert "**meta-llama/Llama-3.1-70B-Instruct · H100 SXM 80GB × 2 · TP 2 / PP 1 · max_model_len 32,768" in shown


def test_the_block_chart_and_the_text_use_the_scenarios_block_size():
    app = run({"m": "Qwen/Qwen3-8B", "v": "0.32.0", "prefix": "512", "n": "4", "in": "1000", "out": "200"})
    result = estimate(Scenario(model="Qwen/Qwen3-8B", vllm_version="0.32.0"))
    assert result.settings.block_size == 16
    assert app.select_slider(key="learn_block").value == 16
    # 512-token prefix = 32 blocks of 16; each sample: cdiv(1200, 16) - 62 full prompt blocks = 13 own blocks.
    assert "stored once (32 blocks of 16 tokens)" in text(app)
    shared = workload_capacity(result, Workload(prompt_tokens_mean=1000, output_tokens_mean=200,
                                                shared_prefix_tokens=512, parallel_samples=4))
    assert shared.mean.private_blocks == 62 - 32 + 4 * 13
    assert f"needs {shared.mean.private_blocks:,} private blocks" in text(app)


def test_the_plain_concurrency_formula_is_spelled_out():
    result = estimate(Scenario())
    assert (f"{result.capacity.num_gpu_blocks:,} blocks ÷ {result.capacity.blocks_per_request:,} blocks per request"
            f" = **{result.capacity.max_concurrency:,.2f}**") in text(run())


def test_n_parallel_samples_are_drawn_one_row_each():
    figure = samples_block_figure(1000, 200, 4, 16, shared_prefix_tokens=512)
    heatmap = figure.data[0]
    assert list(heatmap.y) == ["sample 1", "sample 2", "sample 3", "sample 4"]
    row = list(heatmap.z[0])
    assert len(row) == 75 and row[:32] == [3] * 32 and row[32:62] == [2] * 30 and row[62:] == [1] * 13  # 1,200 tokens fill 75 blocks exactly
    assert "16-token blocks" in figure.layout.title.text


# Issue 28 item 4: Learn called the estimate without handling a refusal (a traceback on the page).
def test_a_scenario_the_estimate_refuses_is_one_sentence_and_a_way_back_to_plan():
    app = run({"tp": "3"})
    assert [e.value for e in app.error] == [
        "**Total number of attention heads (32) must be divisible by tensor parallel size (3).** This page explains "
        "a scenario the estimate accepts: change it on the Plan page."]
    assert "tp=3" in app.get("link_button")[0].proto.url


def test_gpu_memory_below_the_engines_floor_is_named_and_the_page_draws():
    app = run({"mem": "0.1", "g": "none"})
    assert [w.value for w in app.warning][0] == (
        "ignored link value mem='0.1': input should be greater than or equal to 0.25; using the default")
    assert not app.error and app.get("plotly_chart")


def test_section_one_names_every_part_so_they_add_up_to_the_gpu():
    # Issue 26 item 11 / issue 29 item 9: "Everything left: 36.05 GiB" came after parts that left 38.45 GiB; the
    # 1.65 GiB extensible-cache margin and the 0.75 GiB CUDA context (4 ranks) were only in the chart's legend.
    import re

    shown = text(run({"m": "meta-llama/Llama-3.1-70B-Instruct", "g": "h100", "tp": "4", "len": "32768"}))
    paragraph = shown[shown.index("Of its 79.19 GiB"):shown.index("becomes the KV cache")]
    assert "the extensible-cache margin keeps **1.65 GiB** free" in paragraph
    # context 0.50 + communicators 0.25 + the TP all-reduce buffers on Hopper NVLink at TP 4 (issue 20): symmetric
    # memory 32 MiB, custom all-reduce 8 + 16 + 8 MiB = 0.8125 GiB
    assert "the CUDA context (the driver's own, before vLLM allocates anything) takes **0.81 GiB**" in paragraph
    parts = [float(x) for x in re.findall(r"\*\*([\d.]+) GiB\*\*", paragraph)]
    kv = float(re.search(r"Everything left — ([\d.]+) GiB", paragraph).group(1))
    assert kv == 36.56 and abs(sum(parts) + kv - 79.19) < 0.01 * len(parts)


def test_a_link_asking_for_more_samples_than_the_slider_shows_says_so():
    app = run({"n": "1024"})
    assert app.slider(key="learn_n").value == 16
    assert any("asks for n = 1,024; this illustration stops at 16 (the Plan page counts all 1,024)" in c.value
               for c in app.caption)


def test_weight_quantization_is_explained_with_the_engines_bytes():
    """Issue 29 item 9. Llama-3.1-8B's 4,096 x 4,096 projection: 16,777,216 weights. 16 bits: 33,554,432 B. fp8:
    16,777,216 + one fp32 scale = 16,777,220 B. AWQ: 8,388,608 B of 4-bit values + 4,096 outputs x 32 groups x 2 B
    scales (262,144) + 32 groups x 4,096 x 4 bits packed in int32 (65,536) = 8,716,288 B, 3.85x smaller. Embedding
    and lm_head stay 128,256 x 4,096 x 2 B = 1,050,673,152 B each; the norms 65 x 4,096 x 2 B = 532,480 B:
    2,101,878,784 B = 1.96 GiB."""
    app = run()
    shown = text(app)
    assert ("One 4,096 × 4,096 projection of this model holds 16,777,216 weights: **33,554,432 B** in 16 bits" in shown
            and "**16,777,220 B**" in shown and "**8,716,288 B** (3.85× smaller)" in shown)
    rows = {row["format"]: row for frame in app.dataframe if frame.value.columns[0] == "format"
            for row in frame.value.to_dict("records")}
    assert rows["fp8 (--quantization fp8)"]["of which kept in 16 bits (GiB)"] == round(2_101_878_784 / GIB, 2)
    assert rows["16-bit (bf16/fp16)"]["weights (GiB)"] > rows["fp8 (--quantization fp8)"]["weights (GiB)"] > \
        rows["AWQ 4-bit, groups of 128"]["weights (GiB)"]
    assert "with `--quantization fp8` this deployment's KV cache grows from" in shown


def test_the_block_grid_has_whole_number_ticks():
    from calculator.charts import block_grid_figure
    axis = block_grid_figure([70, 33, 120, 18], 16).layout.xaxis
    assert (axis.tickmode, axis.tick0, axis.dtick, axis.tickformat) == ("linear", 0, 1, "d")  # 8 blocks: every one
    wide = block_grid_figure([16 * 100], 16).layout.xaxis  # 100 blocks: a label every 9
    assert wide.dtick == 9


def test_learn_explains_the_model_the_hf_overrides_build():
    # issue 25 item 4: 16 layers, as vLLM builds Llama-3.1-8B with --hf-overrides '{"num_hidden_layers": 16}'
    app = run({"hfo": '{"num_hidden_layers":16}'})
    assert "16 layers × 32 heads" in text(app) and "32 layers × 32 heads" not in text(app)
