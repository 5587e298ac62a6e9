"""Live: attach to a running vLLM server and overlay reality on the estimate."""

import sys
import time
from pathlib import Path

# NOTE: a deep link or AppTest may run this page without app.py; the repo root must still be importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamlit as st

from calculator import CalculatorError, Scenario, load_model_spec, model_spec_from_text, preset_ids
from calculator.observe.live_client import LiveClient, ServerTimeout, default_server_url
from pages.common import page_setup, sentence
from pages.common.inputs import MODEL_SOURCES, cached_model_spec
from pages.common.state import carried_context
from pages.common.live_view import (
    AUTO,
    ENGINE_PANELS,
    access_notice,
    access_policy,
    device_for,
    engine_panel,
    engines_beyond_panels,
    gpu_options,
    header_line,
    local_model_path,
    plan_section,
    read_pace,
    resolve_spec,
    server_panel,
    unreachable_panel,
)

INTERVALS = {"off": None, "2 s": 2, "5 s": 5, "10 s": 10, "30 s": 30}

page_setup("Live server")
policy = access_policy()
carried = carried_context()  # NOTE: the deployment the user was just looking at: the one to compare against
planned, planned_load = carried if carried else (None, None)
if planned is not None:  # the server is taken to run the plan's settings until the user says otherwise
    st.session_state.setdefault("live_tp", planned.tensor_parallel_size)
    if planned.dtype in ("auto", "bfloat16", "float16", "float32"):
        st.session_state.setdefault("live_dtype", planned.dtype)
with st.sidebar:
    st.subheader("Server")
    st.session_state.setdefault("live_url", default_server_url())
    url = st.text_input("Base URL", key="live_url")
    api_key = st.text_input("API key (kept only in this browser session)", type="password", key="live_api_key")
    interval = INTERVALS[st.selectbox("Refresh every", list(INTERVALS), index=2, key="live_interval")]
    st.subheader("For the estimate")
    devices = gpu_options()
    st.session_state.setdefault("live_gpu", AUTO)
    st.selectbox("GPU the server runs on", list(devices), key="live_gpu", format_func=devices.__getitem__)
    preset_override = st.selectbox("Model config", ["auto-detect", *preset_ids()], key="live_model")
    other_source = st.text_input("…or a Hugging Face id or local model folder", key="live_model_id").strip()
    upload = st.file_uploader("…or its config.json", type=["json"], key="live_config_upload")
    dtype = st.selectbox("dtype the server runs", ["auto", "bfloat16", "float16", "float32"], key="live_dtype")
    tp = st.number_input("Tensor parallel", 1, 1024, key="live_tp")  # NOTE: 1 unless the plan says otherwise
access_notice(policy, "This page reads a running vLLM server's /metrics and sets what it reports (KV cache, "
                      "queue, latency) against the estimate for its own settings.")


def given_spec(upload, model_id: str):
    """The config the user gives: an upload, a local folder (where this deployment allows), or a Hub id."""
    try:
        if upload is not None:
            return model_spec_from_text(upload.getvalue(), upload.name), upload.name
        if (folder := local_model_path(model_id)) is not None:
            return load_model_spec(str(folder)), model_id
        return cached_model_spec(MODEL_SOURCES[1], model_id), f"{model_id} from the Hugging Face Hub"
    except CalculatorError as exc:
        st.warning(sentence(exc))
        return None, "the given config could not be read"


@st.fragment(run_every=interval)
def live_panel() -> None:
    bases = st.session_state.setdefault("live_bases", {})
    try:
        with LiveClient(url, api_key or None, policy=policy) as client:
            report = client.read()
    except ServerTimeout as exc:  # a slow read, not a lost server: no "unreachable since"
        st.warning(sentence(exc), icon="⏳")
        return
    except CalculatorError as exc:
        unreachable_panel(url, bases.get(url), sentence(exc))
        return
    bases[url] = report.base_url
    read_pace(url, report.metrics.scraped_at if report.metrics else time.time(), interval)
    engines = report.metrics.engines if report.metrics is not None else ()
    gpu_choice = st.session_state.get("live_gpu", AUTO)  # NOTE: read here: a one-click device change reruns only this
    header_line(report, device_for(engines[0], report, gpu_choice)[1] if engines else None)
    server_panel(report)
    if report.metrics is None:
        return  # server_panel said why /metrics gave nothing
    if not engines:
        st.info("The server exposes no engine metrics yet.")
    base = Scenario(gpu=None, device="cpu", dtype=dtype, tensor_parallel_size=tp)  # the device is chosen per engine
    for engine in engines[:ENGINE_PANELS]:
        model = next((m for m in report.models if m.id == engine.model_name), None)
        if upload is not None or other_source:
            spec, source = given_spec(upload, other_source)
        elif preset_override != "auto-detect":
            spec, source = cached_model_spec(MODEL_SOURCES[0], preset_override), f"the preset {preset_override}"
        elif model is not None:
            spec, source = resolve_spec(model, policy)
        else:
            spec, source = None, "the served model is not in /v1/models"
        st.caption(f"Model config for the estimate: {source}.")
        engine_panel(report, engine, spec, base, gpu_choice)
        if planned is not None:
            plan_section(report, engine, planned, planned_load, f"{engine.model_name}|{engine.engine}")
    engines_beyond_panels(report)


live_panel()
