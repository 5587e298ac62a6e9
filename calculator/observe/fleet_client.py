"""I/O edge to Prometheus's HTTP API (``/api/v1/query``, ``/api/v1/query_range``, ``/api/v1/series``).

The same rules as the live client: one wall-clock deadline per reading (connect, headers and body:
``bounded_http``), a size cap, no redirects, the access policy checked on the address connected to (``access``),
and credentials (a bearer token or basic auth) only in the ``Authorization`` header — never in a URL, an error
message or a log line. Prometheus's own error JSON
(``{"status": "error", "errorType": ..., "error": ...}``), HTTP failures and timeouts become the
``PrometheusError`` subclasses below, each saying what happened and what to try.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict

from ..errors import CalculatorError
from .access import AccessError, AccessPolicy, parse_server_address, policy_from_environment
from .bounded_http import BoundedTransport, current_deadline, deadline_at
from .promql import Matcher, TimeRange, instant_query, range_query, series_match

DEFAULT_PROMETHEUS_ENV = "VLLM_PLANNER_PROMETHEUS_URL"
DEFAULT_PROMETHEUS = "http://localhost:9090"
CONNECT_TIMEOUT_S = 3.0
QUERY_TIMEOUT_S = 15.0  # sent to Prometheus as ?timeout=, so it stops evaluating when we stop waiting
MAX_RESPONSE_BYTES = 32 << 20  # ~100 replicas x 60 series x 1,000 points is about 20 MB of JSON
MAX_WARNINGS = 20  # Prometheus's own warnings kept from one answer
# NOTE: what one answer may hold, checked before any of it is turned into samples: 100 replicas expose some 300 vLLM
# series each (30,000 samples), and the range query reads 3 gauges per replica at up to 1,000 points each.
MAX_SAMPLES = 100_000
MAX_RANGE_POINTS = 1_000_000
MAX_ERROR_TYPE_CHARS = 40  # Prometheus's error types are single words: bad_data, execution, timeout
_T = TypeVar("_T")


class PrometheusError(CalculatorError):
    """Prometheus could not answer; the message says why and what to try."""


class PrometheusUnreachable(PrometheusError):
    pass


class PrometheusTimeout(PrometheusError):
    pass


class PrometheusAuthRequired(PrometheusError):
    pass


class PrometheusQueryError(PrometheusError):
    """Prometheus refused the query (bad_data) or failed to run it (execution)."""


class NotPrometheus(PrometheusError):
    """The address answers, but not with Prometheus's API (HTML, a redirect, another JSON)."""


class Sample(BaseModel):
    """One element of an instant vector."""

    model_config = ConfigDict(frozen=True)
    labels: dict[str, str]
    value: float


class Series(BaseModel):
    """One element of a range matrix: ``(unix time s, value)`` points, ascending."""

    model_config = ConfigDict(frozen=True)
    labels: dict[str, str]
    points: tuple[tuple[float, float], ...]


class FleetReading(BaseModel):
    """Everything the fleet view reads for one time range: the series at its start and end, and the gauges over it."""

    model_config = ConfigDict(frozen=True)
    base_url: str
    time_range: TimeRange
    at_end: tuple[Sample, ...]
    at_start: tuple[Sample, ...]
    over_range: tuple[Series, ...]
    warnings: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    series_seen: int | None = None  # every vLLM series over the range (the filter's reach), when asked


def default_prometheus_url() -> str:
    return os.environ.get(DEFAULT_PROMETHEUS_ENV) or DEFAULT_PROMETHEUS


class PrometheusClient:
    """Queries one Prometheus. ``policy``: which servers may be contacted (default: from the environment)."""

    def __init__(self, base_url: str, *, bearer_token: str | None = None, basic_auth: tuple[str, str] | None = None,
                 policy: AccessPolicy | None = None, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 query_timeout_s: float = QUERY_TIMEOUT_S) -> None:
        try:
            address = parse_server_address(base_url, example=DEFAULT_PROMETHEUS)
        except AccessError as exc:
            raise PrometheusError(str(exc)) from exc
        self.policy = policy if policy is not None else policy_from_environment()
        self.policy.check(address)
        self.base_url = address.url
        if bearer_token and basic_auth:
            raise PrometheusError("give either a bearer token or a user name and password, not both")
        headers = {"Accept": "application/json", "User-Agent": "vllm-capacity-planner"}
        if bearer_token:
            headers["Authorization"] = f"Bearer {bearer_token}"
        self._query_timeout_s = query_timeout_s
        # NOTE: a little longer than the query timeout, so Prometheus's own "timeout" error arrives first.
        self.deadline_s = connect_timeout_s + query_timeout_s + 2.0
        self.connect_timeout_s = connect_timeout_s
        self._client = httpx.Client(
            base_url=self.base_url, headers=headers, follow_redirects=False, transport=BoundedTransport(self.policy),
            auth=httpx.BasicAuth(*basic_auth) if basic_auth else None,
            timeout=httpx.Timeout(self.deadline_s, connect=connect_timeout_s))
        self.warnings: list[str] = []

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def query(self, promql: str, at_s: float | None = None) -> tuple[Sample, ...]:
        """An instant query (``at_s`` None: now) that must return a vector."""
        params = {"query": promql, **({"time": f"{at_s:.3f}"} if at_s is not None else {})}
        data = self._api("/api/v1/query", params)
        if not isinstance(data, dict) or data.get("resultType") != "vector":
            raise PrometheusQueryError(f"expected an instant vector, Prometheus returned {_kind(data)}")
        samples = []
        result = self._result(data, "/api/v1/query")
        if len(result) > MAX_SAMPLES:
            raise PrometheusQueryError(f"{self.base_url}/api/v1/query answered {len(result):,} series, more than "
                                       f"this page reads ({MAX_SAMPLES:,}): narrow the filter")
        for item in result:
            labels, value = _labels(item), _value(item.get("value"))
            if value is None:
                self.warnings.append(f"{_describe(labels)} is not a finite number; ignored")
            else:
                samples.append(Sample(labels=labels, value=value))
        return tuple(samples)

    def query_range(self, promql: str, window: TimeRange) -> tuple[Series, ...]:
        """A range query over a bounded ``TimeRange``; non-finite points are dropped."""
        params = {"query": promql, "start": f"{window.start_s:.3f}", "end": f"{window.end_s:.3f}",
                  "step": f"{window.step_s}s"}
        data = self._api("/api/v1/query_range", params)
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise PrometheusQueryError(f"expected a range matrix, Prometheus returned {_kind(data)}")
        series = []
        result = self._result(data, "/api/v1/query_range")
        total = sum(len(item["values"]) for item in result if isinstance(item.get("values"), list))
        if total > MAX_RANGE_POINTS:
            raise PrometheusQueryError(f"{self.base_url}/api/v1/query_range answered {total:,} points, more than "
                                       f"this page reads ({MAX_RANGE_POINTS:,}): narrow the filter or shorten the "
                                       "time range")
        for item in result:
            values = item.get("values", [])
            # NOTE: Prometheus answers at most one point per step; a longer series is not its answer, and reading
            # a million points would hold the page for a minute and more.
            if not isinstance(values, list) or len(values) > window.points:
                count = f"{len(values):,}" if isinstance(values, list) else "no list of"
                raise NotPrometheus(f"{self.base_url}/api/v1/query_range answered a series of {count} points for a "
                                    f"range of {window.points:,} steps: not Prometheus's answer")
            points = []
            for pair in values:
                at, value = _time(pair), _value(pair)
                if at is not None and value is not None:
                    points.append((at, value))
            series.append(Series(labels=_labels(item), points=tuple(points)))
        return tuple(series)

    def _result(self, data: dict[str, Any], path: str) -> list[dict[str, Any]]:
        """The answer's ``result``: a list of objects, or ``NotPrometheus``."""
        result = data.get("result", [])
        if not isinstance(result, list) or not all(isinstance(item, dict) for item in result):
            raise NotPrometheus(f"{self.base_url}{path} answered a result that is not a list of series: not "
                                "Prometheus's API response")
        return result

    def series(self, match: str, start_s: float, end_s: float) -> tuple[dict[str, str], ...]:
        """Label sets of the series matching ``match`` between two times (``/api/v1/series``)."""
        data = self._api("/api/v1/series", {"match[]": match, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}"})
        if not isinstance(data, list):
            raise NotPrometheus(f"{self.base_url}/api/v1/series did not return a list of series")
        return tuple(_labels({"metric": item}) for item in data if isinstance(item, dict))

    def _api(self, path: str, params: dict[str, str]) -> Any:
        if path != "/api/v1/series":
            params = {**params, "timeout": f"{self._query_timeout_s:g}s"}
        status, body = self._get(path, params)
        where = f"{self.base_url}{path}"
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested too deep, a 5,000-digit number
            if status >= 400:
                raise _http_error(where, status) from exc
            if not isinstance(exc, json.JSONDecodeError | UnicodeDecodeError):
                raise NotPrometheus(f"{where} returned JSON nested too deep or with a number too long to read: not "
                                    "Prometheus's API response") from exc
            raise NotPrometheus(f"{where} did not return JSON (HTML from a login page or another app?): give "
                                "Prometheus's own base address, e.g. http://prometheus:9090") from exc
        if not isinstance(payload, dict) or payload.get("status") not in ("success", "error"):
            if status >= 400:
                raise _http_error(where, status)
            raise NotPrometheus(f"{where} answered JSON that is not Prometheus's API response")
        if payload["status"] == "error":
            raise _api_error(str(payload.get("errorType", ""))[:MAX_ERROR_TYPE_CHARS],
                             str(payload.get("error", ""))[:500], status)
        warnings = payload.get("warnings") or []
        warnings = warnings if isinstance(warnings, list) else [warnings]
        self.warnings.extend(str(w)[:300] for w in warnings[:MAX_WARNINGS])
        return payload.get("data")

    def _get(self, path: str, params: dict[str, str]) -> tuple[int, bytes]:
        deadline = current_deadline()
        if deadline is None:
            with deadline_at(time.monotonic() + self.deadline_s):
                return self._get(path, params)
        where, started = f"{self.base_url}{path}", time.monotonic()
        try:
            with self._client.stream("GET", path, params=params) as response:
                if response.status_code in (401, 403):
                    raise PrometheusAuthRequired(f"{where} answered {response.status_code}: Prometheus (or the proxy "
                                                 "in front of it) wants credentials; give a bearer token or a user "
                                                 "name and password")
                if 300 <= response.status_code < 400:
                    raise NotPrometheus(f"{where} redirects elsewhere ({response.status_code}); redirects are not "
                                        "followed — give Prometheus's own address")
                body = bytearray()
                for chunk in response.iter_bytes():
                    body.extend(chunk)
                    if len(body) > MAX_RESPONSE_BYTES:
                        raise PrometheusQueryError(f"{where} sent more than {MAX_RESPONSE_BYTES >> 20} MiB; narrow "
                                                   "the filter or shorten the time range")
                return response.status_code, bytes(body)
        except httpx.ConnectTimeout as exc:
            if deadline - started < self.connect_timeout_s:  # the read's deadline cut it short (live_client.py)
                raise self._timeout(where, started) from exc
            raise PrometheusUnreachable(f"cannot connect to {self.base_url}: no answer to the connection within "
                                        f"{time.monotonic() - started:.1f} s. Is Prometheus running there?") from exc
        except httpx.ConnectError as exc:
            raise PrometheusUnreachable(f"cannot connect to {self.base_url}: {_reason(exc)}. Is Prometheus running "
                                        "there?") from exc
        except httpx.TimeoutException as exc:
            raise self._timeout(where, started) from exc
        except httpx.HTTPError as exc:
            raise PrometheusUnreachable(f"{where}: {_reason(exc)}") from exc

    def _timeout(self, where: str, started: float) -> PrometheusTimeout:
        return PrometheusTimeout(f"{where} did not answer completely within {time.monotonic() - started:.1f} s "
                                 f"(this dashboard waits at most {self.deadline_s:g} s); shorten the time range or "
                                 "narrow the filter")


def read_fleet(client: PrometheusClient, window: TimeRange, matchers: Iterable[Matcher] = (), *,
               count_series: bool = False, deadline: float | None = None) -> FleetReading:
    """The queries behind the fleet view, at once under one deadline (``time.monotonic()`` based; by default the
    client's ``deadline_s`` from now): every vLLM series at the range's end and start, the gauges (running, waiting,
    KV usage) over it, and (``count_series``) how many series match."""
    matchers = tuple(matchers)
    started, first_warning = time.monotonic(), len(client.warnings)
    deadline = deadline if deadline is not None else started + client.deadline_s
    queries: dict[str, Callable[[], Any]] = {
        "at_end": lambda: client.query(instant_query(matchers), window.end_s),
        "at_start": lambda: client.query(instant_query(matchers), window.start_s),
        "over_range": lambda: client.query_range(range_query(matchers), window)}
    if count_series:
        queries["series"] = lambda: len(client.series(series_match(matchers), window.start_s, window.end_s))
    with ThreadPoolExecutor(max_workers=len(queries), thread_name_prefix="fleet-read") as pool:
        futures = {name: pool.submit(_within, deadline, query) for name, query in queries.items()}
        results = {name: future.result() for name, future in futures.items()}  # the first failure is raised
    return FleetReading(base_url=client.base_url, time_range=window, at_end=results["at_end"],
                        at_start=results["at_start"], over_range=results["over_range"],
                        warnings=tuple(client.warnings[first_warning:]), elapsed_s=time.monotonic() - started,
                        series_seen=results.get("series"))


def _within(deadline: float, query: Callable[[], _T]) -> _T:
    with deadline_at(deadline):  # NOTE: a worker thread starts with an empty context: set it here
        return query()


def _api_error(error_type: str, message: str, status: int) -> PrometheusError:
    if error_type in ("timeout", "canceled"):
        return PrometheusTimeout(f"Prometheus gave up on the query ({error_type}: {message}); shorten the time "
                                 "range or narrow the filter")
    if error_type == "bad_data":
        return PrometheusQueryError(f"Prometheus rejected the query: {message}. Check the label filter")
    if error_type == "execution":
        return PrometheusQueryError(f"Prometheus could not run the query: {message}")
    if error_type == "unavailable" or status in (502, 503, 504):
        return PrometheusUnreachable(f"Prometheus is unavailable ({message or status})")
    return PrometheusQueryError(f"Prometheus answered an error ({error_type or status}: {message})")


def _http_error(where: str, status: int) -> PrometheusError:
    if status in (502, 503, 504):
        return PrometheusUnreachable(f"{where} answered HTTP {status}: Prometheus, or a proxy in front of it, is "
                                     "unavailable")
    if status == 404:
        return NotPrometheus(f"{where} answered 404: this is not Prometheus's base address (no /api/v1 there)")
    return NotPrometheus(f"{where} answered HTTP {status}")


def _kind(data: Any) -> str:
    return f"a {data.get('resultType')}" if isinstance(data, dict) else "no result"


def _labels(item: Any) -> dict[str, str]:
    """A series' labels; Prometheus's are text, so anything else (a number, a nested object) is left out."""
    metric = item.get("metric") if isinstance(item, dict) else None
    return {k: v for k, v in metric.items() if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(metric, dict) else {}


def _time(pair: Any) -> float | None:
    """A point's Unix time in seconds, when it is one (finite, within the years a float date can show)."""
    try:
        at = float(pair[0])
    except (TypeError, ValueError, IndexError, KeyError, OverflowError):
        return None
    return at if 0 <= at < 1e11 else None


def _value(pair: Any) -> float | None:
    """Prometheus sends ``[unix time, "value"]``; NaN and ±Inf are not numbers we can plan with."""
    try:
        value = float(pair[1])
    except (TypeError, ValueError, IndexError, KeyError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def _describe(labels: dict[str, str]) -> str:
    name = labels.get("__name__", "a series")
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__") + "}"


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text.split("\n")[0][:200]
