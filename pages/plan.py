"""Plan: pick a model and GPUs, see what vLLM will do."""

import streamlit as st

from calculator import CalculatorError, Scenario, estimate, gpu_catalog, preset_ids
from calculator.units import gib
from pages.common import page_setup

page_setup("Plan")
presets = preset_ids()
gpus = gpu_catalog()
model = st.selectbox("Model", presets, index=presets.index("meta-llama/Llama-3.1-8B-Instruct"))
gpu = st.selectbox("GPU", [g.key for g in gpus], index=[g.key for g in gpus].index("h100-sxm-80gb"),
                   format_func=lambda key: next(g.name for g in gpus if g.key == key))
try:
    result = estimate(Scenario(model=model, gpu=gpu))
except CalculatorError as exc:
    st.error(str(exc))
    st.stop()
cols = st.columns(4)
cols[0].metric("KV cache tokens", f"{result.capacity.kv_cache_tokens:,}")
cols[1].metric("Max concurrency", f"{result.capacity.max_concurrency:.2f}x")
cols[2].metric("Weights per GPU", f"{gib(result.budget.weights_bytes):.2f} GiB")
cols[3].metric("Fits", "yes" if result.fits else "no")
if result.error:
    st.error(result.error)
