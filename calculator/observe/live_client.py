"""I/O edge to a running vLLM server: ``/metrics``, ``/v1/models``, ``/version``, ``/health``, ``/server_info``.

Every request has connect and read timeouts and a size cap, never follows a redirect, and sends the API key
only in the ``Authorization`` header — never in a URL, an error message or a log line. When the dashboard is
deployed for others, ``VLLM_PLANNER_ALLOWED_HOSTS`` (comma-separated host names, ``host:port`` pairs or CIDR
ranges) restricts which servers it may contact, so the live page cannot be used to probe a private network.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict

from ..errors import CalculatorError
from .metrics import MetricsSnapshot, parse_metrics

ALLOWED_HOSTS_ENV = "VLLM_PLANNER_ALLOWED_HOSTS"
DEFAULT_SERVER_ENV = "VLLM_PLANNER_SERVER_URL"
DEFAULT_SERVER = "http://localhost:8000"
CONNECT_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 5.0
MAX_METRICS_BYTES = 8 << 20  # a large multi-engine /metrics is a few hundred KB
MAX_JSON_BYTES = 2 << 20


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


class HostNotAllowed(LiveServerError):
    pass


class ServerModel(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: str
    root: str | None = None
    max_model_len: int | None = None
    parent: str | None = None


class ServerReport(BaseModel):
    """One read of a server: what it serves and its metrics."""

    model_config = ConfigDict(frozen=True)
    base_url: str
    healthy: bool
    version: str | None
    models: tuple[ServerModel, ...]
    metrics: MetricsSnapshot
    server_info: dict[str, Any] | None = None
    elapsed_s: float


def default_server_url() -> str:
    return os.environ.get(DEFAULT_SERVER_ENV) or DEFAULT_SERVER


def normalise_base_url(url: str) -> str:
    """``localhost:8000`` -> ``http://localhost:8000``; refuses other schemes and embedded credentials."""
    text = url.strip().rstrip("/")
    if "://" not in text:
        text = f"http://{text}"
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LiveServerError(f"not an http(s) server address: {url!r} (expected e.g. http://localhost:8000)")
    if parts.username or parts.password:
        raise LiveServerError("put the API key in its own field, not in the address")
    if parts.query or parts.fragment:
        raise LiveServerError("give the server's base address without ?query or #fragment")
    return text


def check_host_allowed(base_url: str, allowed: str | None = None) -> None:
    """Enforce ``VLLM_PLANNER_ALLOWED_HOSTS`` (unset: every host is allowed)."""
    rules = [r.strip() for r in (allowed if allowed is not None else os.environ.get(ALLOWED_HOSTS_ENV, "")).split(",")
             if r.strip()]
    if not rules:
        return
    parts = urlsplit(base_url)
    host, port = (parts.hostname or "").lower(), parts.port or (443 if parts.scheme == "https" else 80)
    addresses = _resolve(host)
    for rule in rules:
        if "/" in rule:
            network = ipaddress.ip_network(rule, strict=False)
            if addresses and all(address in network for address in addresses):
                return
        elif rule.lower() in (host, f"{host}:{port}"):
            return
    raise HostNotAllowed(f"{host}:{port} is not in {ALLOWED_HOSTS_ENV}; this dashboard may only contact "
                         f"the servers its operator allowed")


def _resolve(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(info[4][0]) for info in socket.getaddrinfo(host, None)]
    except (OSError, ValueError):
        return []


class LiveClient:
    """Reads one vLLM server. ``transport`` is the httpx seam for tests that need a custom transport."""

    def __init__(self, base_url: str, api_key: str | None = None, *, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 read_timeout_s: float = READ_TIMEOUT_S, transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = normalise_base_url(base_url)
        check_host_allowed(self.base_url)
        headers = {"Accept": "text/plain, application/json", "User-Agent": "vllm-capacity-planner"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(
            base_url=self.base_url, headers=headers, follow_redirects=False, transport=transport,
            timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s))
        self._deadline_s = connect_timeout_s + read_timeout_s

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> LiveClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(self, path: str, limit: int, *, missing_ok: bool = False) -> tuple[int, bytes]:
        where = f"{self.base_url}{path}"
        started = time.monotonic()
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
                    if time.monotonic() - started > self._deadline_s:
                        raise ServerTimeout(f"{where} is sending too slowly; gave up after {self._deadline_s:.0f} s")
                return response.status_code, bytes(body)
        except httpx.ConnectError as exc:
            raise ServerUnreachable(f"cannot connect to {self.base_url}: {_reason(exc)}. Is vLLM running there?") from exc
        except httpx.TimeoutException as exc:
            raise ServerTimeout(f"{where} did not answer within {self._deadline_s:.0f} s") from exc
        except httpx.HTTPError as exc:
            raise ServerUnreachable(f"{where}: {_reason(exc)}") from exc

    def _json(self, path: str, *, missing_ok: bool = False) -> Any:
        status, body = self._get(path, MAX_JSON_BYTES, missing_ok=missing_ok)
        if status == 404:
            return None
        try:
            return json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise NotAVllmServer(f"{self.base_url}{path} did not return JSON: this does not look like vLLM") from exc

    def metrics(self) -> MetricsSnapshot:
        _, body = self._get("/metrics", MAX_METRICS_BYTES)
        return parse_metrics(body.decode("utf-8", errors="replace"), scraped_at=time.time())

    def models(self) -> tuple[ServerModel, ...]:
        payload = self._json("/v1/models")
        if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
            raise NotAVllmServer(f"{self.base_url}/v1/models is not an OpenAI model list")
        cards = []
        for card in payload["data"]:
            if isinstance(card, dict) and isinstance(card.get("id"), str):
                length = card.get("max_model_len")
                cards.append(ServerModel(id=card["id"], root=card.get("root") if isinstance(card.get("root"), str) else None,
                                         max_model_len=length if isinstance(length, int) and length > 0 else None,
                                         parent=card.get("parent") if isinstance(card.get("parent"), str) else None))
        return tuple(cards)

    def version(self) -> str | None:
        payload = self._json("/version", missing_ok=True)
        return str(payload["version"]) if isinstance(payload, dict) and "version" in payload else None

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
        started = time.monotonic()
        metrics = self.metrics()
        return ServerReport(base_url=self.base_url, healthy=self.healthy(), version=self.version(),
                            models=self.models(), metrics=metrics, server_info=self.server_info(),
                            elapsed_s=time.monotonic() - started)


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text.split("\n")[0][:200]
