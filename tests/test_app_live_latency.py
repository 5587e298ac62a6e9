"""The Live page's latency panels (AppTest) against a local HTTP server serving the real vLLM 0.32.0 /metrics
capture: percentiles by hand from its buckets, no speed prediction for its CPU server, a prediction and a
calibrated Plan link when the user says it runs on a GPU."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from streamlit.testing.v1 import AppTest
from support.http_server import answer, send
from test_live_latency import CAPTURE, edited, ttft_before

PAGE = str(Path(__file__).resolve().parents[1] / "pages" / "live.py")
pytestmark = pytest.mark.usefixtures("local_dashboard")


def routes(pages: list[str]):
    texts = iter(pages)
    last = [pages[-1]]

    def metrics(handler):
        last[0] = next(texts, last[0])
        send(handler, (200, {"Content-Type": "text/plain"}, last[0].encode()))

    return {"/metrics": metrics, "/health": answer(200, b""), "/version": answer(200, {"version": "0.32.0"}),
            "/v1/models": answer(200, {"object": "list", "data": [{"id": "tiny", "max_model_len": 1024}]})}


def run(url: str, **state) -> AppTest:
    app = AppTest.from_file(PAGE, default_timeout=60)
    app.session_state["live_url"] = url
    app.session_state["live_interval"] = "off"
    for key, value in state.items():
        app.session_state[key] = value
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def _frame(app: AppTest, first_column: str) -> list[dict]:
    """The dataframe whose first column is ``first_column`` (AppTest does not expose a dataframe's key)."""
    for frame in app.dataframe:
        if frame.value.columns[0] == first_column:
            return frame.value.to_dict("records")
    raise AssertionError(f"no dataframe with a {first_column!r} column")


def test_the_latency_table_shows_hand_computed_percentiles_and_a_cpu_server_gets_no_prediction(serve):
    app = run(serve(routes([CAPTURE])).url, live_model="facebook/opt-125m")
    rows = {row["latency"]: row for row in _frame(app, "latency")}
    # TTFT: 2 of 9 under 5 ms, 7 in (10, 20] ms: p50 = 10 + 10 x 2.5/7, p95 = 10 + 10 x 6.55/7 (ms).
    assert (rows["Time to first token"]["p50 (ms)"], rows["Time to first token"]["p95 (ms)"]) == ("13.6", "19.4")
    assert rows["Time to first token"]["counted"] == "9 requests"
    assert set(rows) == {"Queue time", "Time to first token", "Inter-token latency", "Prefill time", "Decode time",
                         "End-to-end latency"}
    assert any(i.value.startswith("The speed model covers GPUs; this server runs on the CPU") for i in app.info)
    assert "##### Speed model vs measured" in [m.value for m in app.markdown]
    assert not any("TTFT mean" in frame.value.iloc[:, 0].tolist() for frame in app.dataframe)


def test_p50_and_p95_over_time_come_from_the_interval_between_reads(serve):
    app = run(serve(routes([ttft_before(2, 0.005), CAPTURE])).url)
    app.run()
    rows = {row["latency"]: row for row in _frame(app, "latency")}
    # 7 first tokens between the reads, all in (10, 20] ms: p50 = 15.0 ms, p95 = 19.5 ms
    assert (rows["Time to first token"]["p50 (ms)"], rows["Time to first token"]["p95 (ms)"]) == ("15.0", "19.5")
    assert rows["Time to first token"]["counted"] == "7 requests"
    chart = next(c for c in app.get("plotly_chart") if "Latency p50 and p95" in c.proto.spec)
    assert "Time to first token p95" in chart.proto.spec


def test_on_a_gpu_the_prediction_stands_next_to_the_measurement_and_the_efficiencies_go_to_plan(serve):
    busy = edited(vllm_num_requests_running=4)
    later = edited(busy, vllm_estimated_read_bytes_per_gpu_total=3e12, vllm_estimated_flops_per_gpu_total=2e14)
    app = run(serve(routes([busy, later])).url, live_gpu="h100-sxm-80gb", live_model="facebook/opt-125m")
    app.run()
    rows = {row["quantity"]: row for frame in app.dataframe for row in frame.value.to_dict("records")
            if "TTFT mean" in frame.value.iloc[:, 0].tolist()}
    # measured TTFT mean since the server started: 0.10289 s / 9 requests
    assert rows["TTFT mean"]["measured"] == round(0.10289311408996582 / 9 * 1e3, 2)
    assert rows["Inter-token latency mean"]["measured"] == round(20.63908349999997 / 6039 * 1e3, 2)
    captions = " ".join(c.value for c in app.caption)
    # 36 prompt tokens / 9 requests = 4; 6,048 generated / 9 = 672 (the capture's length histograms)
    assert "Predicted for 4 concurrent request(s) of 4 prompt and 672 output tokens" in captions
    link = next(b for b in app.get("link_button") if "calibrated with these efficiencies" in b.proto.label)
    query = {k: v[-1] for k, v in parse_qs(urlsplit(link.proto.url).query).items()}
    assert 0 < float(query["mbu"]) <= 1.2 and 0 < float(query["mfu"]) <= 1  # mbu: a share of the streaming rate
    assert query["m"] == "facebook/opt-125m"


def test_the_diagnosis_names_memory_and_the_latest_reads_advice_is_not_repeated(serve):
    full = edited(vllm_kv_cache_usage_perc=0.99, vllm_num_requests_waiting=2)
    app = run(serve(routes([edited(full, vllm_num_preemptions_total=3), full])).url)
    app.run()
    warnings = [w.value for w in app.warning]
    assert ("Memory is the bottleneck: the KV cache reached 99% and requests are being preempted. Its pool is "
            "fixed at 16 blocks by --num-gpu-blocks-override 16: raise that override or remove it; or add "
            "replicas.") in warnings  # a CPU server: no GPUs to add
    assert not any(w.startswith("Requests are being preempted now") for w in warnings)


def test_quantiles_the_buckets_cannot_resolve_are_bounded_by_the_histograms_sum(serve):
    # The capture's 9 queue times all in (0, 300 ms] sum to 0.145888 ms: PromQL would say p50 150 ms, p95 285 ms.
    # p50 <= sum / 4.5, p95 <= sum / 0.45. Prefill: 9 in (0, 300 ms] summing to 51.101 ms: p50 <= 11.4 ms, below
    # TTFT's p50 (13.6 ms). Inter-token latency counts token gaps, not requests.
    app = run(serve(routes([CAPTURE])).url)
    rows = {row["latency"]: row for row in _frame(app, "latency")}
    queue_sum_ms = 0.14588800013370928
    assert rows["Queue time"]["p50 (ms)"] == f"< {queue_sum_ms / 4.5:.3g} (below the first bucket)"
    assert rows["Queue time"]["p95 (ms)"] == f"< {queue_sum_ms / 0.45:.3g} (below the first bucket)"
    assert rows["Prefill time"]["p50 (ms)"] == "< 11.4 (below the first bucket)"
    assert rows["Inter-token latency"]["counted"] == "6,039 token gaps"


def test_when_the_server_stops_the_latency_table_and_chart_stay_with_an_unreachable_band(serve):
    # issue 29 item 4: the latency record is kept like the KV chart and the session totals
    server = serve(routes([ttft_before(2, 0.005), CAPTURE]))
    app = run(server.url)
    app.run()
    server.close()
    app.run()
    assert not app.exception and app.error[0].value.startswith("Server unreachable since ")
    rows = {row["latency"]: row for row in _frame(app, "latency")}
    # the last interval before the stop, as read then: 7 first tokens in (10, 20] ms, p50 15.0 ms, p95 19.5 ms
    assert (rows["Time to first token"]["p50 (ms)"], rows["Time to first token"]["p95 (ms)"]) == ("15.0", "19.5")
    assert rows["Time to first token"]["counted"] == "7 requests"
    assert any(c.value.startswith("Requests that finished between the last two reads before the server stopped;")
               for c in app.caption)
    chart = next(c for c in app.get("plotly_chart") if "Latency p50 and p95" in c.proto.spec)
    assert "Time to first token p95" in chart.proto.spec and "server unreachable since" in chart.proto.spec
