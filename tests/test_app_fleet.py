"""The Fleet page (AppTest) against a local fake Prometheus serving the hand-made reading of
tests/support/fleet_reading.py; the real Prometheus + vLLM run is tests/test_fleet_against_prometheus.py."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from support.fleet_reading import AT_END, AT_START, OVER_RANGE
from support.http_server import RouteServer, answer, send

from calculator.url_state import from_query_params

PAGE = str(Path(__file__).resolve().parents[1] / "pages" / "fleet.py")
pytestmark = pytest.mark.usefixtures("local_dashboard")
END_S = 1100.0
SECRET = "prom-secret-token"


def vector(samples) -> dict:
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": s.labels, "value": [END_S, repr(s.value)]} for s in samples]}}


def fake_prometheus(error: dict | None = None) -> RouteServer:
    """Answers the fleet page's four requests from the hand-made reading; ``error`` makes every query fail."""
    def reply(payload_for):
        def route(handler):
            params = parse_qs(urlsplit(handler.path).query)
            send(handler, answer(400, error) if error is not None else answer(200, payload_for(params)))
        return route

    def instant(params):
        return vector(AT_END if abs(float(params["time"][0]) - END_S) < 1e-3 else AT_START)

    def over_range(params):
        return {"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": s.labels, "values": [[t, repr(v)] for t, v in s.points]} for s in OVER_RANGE]}}

    def series(params):
        return {"status": "success", "data": [
            s.labels for s in OVER_RANGE if s.labels["__name__"] == "vllm:num_requests_running"]}

    return RouteServer({"/api/v1/query": reply(instant), "/api/v1/query_range": reply(over_range),
                        "/api/v1/series": reply(series)})


@pytest.fixture()
def prometheus():
    server = fake_prometheus()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def clear_caches():
    st.cache_data.clear()
    st.cache_resource.clear()


def run_page(url: str, **state) -> AppTest:
    app = AppTest.from_file(PAGE, default_timeout=60)
    app.session_state["fleet_url"] = url
    app.session_state["fleet_freeze"] = True
    app.session_state["fleet_end_s"] = END_S
    for key, value in state.items():
        app.session_state[key] = value
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def tables(app: AppTest, first_column: str) -> list[list[dict]]:
    return [df.value.to_dict("records") for df in app.dataframe if df.value.columns[0] == first_column]


def metric_values(app: AppTest, label: str) -> list[str]:
    return [m.value for m in app.metric if m.label == label]


def test_replicas_grouped_by_model_with_their_numbers_flags_and_plan(prometheus):
    app = run_page(prometheus.url)
    assert not app.error, [e.value for e in app.error]
    assert [h.value for h in app.subheader if h.value in ("llama", "qwen")] == ["llama", "qwen"]
    llama, qwen = tables(app, "replica")
    a, b = llama
    assert (a["replica"], a["num_gpu_blocks"], a["block_size"], a["KV tokens"]) == ("a:8000", 101, 16, 1616)
    assert (a["KV usage %"], a["running"], a["waiting"], a["peak waiting"]) == (90.0, 2, 3, 4)
    assert (a["preemptions"], a["prompt tokens"], a["generation tokens"]) == (3, 4000, 6000)
    assert a["generation tok/s"] == 6000 / 900 and a["prefix hit rate %"] == 20.0  # the 15 min default range
    assert (a["p95 requests that fit"], b["p95 requests that fit"]) == (2, 4)
    assert qwen[0]["replica"] == "c:8000"
    assert metric_values(app, "Replicas now") == ["3"] and metric_values(app, "Served models") == ["2"]
    # llama: observed peak 7 requests, +20 % -> 9; 2 + 4 = 6 held by 2 replicas -> ceil(9 x 2 / 6) = 3
    assert metric_values(app, "Target concurrent requests") == ["7"]
    assert metric_values(app, "With 20 % headroom") == ["9"]
    assert metric_values(app, "Replicas needed") == ["3"]
    warnings, infos = [w.value for w in app.warning], [i.value for i in app.info]
    assert any(w.startswith("a:8000 is saturated") for w in warnings)
    assert "c:8000 served nothing in the range" in infos
    assert not any("b:8000" in w for w in warnings)


def test_grouping_by_a_chosen_label_and_a_given_target(prometheus):
    app = run_page(prometheus.url, fleet_group_by=["namespace"], fleet_target=30, fleet_headroom=0)
    titles = [h.value for h in app.subheader if "·" in h.value]
    assert titles == ["llama · namespace=prod", "llama · namespace=staging", "qwen · namespace=prod"]
    assert [[row["namespace"] for row in table] for table in tables(app, "replica")] == [["prod"], ["staging"],
                                                                                        ["prod"]]
    # prod holds 2 requests per replica (A alone saw prompts p95 455, prefix 43 tokens): 30 / 2 = 15 replicas
    assert metric_values(app, "Replicas needed")[0] == "15"


def test_what_ifs_ask_the_engine_and_link_to_the_plan_page(prometheus):
    app = run_page(prometheus.url, fleet_gpu="a100-sxm-80gb", fleet_whatif_max_model_len=256,
                   **{"fleet_model__llama": "meta-llama/Llama-3.1-8B-Instruct"})
    (what_ifs,) = tables(app, "deployment")
    assert [row["deployment"] for row in what_ifs] == ["as deployed, KV cache sized from memory", "max_model_len 256"]
    assert what_ifs[0]["p95 requests per replica"] > 0 and "exceed max_model_len 256" in what_ifs[1]["note"]
    scenario, workload, _, warnings = from_query_params(parse_qs(urlsplit(what_ifs[1]["Plan page"]).query))
    assert not warnings and (scenario.gpu, scenario.block_size, scenario.max_model_len) == ("a100-sxm-80gb", 16, 256)
    assert (workload.prompt_tokens_p95, workload.output_tokens_p95) == (458, 190)
    assert workload.target_concurrent_requests == 9  # the target with headroom, for the Plan page's own plan


def test_the_token_goes_only_in_the_header(prometheus):
    app = run_page(prometheus.url, fleet_auth="bearer token", fleet_token=SECRET)
    assert {auth for _, auth in prometheus.seen} == {f"Bearer {SECRET}"}
    assert all(SECRET not in path for path, _ in prometheus.seen)
    assert SECRET not in json.dumps(app.query_params.to_dict() if hasattr(app.query_params, "to_dict") else {})


def test_prometheus_errors_and_bad_filters_are_clear_states():
    bad = fake_prometheus(error={"status": "error", "errorType": "bad_data", "error": "1:1: parse error"})
    try:
        app = run_page(bad.url)
        assert "Prometheus rejected the query: 1:1: parse error" in app.error[0].value
    finally:
        bad.close()
    app = run_page("http://127.0.0.1:9")
    assert "Cannot connect to http://127.0.0.1:9" in app.error[0].value
    app = run_page("http://127.0.0.1:9", fleet_filter="namespace")
    assert "write label=value" in app.error[0].value


def test_auto_refresh_reads_up_to_now_and_the_button_reads_again(prometheus):
    app = run_page(prometheus.url, fleet_freeze=False, fleet_refresh_every="30 s")
    assert not app.error, [e.value for e in app.error]
    queried = len(prometheus.seen)
    times = [float(parse_qs(urlsplit(path).query)["time"][0]) for path, _ in prometheus.seen
             if path.startswith("/api/v1/query?")]
    assert times and min(times) > END_S  # not the frozen end: the range ends now
    app.button(key="fleet_refresh").click().run()
    assert len(prometheus.seen) > queried


def test_a_hostile_prometheus_is_bounded_and_flagged():
    """30 replicas of 30 models, each with impossible gauges: 8 groups drawn, the rest named, the values flagged."""
    def labels(i: int) -> dict:
        return {"job": "vllm", "instance": f"10.0.0.{i}:8000", "engine": "0", "model_name": f"model-{i:02d}"}

    result = [{"metric": {"__name__": name, **labels(i)}, "value": [END_S, value]}
              for i in range(30) for name, value in (("vllm:num_requests_running", "-3"),
                                                     ("vllm:kv_cache_usage_perc", "5"))]
    routes = {"/api/v1/query": answer(200, {"status": "success", "data": {"resultType": "vector", "result": result}}),
              "/api/v1/query_range": answer(200, {"status": "success", "data": {"resultType": "matrix", "result": []}}),
              "/api/v1/series": answer(200, {"status": "success", "data": []})}
    server = RouteServer(routes)
    try:
        app = run_page(server.url)
    finally:
        server.close()
    drawn = [s.value for s in app.subheader if s.value.startswith("model-")]
    assert drawn == [f"model-{i:02d}" for i in range(8)]
    more = next(i.value for i in app.info if "more groups not drawn" in i.value)
    assert more.startswith("22 more groups not drawn: model-08, model-09") and more.endswith("Narrow the filter to see them.")
    flagged = " ".join(w.value for w in app.warning)
    assert "is -3, impossible for a count of requests; ignored" in flagged
    assert "is 5, outside 0-1 (0-100 %); shown as 100%" in flagged


def test_a_plain_streamlit_run_says_what_the_page_does_and_how_to_open_it(monkeypatch):
    """Issue 26 item 9 / issue 29 item 5: a closed dashboard explains the page and gives the exact line."""
    monkeypatch.delenv("VLLM_PLANNER_DEPLOYMENT")
    st.cache_resource.clear()
    app = run_page("http://127.0.0.1:9")
    assert app.info[0].value.startswith("This page reads many vLLM replicas from one Prometheus server and plans")
    assert "`make dashboard`" in app.info[0].value and "VLLM_PLANNER_ALLOWED_HOSTS=HOST:PORT" in app.info[0].value
    assert [c.value for c in app.code] == ["VLLM_PLANNER_DEPLOYMENT=local streamlit run app.py"]
    assert "VLLM_PLANNER_DEPLOYMENT=local streamlit run app.py" in app.error[0].value
