"""Plan: pick a model and GPUs, move the knobs, see what vLLM will do — and share the view."""

import sys
from pathlib import Path

# NOTE: a deep link or AppTest may run this page without app.py; the repo root must still be importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamlit as st

from calculator import CalculatorError, Workload, estimate, workload_capacity
from calculator.scenario import DEFAULT_MODEL
from pages.common import inputs, outputs, page_setup, sentence, state

PREFIX = "plan"

page_setup("Plan")
for warning in state.init_from_url(PREFIX):
    st.warning(warning, icon="🔗")

with st.sidebar:
    model, spec, model_error = inputs.model_section(PREFIX)
    hardware = inputs.hardware_section(PREFIX)
    parallelism = inputs.parallelism_section(PREFIX)
    vllm_settings = inputs.vllm_section(PREFIX, spec)
    workload = inputs.workload_section(PREFIX)

if spec is None:
    st.warning(f"{sentence(model_error).rstrip('.')}. Showing {DEFAULT_MODEL} instead.", icon="⚠️")
    model, spec = DEFAULT_MODEL, inputs.cached_model_spec(inputs.MODEL_SOURCES[0], DEFAULT_MODEL)
if isinstance(workload, str):
    st.warning(f"Workload: {workload}; using the default workload.", icon="⚠️")
    workload = Workload()
scenario = inputs.build_scenario(model, hardware, parallelism, vllm_settings)
if isinstance(scenario, str):
    st.error(f"Settings: {scenario}")
    st.stop()

try:
    result = estimate(scenario, spec)
except CalculatorError as exc:
    st.error(sentence(exc))
    st.stop()

capacity = workload_capacity(result, workload)
outputs.verdict(result)
outputs.kpis(result, capacity)
outputs.memory_chart(result)
outputs.how_calculated(result)
outputs.paged_vs_naive(capacity, result)
outputs.sweeps(scenario, spec, PREFIX)
outputs.plan_for_target(result, workload)
outputs.serve_round_trip(scenario, PREFIX)
sweep_view = st.session_state.get(f"{PREFIX}_view_sweep", "max_model_len")
link = state.write_url(scenario if not model.startswith("upload:") else scenario.replace(model=DEFAULT_MODEL),
                       workload, {"sweep": sweep_view} if sweep_view != "max_model_len" else {})
outputs.share_and_export(link, result)
