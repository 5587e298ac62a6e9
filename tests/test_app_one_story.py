"""One page, one story (issues 24 and 26): one capacity plan per page, equal to the Recommend row that opened it and
to Compare's; a deployment vLLM refuses shows no figure of a running server and a command that says so or carries
the fix; a Hub checkpoint that cannot be read offers the bundled preset of the same model, never silently."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from support.apptest import metrics, run_with_link

from calculator import Scenario, Workload
from calculator.url_state import to_query_params

PAGES = Path(__file__).resolve().parents[1] / "pages"
plan_page = partial(run_with_link, str(PAGES / "plan.py"))
LLAMA_70B_2XH100 = Scenario(model="meta-llama/Llama-3.1-70B-Instruct", gpu="h100-sxm-80gb", tensor_parallel_size=2,
                            max_model_len=32768)
TEAM_LOAD = Workload(prompt_tokens_mean=2000, output_tokens_mean=500, target_concurrent_requests=200)
RUNNING_SERVER = ("KV cache tokens", "Max concurrency", "Workload concurrency", "KV cache per GPU", "GPU blocks")


@pytest.fixture(autouse=True)
def fresh_caches():
    st.cache_data.clear()
    st.cache_resource.clear()


def markdown(app: AppTest) -> list[str]:
    return [m.value for m in app.markdown]


def the_plan(app: AppTest) -> str:
    plans = [text for text in markdown(app) if text.startswith("**Plan")]
    assert len(plans) == 1, plans  # one capacity plan on the page
    return plans[0]


def test_a_recommend_row_opens_a_plan_page_with_its_numbers_and_no_other_gpu_count() -> None:
    # Issue 24: the row said 5 GPUs; the page it opened also said "2 GPU(s)" (a memory-only layout search).
    app = run_with_link(str(PAGES / "recommend.py"), {
        "m": "meta-llama/Llama-3.1-70B-Instruct", "in": "2000", "out": "500", "users": "200", "ttft": "2000",
        "itl": "50", "gpus": "gh200-96gb,h100-sxm-80gb"})
    table = next(text for text in markdown(app) if text.startswith("| # | Deployment"))
    row = [cell.strip() for cell in table.splitlines()[2].strip("|").split("|")]
    replicas, gpus, per_hour, ttft, itl, link = row[2], row[3], row[4], row[7], row[10], row[-1]
    query = {key: values[-1] for key, values in parse_qs(urlsplit(link[link.index("(") + 1:-1]).query).items()}
    plan = plan_page(query)
    text = the_plan(plan)
    word = "replica" if replicas == "1" else "replicas"
    assert text.startswith(f"**Plan: {replicas} {word} × ") and f"= {gpus} GPU" in text
    assert f"**{per_hour}/hour**" in text and f"TTFT p95 {ttft}, ITL {itl};" in text
    assert (metrics(plan)["TTFT p95"], metrics(plan)["ITL"]) == (ttft, itl)
    page = " ".join(markdown(plan))
    assert "Capacity plan for" not in page and "GPU(s): " not in page  # the memory-only search's headline is gone
    assert "memory only, no SLO" in text  # the memory ceiling stays, labelled, inside the one plan


def test_a_deployment_vllm_refuses_shows_no_running_figures_and_a_command_with_the_fix() -> None:
    # Issue 26 items 1 and 2: 70B in bf16 on 2 x H100 at 32k does not start (the largest max_model_len is 24,384).
    app = plan_page(to_query_params(LLAMA_70B_2XH100, TEAM_LOAD))
    shown = metrics(app)
    assert all(shown[label] == "—" for label in RUNNING_SERVER)  # no "Workload concurrency 8"
    assert shown["Largest max_model_len"] == "24,384"
    assert not [text for text in markdown(app) if text.startswith("**Plan")]
    assert any("No capacity plan: vLLM does not start" in i.value for i in app.info)
    # 382 blocks of 64 tokens, less the null block, hold 24,384 tokens; at that length a request needs 381 blocks:
    # the pool is unchanged, so the fix says so rather than a token figure that moves with max_model_len
    fixes = next(text for text in markdown(app) if text.startswith("**What would make it fit:**"))
    assert ("- lower max_model_len to 24,384 (the largest that fits) → the same 382-block KV cache, 1.00x"
            in fixes) and 382 * 64 - 64 == 24384 and f"{382 / 381:.2f}" == "1.00"
    assert "--max-model-len 24384" in app.code[0].value  # the first fix, picked by default
    app.radio(key="launch_fix").set_value("as set: will not start").run()
    assert app.code[0].value.startswith("# will not start")
    assert any(e.value.startswith("**Will not start.** vLLM's error:") for e in app.error)


def test_a_length_above_the_models_offers_its_limit_or_the_variable_with_its_risk() -> None:
    # Issue 26 item 2: `vllm serve Qwen/Qwen3-30B-A3B --quantization fp8 -tp 2 --max-model-len 65536`; the model's
    # config.json says 40,960, so vLLM refuses before sizing memory.
    scenario = Scenario(model="Qwen/Qwen3-30B-A3B", gpu="h100-sxm-80gb", tensor_parallel_size=2, quantization="fp8",
                        max_model_len=65536)
    app = plan_page(to_query_params(scenario))
    shown = metrics(app)
    assert shown["Largest max_model_len"] == "40,960" and shown["Max concurrency"] == "—"
    fixes = next(text for text in markdown(app) if text.startswith("**What would make it fit:**"))
    assert "- lower max_model_len to 40,960 (the model's own limit, from its config.json)" in fixes
    assert "- set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 to keep max_model_len 65,536 (risk: " in fixes
    allow = next(o for o in app.radio(key="launch_fix").options if o.startswith("set VLLM_ALLOW_LONG"))
    app.radio(key="launch_fix").set_value(allow).run()
    assert app.code[0].value.startswith("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve Qwen/Qwen3-30B-A3B")
    assert "--max-model-len 65536" in app.code[0].value


def test_compare_shows_the_plan_pages_plan_for_the_same_settings() -> None:
    # Issue 26 item 4: Compare had the memory half only.
    compare = run_with_link(str(PAGES / "compare.py"), {"users": "200"})
    frame = compare.table[0].value
    column = next(c for c in frame.columns if c.startswith("A:"))
    rows = dict(zip(frame[""], frame[column]))
    link = next(b.proto.url for b in compare.get("link_button"))
    plan = plan_page({k: v[-1] for k, v in parse_qs(urlsplit(link).query).items()})
    text = the_plan(plan)
    count = re.match(r"\*\*Plan: ([\d,]+ replicas? × \d+ GPU\(s\) = [\d,]+ GPUs?)\*\*", text)[1]
    assert rows["plan: replicas × GPUs"].startswith(f"{count} (")  # "1 replica × 4 GPU(s) = 4 GPUs (speed binds)"
    assert (rows["TTFT p95"], rows["ITL"]) == (metrics(plan)["TTFT p95"], metrics(plan)["ITL"])
    assert f"**{rows['$/hour']}/hour**" in text
    assert rows["verdict"] == "Fits"  # the Plan page's word, not "Fits with margin"


def test_an_unreadable_hub_checkpoint_offers_the_bundled_preset_of_the_same_model(monkeypatch) -> None:
    # Issue 26 item 10: offline, the -FP8 checkpoint cannot be read; the bundled Qwen/Qwen3-30B-A3B is offered, and
    # only used once accepted, with the page saying what was asked for.
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    app = plan_page()
    app.text_area(key="plan_import_text").set_value("vllm serve Qwen/Qwen3-30B-A3B-FP8 -tp 2")
    app.button(key="plan_import_button").click().run()
    assert any("**Qwen/Qwen3-30B-A3B**, a bundled preset, is the same model" in i.value for i in app.info)
    assert "Qwen3-30B-A3B" not in app.markdown[0].value  # nothing substituted yet
    app.button(key="plan_stand_in").click().run()
    assert not app.exception
    header = " ".join(c.value for c in app.caption)
    assert "model: 'Qwen/Qwen3-30B-A3B-FP8' was asked for; the numbers are for the model shown instead" in header
    assert any("Qwen/Qwen3-30B-A3B ·" in text for text in markdown(app))
