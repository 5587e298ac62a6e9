"""The Prometheus client against local HTTP servers: Prometheus's error JSON, hangs, HTML, 401, redirects,
huge bodies, nothing listening — and what a good answer becomes."""

from __future__ import annotations

import base64
import socket
import time

import pytest
from support import hostile
from support.http_server import answer

from calculator import CalculatorError
from calculator.observe.fleet_client import (
    NotPrometheus,
    PrometheusAuthRequired,
    PrometheusClient,
    PrometheusError,
    PrometheusQueryError,
    PrometheusTimeout,
    PrometheusUnreachable,
    read_fleet,
)
from calculator.observe.bounded_http import deadline_at
from calculator.observe.live_client import HostNotAllowed
from calculator.observe.promql import Matcher, time_range

SECRET = "prom-very-secret-token"
VECTOR = {"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"__name__": "vllm:num_requests_running", "instance": "a:8000"}, "value": [1700000000.5, "3"]},
    {"metric": {"__name__": "vllm:kv_cache_usage_perc", "instance": "a:8000"}, "value": [1700000000.5, "NaN"]}]},
    "warnings": ["some series were dropped"]}
MATRIX = {"status": "success", "data": {"resultType": "matrix", "result": [
    {"metric": {"__name__": "vllm:num_requests_waiting"}, "values": [[100, "1"], [110, "+Inf"], [120, "2.5"]]}]}}


def test_a_vector_drops_non_finite_values_and_keeps_prometheus_warnings(serve):
    server = serve({"/api/v1/query": answer(200, VECTOR)})
    with PrometheusClient(server.url) as client:
        samples = client.query("vllm:num_requests_running", at_s=1234.5)
        assert [(s.labels["__name__"], s.value) for s in samples] == [("vllm:num_requests_running", 3.0)]
        assert client.warnings[0] == "some series were dropped"
        assert "vllm:kv_cache_usage_perc{instance=\"a:8000\"} is not a finite number" in client.warnings[1]
    assert server.params() == {"query": ["vllm:num_requests_running"], "time": ["1234.500"], "timeout": ["15s"]}


def test_a_matrix_and_series(serve):
    server = serve({"/api/v1/query_range": answer(200, MATRIX),
                    "/api/v1/series": answer(200, {"status": "success", "data": [{"__name__": "x", "pod": "p"}]})})
    window = time_range(end_s=120.0, duration_s=20, max_points=3)
    with PrometheusClient(server.url) as client:
        (series,) = client.query_range("q", window)
        assert series.points == ((100.0, 1.0), (120.0, 2.5))
        assert server.params() == {"query": ["q"], "start": ["100.000"], "end": ["120.000"], "step": ["10s"],
                                   "timeout": ["15s"]}
        assert client.series("m", 1.0, 2.0) == ({"__name__": "x", "pod": "p"},)
        assert server.params() == {"match[]": ["m"], "start": ["1.000"], "end": ["2.000"]}


def test_read_fleet_asks_for_the_end_the_start_and_the_range(serve):
    server = serve({"/api/v1/query": answer(200, VECTOR), "/api/v1/query_range": answer(200, MATRIX)})
    window = time_range(end_s=1000.0, duration_s=300)
    with PrometheusClient(server.url) as client:
        reading = read_fleet(client, window, [Matcher(name="namespace", value="prod")])
    assert sorted(str(server.params(i).get("time")) for i in range(3)) == ["None", "['1000.000']", "['700.000']"]
    assert all('namespace="prod"' in server.params(i)["query"][0] for i in range(3))
    assert len(reading.at_end) == len(reading.at_start) == 1 and reading.over_range[0].points[-1] == (120.0, 2.5)
    assert reading.warnings[0] == "some series were dropped"


@pytest.mark.parametrize(("status", "error_type", "error", "expected", "says"), [
    (400, "bad_data", 'invalid parameter "query": 1:9: parse error: unexpected "}"', PrometheusQueryError,
     "Prometheus rejected the query: invalid parameter"),
    (422, "execution", "query processing would load too many samples into memory", PrometheusQueryError,
     "could not run the query: query processing would load too many samples"),
    (503, "timeout", "query timed out in expression evaluation", PrometheusTimeout, "shorten the time range"),
    (503, "canceled", "query was canceled", PrometheusTimeout, "canceled"),
    (503, "unavailable", "TSDB not ready", PrometheusUnreachable, "TSDB not ready"),
    (500, "internal", "boom", PrometheusQueryError, "internal: boom"),
])
def test_prometheus_error_json_becomes_a_clear_error(serve, status, error_type, error, expected, says):
    server = serve({"/api/v1/query": answer(status, {"status": "error", "errorType": error_type, "error": error})})
    with PrometheusClient(server.url) as client, pytest.raises(expected) as caught:
        client.query("x")
    assert says in str(caught.value) and isinstance(caught.value, CalculatorError)


def test_a_hanging_server_times_out(serve):
    def hang(handler):
        time.sleep(5)

    server = serve({"/api/v1/query": hang})
    started = time.monotonic()
    with PrometheusClient(server.url, connect_timeout_s=0.5, query_timeout_s=0.5) as client:
        with pytest.raises(PrometheusTimeout, match="did not answer completely within"):
            client.query("x")
    assert time.monotonic() - started < 4.5


def test_a_query_left_no_time_by_its_reading_times_out_and_does_not_call_prometheus_unreachable(serve):
    # the Live client's CI case (tests/test_live_client.py): a query thread that starts after its reading's deadline
    server = serve({"/api/v1/query": answer(200, {"status": "success", "data": {"resultType": "vector",
                                                                               "result": []}})})
    with PrometheusClient(server.url) as client:
        with deadline_at(time.monotonic() - 0.1), pytest.raises(PrometheusTimeout, match="did not answer completely"):
            client.query("x")
        client.query("x")  # Prometheus was up all along


def test_nothing_listening_is_unreachable():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with PrometheusClient(f"http://127.0.0.1:{port}") as client, pytest.raises(PrometheusUnreachable,
                                                                              match="cannot connect"):
        client.query("x")


@pytest.mark.parametrize(("route", "expected", "says"), [
    (answer(200, b"<html><body>Grafana</body></html>", "text/html"), NotPrometheus, "did not return JSON"),
    (answer(200, {"hello": "world"}), NotPrometheus, "not Prometheus's API response"),
    (answer(200, {"status": "success", "data": {"resultType": "matrix", "result": []}}), PrometheusQueryError,
     "expected an instant vector"),
    (answer(401, b"unauthorized", "text/plain"), PrometheusAuthRequired, "wants credentials"),
    ((302, {"Location": "http://elsewhere/login"}, b""), NotPrometheus, "redirects are not followed"),
    (answer(502, b"<html>bad gateway</html>", "text/html"), PrometheusUnreachable, "HTTP 502"),
])
def test_wrong_answers_are_clear_states(serve, route, expected, says):
    server = serve({"/api/v1/query": route})
    with PrometheusClient(server.url) as client, pytest.raises(expected, match=says):
        client.query("x")


def test_a_wrong_path_says_it_is_not_prometheus(serve):
    server = serve({})
    with PrometheusClient(server.url + "/grafana") as client, pytest.raises(NotPrometheus, match="404"):
        client.query("x")
    assert server.seen[0][0].startswith("/grafana/api/v1/query?")


def test_a_huge_body_is_cut_off(serve, monkeypatch):
    monkeypatch.setattr("calculator.observe.fleet_client.MAX_RESPONSE_BYTES", 1000)
    server = serve({"/api/v1/query": answer(200, b"[" + b"1," * 5000 + b"1]")})
    with PrometheusClient(server.url) as client, pytest.raises(PrometheusQueryError, match="sent more than"):
        client.query("x")


def test_credentials_travel_only_in_the_authorization_header(serve):
    server = serve({"/api/v1/query": answer(401, b"no", "text/plain")})
    with PrometheusClient(server.url, bearer_token=SECRET) as client, pytest.raises(PrometheusAuthRequired) as caught:
        client.query("x")
    assert server.seen[-1][1] == f"Bearer {SECRET}" and SECRET not in server.seen[-1][0]
    assert SECRET not in str(caught.value)
    with PrometheusClient(server.url, basic_auth=("ops", SECRET)) as client, pytest.raises(PrometheusAuthRequired):
        client.query("x")
    assert server.seen[-1][1] == "Basic " + base64.b64encode(f"ops:{SECRET}".encode()).decode()


def test_addresses_with_credentials_or_both_auth_kinds_are_refused():
    with pytest.raises(PrometheusError, match="own field"):
        PrometheusClient(f"http://ops:{SECRET}@prometheus:9090")
    with pytest.raises(PrometheusError, match="not both"):
        PrometheusClient("http://prometheus:9090", bearer_token="t", basic_auth=("u", "p"))
    with pytest.raises(PrometheusError, match="localhost:9090"):
        PrometheusClient("ftp://prometheus")


def test_the_allowed_hosts_guard_applies(monkeypatch):
    monkeypatch.setenv("VLLM_PLANNER_ALLOWED_HOSTS", "prometheus.internal:9090")
    with pytest.raises(HostNotAllowed):
        PrometheusClient("http://127.0.0.1:9090")
    PrometheusClient("http://prometheus.internal:9090").close()


@pytest.mark.parametrize("route", [hostile.trickle_headers(0.05), hostile.trickle_status(0.05),
                                   hostile.trickle_body(b'{"status": "success", "data": []}', 0.2)],
                         ids=["headers", "status line", "body"])
def test_a_trickling_prometheus_is_cut_off_at_one_deadline(serve, route):
    server = serve({"/api/v1/query": route})
    started = time.monotonic()
    with PrometheusClient(server.url, connect_timeout_s=0.5, query_timeout_s=0.5) as client:
        with pytest.raises(PrometheusTimeout, match="did not answer completely within"):
            client.query("x")
    assert time.monotonic() - started < client.deadline_s + 0.6  # 3.0 s: connect + query + 2 s of grace


def test_a_fleet_reading_runs_its_queries_at_once_under_one_deadline(serve):
    server = serve({"/api/v1/query": hostile.slow(1.0, answer(200, VECTOR)),
                    "/api/v1/query_range": hostile.slow(1.0, answer(200, MATRIX)),
                    "/api/v1/series": hostile.slow(1.0, answer(200, {"status": "success", "data": [{"a": "b"}]}))})
    started = time.monotonic()
    with PrometheusClient(server.url) as client:
        reading = read_fleet(client, time_range(end_s=1000.0, duration_s=300), count_series=True)
    assert time.monotonic() - started < 2.0  # one after another: 4 x 1.0 s
    assert reading.series_seen == 1 and len(reading.at_end) == 1


def test_the_fleet_and_its_latencies_share_one_deadline(serve):
    """The Fleet page reads the fleet, then its 12 latency quantiles (4 at a time): with one deadline for both, a
    slow Prometheus costs at most that deadline, not one deadline each."""
    from calculator.observe.fleet_latency import read_latency

    server = serve({"/api/v1/query": hostile.slow(1.0, answer(200, VECTOR)),
                    "/api/v1/query_range": hostile.slow(1.0, answer(200, MATRIX))})
    window = time_range(end_s=1000.0, duration_s=300)
    started = time.monotonic()
    with PrometheusClient(server.url) as client:
        deadline = started + 2.5  # the fleet takes 1 s, its latencies 3 rounds of 1 s
        read_fleet(client, window, deadline=deadline)
        with pytest.raises(PrometheusTimeout):
            read_latency(client, window, deadline=deadline)
    assert time.monotonic() - started < 3.1


# --- issue 28: answers of the wrong shape, giant errors and giant series ----------------------------------------

@pytest.mark.parametrize(("payload", "says"), [
    ({"status": "success", "data": {"resultType": "vector", "result": 5}}, "not a list of series"),
    ({"status": "success", "data": {"resultType": "vector", "result": {"a": 1}}}, "not a list of series"),
    ({"status": "success", "data": {"resultType": "vector", "result": ["x", 3]}}, "not a list of series"),
    (b'{"status": "success", "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "JSON nested too deep or with a "
     "number too long to read"),
    (b'{"status": "success", "data": {"resultType": "vector", "result": [' + b"9" * 5000 + b"]}}",
     "JSON nested too deep or with a number too long to read"),
])
def test_an_answer_of_the_wrong_shape_is_not_prometheus(serve, payload, says):
    server = serve({"/api/v1/query": answer(200, payload)})
    with PrometheusClient(server.url) as client, pytest.raises(NotPrometheus, match=says):
        client.query("vllm:num_requests_running")


def test_labels_that_are_not_text_and_warnings_that_are_not_a_list_are_left_out(serve):
    payload = {"status": "success", "warnings": "one line", "data": {"resultType": "vector", "result": [
        {"metric": {"__name__": "vllm:num_requests_running", "pod": {"deep": [1]}, "n": 5}, "value": [1, "2"]},
        {"metric": "not labels", "value": {"1": "3"}}]}}
    server = serve({"/api/v1/query": answer(200, payload)})
    with PrometheusClient(server.url) as client:
        (sample,) = client.query("vllm:num_requests_running")
        assert sample.labels == {"__name__": "vllm:num_requests_running"} and sample.value == 2.0
        assert client.warnings == ["one line", "a series{} is not a finite number; ignored"]


def test_a_megabyte_error_type_is_cut_to_a_word(serve):
    payload = {"status": "error", "errorType": "x" * (1 << 20), "error": "y" * (1 << 20)}
    server = serve({"/api/v1/query": answer(422, payload)})
    with PrometheusClient(server.url) as client, pytest.raises(PrometheusQueryError) as caught:
        client.query("up")
    # 40 characters of the type, 500 of the message, and the words around them
    assert str(caught.value) == f"Prometheus answered an error ({'x' * 40}: {'y' * 500})"


def test_a_series_of_a_million_points_is_refused_before_it_is_read(serve):
    """Issue 28: one series of 1,000,000 points held the Fleet page for 98 s."""
    window = time_range(end_s=1_000_000.0, duration_s=3600, max_points=361)
    values = b",".join(b'[%d,"1"]' % (999_000 + i) for i in range(1_000_000))
    body = b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[' + values + b"]}]}}"
    server = serve({"/api/v1/query_range": answer(200, body)})
    started = time.monotonic()
    with PrometheusClient(server.url) as client, pytest.raises(
            NotPrometheus, match=r"a series of 1,000,000 points for a range of 361 steps: not Prometheus's answer"):
        client.query_range("vllm:num_requests_running", window)
    assert time.monotonic() - started < 5
    assert window.points == 361  # 3,600 s in 10 s steps, both ends included


def test_an_answer_of_more_series_or_points_than_a_page_reads_is_refused(serve):
    from calculator.observe.fleet_client import MAX_RANGE_POINTS, MAX_SAMPLES

    vector = b'{"status":"success","data":{"resultType":"vector","result":[' + b",".join(
        [b'{"metric":{},"value":[1,"1"]}'] * (MAX_SAMPLES + 1)) + b"]}}"
    window = time_range(end_s=1_000_000.0, duration_s=9990, max_points=1000)  # 1,000 points per series
    series = b'{"metric":{},"values":[' + b",".join(b'[%d,"1"]' % (990_010 + 10 * i) for i in range(1000)) + b"]}"
    matrix = (b'{"status":"success","data":{"resultType":"matrix","result":['
              + b",".join([series] * (MAX_RANGE_POINTS // 1000 + 1)) + b"]}}")
    server = serve({"/api/v1/query": answer(200, vector), "/api/v1/query_range": answer(200, matrix)})
    with PrometheusClient(server.url) as client:
        with pytest.raises(PrometheusQueryError, match=r"answered 100,001 series, more than this page reads "
                                                       r"\(100,000\): narrow the filter"):
            client.query("up")
        with pytest.raises(PrometheusQueryError, match=r"answered 1,001,000 points, more than this page reads "
                                                       r"\(1,000,000\)"):
            client.query_range("up", window)
