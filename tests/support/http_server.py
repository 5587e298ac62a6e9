"""A local HTTP server for client tests: GET answers by path, each a ``(status, headers, body)`` tuple or a
callable taking the request handler (to hang, stream or compute an answer). Real sockets, real HTTP."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

Answer = tuple[int, Mapping[str, str], bytes]
Route = Answer | Callable[[BaseHTTPRequestHandler], None]
NOT_FOUND: Answer = (404, {"Content-Type": "text/plain"}, b"404 page not found")


def answer(status: int, payload: object, content_type: str = "application/json") -> Answer:
    """An answer with a JSON (or raw bytes) body."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return status, {"Content-Type": content_type}, body


def send(handler: BaseHTTPRequestHandler, reply: Answer) -> None:
    status, headers, body = reply
    handler.send_response(status)
    for key, value in headers.items():
        handler.send_header(key, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class RouteServer:
    """Serves ``routes`` on 127.0.0.1 until ``close()``; ``seen`` records (path with query, Authorization)."""

    def __init__(self, routes: Mapping[str, Route]) -> None:
        seen: list[tuple[str, str | None]] = []
        self.seen = seen

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_GET(self):  # noqa: N802 (http.server API)
                seen.append((self.path, self.headers.get("Authorization")))
                route = routes.get(urlsplit(self.path).path, NOT_FOUND)
                if callable(route):
                    route(self)
                else:
                    send(self, route)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def params(self, index: int = -1) -> dict[str, list[str]]:
        """The query parameters of a recorded request."""
        return parse_qs(urlsplit(self.seen[index][0]).query)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
