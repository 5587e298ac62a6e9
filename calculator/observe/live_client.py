"""I/O edge to a running vLLM server: ``/metrics``, ``/v1/models``, ``/version``, ``/health``, ``/server_info``.

One refresh reads the five endpoints at once under one wall-clock deadline (connect, headers and body included:
``bounded_http``), keeps what arrived and names what did not. Every request has a size cap, never follows a
redirect, is checked against the access policy on the address it connects to (``access``), and sends the API
key only in the ``Authorization`` header — never in a URL, an error message or a log line.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict

from ..errors import CalculatorError
from .access import AccessPolicy, HostNotAllowed, parse_server_address, policy_from_environment
from .bounded_http import BoundedTransport, current_deadline, deadline_at
from .metrics import MetricsSnapshot, parse_metrics

DEFAULT_SERVER_ENV = "VLLM_PLANNER_SERVER_URL"
DEFAULT_SERVER = "http://localhost:8000"
CONNECT_TIMEOUT_S = 3.0
DEADLINE_S = 8.0  # one refresh, all endpoints together
MAX_METRICS_BYTES = 8 << 20  # a large multi-engine /metrics is a few hundred KB
MAX_JSON_BYTES = 2 << 20
MAX_MODELS = 256  # served models (LoRA adapters included) read from /v1/models
MAX_VERSION_CHARS = 100
MAX_JSON_DEPTH = 32  # vLLM's /server_info nests 5 deep; st.json and the browser draw every level
ENDPOINTS = ("/metrics", "/health", "/version", "/v1/models", "/server_info")
_T = TypeVar("_T")

class LiveServerError(CalculatorError):
    """The server could not be read; the message says why and what to try."""


class ServerUnreachable(LiveServerError):
    pass


class ServerTimeout(LiveServerError):
    pass


class AuthenticationRequired(LiveServerError):
    pass


class NotAVllmServer(LiveServerError):
    pass


class ServerModel(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: str
    root: str | None = None
    max_model_len: int | None = None
    parent: str | None = None


class EndpointProblem(BaseModel):
    """An endpoint that gave nothing usable in this refresh, and why."""

    model_config = ConfigDict(frozen=True)
    path: str
    message: str
    timed_out: bool


class ServerReport(BaseModel):
    """One read of a server: what arrived (None where an endpoint failed; ``problems`` says why)."""

    model_config = ConfigDict(frozen=True)
    base_url: str
    healthy: bool | None
    version: str | None
    models: tuple[ServerModel, ...]
    metrics: MetricsSnapshot | None
    server_info: dict[str, Any] | None = None
    problems: tuple[EndpointProblem, ...] = ()
    elapsed_s: float

    @property
    def slow_endpoints(self) -> tuple[str, ...]:
        return tuple(p.path for p in self.problems if p.timed_out)


def default_server_url() -> str:
    return os.environ.get(DEFAULT_SERVER_ENV) or DEFAULT_SERVER


def normalise_base_url(url: str) -> str:
    """``localhost:8000`` -> ``http://localhost:8000``; ``BadAddress`` (one clear line) for anything else."""
    return parse_server_address(url).url


class LiveClient:
    """Reads one vLLM server. ``policy``: which servers may be contacted (default: from the environment)."""

    def __init__(self, base_url: str, api_key: str | None = None, *, policy: AccessPolicy | None = None,
                 deadline_s: float = DEADLINE_S, connect_timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        address = parse_server_address(base_url)
        self.policy = policy if policy is not None else policy_from_environment()
        self.policy.check(address)
        self.base_url = address.url
        self.deadline_s = deadline_s
        self.connect_timeout_s = min(connect_timeout_s, deadline_s)
        headers = {"Accept": "text/plain, application/json", "User-Agent": "vllm-capacity-planner"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(
            base_url=self.base_url, headers=headers, follow_redirects=False, transport=BoundedTransport(self.policy),
            timeout=httpx.Timeout(deadline_s, connect=min(connect_timeout_s, deadline_s)))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> LiveClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(self, path: str, limit: int, *, missing_ok: bool = False) -> tuple[int, bytes]:
        deadline = current_deadline()
        if deadline is None:
            with deadline_at(time.monotonic() + self.deadline_s):
                return self._get(path, limit, missing_ok=missing_ok)
        where, started = f"{self.base_url}{path}", time.monotonic()
        try:
            with self._client.stream("GET", path) as response:
                if response.status_code in (401, 403):
                    raise AuthenticationRequired(f"{where} answered {response.status_code}: the server wants an API "
                                                 "key (vllm serve --api-key); enter it in the API key field")
                if 300 <= response.status_code < 400:
                    raise NotAVllmServer(f"{where} redirects elsewhere ({response.status_code}); redirects are not "
                                         "followed — give the server's own address")
                if response.status_code == 404 and missing_ok:
                    return 404, b""
                if response.status_code >= 400:
                    raise NotAVllmServer(f"{where} answered HTTP {response.status_code}")
                body = bytearray()
                for chunk in response.iter_bytes():
                    body.extend(chunk)
                    if len(body) > limit:
                        raise NotAVllmServer(f"{where} sent more than {limit >> 20} MiB; stopped reading")
                return response.status_code, bytes(body)
        except httpx.ConnectTimeout as exc:
            if deadline - started < self.connect_timeout_s:
                # NOTE: the refresh's deadline cut the connection short, not the server: on a loaded machine a
                # reader thread can start with (almost) nothing of the deadline left (CI: "no answer to the
                # connection within 0.0 s", while the server answered the next read)
                raise self._timeout(where) from exc
            raise ServerUnreachable(f"cannot connect to {self.base_url}: no answer to the connection within "
                                    f"{time.monotonic() - started:.1f} s. Is vLLM running there?") from exc
        except httpx.ConnectError as exc:
            raise ServerUnreachable(f"cannot connect to {self.base_url}: {_reason(exc)}. Is vLLM running there?") from exc
        except httpx.TimeoutException as exc:
            # NOTE: the refresh's deadline, not this endpoint's own elapsed time: the five readers share one
            # deadline and a worker thread that starts late on a loaded machine waits less than the refresh did
            raise self._timeout(where) from exc
        except httpx.HTTPError as exc:
            raise ServerUnreachable(f"{where}: {_reason(exc)}") from exc

    def _timeout(self, where: str) -> ServerTimeout:
        return ServerTimeout(f"{where} did not answer completely within {self.deadline_s:g} s, the most this "
                             "dashboard waits for a refresh")

    def _json(self, path: str, *, missing_ok: bool = False) -> Any:
        status, body = self._get(path, MAX_JSON_BYTES, missing_ok=missing_ok)
        if status == 404:
            return None
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested too deep, a 5,000-digit number
            raise NotAVllmServer(f"{self.base_url}{path.split('?')[0]} did not return JSON this page can read: "
                                 "this does not look like vLLM") from exc
        if _depth_beyond(payload, MAX_JSON_DEPTH):
            raise NotAVllmServer(f"{self.base_url}{path.split('?')[0]} returned JSON nested deeper than "
                                 f"{MAX_JSON_DEPTH} levels: this does not look like vLLM")
        return payload

    def metrics(self) -> MetricsSnapshot:
        _, body = self._get("/metrics", MAX_METRICS_BYTES)
        return parse_metrics(body.decode("utf-8", errors="replace"), scraped_at=time.time())

    def models(self) -> tuple[ServerModel, ...]:
        payload = self._json("/v1/models")
        if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
            raise NotAVllmServer(f"{self.base_url}/v1/models is not an OpenAI model list")
        cards = []
        for card in payload["data"][:MAX_MODELS]:
            if isinstance(card, dict) and isinstance(card.get("id"), str):
                length = card.get("max_model_len")
                cards.append(ServerModel(id=card["id"], root=card.get("root") if isinstance(card.get("root"), str) else None,
                                         max_model_len=length if type(length) is int and length > 0 else None,
                                         parent=card.get("parent") if isinstance(card.get("parent"), str) else None))
        return tuple(cards)

    def version(self) -> str | None:
        payload = self._json("/version", missing_ok=True)
        if not isinstance(payload, dict) or not isinstance(payload.get("version"), str | int | float):
            return None
        return str(payload["version"])[:MAX_VERSION_CHARS]

    def healthy(self) -> bool:
        try:
            status, _ = self._get("/health", 1 << 16)
        except NotAVllmServer:
            return False  # 503: the engine is dead
        return status == 200

    def server_info(self) -> dict[str, Any] | None:
        """``/server_info`` exists only with VLLM_SERVER_DEV_MODE=1; None otherwise."""
        try:
            payload = self._json("/server_info?config_format=json", missing_ok=True)
        except NotAVllmServer:
            return None
        return payload if isinstance(payload, dict) else None

    def read(self) -> ServerReport:
        """All endpoints at once under one deadline: what arrived, and which endpoint failed or was slow.

        Raises when nothing arrived, or when the server refuses us (an API key is needed, or it is not vLLM)."""
        started = time.monotonic()
        deadline = started + self.deadline_s
        readers: dict[str, Callable[[], Any]] = {"/metrics": self.metrics, "/health": self.healthy,
                                                 "/version": self.version, "/v1/models": self.models,
                                                 "/server_info": self.server_info}
        with ThreadPoolExecutor(max_workers=len(readers), thread_name_prefix="live-read") as pool:
            futures = {path: pool.submit(_within, deadline, reader) for path, reader in readers.items()}
            outcomes = {path: _outcome(future.result) for path, future in futures.items()}
        values = {path: value for path, (value, _) in outcomes.items()}
        errors = {path: error for path, (_, error) in outcomes.items() if error is not None}
        if all(isinstance(error, ServerTimeout) for error in errors.values()) and len(errors) == len(readers):
            raise ServerTimeout(f"no endpoint of {self.base_url} answered completely within {self.deadline_s:g} s, "
                                "the most this dashboard waits for a refresh: the server, or the machine this "
                                "dashboard runs on, is too busy to answer in time; the next read tries again")
        if len(errors) == len(readers) or isinstance(errors.get("/metrics"), (AuthenticationRequired, HostNotAllowed)):
            raise errors["/metrics"]
        if "/metrics" in errors and not isinstance(errors["/metrics"], ServerTimeout) and "/v1/models" in errors:
            raise errors["/metrics"]  # neither of the two endpoints every vLLM has: not (or no longer) vLLM
        problems = tuple(EndpointProblem(path=path, message=str(error), timed_out=isinstance(error, ServerTimeout))
                         for path, error in errors.items())
        return ServerReport(base_url=self.base_url, healthy=values["/health"], version=values["/version"],
                            models=values["/v1/models"] or (), metrics=values["/metrics"],
                            server_info=values["/server_info"], problems=problems,
                            elapsed_s=time.monotonic() - started)


def _within(deadline: float, reader: Callable[[], _T]) -> _T:
    with deadline_at(deadline):  # NOTE: a worker thread starts with an empty context: set it here
        return reader()


def _outcome(result: Callable[[], _T]) -> tuple[_T | None, CalculatorError | None]:
    try:
        return result(), None
    except CalculatorError as exc:
        return None, exc


def _depth_beyond(payload: Any, limit: int) -> bool:
    """Whether the JSON value nests deeper than ``limit`` (walked without recursion)."""
    stack = [(payload, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (value.values() if isinstance(value, dict) else value))
    return False


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text.split("\n")[0][:200]
