"""The Live page (AppTest) against a local HTTP server serving a real vLLM /metrics capture; the real-server
run is tests/test_live_against_vllm.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from support.http_server import answer

PAGE = str(Path(__file__).resolve().parents[1] / "pages" / "live.py")
CAPTURE = (Path(__file__).parent / "data" / "vllm-metrics" / "vllm-0.32.0-cpu-saturated.txt").read_bytes()
SERVER_INFO = {"vllm_config": {"cache_config": {"block_size": 128}}, "vllm_env": {"VLLM_SERVER_DEV_MODE": "1"}}


@pytest.fixture(autouse=True)
def local_dashboard(monkeypatch):
    """These tests play `make dashboard` (servers on this machine allowed); the access policy is read once."""
    monkeypatch.setenv("VLLM_PLANNER_DEPLOYMENT", "local")
    monkeypatch.delenv("VLLM_PLANNER_ALLOWED_HOSTS", raising=False)
    st.cache_resource.clear()
    yield
    st.cache_resource.clear()


def routes(**extra):
    return {"/metrics": answer(200, CAPTURE, "text/plain"), "/health": answer(200, b""),
            "/version": answer(200, {"version": "0.32.0"}),
            "/v1/models": answer(200, {"object": "list", "data": [{"id": "tiny", "max_model_len": 1024}]}), **extra}


def run(url: str) -> AppTest:
    app = AppTest.from_file(PAGE, default_timeout=60)
    app.session_state["live_url"] = url
    app.session_state["live_interval"] = "off"
    app.run()
    assert not app.exception
    return app


def test_capture_values_and_server_info(serve):
    server = serve(routes(**{"/server_info": answer(200, SERVER_INFO)}))
    app = run(server.url)
    shown = {m.label: m.value for m in app.metric}
    assert shown["Preemptions (total)"] == "8" and shown["Prefix cache hits"] == "0 / 36 tokens"
    assert shown["vLLM version"] == "0.32.0" and shown["Server"] == "healthy"
    assert any("server_info" in e.label for e in app.expander)
    assert json.loads(app.json[0].value) == SERVER_INFO


def test_without_dev_mode_there_is_no_server_info_panel(serve):
    app = run(serve(routes()).url)
    assert not any("server_info" in e.label for e in app.expander)


def test_a_page_that_is_not_vllm_is_a_clear_state(serve):
    app = run(serve({"/metrics": answer(200, b"<html>Grafana</html>", "text/html")}).url)
    assert "does not look like a vLLM server" in app.error[0].value


def shown(app: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in app.metric}


def texts(app: AppTest) -> str:
    return " ".join(e.value for e in [*app.warning, *app.caption, *app.info, *app.error, *app.markdown])


# --- issue 14: the estimate describes the server it is attached to -------------------------------------------

def test_a_cpu_build_is_detected_and_a_gpu_choice_is_flagged_with_a_one_click_fix(serve):
    app = run(serve(routes()).url)
    # the capture: block_size 128 not user-specified and a KV space of exactly 1 GiB (VLLM_CPU_KVCACHE_SPACE=1)
    assert "Device for the estimate: **the CPU (vLLM CPU build)** — detected from the server: block_size 128" \
        in texts(app)
    app.session_state["live_gpu"] = "h100-sxm-80gb"
    app.run()
    warning = next(w.value for w in app.warning if "CPU build" in w.value)
    assert warning.startswith("This server looks like a vLLM CPU build") and "assumes H100 SXM 80GB" in warning
    app.button(key="use_device_tiny · engine 0").click().run()
    assert app.session_state["live_gpu"] == "cpu" and not any("CPU build" in w.value for w in app.warning)


def test_the_gpu_that_server_info_names_is_used(serve):
    info = {"vllm_config": {"device_config": {"device_type": "cuda"}},
            "system_env": {"nvidia_gpu_models": "GPU 0: NVIDIA H100 80GB HBM3\nGPU 1: NVIDIA H100 80GB HBM3"}}
    app = run(serve(routes(**{"/server_info": answer(200, info)})).url)
    assert "**H100 SXM 80GB** — detected from the server: /server_info lists 2 × NVIDIA H100 80GB HBM3" in texts(app)
    assert "NVIDIA H100 80GB HBM3" in next(m.value for m in app.markdown if m.value.startswith("**Numbers about**"))
