"""Two visitors of one dashboard process share its caches, never each other's rights (issue 28).

Visitor A opens a private (or gated, licence accepted) model with a token; visitor B, in another session of the
same process, opens the same id without a token (or with one that never accepted the licence). The local Hub
must see B's request and refuse it, and B's page must say so; nothing A read may reach B.
"""

from __future__ import annotations

import json
import random

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from support.apptest import metrics
from support.local_hub import LocalHub

from calculator import Scenario, estimate
from calculator.errors import CalculatorError
from calculator.model.architecture import build_model_spec
from pages.common.inputs import MODEL_SOURCES, cached_model_spec

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4,
          "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000, "intermediate_size": 1024,
          "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
OWNER = "hf_owner_token_of_visitor_a"
STRANGER = "hf_token_of_visitor_b"


@pytest.fixture(autouse=True)
def fresh_caches():
    """Each test starts with the process's caches empty (the specs are a st.cache_resource, shared by sessions)."""
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.fixture()
def hub(monkeypatch):
    files = {"config.json": json.dumps(CONFIG).encode()}
    with LocalHub(public={"acme/private": files, "acme/licensed": files}, private={"acme/private": OWNER},
                  gated={"acme/licensed"}, accepted={"acme/licensed": {OWNER}}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield server


def visit(repo: str, token: str | None) -> AppTest:
    """One visitor's session: the Plan page, a Hub id and (maybe) a token, as a person types them."""
    app = AppTest.from_file("../pages/plan.py", default_timeout=120)
    app.run()
    app.radio(key="plan_source").set_value("Hugging Face id")
    app.run()
    app.text_input(key="plan_hub_id").set_value(repo)
    if token:
        app.text_input(key="plan_hf_token").set_value(token)
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def errors_of(app: AppTest) -> str:
    return " ".join(e.value for e in app.error)


@pytest.mark.parametrize(("repo", "stranger", "refusal"), [
    ("acme/private", None, "No such model on the Hub: acme/private (or it is private: give a token)"),
    ("acme/licensed", None, "Acme/licensed is gated: accept its licence on the Hub"),
    ("acme/licensed", STRANGER, "Acme/licensed is gated: accept its licence on the Hub"),
])
def test_a_model_read_with_one_visitors_token_is_refused_to_another_visitor(hub, repo, stranger, refusal):
    owner = visit(repo, OWNER)
    expected = estimate(Scenario(model=repo), build_model_spec(CONFIG, repo)).capacity.kv_cache_tokens
    assert metrics(owner)["KV cache tokens"] == f"{expected:,}"
    config_reads = f"GET /{repo}/resolve/main/config.json"
    read_by_owner = hub.requests.count(config_reads)

    other = visit(repo, stranger)
    assert refusal in errors_of(other)
    assert metrics(other).get("KV cache tokens") != f"{expected:,}"  # what stays shown is B's previous scenario
    assert hub.requests.count(config_reads) == read_by_owner + 1  # the Hub saw B's request and decided it
    assert hub.authorizations[hub.requests.index(config_reads, len(hub.requests) - 1)] == stranger
    assert OWNER not in errors_of(other)


def test_the_same_token_in_a_second_session_is_served_from_the_cache(hub):
    """Sharing is kept where it is safe: the same right reads the Hub once."""
    visit("acme/private", OWNER)
    reads = len(hub.requests)
    again = visit("acme/private", OWNER)
    assert "KV cache tokens" in metrics(again) and len(hub.requests) == reads


@pytest.mark.parametrize("seed", range(12))
def test_seeded_visitors_in_any_order_get_exactly_what_their_token_may_read(hub, seed):
    """Visitors with the owner's token, another token or none read the private, the gated and a missing model in
    a random order through the shared cache: a read succeeds exactly when the token has the right, and every read
    by a token the cache has not seen succeed for that model reaches the Hub."""
    rng = random.Random(seed)
    served: set[tuple[str, str | None]] = set()
    for _ in range(12):
        repo, token = rng.choice(["acme/private", "acme/licensed", "acme/missing"]), rng.choice([OWNER, STRANGER, None])
        before = len(hub.requests)
        try:
            spec = cached_model_spec(MODEL_SOURCES[1], repo, token)
        except CalculatorError as exc:
            assert (repo, token) not in served and OWNER not in str(exc)
            assert len(hub.requests) > before  # the Hub decided
        else:
            assert token == OWNER and repo != "acme/missing" and spec.model_id == repo
            assert len(hub.requests) == before if (repo, token) in served else len(hub.requests) > before
            served.add((repo, token))
