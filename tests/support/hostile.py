"""Hostile server behaviours as routes for ``support.http_server.RouteServer``: real sockets, real bytes.

Each factory returns a route (a callable taking the request handler). Every loop is bounded in count and time
and stops as soon as the client hangs up, so a test that passes leaves nothing running for long.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from .http_server import Answer, send

Route = Callable[[BaseHTTPRequestHandler], None]
MAX_TRICKLE_S = 30.0  # a trickle gives up by itself after this long, whatever the client does


def _trickle(handler: BaseHTTPRequestHandler, data: bytes, every_s: float) -> None:
    stop = time.monotonic() + MAX_TRICKLE_S
    for index in range(len(data)):
        if time.monotonic() > stop:
            return
        try:
            handler.wfile.write(data[index:index + 1])
            handler.wfile.flush()
        except OSError:
            return  # the client hung up: what a bounded client does
        time.sleep(every_s)


def trickle_headers(every_s: float = 0.1, headers: int = 400) -> Route:
    """The status line at once, then header lines one byte every ``every_s``: never an end of headers in time."""
    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
        _trickle(handler, b"".join(b"X-Slow-%d: %s\r\n" % (i, b"y" * 20) for i in range(headers)) + b"\r\n",
                 every_s)
    return route


def trickle_status(every_s: float = 0.1) -> Route:
    """Even the status line comes one byte at a time."""
    def route(handler: BaseHTTPRequestHandler) -> None:
        _trickle(handler, b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 200 + b"\r\n", every_s)
    return route


def trickle_body(body: bytes, every_s: float = 0.1) -> Route:
    """Headers at once (with the real length), then the body one byte every ``every_s``."""
    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        _trickle(handler, body, every_s)
    return route


def slow(after_s: float, reply: Answer) -> Route:
    """A valid answer, after ``after_s``."""
    def route(handler: BaseHTTPRequestHandler) -> None:
        time.sleep(after_s)
        try:
            send(handler, reply)
        except OSError:
            pass
    return route


def silent(for_s: float = 10.0) -> Route:
    """Accepts the request and says nothing for ``for_s``."""
    def route(handler: BaseHTTPRequestHandler) -> None:
        time.sleep(for_s)
    return route


def hang_up() -> Route:
    """Closes the connection without a byte."""
    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.close_connection = True
        handler.connection.close()
    return route


def garbage_status() -> Route:
    """Not HTTP at all."""
    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.wfile.write(b"\x00\xffSSH-2.0-OpenSSH_9.6\r\n\r\n")
    return route


def lying_length(body: bytes) -> Route:
    """Content-Length says more than is sent, then the connection closes."""
    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body) + 10_000))
        handler.end_headers()
        handler.wfile.write(body)
        handler.close_connection = True
    return route


def endless_chunks(chunk: bytes = b"vllm:num_requests_running 1\n", every_s: float = 0.0,
                   max_bytes: int = 64 << 20) -> Route:
    """A chunked body that goes on (up to ``max_bytes``), fast or slow."""
    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        sent, stop = 0, time.monotonic() + MAX_TRICKLE_S
        while sent < max_bytes and time.monotonic() < stop:
            try:
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:
                return
            sent += len(chunk)
            if every_s:
                time.sleep(every_s)
    return route


# --- readings that parse but say impossible things (issue 28) -------------------------------------------------------

HOSTILE_JSON_BODIES = (
    b"[" * 100_000 + b"]" * 100_000,  # deeper than any parser's recursion limit
    b'{"a": ' * 40 + b"1" + b"}" * 40,  # deeper than a page draws
    b'{"version": ' + b"9" * 5000 + b"}",  # more digits than int() takes
    b"[" + b"0," * 300_000 + b"0]",  # long
    b'{"data": [{"id": {"x": [1]}, "max_model_len": "4096"}], "version": ["0.32"]}',  # the wrong types
    b"\xff\xfe{}",  # not UTF-8
)


def impossible_metrics(rng, capture: str) -> str:
    """The capture with impossible settings in ``vllm:cache_config_info`` and impossible histograms: block sizes of
    0 or 5,000, overrides past any bound, NaN and 1e308 bucket bounds, a mean prompt above 1e7 tokens, n above 1,024."""
    text = capture
    for key, values in (("block_size", ("0", "5000", "-16", "1e400", "16")),
                        ("num_gpu_blocks", ("0", str(2**52), "99999999999999999999", "16")),
                        ("num_gpu_blocks_override", (str(2**50), "0", "16")),
                        ("kv_cache_memory_bytes", (str(2**60), "1073741824")),
                        ("gpu_memory_utilization", ("NaN", "5", "0.92"))):
        text = text.replace(f',{key}="{_label(capture, key)}"', f',{key}="{rng.choice(values)}"', 1)
    family = rng.choice(("request_prompt_tokens", "request_generation_tokens", "request_params_n"))
    bound, total = rng.choice((('"NaN"', None), ('"1e308"', None), ('"nan"', None), (None, "1e12"), (None, "4000000")))
    lines = []
    for line in text.splitlines():
        if line.startswith(f"vllm:{family}_bucket") and bound and 'le="5.0"' in line:
            line = line.replace('le="5.0"', f"le={bound}")
        if line.startswith(f"vllm:{family}_sum") and total:
            line = line.rsplit(" ", 1)[0] + " " + total
        lines.append(line)
    return "\n".join(lines) + "\n"


def _label(text: str, key: str) -> str:
    start = text.index(f',{key}="') + len(key) + 3
    return text[start:text.index('"', start)]
