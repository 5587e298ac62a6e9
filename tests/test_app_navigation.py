"""Issue 29 item 6: every page opens on the deployment and workload the user was just looking at (one AppTest
session switching pages, as the sidebar's navigation does)."""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
MODEL = "meta-llama/Llama-3.1-70B-Instruct"


@pytest.fixture(autouse=True)
def fresh_caches():
    st.cache_data.clear()


def plan_70b_for_200_users() -> AppTest:
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    app.run()
    app.selectbox(key="plan_preset").set_value(MODEL)
    app.selectbox(key="plan_tensor_parallel_size").set_value(2)
    app.number_input(key="plan_max_model_len").set_value(32768)
    app.number_input(key="plan_target_concurrent_requests").set_value(200)
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    app.query_params.clear()  # NOTE: the sidebar's navigation opens a page without the previous page's link
    return app


def test_recommend_compare_and_learn_open_on_plans_deployment_and_load():
    app = plan_70b_for_200_users()
    app.switch_page("pages/recommend.py").run()
    assert not app.exception, [e.value for e in app.exception]
    assert app.session_state["rec_model"] == MODEL
    assert app.session_state["rec_target_concurrent_requests"] == 200
    assert app.session_state["rec_max_model_len"] == 32768

    app.query_params.clear()
    app.switch_page("pages/compare.py").run()
    assert not app.exception, [e.value for e in app.exception]
    assert app.session_state["cmp_a_model"] == MODEL and app.session_state["cmp_a_tensor_parallel_size"] == 2
    assert app.session_state["cmp_target_concurrent_requests"] == 200

    app.query_params.clear()
    app.switch_page("pages/learn.py").run()
    assert not app.exception, [e.value for e in app.exception]
    assert any(MODEL in m.value and "max_model_len 32,768" in m.value for m in app.markdown)
