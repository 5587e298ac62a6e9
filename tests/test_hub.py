"""The Hub client (real huggingface_hub code) against a local HTTP server speaking the Hub's protocol."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from support.hostile import trickle_headers
from support.local_hub import LocalHub, safetensors_header

from calculator.errors import GatedModel, HubUnreachable, InvalidConfig, ModelNotFound
from calculator.model.hub import fetch_config, fetch_safetensors_parameter_count

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 2, "vocab_size": 100, "intermediate_size": 128}
SECRET = "hf_supersecrettoken123"


@pytest.fixture()
def hub():
    tensors = {"model.embed_tokens.weight": ("BF16", [100, 64]), "lm_head.weight": ("BF16", [100, 64])}
    with LocalHub(public={"acme/tiny": {"config.json": json.dumps(CONFIG).encode(),
                                        "model.safetensors": safetensors_header(tensors)},
                          "acme/gguf-only": {"README.md": b"# gguf"}},
                  gated={"acme/gated"}) as server:
        yield server


def test_downloads_and_parses_config_json(hub, tmp_path):
    assert fetch_config("acme/tiny", endpoint=hub.url, cache_dir=str(tmp_path)) == CONFIG


def test_gated_repository_asks_for_licence_and_token_without_leaking_it(hub, tmp_path):
    with pytest.raises(GatedModel, match="accept its licence") as caught:
        fetch_config("acme/gated", endpoint=hub.url, cache_dir=str(tmp_path), token=SECRET)
    assert SECRET not in str(caught.value)


def test_missing_repository_says_no_such_model(hub, tmp_path):
    with pytest.raises(ModelNotFound, match="no such model"):
        fetch_config("acme/nothing", endpoint=hub.url, cache_dir=str(tmp_path))


def test_repository_without_config_json(hub, tmp_path):
    with pytest.raises(InvalidConfig, match="no config.json"):
        fetch_config("acme/gguf-only", endpoint=hub.url, cache_dir=str(tmp_path))


def test_unreachable_hub_is_reported_as_such(tmp_path):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(HubUnreachable, match="could not be reached"):
        fetch_config("acme/tiny", endpoint=f"http://127.0.0.1:{port}", cache_dir=str(tmp_path))


def test_invalid_repo_id_is_a_clear_error(hub, tmp_path):
    with pytest.raises(ModelNotFound, match="not a valid Hub model id"):
        fetch_config("not a repo id!!", endpoint=hub.url, cache_dir=str(tmp_path))


def test_parameter_count_from_safetensors_headers(hub):
    assert fetch_safetensors_parameter_count("acme/tiny", endpoint=hub.url) == {"BF16": 2 * 100 * 64}


def test_a_hub_that_trickles_its_headers_is_cut_off_at_the_deadline(tmp_path):
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
                         cache_dir=str(tmp_path), deadline_s=2)
        assert time.monotonic() - started < 3
    finally:
        server.shutdown()
        server.server_close()
