"""Live: attach to a running vLLM server and overlay reality on the estimate."""

import sys
from pathlib import Path

# NOTE: a deep link or AppTest may run this page without app.py; the repo root must still be importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamlit as st

from calculator import CalculatorError, Scenario, gpu_catalog, load_model_spec, model_spec_from_text, preset_ids
from calculator.observe.live_client import LiveClient, default_server_url
from calculator.scenario import DEFAULT_GPU
from pages.common import page_setup, sentence
from pages.common.inputs import MODEL_SOURCES, cached_model_spec
from pages.common.live_view import engine_panel, resolve_spec, server_panel

INTERVALS = {"off": None, "2 s": 2, "5 s": 5, "10 s": 10, "30 s": 30}
CPU = "cpu"

page_setup("Live server")
with st.sidebar:
    st.subheader("Server")
    st.session_state.setdefault("live_url", default_server_url())
    url = st.text_input("Base URL", key="live_url")
    api_key = st.text_input("API key (kept only in this browser session)", type="password", key="live_api_key")
    interval = INTERVALS[st.selectbox("Refresh every", list(INTERVALS), index=2, key="live_interval")]
    st.subheader("For the estimate")
    gpus = {g.key: g.name for g in gpu_catalog()}
    gpu = st.selectbox("GPU the server runs on", [*gpus, CPU], index=list(gpus).index(DEFAULT_GPU), key="live_gpu",
                       format_func=lambda k: "CPU (vLLM CPU build)" if k == CPU else gpus[k])
    preset_override = st.selectbox("Model config", ["auto-detect", *preset_ids()], key="live_model")
    other_source = st.text_input("…or a Hugging Face id or local model folder", key="live_model_id").strip()
    upload = st.file_uploader("…or its config.json", type=["json"], key="live_config_upload")
    dtype = st.selectbox("dtype the server runs", ["auto", "bfloat16", "float16", "float32"], key="live_dtype")
    tp = st.number_input("Tensor parallel", 1, 1024, 1, key="live_tp")
base = Scenario(gpu=None if gpu == CPU else gpu, device=CPU if gpu == CPU else None, dtype=dtype,
                tensor_parallel_size=tp)


def given_spec(upload, model_id: str):
    """The config the user gives: an upload, a local folder, or a Hub id (through huggingface_hub)."""
    try:
        if upload is not None:
            return model_spec_from_text(upload.getvalue().decode("utf-8", "replace"), upload.name), upload.name
        if Path(model_id).expanduser().exists():
            return load_model_spec(model_id), model_id
        return cached_model_spec(MODEL_SOURCES[1], model_id), f"{model_id} from the Hugging Face Hub"
    except CalculatorError as exc:
        st.warning(sentence(exc))
        return None, "the given config could not be read"


@st.fragment(run_every=interval)
def live_panel() -> None:
    try:
        with LiveClient(url, api_key or None) as client:
            report = client.read()
    except CalculatorError as exc:
        st.error(sentence(exc), icon="🔌")
        return
    server_panel(report)
    if not report.metrics.engines:
        st.info("The server exposes no engine metrics yet.")
    for engine in report.metrics.engines:
        model = next((m for m in report.models if m.id == engine.model_name), None)
        if upload is not None or other_source:
            spec, source = given_spec(upload, other_source)
        elif preset_override != "auto-detect":
            spec, source = cached_model_spec(MODEL_SOURCES[0], preset_override), f"the preset {preset_override}"
        elif model is not None:
            spec, source = resolve_spec(model)
        else:
            spec, source = None, "the served model is not in /v1/models"
        st.caption(f"Model config for the estimate: {source}.")
        engine_panel(report, engine, spec, base)


live_panel()
