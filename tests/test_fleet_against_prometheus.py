"""The Fleet page against a REAL Prometheus scraping two REAL vLLM 0.32.0 CPU servers.

Both serve the tiny random Llama as "tiny" (one model, so grouping by model gives one group of two replicas), with
different KV pools (16 and 32 blocks of 128 tokens) in different namespaces (so grouping by namespace splits them).
Replica A gets more long generations than its pool holds (queue, preemptions); B gets a light load. Once
Prometheus has scraped the final state, the page's per-replica numbers must equal each server's own /metrics, and
its capacity plan must equal the hand computation from those numbers.
"""

from __future__ import annotations

import json
import math
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from support.dashboard import SCREENSHOTS, choose, chromium, running_dashboard, wait_idle
from support.dashboard import metric as shown_metric
from support.prometheus_server import PrometheusServer, PrometheusServerError, prometheus_binary
from support.vllm_server import VllmCpuServer

from calculator import estimate, load_model_spec, workload_capacity
from calculator.observe.metrics import Histogram, parse_metrics
from calculator.observe.promql import time_range
from calculator.url_state import from_query_params

pytestmark = [pytest.mark.vllm_server, pytest.mark.usefixtures("local_dashboard")]
PAGE = str(Path(__file__).resolve().parents[1] / "pages" / "fleet.py")
BLOCKS = {"team-a": 16, "team-b": 32}
LOAD = {"team-a": (6, 600), "team-b": (4, 300)}  # (requests, generated tokens each), all at once
SYNC_TIMEOUT_S = 60


def post(url: str, payload: dict, timeout: float = 600) -> dict:
    request = urllib.request.Request(url, data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def truth(server: VllmCpuServer):
    with urllib.request.urlopen(f"{server.base_url}/metrics", timeout=10) as response:
        return parse_metrics(response.read().decode()).engine("tiny")


@pytest.fixture(scope="module")
def fleet(tiny_model_factory, tmp_path_factory):
    try:  # fail (never skip) before the slow part when the package is missing
        prometheus_binary()
    except PrometheusServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    model = tiny_model_factory("tiny-llama")
    servers = {namespace: VllmCpuServer(
        model, served_model_name="tiny", scratch_dir=tmp_path_factory.mktemp(namespace),
        extra_args=("--max-model-len", "1024", "--num-gpu-blocks-override", str(blocks)))
        for namespace, blocks in BLOCKS.items()}
    failures: list[BaseException] = []

    def start(server: VllmCpuServer) -> None:
        try:
            server.start()
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after both threads end
            failures.append(exc)

    threads = [threading.Thread(target=start, args=(server,)) for server in servers.values()]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]
        targets = {namespace: [f"127.0.0.1:{server.port}"] for namespace, server in servers.items()}
        with PrometheusServer(targets, scratch_dir=tmp_path_factory.mktemp("prometheus")) as prometheus:
            prometheus.wait_for_targets(len(servers))
            yield servers, prometheus, model
    finally:
        for server in servers.values():
            server.stop()


def load(servers: dict[str, VllmCpuServer]) -> None:
    threads = [threading.Thread(target=post, args=(f"{servers[ns].base_url}/v1/completions", {
        "model": "tiny", "prompt": f"hello world {i}", "max_tokens": tokens, "ignore_eos": True}), daemon=True)
        for ns, (count, tokens) in LOAD.items() for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not any(thread.is_alive() for thread in threads), "the load did not finish within 10 minutes"


def prometheus_values(prometheus: PrometheusServer, instance: str) -> dict[str, float]:
    query = '{__name__=~"vllm:.*",instance="%s"}' % instance
    data = prometheus.api("/api/v1/query?" + urlencode({"query": query}))
    return {item["metric"]["__name__"] + json.dumps({k: v for k, v in item["metric"].items() if k == "le"}):
            float(item["value"][1]) for item in data["result"]}  # type: ignore[index]


def wait_until_scraped(servers: dict[str, VllmCpuServer], prometheus: PrometheusServer) -> dict[str, object]:
    """Until Prometheus's latest samples equal each server's /metrics (the servers are idle: nothing moves)."""
    deadline = time.monotonic() + SYNC_TIMEOUT_S
    while True:
        truths = {ns: truth(server) for ns, server in servers.items()}
        seen = {ns: prometheus_values(prometheus, f"127.0.0.1:{server.port}") for ns, server in servers.items()}
        synced = all(seen[ns].get("vllm:generation_tokens_total{}") == t.generation_tokens_total
                     and seen[ns].get("vllm:num_preemptions_total{}") == t.preemptions_total
                     and seen[ns].get("vllm:request_prompt_tokens_count{}") == t.histograms["prompt_tokens"].count
                     and seen[ns].get("vllm:num_requests_running{}") == t.running
                     and seen[ns].get("vllm:kv_cache_usage_perc{}") == t.kv_cache_usage for ns, t in truths.items())
        if synced:
            return truths
        if time.monotonic() > deadline:
            raise AssertionError(f"Prometheus did not catch up with /metrics within {SYNC_TIMEOUT_S} s")
        time.sleep(1)


def range_max(prometheus: PrometheusServer, query: str, end_s: float) -> float:
    """The largest value of ``query`` at the steps of the page's range (15 min to ``end_s``), asked independently."""
    window = time_range(end_s, 900)
    data = prometheus.api("/api/v1/query_range?" + urlencode({
        "query": query, "start": f"{window.start_s:.3f}", "end": f"{window.end_s:.3f}", "step": f"{window.step_s}s"}))
    return max(float(v) for series in data["result"] for _, v in series["values"])  # type: ignore[index]


def run_page(prometheus: PrometheusServer, model: Path, end_s: float, **state) -> AppTest:
    st.cache_data.clear()
    app = AppTest.from_file(PAGE, default_timeout=120)
    for key, value in {"fleet_url": prometheus.base_url, "fleet_freeze": True, "fleet_end_s": end_s,
                       "fleet_gpu": "cpu", "fleet_dtype": "float32", "fleet_vllm_version": "0.32.0",
                       "fleet_model__tiny": str(model), **state}.items():
        app.session_state[key] = value
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    assert not app.error, [e.value for e in app.error]
    return app


def replica_tables(app: AppTest) -> list[list[dict]]:
    """The replica table of each group (the latency table, also by replica, is not one)."""
    return [df.value.to_dict("records") for df in app.dataframe
            if df.value.columns[0] == "replica" and "KV usage %" in df.value.columns]


def metric(app: AppTest, label: str) -> str:
    (value,) = [m.value for m in app.metric if m.label == label]
    return value


def expected_plan(truths: dict, peak: float) -> dict[str, int]:
    """The plan worked out from the servers' own numbers: merged length histograms -> p95 request -> blocks."""
    def merged(name: str) -> Histogram:
        a, b = (truths[ns].histograms[name] for ns in BLOCKS)
        assert [le for le, _ in a.buckets] == [le for le, _ in b.buckets]  # same max_model_len, same buckets
        return Histogram(buckets=tuple((le, x + y) for (le, x), (_, y) in zip(a.buckets, b.buckets)),
                         sum=a.sum + b.sum, count=a.count + b.count)

    prompt, output = merged("prompt_tokens"), merged("generation_tokens")
    prompt_mean = round(prompt.sum / prompt.count)
    prompt_p95, output_p95 = math.ceil(prompt.quantile(0.95)), math.ceil(output.quantile(0.95))
    hits = sum(t.prefix_cache_hits_total for t in truths.values())
    queries = sum(t.prefix_cache_queries_total for t in truths.values())
    shared = min(prompt_mean, round(hits / queries * prompt_mean)) if queries else 0
    total = min(prompt_p95 + output_p95, 1024)  # max_model_len = kv_cache_size_tokens / kv_cache_max_concurrency
    prefix_blocks, prompt_blocks = shared // 128, prompt_p95 // 128
    per_request = prompt_blocks - prefix_blocks + math.ceil(total / 128) - prompt_blocks
    fits = {ns: (BLOCKS[ns] - 1 - prefix_blocks) // per_request for ns in BLOCKS}
    target = math.ceil(peak)
    required = math.ceil(target * 120 / 100)
    return {"fits_a": fits["team-a"], "fits_b": fits["team-b"], "target": target, "required": required,
            "replicas": math.ceil(required * 2 / sum(fits.values()))}


def test_fleet_page_agrees_with_each_servers_metrics_and_plans_from_them(fleet):
    servers, prometheus, model = fleet
    load(servers)
    truths = wait_until_scraped(servers, prometheus)
    a, b = truths["team-a"], truths["team-b"]
    assert a.preemptions_total > 0 and b.preemptions_total == 0, "the load should saturate A only"
    end_s = time.time()
    app = run_page(prometheus, model, end_s)

    (rows,) = replica_tables(app)  # one model, so one group of both replicas
    assert [h.value for h in app.subheader if h.value.startswith("tiny")] == ["tiny"]
    by_instance = {row["replica"]: row for row in rows}
    for namespace, server in servers.items():
        row, t = by_instance[f"127.0.0.1:{server.port}"], truths[namespace]
        assert row["num_gpu_blocks"] == t.config_int("num_gpu_blocks") == BLOCKS[namespace]
        assert row["block_size"] == t.config_int("block_size") == 128
        assert row["KV tokens"] == t.config_int("kv_cache_size_tokens") == BLOCKS[namespace] * 128
        assert row["max concurrency (vLLM)"] == t.config_float("kv_cache_max_concurrency")
        assert row["KV usage %"] == t.kv_cache_usage * 100
        assert (row["running"], row["waiting"]) == (t.running, t.waiting) == (0, 0)
        # Prometheus first scraped these servers within the 15 min range: its increases are their totals.
        assert row["preemptions"] == t.preemptions_total
        assert row["prompt tokens"] == t.prompt_tokens_total
        assert row["generation tokens"] == t.generation_tokens_total == LOAD[namespace][0] * LOAD[namespace][1]
        if t.prefix_cache_queries_total:
            assert row["prefix hit rate %"] == pytest.approx(100 * t.prefix_cache_hits_total
                                                             / t.prefix_cache_queries_total)
    for server in servers.values():  # peaks over the range: what Prometheus itself answers
        row, instance = by_instance[f"127.0.0.1:{server.port}"], f'{{instance="127.0.0.1:{server.port}"}}'
        assert row["peak running"] == range_max(prometheus, f"vllm:num_requests_running{instance}", end_s)
        assert row["peak waiting"] == range_max(prometheus, f"vllm:num_requests_waiting{instance}", end_s)
        assert row["peak KV usage %"] == 100 * range_max(prometheus, f"vllm:kv_cache_usage_perc{instance}", end_s)
    row_a = by_instance[f"127.0.0.1:{servers['team-a'].port}"]

    warnings = [w.value for w in app.warning]
    assert any(w.startswith(f"127.0.0.1:{servers['team-a'].port} is saturated") for w in warnings), warnings
    assert not any(f"127.0.0.1:{servers['team-b'].port}" in w for w in warnings), warnings
    assert not any("the estimate for its settings" in w for w in warnings)  # the engine predicts 16 and 32 blocks

    peak = range_max(prometheus, "sum(vllm:num_requests_running) + sum(vllm:num_requests_waiting)", end_s)
    assert 1 <= peak <= sum(count for count, _ in LOAD.values()), peak
    plan = expected_plan(truths, peak)
    print(f"peak demand {peak}, plan {plan}, A {row_a}")  # shown with -rP
    assert (row_a["p95 requests that fit"], by_instance[f"127.0.0.1:{servers['team-b'].port}"][
        "p95 requests that fit"]) == (plan["fits_a"], plan["fits_b"])
    assert metric(app, "Target concurrent requests") == f"{plan['target']:,}"
    assert metric(app, "With 20 % headroom") == f"{plan['required']:,}"
    assert metric(app, "The replicas hold now (p95 requests)") == f"{plan['fits_a'] + plan['fits_b']:,}"
    assert metric(app, "Replicas needed") == f"{plan['replicas']:,}"

    by_namespace = run_page(prometheus, model, end_s, fleet_group_by=["namespace"], fleet_whatif_max_model_len=512)
    assert [h.value for h in by_namespace.subheader if h.value.startswith("tiny")] == [
        "tiny · namespace=team-a", "tiny · namespace=team-b"]
    assert [[(row["replica"], row["namespace"]) for row in table] for table in replica_tables(by_namespace)] == [
        [(f"127.0.0.1:{servers[ns].port}", ns)] for ns in BLOCKS]

    # What-if on A's settings: the engine's answer for max_model_len 512, and a Plan link carrying it.
    what_ifs = next(df.value.to_dict("records") for df in by_namespace.dataframe
                    if df.value.columns[0] == "deployment")
    shorter = next(row for row in what_ifs if row["deployment"] == "max_model_len 512")
    scenario, workload, _, link_warnings = from_query_params(parse_qs(urlsplit(shorter["Plan page"]).query))
    assert not link_warnings
    assert (scenario.device, scenario.max_model_len, scenario.block_size, scenario.num_gpu_blocks_override) == (
        "cpu", 512, 128, None)
    assert scenario.kv_cache_memory_bytes == a.config_int("kv_cache_memory_bytes")
    own = a.histograms  # the team-a group is A alone: its own lengths
    assert (workload.prompt_tokens_p95, workload.output_tokens_p95) == (
        math.ceil(own["prompt_tokens"].quantile(0.95)), math.ceil(own["generation_tokens"].quantile(0.95)))
    expected = workload_capacity(estimate(scenario, load_model_spec(str(model))), workload).concurrency_p95
    assert shorter["p95 requests per replica"] == expected


def test_in_a_real_browser_the_fleet_page_shows_both_replicas(fleet, tmp_path):
    """Debian's Chromium on `streamlit run app.py` against the same Prometheus; its screenshot is the README's
    picture of the Fleet page."""
    servers, prometheus, model = fleet
    if truth(servers["team-a"]).preemptions_total == 0:  # this test alone: load the fleet as the one above does
        load(servers)
    wait_until_scraped(servers, prometheus)
    env = {"VLLM_PLANNER_PROMETHEUS_URL": prometheus.base_url, "VLLM_PLANNER_DEPLOYMENT": "local"}
    with running_dashboard(tmp_path / "streamlit.log", env=env) as url, chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 1700})
        page.goto(f"{url}/fleet", wait_until="networkidle")
        choose(page, "GPU the replicas run on", "CPU (vLLM CPU build)")
        choose(page, "dtype they run", "float32")
        choose(page, "vLLM version", "0.32.0")
        page.get_by_text("Model configs (for the estimate and the what-ifs)").click()
        config = page.get_by_label("Config for tiny: preset, Hugging Face id or local folder")
        config.fill(str(model))
        config.press("Enter")
        wait_idle(page)
        page.get_by_text(f"tiny: {model}.").wait_for(timeout=60_000)
        assert shown_metric(page, "Replicas now") == "2"
        assert shown_metric(page, "Served models") == "1"
        saturated, calm = (f"127.0.0.1:{servers[ns].port}" for ns in BLOCKS)
        page.get_by_text(f"{saturated} is saturated").wait_for(timeout=60_000)
        assert page.locator('[data-testid="stAlert"]', has_text=calm).count() == 0  # no flag for B
        page.locator('.js-plotly-plot .main-svg').first.wait_for(timeout=60_000)
        page.get_by_text("Model configs (for the estimate and the what-ifs)").click()  # folded for the picture
        wait_idle(page)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "fleet.png"))  # Streamlit scrolls inside: the viewport is the page


def test_latency_percentiles_per_replica_are_prometheus_histogram_quantile_of_each_servers_histograms(fleet):
    """Prometheus's own histogram_quantile over the range equals the quantile of each server's /metrics histogram
    (all its requests fall in the range; Prometheus scraped every bucket at zero before the first request)."""
    servers, prometheus, model = fleet
    load(servers)
    truths = wait_until_scraped(servers, prometheus)
    app = run_page(prometheus, model, time.time())
    (frame,) = [df.value for df in app.dataframe if "Time to first token p95 (ms)" in df.value.columns]
    by_instance = {row["replica"]: row for row in frame.to_dict("records")}
    labels = {"ttft_s": "Time to first token", "itl_s": "Inter-token latency", "e2e_s": "End-to-end latency",
              "queue_s": "Queue time", "prefill_s": "Prefill time", "decode_s": "Decode time"}
    for namespace, server in servers.items():
        row, t = by_instance[f"127.0.0.1:{server.port}"], truths[namespace]
        for field, label in labels.items():
            histogram = t.histograms[field]
            assert histogram.count > 0, f"{namespace} finished no request for {field}"
            for quantile, name in ((0.5, "p50"), (0.95, "p95")):
                expected_ms = round(histogram.quantile(quantile) * 1e3, 2)
                assert row[f"{label} {name} (ms)"] == pytest.approx(expected_ms, abs=0.011), (namespace, field, name)
