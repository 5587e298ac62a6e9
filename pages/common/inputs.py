"""The Plan page's inputs, grouped like a table of contents: model, hardware, parallelism, vLLM, workload."""

from __future__ import annotations

import os

import streamlit as st

from calculator import CalculatorError, ModelSpec, Scenario, Workload, gpu_catalog, preset_ids
from calculator.engine.kv_cache import SUPPORTED_KV_CACHE_DTYPES
from calculator.engine.vllm_versions import known_versions, provenance_summary, rules_for, version_provenance
from calculator.model.model_source import hub_model_spec, load_model_spec, model_spec_from_text
from calculator.scenario import DEFAULT_MODEL

from .state import CUSTOM_GPU, DTYPES, FROM_CHECKPOINT, MODEL_SOURCES, QUANTIZATIONS


@st.cache_data(ttl="1h", max_entries=256, show_spinner="Reading the model's config.json")
def cached_model_spec(source: str, model: str, _token: str | None = None) -> ModelSpec:
    """Presets and files offline; Hub ids through huggingface_hub (the token is not part of the cache key)."""
    if source == MODEL_SOURCES[0]:
        return load_model_spec(model)
    return hub_model_spec(model, token=_token or os.environ.get("HF_TOKEN") or None)


def model_section(prefix: str) -> tuple[str, ModelSpec | None, str | None]:
    """Model picker; returns (model id, spec or None, error message or None)."""
    st.subheader("Model")
    source = st.radio("Source", MODEL_SOURCES, key=f"{prefix}_source", horizontal=True, label_visibility="collapsed")
    try:
        if source == MODEL_SOURCES[0]:
            presets = preset_ids()
            st.session_state.setdefault(f"{prefix}_preset", DEFAULT_MODEL)
            model = st.selectbox("Preset (type to search)", presets, key=f"{prefix}_preset")
            return model, cached_model_spec(source, model), None
        if source == MODEL_SOURCES[1]:
            model = st.text_input("Hugging Face model id", key=f"{prefix}_hub_id", placeholder="org/name").strip()
            token = st.text_input("Hugging Face token (optional, kept only in this browser session)",
                                  type="password", key=f"{prefix}_hf_token")
            if not model:
                return DEFAULT_MODEL, None, "Type a Hugging Face model id, e.g. Qwen/Qwen3-8B."
            return model, cached_model_spec(source, model, _token=token or None), None
        upload = st.file_uploader("config.json", type=["json"], key=f"{prefix}_upload")
        if upload is None:
            return DEFAULT_MODEL, None, "Upload a model's config.json."
        name = f"upload:{upload.name}"
        return name, model_spec_from_text(upload.getvalue().decode("utf-8", errors="replace"), name), None
    except CalculatorError as exc:
        return DEFAULT_MODEL, None, str(exc)


def hardware_section(prefix: str) -> dict[str, object]:
    st.subheader("Hardware")
    catalog = {g.key: g for g in gpu_catalog()}
    st.session_state.setdefault(f"{prefix}_gpu", "h100-sxm-80gb")
    if st.session_state[f"{prefix}_gpu"] not in (*catalog, CUSTOM_GPU):
        st.session_state[f"{prefix}_gpu"] = "h100-sxm-80gb"
    gpu = st.selectbox("GPU (type to search)", (*catalog, CUSTOM_GPU), key=f"{prefix}_gpu",
                       format_func=lambda k: "Custom memory…" if k == CUSTOM_GPU else
                       f"{catalog[k].name} — {catalog[k].memory_gib:.2f} GiB")
    memory = None
    if gpu == CUSTOM_GPU:
        st.session_state.setdefault(f"{prefix}_gpu_memory_gib", 80.0)
        memory = st.number_input("GPU memory as the driver reports it (GiB)", min_value=1.0, max_value=4096.0,
                                 step=1.0, key=f"{prefix}_gpu_memory_gib")
    other = st.number_input("Memory already used on each GPU by other processes (GiB)", min_value=0.0,
                            max_value=4096.0, step=0.5, key=f"{prefix}_other_processes_memory_gib")
    return {"gpu": None if gpu == CUSTOM_GPU else gpu, "gpu_memory_gib": memory, "other_processes_memory_gib": other}


def parallelism_section(prefix: str) -> dict[str, object]:
    st.subheader("Parallelism")
    left, right = st.columns(2)
    tp = left.number_input("Tensor parallel", min_value=1, max_value=1024, key=f"{prefix}_tensor_parallel_size")
    pp = right.number_input("Pipeline parallel", min_value=1, max_value=1024, key=f"{prefix}_pipeline_parallel_size")
    st.caption(f"{tp * pp} GPU(s) per replica")
    return {"tensor_parallel_size": tp, "pipeline_parallel_size": pp}


def vllm_section(prefix: str, spec: ModelSpec | None) -> dict[str, object]:
    st.subheader("vLLM settings")
    versions = list(known_versions())
    if st.session_state.get(f"{prefix}_vllm_version") not in versions:
        versions.insert(0, st.session_state[f"{prefix}_vllm_version"])  # a valid version from a link or import
    version = st.selectbox("vLLM version", versions, key=f"{prefix}_vllm_version", help=provenance_summary())
    st.caption(version_provenance(version))
    use_default = st.checkbox("Default gpu_memory_utilization", key=f"{prefix}_util_default")
    default_util = 1.0 if rules_for(version).memory_formula == "v1_extensible" else \
        rules_for(version).default_gpu_memory_utilization
    st.session_state.setdefault(f"{prefix}_util", default_util)
    util = st.slider("gpu_memory_utilization", 0.30, 1.0, step=0.01, key=f"{prefix}_util", disabled=use_default,
                     help=f"vLLM {version} default: {default_util}")
    context = spec.derived_max_model_len if spec else None
    max_len = st.number_input("max_model_len (empty: the config's)", min_value=1, max_value=10_000_000, step=1024,
                              key=f"{prefix}_max_model_len", placeholder=f"{context:,}" if context else "config")
    left, right = st.columns(2)
    seqs = left.number_input("max_num_seqs", min_value=1, max_value=100_000, key=f"{prefix}_max_num_seqs",
                             placeholder="default")
    batched = right.number_input("max_num_batched_tokens", min_value=1, max_value=10_000_000, step=1024,
                                 key=f"{prefix}_max_num_batched_tokens", placeholder="default")
    left, right = st.columns(2)
    block = left.number_input("block_size", min_value=1, max_value=4096, key=f"{prefix}_block_size",
                              placeholder="default")
    dtype = right.selectbox("dtype", DTYPES, key=f"{prefix}_dtype")
    left, right = st.columns(2)
    quantization = left.selectbox("quantization", QUANTIZATIONS, key=f"{prefix}_quantization")
    kv_dtype = right.selectbox("kv_cache_dtype", SUPPORTED_KV_CACHE_DTYPES, key=f"{prefix}_kv_cache_dtype")
    eager = st.checkbox("enforce-eager (no CUDA graphs)", key=f"{prefix}_enforce_eager")
    return {"vllm_version": version, "gpu_memory_utilization": None if use_default else util,
            "max_model_len": max_len, "max_num_seqs": seqs, "max_num_batched_tokens": batched, "block_size": block,
            "dtype": dtype, "quantization": None if quantization == FROM_CHECKPOINT else quantization, "kv_cache_dtype": kv_dtype, "enforce_eager": eager}


def workload_section(prefix: str) -> Workload | str:
    """Workload inputs; returns a Workload or the reason it is invalid."""
    st.subheader("Workload")
    left, right = st.columns(2)
    values = {
        "prompt_tokens_mean": left.number_input("Prompt tokens (mean)", 1, 10_000_000, key=f"{prefix}_prompt_tokens_mean"),
        "prompt_tokens_p95": right.number_input("Prompt tokens (p95)", 1, 10_000_000, key=f"{prefix}_prompt_tokens_p95",
                                                placeholder="= mean"),
        "output_tokens_mean": left.number_input("Output tokens (mean)", 0, 10_000_000, key=f"{prefix}_output_tokens_mean"),
        "output_tokens_p95": right.number_input("Output tokens (p95)", 0, 10_000_000, key=f"{prefix}_output_tokens_p95",
                                                placeholder="= mean"),
        "shared_prefix_tokens": left.number_input("Shared prefix tokens", 0, 10_000_000,
                                                  key=f"{prefix}_shared_prefix_tokens"),
        "parallel_samples": right.number_input("Parallel samples n", 1, 1024, key=f"{prefix}_parallel_samples"),
        "target_concurrent_requests": st.number_input("Target concurrent requests", 1, 10_000_000,
                                                      key=f"{prefix}_target_concurrent_requests"),
    }
    try:
        return Workload(**values)
    except ValueError as exc:
        return str(exc).splitlines()[-1] if str(exc) else "invalid workload"


def build_scenario(model: str, *parts: dict[str, object]) -> Scenario | str:
    """A Scenario from the sections' values, or the validation message."""
    fields: dict[str, object] = {"model": model}
    for part in parts:
        fields.update(part)
    try:
        return Scenario(**fields)
    except ValueError as exc:
        return str(exc).splitlines()[-1]
