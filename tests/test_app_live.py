"""The Live page (AppTest) against a local HTTP server serving a real vLLM /metrics capture; the real-server
run is tests/test_live_against_vllm.py."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest
from support.http_server import answer

PAGE = str(Path(__file__).resolve().parents[1] / "pages" / "live.py")
CAPTURE = (Path(__file__).parent / "data" / "vllm-metrics" / "vllm-0.32.0-cpu-saturated.txt").read_bytes()
SERVER_INFO = {"vllm_config": {"cache_config": {"block_size": 128}}, "vllm_env": {"VLLM_SERVER_DEV_MODE": "1"}}


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
