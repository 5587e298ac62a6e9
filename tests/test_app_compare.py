"""The Compare page: side-by-side scenarios equal the engine's numbers, and the link restores them."""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from calculator import Scenario, estimate, find_gpu

PAGE = str(Path(__file__).resolve().parents[1] / "pages" / "compare.py")


@pytest.fixture(autouse=True)
def fresh_caches():
    st.cache_data.clear()


def run_page(query: dict[str, str] | None = None) -> AppTest:
    app = AppTest.from_file(PAGE, default_timeout=120)
    for key, value in (query or {}).items():
        app.query_params[key] = value
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def table(app: AppTest) -> list[dict]:
    return app.dataframe[0].value.to_dict("records")


def test_two_default_scenarios_match_the_engine():
    rows = table(run_page())
    assert len(rows) == 2
    expected = estimate(Scenario(model="RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", gpu="h100-sxm-80gb",
                                 tensor_parallel_size=2, max_model_len=32768))
    assert rows[1]["KV tokens"] == expected.capacity.kv_cache_tokens
    assert rows[1]["max concurrency"] == round(expected.capacity.max_concurrency, 2)


def test_editing_a_scenario_and_reopening_its_link():
    app = run_page()
    app.segmented_control(key="cmp_count").set_value(3)
    app.run()
    app.selectbox(key="cmp_c_model").set_value("Qwen/Qwen3-8B")
    app.selectbox(key="cmp_c_gpu").set_value(find_gpu("l4").key)
    app.number_input(key="cmp_c_max_model_len").set_value(8192)
    app.run()
    rows = table(app)
    assert len(rows) == 3
    link = {key: (value[-1] if isinstance(value, list) else value) for key, value in app.query_params.items()}
    assert link["k"] == "3" and link["c.m"] == "Qwen/Qwen3-8B" and link["c.g"] == find_gpu("l4").key
    assert table(run_page(link)) == rows
    expected = estimate(Scenario(model="Qwen/Qwen3-8B", gpu="l4", max_model_len=8192, tensor_parallel_size=2))
    assert rows[2]["GPUs"] == 2 and rows[2]["KV tokens"] == expected.capacity.kv_cache_tokens


def test_a_bad_link_falls_back_with_warnings():
    app = run_page({"k": "9", "a.tp": "-1", "b.m": "nope/nope"})
    text = " ".join(w.value for w in app.warning)
    assert "k='9'" in text and "tp=" in text and "nope/nope" in text
    assert len(table(app)) == 2
