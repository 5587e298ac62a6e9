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


def test_gpu_diagnose_and_live_open_on_plans_deployment(serve, local_dashboard, monkeypatch):
    from urllib.parse import parse_qsl, urlsplit

    from support.fake_nvml import fake
    from support.http_server import answer
    from test_app_live import CAPTURE

    import calculator.observe.nvml
    from calculator import Scenario, estimate

    app = plan_70b_for_200_users()
    monkeypatch.setattr(calculator.observe.nvml, "default_backend", lambda: fake("two_gpus_mixed"))
    app.switch_page("pages/gpu.py").run()
    assert not app.exception, [e.value for e in app.exception]
    assert any(c.value.startswith(f"Your plan: `{MODEL}` on H100 SXM 80GB × 2.") for c in app.caption)
    assert any(c.value.endswith("not the planned H100 SXM 80GB") for c in app.caption)
    first = next(dict(parse_qsl(urlsplit(b.proto.url).query)) for b in app.get("link_button")
                 if b.proto.label == "Plan on this GPU")
    assert (first["m"], first["tp"], first["len"], first["users"], first["g"]) == (
        MODEL, "2", "32768", "200", "a100-sxm-40gb")

    app.query_params.clear()
    app.switch_page("pages/diagnose.py").run()
    assert not app.exception, [e.value for e in app.exception]
    assert app.session_state["diagnose_gpu"] == "H100 SXM 80GB"

    server = serve({"/metrics": answer(200, CAPTURE, "text/plain"), "/health": answer(200, b""),
                    "/version": answer(200, {"version": "0.32.0"}),
                    "/v1/models": answer(200, {"object": "list", "data": [{"id": "tiny", "max_model_len": 1024}]})})
    app.query_params.clear()
    app.session_state["live_url"], app.session_state["live_interval"] = server.url, "off"
    app.switch_page("pages/live.py").run()
    assert not app.exception, [e.value for e in app.exception]
    assert app.session_state["live_tp"] == 2
    plan = estimate(Scenario(model=MODEL, tensor_parallel_size=2, max_model_len=32768))
    rows = {r["quantity"]: (r["planned"], r["this server"]) for frame in app.dataframe
            for r in frame.value.to_dict("records") if frame.value.columns[1] == "planned"}
    # the server's own cache_config_info: 16 blocks of 128 tokens, max concurrency 2.0; /v1/models: 1,024 tokens
    assert rows["KV cache tokens (per engine)"] == (plan.capacity.kv_cache_tokens, 2048)
    assert rows["block size (tokens)"] == (plan.settings.block_size, 128)
    assert rows["max_model_len"] == (32768, 1024)
    assert any(c.value == f"This server serves `tiny`; your plan is for `{MODEL}`." for c in app.caption)
