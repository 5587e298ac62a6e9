"""A local HTTP server that speaks the slice of the Hugging Face Hub protocol huggingface_hub uses for
``hf_hub_download`` and safetensors metadata. The real Hub is out of reach on this machine, so the real
client code is tested against this server at the HTTP boundary (status codes and ``X-Error-Code`` headers
as the Hub sends them).
"""

from __future__ import annotations

import json
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def safetensors_header(tensors: dict[str, tuple[str, list[int]]]) -> bytes:
    """The first bytes of a .safetensors file: u64 header length + JSON header (no tensor data needed)."""
    header, offset = {}, 0
    sizes = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "I32": 4}
    for name, (dtype, shape) in tensors.items():
        count = 1
        for dim in shape:
            count *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + count * sizes[dtype]]}
        offset += count * sizes[dtype]
    body = json.dumps(header).encode()
    return struct.pack("<Q", len(body)) + body


@dataclass
class LocalHub:
    """Repos: ``public`` id -> files (name -> bytes). A ``gated`` id answers GatedRepo, except to a token in
    ``accepted[id]`` (its files are in ``public``); a ``private`` id answers as the Hub does to strangers (401
    RepoNotFound) except to its owner's token ``private[id]``. ``requests`` records "METHOD path" and
    ``authorizations`` the bearer token each request carried (None without one)."""

    public: dict[str, dict[str, bytes]] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)
    accepted: dict[str, set[str]] = field(default_factory=dict)
    private: dict[str, str] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)

    def __enter__(self) -> LocalHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _answer(self, with_body: bool) -> None:
                hub.requests.append(f"{self.command} {self.path}")
                bearer = self.headers.get("Authorization", "")
                token = bearer.removeprefix("Bearer ") if bearer.startswith("Bearer ") else None
                hub.authorizations.append(token)
                path = self.path.split("?")[0]
                if "/resolve/" not in path:
                    return self._error(404, "RepoNotFound", with_body)
                repo, rest = path.lstrip("/").split("/resolve/", 1)
                filename = rest.split("/", 1)[1]
                if repo in hub.gated and token not in hub.accepted.get(repo, set()):
                    return self._error(401 if token is None else 403, "GatedRepo", with_body,
                                       "Access to model is restricted.")
                if repo in hub.private and token != hub.private[repo]:
                    return self._error(401, "RepoNotFound", with_body, "Repository not found")
                if repo not in hub.public:
                    return self._error(404, "RepoNotFound", with_body, "Repository not found")
                files = hub.public[repo]
                if filename not in files:
                    return self._error(404, "EntryNotFound", with_body, "Entry not found")
                data = files[filename]
                status = 200
                if "Range" in self.headers and with_body:
                    start, end = self.headers["Range"].removeprefix("bytes=").split("-")
                    data = data[int(start): int(end) + 1 if end else None]
                    status = 206
                self.send_response(status)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{abs(hash(files[filename]))}"')
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if with_body:
                    self.wfile.write(data)

            def _error(self, status: int, code: str, with_body: bool, message: str = "") -> None:
                body = json.dumps({"error": message or code}).encode()
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("X-Error-Message", message or code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if with_body:
                    self.wfile.write(body)

            def do_HEAD(self):  # noqa: N802 (http.server API)
                self._answer(with_body=False)

            def do_GET(self):  # noqa: N802
                self._answer(with_body=True)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
