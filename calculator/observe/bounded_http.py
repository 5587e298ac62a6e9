"""I/O edge shared by the Live and Fleet clients: HTTP with one wall-clock deadline and the access policy enforced
on the address actually connected to.

httpx's timeouts bound each socket operation, so a server that trickles its headers one byte a second is never
cut off. Here every connect, DNS look-up, read and write gets at most the time left before the deadline set with
``deadline_at``; past it the request fails with httpx's own timeout errors. The policy is checked on each resolved
IP address right before ``connect`` (a name cannot resolve to one address for the check and another for the
connection), and connections are never reused, so no request outlives its own deadline on a pooled socket.
"""

from __future__ import annotations

import contextlib
import contextvars
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore
import httpx

from .access import AccessPolicy, IpAddress

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("http_deadline", default=None)


@contextlib.contextmanager
def deadline_at(monotonic_s: float) -> Iterator[None]:
    """Every request made inside (in this thread or context) ends by ``monotonic_s`` (``time.monotonic()``)."""
    token = _deadline.set(monotonic_s)
    try:
        yield
    finally:
        _deadline.reset(token)


def _bounded(timeout: float | None, error: type[Exception]) -> float | None:
    deadline = _deadline.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname,
                                                     _bounded(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


def _resolve(host: str, port: int, timeout_s: float | None) -> list[IpAddress]:
    """getaddrinfo has no timeout of its own: run it aside and stop waiting at the deadline."""
    import ipaddress

    found: list[Any] = []

    def look_up() -> None:
        try:
            found.extend(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            found.append(exc)

    worker = threading.Thread(target=look_up, daemon=True, name=f"resolve {host}")
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise httpcore.ConnectTimeout(f"looking up {host} took too long")
    if found and isinstance(found[0], OSError):
        raise httpcore.ConnectError(f"cannot resolve {host}: {found[0]}")
    addresses: list[IpAddress] = []
    for info in found:
        address = ipaddress.ip_address(info[4][0].split("%")[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


class _GuardedBackend(httpcore.NetworkBackend):
    """Resolves, checks each address against the policy, connects to an allowed one; all under the deadline."""

    def __init__(self, policy: AccessPolicy) -> None:
        self._policy = policy

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        addresses = _resolve(host, port, _bounded(timeout, httpcore.ConnectTimeout))
        allowed = [a for a in addresses if self._policy.permits(host, port, a)]
        if not allowed:
            raise self._policy.refusal(host, port, addresses)
        last: Exception | None = None
        for address in allowed:  # NOTE: an IP literal: SyncBackend's own getaddrinfo does no look-up
            try:
                return _DeadlineStream(httpcore.SyncBackend().connect_tcp(
                    str(address), port, _bounded(timeout, httpcore.ConnectTimeout), local_address, socket_options))
            except (httpcore.ConnectTimeout, httpcore.ConnectError) as exc:
                last = exc
        raise last or httpcore.ConnectError(f"{host} has no address")

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("unix sockets are not used here")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class _MappedStream(httpx.SyncByteStream):
    """The body, with httpcore's errors turned into httpx's (as httpx's own transport does)."""

    def __init__(self, stream: Iterable[bytes], request: httpx.Request) -> None:
        self._stream, self._request = stream, request

    def __iter__(self) -> Iterator[bytes]:
        with _mapped_errors(self._request):
            yield from self._stream

    def close(self) -> None:
        if hasattr(self._stream, "close"):
            self._stream.close()


@contextlib.contextmanager
def _mapped_errors(request: httpx.Request) -> Iterator[None]:
    try:
        yield
    except httpcore.TimeoutException as exc:
        raise getattr(httpx, type(exc).__name__, httpx.TimeoutException)(str(exc), request=request) from exc
    except httpcore.ConnectError as exc:
        raise httpx.ConnectError(str(exc), request=request) from exc
    except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
        raise getattr(httpx, type(exc).__name__, httpx.TransportError)(str(exc), request=request) from exc


class BoundedTransport(httpx.BaseTransport):
    """An httpx transport: deadline-bounded, policy-checked, one connection per request, HTTP/1.1."""

    def __init__(self, policy: AccessPolicy, *, verify: ssl.SSLContext | None = None) -> None:
        self._pool = httpcore.ConnectionPool(ssl_context=verify or httpx.create_ssl_context(),
                                             max_keepalive_connections=0, network_backend=_GuardedBackend(policy))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=request.url.raw_scheme, host=request.url.raw_host, port=request.url.port,
                             target=request.url.raw_path),
            headers=request.headers.raw, content=request.stream, extensions=request.extensions)
        with _mapped_errors(request):
            response = self._pool.handle_request(core_request)
        return httpx.Response(status_code=response.status, headers=response.headers,
                              stream=_MappedStream(response.stream, request), extensions=response.extensions)

    def close(self) -> None:
        self._pool.close()


def current_deadline() -> float | None:
    """The deadline set by the innermost ``deadline_at`` in this context, if any."""
    return _deadline.get()
