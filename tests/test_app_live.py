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


pytestmark = pytest.mark.usefixtures("local_dashboard")


def routes(**extra):
    return {"/metrics": answer(200, CAPTURE, "text/plain"), "/health": answer(200, b""),
            "/version": answer(200, {"version": "0.32.0"}),
            "/v1/models": answer(200, {"object": "list", "data": [{"id": "tiny", "max_model_len": 1024}]}), **extra}


def run(url: str) -> AppTest:
    # NOTE: generous: a run waits out the 8 s refresh deadline on a slow endpoint, on a runner that may be loaded
    app = AppTest.from_file(PAGE, default_timeout=300)
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


def test_a_burst_between_two_reads_shows_in_the_interval_summary(serve):
    """The second read's counters moved by a burst the gauges never saw (both reads idle)."""
    text = CAPTURE.decode()
    before = text.replace('finished_reason="length",model_name="tiny"} 9.0', 'finished_reason="length",model_name="tiny"} 1.0')
    pages = iter([before.encode(), CAPTURE])

    def metrics(handler):
        from support.http_server import send
        send(handler, (200, {"Content-Type": "text/plain"}, next(pages)))

    app = run(serve(routes(**{"/metrics": metrics})).url)
    assert "The next refresh shows what happened since this read" in texts(app)
    app.run()
    assert shown(app)["Requests finished (since last read)"] == "8"  # 9 - 1 length-finished requests


# --- issue 10 items 2, 3: slow endpoints and hostile /metrics on the page ------------------------------------

def hostile_metrics(engines: int = 1, **values: str) -> bytes:
    usage, running, waiting = values.get("usage", "0.5"), values.get("running", "1"), values.get("waiting", "0")
    lines = ["# TYPE vllm:kv_cache_usage_perc gauge", f'vllm:kv_cache_usage_perc{{engine="0",model_name="tiny"}} {usage}',
             "# TYPE vllm:num_requests_waiting gauge", f'vllm:num_requests_waiting{{engine="0",model_name="tiny"}} {waiting}',
             "# TYPE vllm:num_requests_running gauge"]
    lines += [f'vllm:num_requests_running{{engine="{i}",model_name="tiny"}} {running}' for i in range(engines)]
    return ("\n".join(lines) + "\n").encode()


def test_impossible_values_are_clamped_or_dropped_and_flagged(serve):
    app = run(serve(routes(**{"/metrics": answer(200, hostile_metrics(usage="-5", running="-3", waiting="inf"),
                                                 "text/plain")})).url)
    values = shown(app)
    assert values["KV cache usage"] == "0.0%" and values["Running"] == "—" and values["Waiting"] == "—"
    warnings = " ".join(w.value for w in app.warning)
    assert "kv_cache_usage_perc" in warnings and "is -5, outside 0-1 (0-100 %); shown as 0%" in warnings
    assert "is -3, impossible for a count of requests; ignored" in warnings and "is inf; ignored" in warnings
    for usage, shown_as in (("500", "100.0%"), ("nan", "—")):
        app = run(serve(routes(**{"/metrics": answer(200, hostile_metrics(usage=usage), "text/plain")})).url)
        assert shown(app)["KV cache usage"] == shown_as


def test_two_thousand_engines_are_bounded_and_the_rest_is_named(serve):
    body = hostile_metrics(engines=2001)
    assert 100_000 < len(body) < 160_000
    app = run(serve(routes(**{"/metrics": answer(200, body, "text/plain")})).url)
    assert len([s for s in app.subheader if s.value.startswith("tiny · engine")]) == 4
    assert any(m.value == "#### 2,001 engines reported" for m in app.markdown)
    assert "4 drawn in full above; 60 in this table; 1,937 not read (this page reads at most 64)." in texts(app)


def test_a_slow_endpoint_is_named_and_the_rest_is_shown(serve):
    from support import hostile
    app = run(serve(routes(**{"/v1/models": hostile.silent(12)})).url)
    assert shown(app)["Preemptions (total)"] == "8" and shown(app)["Served models"] == "none"
    warning = next(w.value for w in app.warning if w.value.startswith("/v1/models"))
    assert warning == (f"/v1/models: {app.session_state['live_url']}/v1/models did not answer completely within "
                       "8 s, the most this dashboard waits for a refresh. Shown without it.")


def test_a_read_in_which_no_endpoint_answers_in_time_is_a_slow_read_not_a_lost_server(serve):
    from support import hostile
    app = run(serve({path: hostile.silent(12) for path in
                     ("/metrics", "/health", "/version", "/v1/models", "/server_info")}).url)
    assert not app.error  # not "Server unreachable": the next read may well answer
    assert [w.value for w in app.warning][-1] == (
        f"No endpoint of {app.session_state['live_url']} answered completely within 8 s, the most this dashboard "
        "waits for a refresh: the server, or the machine this dashboard runs on, is too busy to answer in time; the "
        "next read tries again")


# --- issue 10 items 12-14 on the page -------------------------------------------------------------------------

def test_a_shared_dashboard_is_closed_and_says_so(serve, monkeypatch):
    monkeypatch.setenv("VLLM_PLANNER_DEPLOYMENT", "shared")
    st.cache_resource.clear()
    server = serve(routes())
    app = run(server.url)
    assert ("This dashboard may contact: closed: no server is allowed until the operator names them in "
            "VLLM_PLANNER_ALLOWED_HOSTS") in texts(app)
    assert "is not among the servers this dashboard may contact" in app.error[0].value and server.seen == []
    # issue 29 item 5: the refusal names every way out, with the exact lines, and the page says what it is for
    port = server.url.rsplit(":", 1)[1]
    assert app.error[0].value.endswith(
        "For servers on this machine, start the dashboard with `make dashboard` or `VLLM_PLANNER_DEPLOYMENT=local "
        "streamlit run app.py`; for this one in a shared deployment, add "
        f"`VLLM_PLANNER_ALLOWED_HOSTS=127.0.0.1:{port}` to its environment.")
    assert app.info[0].value.startswith("This page reads a running vLLM server's /metrics and sets what it reports")
    assert [c.value for c in app.code] == ["VLLM_PLANNER_DEPLOYMENT=local streamlit run app.py"]


def test_a_bad_rule_and_a_malformed_address_are_clear_states(serve, monkeypatch):
    monkeypatch.setenv("VLLM_PLANNER_ALLOWED_HOSTS", "not-a-cidr/99")
    st.cache_resource.clear()
    for url in ("http://127.0.0.1:18600\\x:1", "http://[127.0.0.1]:18600", "http://127.0.0.1:+18600",
                "http://127.0.0.1:18600:8000"):
        app = run(url)
        assert len(app.error) == 1 and "\n" not in app.error[0].value and not app.exception
        assert "'not-a-cidr/99' is not a CIDR range" in " ".join(w.value for w in app.warning)


def test_a_shared_dashboard_refuses_every_local_path_with_one_message(serve, monkeypatch):
    monkeypatch.setenv("VLLM_PLANNER_DEPLOYMENT", "shared")
    monkeypatch.setenv("VLLM_PLANNER_ALLOWED_HOSTS", "127.0.0.1")
    st.cache_resource.clear()
    url = serve(routes()).url
    said = set()
    for path in ("/etc/passwd", "/etc", "/no/such/folder"):
        app = AppTest.from_file(PAGE, default_timeout=60)
        app.session_state["live_url"], app.session_state["live_interval"] = url, "off"
        app.session_state["live_model_id"] = path
        app.run()
        said |= {w.value for w in app.warning if "model folders" in w.value}
    assert said == {"Local model folders are off in this shared dashboard; give a Hugging Face model id or upload "
                    "config.json"}


# --- issue 29 items 4, 5: the history stays when the server stops; the reads' real pace; preemptions are bad -----

def test_when_the_server_stops_the_history_stays_with_an_unreachable_band(serve):
    text = CAPTURE.decode()
    before = text.replace('finished_reason="length",model_name="tiny"} 9.0', 'finished_reason="length",model_name="tiny"} 1.0')
    before = before.replace('vllm:num_preemptions_total{engine="0",model_name="tiny"} 8.0',
                            'vllm:num_preemptions_total{engine="0",model_name="tiny"} 2.0')
    pages = iter([before.encode(), CAPTURE])

    def metrics(handler):
        from support.http_server import send
        send(handler, (200, {"Content-Type": "text/plain"}, next(pages, CAPTURE)))

    server = serve(routes(**{"/metrics": metrics}))
    app = run(server.url)
    app.session_state["live_model"] = "facebook/opt-125m"  # any config: the chart needs the pool's tokens
    app.run()
    card = next(m for m in app.metric if m.label == "Preemptions (total)")
    assert card.proto.delta.endswith("/s") and card.proto.color == card.proto.MetricColor.RED  # more: a red arrow
    assert any(c.value.startswith("Read at ") and "read(s) came every" in c.value for c in app.caption)
    app.run()  # a third read: no new preemption, so no arrow at all
    card = next(m for m in app.metric if m.label == "Preemptions (total)")
    assert (card.proto.delta, card.proto.direction) == ("0.00/s", card.proto.MetricDirection.NONE)
    server.close()
    app.run()
    assert not app.exception
    error = app.error[0].value
    assert error.startswith("Server unreachable since ") and "UTC: Cannot connect to" in error
    assert error.endswith("What this session saw until then is kept below.")
    assert any(c.value.startswith("This session: 8 requests finished") for c in app.caption)
    chart = next(c for c in app.get("plotly_chart") if "KV cache usage over time" in c.proto.spec)
    assert "server unreachable since" in chart.proto.spec
