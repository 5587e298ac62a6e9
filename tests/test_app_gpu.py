"""The GPUs page through AppTest: the friendly no-driver state here, and fake NVML machines for the rest."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from support.fake_nvml import fake

import calculator.observe.nvml

ROOT = Path(__file__).resolve().parents[1]
PAGE = str(ROOT / "pages" / "gpu.py")


@pytest.fixture(autouse=True)
def fresh_caches():
    st.cache_data.clear()
    st.cache_resource.clear()


def run_page(path: str = PAGE) -> AppTest:
    app = AppTest.from_file(path, default_timeout=60)
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def link_buttons(app: AppTest) -> dict[str, list[dict[str, str]]]:
    """Each link button's label -> the query parameters of its links."""
    links: dict[str, list[dict[str, str]]] = {}
    for button in app.get("link_button"):
        links.setdefault(button.proto.label, []).append(dict(parse_qsl(urlsplit(button.proto.url).query)))
    return links


def use_fake(monkeypatch: pytest.MonkeyPatch, scenario: str) -> None:
    monkeypatch.setattr(calculator.observe.nvml, "default_backend", lambda: fake(scenario))


def test_without_a_driver_the_page_explains_and_links_to_plan():
    app = run_page()
    (info,) = app.info
    assert "machine running the dashboard" in info.value and "No NVIDIA driver on this machine" in info.value
    assert link_buttons(app) == {"Plan with a catalog GPU": [{}]}
    assert not app.metric


def test_the_router_registers_the_page():
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    app.switch_page("pages/gpu.py").run()
    assert not app.exception
    assert app.title[0].value == "GPUs"


def test_two_gpus_show_metrics_processes_and_plan_links(monkeypatch: pytest.MonkeyPatch):
    use_fake(monkeypatch, "two_gpus_mixed")
    app = run_page()
    values = [(metric.label, metric.value) for metric in app.metric]
    assert values[:6] == [("Memory used", "8.00 GiB"), ("Memory free", "32.00 GiB"), ("Memory total", "40.00 GiB"),
                          ("Utilization", "0 %"), ("Temperature", "35 °C"), ("Power / limit", "70 W / 700 W")]
    assert values[8] == ("Memory total", "24.00 GiB")
    assert app.caption[0].value == "Driver 550.54.15 · CUDA 12.4 · 2 GPU(s)"
    assert app.dataframe[0].value.to_dict("records") == [
        {"PID": 10, "Process": "ollama", "Memory (GiB)": 7.0}, {"PID": 11, "Process": "Xorg", "Memory (GiB)": 0.25}]
    assert link_buttons(app) == {"Plan on this GPU": [{"g": "a100-sxm-40gb", "other": "7.38"},
                                                      {"g": "none", "mem": "24", "other": "6"}]}


def test_a_gpu_answering_not_supported_shows_n_a(monkeypatch: pytest.MonkeyPatch):
    use_fake(monkeypatch, "gpu_answers_not_supported")
    app = run_page()
    values = {metric.label: metric.value for metric in app.metric}
    assert (values["Utilization"], values["Temperature"], values["Power / limit"]) == ("n/a", "n/a", "n/a / n/a")
    assert "This GPU does not list the processes holding its memory." in [c.value for c in app.caption]
    # the catalog's CUDA total (23.55 GiB) minus NVML's free 23,540 MiB (22.99 GiB)
    assert link_buttons(app) == {"Plan on this GPU": [{"g": "rtx-4090", "other": "0.56"}]}


def test_mig_on_warns_that_the_plan_is_for_the_whole_card(monkeypatch: pytest.MonkeyPatch):
    use_fake(monkeypatch, "mig_enabled")
    app = run_page()
    assert "MIG is on" in app.warning[0].value
    assert link_buttons(app) == {"Plan on this GPU": [{"g": "a100-sxm-80gb", "other": "9.15"}]}
