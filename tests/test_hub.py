"""The Hub client (real huggingface_hub code) against a local HTTP server speaking the Hub's protocol."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from support.hostile import endless_chunks, trickle_headers
from support.local_hub import LocalHub, safetensors_header

from calculator.errors import GatedModel, HubUnreachable, InvalidConfig, ModelNotFound
from calculator.limits import MAX_CONFIG_BYTES
from calculator.model.hub import fetch_config, fetch_safetensors_parameter_count

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 2, "vocab_size": 100, "intermediate_size": 128}
SECRET = "hf_supersecrettoken123"


@pytest.fixture()
def hub():
    tensors = {"model.embed_tokens.weight": ("BF16", [100, 64]), "lm_head.weight": ("BF16", [100, 64])}
    with LocalHub(public={"acme/tiny": {"config.json": json.dumps(CONFIG).encode(),
                                        "model.safetensors": safetensors_header(tensors)},
                          "acme/gguf-only": {"README.md": b"# gguf"},
                          "acme/private": {"config.json": json.dumps(CONFIG).encode()},
                          "acme/licensed": {"config.json": json.dumps(CONFIG).encode()}},
                  gated={"acme/gated", "acme/licensed"}, accepted={"acme/licensed": {SECRET}},
                  private={"acme/private": SECRET}) as server:
        yield server


def test_downloads_and_parses_config_json(hub):
    assert fetch_config("acme/tiny", endpoint=hub.url) == CONFIG


def test_gated_repository_asks_for_licence_and_token_without_leaking_it(hub):
    with pytest.raises(GatedModel, match="accept its licence") as caught:
        fetch_config("acme/gated", endpoint=hub.url, token=SECRET)
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize("repo", ["acme/private", "acme/licensed"])
def test_private_and_gated_repositories_are_read_again_for_every_caller(hub, repo):
    """Issue 28: nothing a token read is kept for a caller without it; the Hub decides every read (and sees it)."""
    assert fetch_config(repo, endpoint=hub.url, token=SECRET) == CONFIG
    for stranger in (None, "hf_someone_else"):
        with pytest.raises((ModelNotFound, GatedModel)) as caught:
            fetch_config(repo, endpoint=hub.url, token=stranger)
        assert SECRET not in str(caught.value)
    assert hub.authorizations == [SECRET, None, "hf_someone_else"]
    assert hub.requests == [f"GET /{repo}/resolve/main/config.json"] * 3


def test_a_config_json_announced_as_400_mib_is_refused_before_its_body_is_read(serve):
    def announce_then_wait(handler):
        handler.send_response(200)
        handler.send_header("Content-Length", str(400 << 20))
        handler.end_headers()
        time.sleep(5)  # a client that reads the body first waits here until its deadline

    server = serve({"/acme/huge/resolve/main/config.json": announce_then_wait})
    started = time.monotonic()
    with pytest.raises(InvalidConfig, match=r"acme/huge is 400\.0 MiB, larger than any config.json can be \(8 MiB"):
        fetch_config("acme/huge", endpoint=server.url, deadline_s=4)
    assert time.monotonic() - started < 1.5


def test_a_config_json_streamed_without_length_is_refused_past_the_cap(serve):
    server = serve({"/acme/endless/resolve/main/config.json": endless_chunks(b"x" * 65536)})
    with pytest.raises(InvalidConfig, match="acme/endless is over 8 MiB"):
        fetch_config("acme/endless", endpoint=server.url)
    assert MAX_CONFIG_BYTES == 8 << 20


def test_missing_repository_says_no_such_model(hub):
    with pytest.raises(ModelNotFound, match="no such model"):
        fetch_config("acme/nothing", endpoint=hub.url)


def test_repository_without_config_json(hub):
    with pytest.raises(InvalidConfig, match="no config.json"):
        fetch_config("acme/gguf-only", endpoint=hub.url)


def test_unreachable_hub_is_reported_as_such():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(HubUnreachable, match="could not be reached"):
        fetch_config("acme/tiny", endpoint=f"http://127.0.0.1:{port}")


def test_invalid_repo_id_is_a_clear_error(hub):
    with pytest.raises(ModelNotFound, match="not a valid Hub model id"):
        fetch_config("not a repo id!!", endpoint=hub.url)


def test_parameter_count_from_safetensors_headers(hub):
    assert fetch_safetensors_parameter_count("acme/tiny", endpoint=hub.url) == {"BF16": 2 * 100 * 64}


def test_a_hub_that_trickles_its_headers_is_cut_off_at_the_deadline():
    """huggingface_hub's own timeouts bound each socket read, so a byte every 0.2 s is never cut off by them."""
    trickle = trickle_headers(every_s=0.2)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_HEAD(self):  # noqa: N802 (http.server API)
            trickle(self)

        do_GET = do_HEAD  # noqa: N815

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        started = time.monotonic()
        with pytest.raises(HubUnreachable, match="did not answer for acme/tiny within 2 s"):
            fetch_config("acme/tiny", endpoint=f"http://127.0.0.1:{server.server_address[1]}",
                         deadline_s=2)
        assert time.monotonic() - started < 3
    finally:
        server.shutdown()
        server.server_close()


def test_a_refused_token_and_a_failing_hub_are_named_as_such(serve):
    def refuse_token(handler):
        handler.send_response(401)
        handler.send_header("X-Error-Message", "Invalid credentials in Authorization header")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    server = serve({"/acme/tiny/resolve/main/config.json": refuse_token,
                    "/acme/down/resolve/main/config.json": (503, {"Content-Type": "text/html"}, b"<html>down</html>")})
    with pytest.raises(ModelNotFound, match="the Hub refused the token given for acme/tiny: check it") as caught:
        fetch_config("acme/tiny", endpoint=server.url, token=SECRET)
    assert SECRET not in str(caught.value)
    with pytest.raises(HubUnreachable, match="the Hugging Face Hub answered HTTP 503 for acme/down; try again later"):
        fetch_config("acme/down", endpoint=server.url)
