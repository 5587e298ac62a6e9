"""Compare: two to four deployments side by side — one memory chart, one KPI table, one share link."""

import sys
from pathlib import Path

# NOTE: a deep link or AppTest may run this page without app.py; the repo root must still be importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamlit as st

from calculator import CalculatorError, Scenario, estimate, find_gpu, gpu_catalog, preset_ids
from calculator.charts import compare_memory_figure
from calculator.engine.kv_cache import SUPPORTED_KV_CACHE_DTYPES
from calculator.engine.vllm_versions import known_versions
from calculator.url_state import from_query_params, to_query_params
from pages.common import page_setup, sentence
from pages.common.inputs import cached_model_spec
from pages.common.outputs import CHART_CONFIG
from pages.common.state import FROM_CHECKPOINT, MODEL_SOURCES, QUANTIZATIONS, plan_link, share_link

PREFIX = "cmp"
LETTERS = "abcd"
STARTERS = (
    Scenario(model="meta-llama/Llama-3.1-70B-Instruct", gpu="h100-sxm-80gb", tensor_parallel_size=4,
             max_model_len=32768),
    Scenario(model="RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", gpu="h100-sxm-80gb", tensor_parallel_size=2,
             max_model_len=32768),
    Scenario(model="Qwen/Qwen2.5-72B-Instruct-AWQ", gpu="l40s", tensor_parallel_size=2, max_model_len=16384),
    Scenario(model="Qwen/Qwen3-32B", gpu="a100-sxm-80gb", max_model_len=32768, kv_cache_dtype="fp8"),
)
EDITABLE = ("model", "gpu", "tensor_parallel_size", "quantization", "kv_cache_dtype", "max_model_len", "vllm_version")


def read_link() -> list[str]:
    """Scenarios from ``a.m=...&b.tp=...`` parameters, once per session."""
    if st.session_state.get(f"{PREFIX}__initialised"):
        return []
    params = st.query_params.to_dict()
    count = params.get("k", "2")
    st.session_state[f"{PREFIX}_count"] = int(count) if count in ("2", "3", "4") else 2
    warnings = [] if count in ("2", "3", "4") else [f"Share link: k={count!r} is not 2-4; showing 2 scenarios"]
    for index, letter in enumerate(LETTERS):
        own = {key[2:]: value for key, value in params.items() if key.startswith(f"{letter}.")}
        scenario, _, _, problems = from_query_params(own) if own else (STARTERS[index], None, None, [])
        warnings += [f"Share link, scenario {letter.upper()}: {p}" for p in problems]
        if scenario.model not in preset_ids():
            warnings.append(f"Share link, scenario {letter.upper()}: {scenario.model} is not a bundled preset; "
                            f"showing {STARTERS[index].model}")
            scenario = scenario.replace(model=STARTERS[index].model)
        for field in EDITABLE:
            st.session_state[f"{PREFIX}_{letter}_{field}"] = getattr(scenario, field)
    st.session_state[f"{PREFIX}__initialised"] = True
    return warnings


def scenario_editor(letter: str, column) -> Scenario | str:
    key = f"{PREFIX}_{letter}"
    presets, catalog = preset_ids(), [g.key for g in gpu_catalog()]
    names = {g.key: g.name for g in gpu_catalog()}
    if st.session_state.get(f"{key}_quantization") is None:
        st.session_state[f"{key}_quantization"] = FROM_CHECKPOINT
    for field, options in (("model", presets), ("gpu", catalog), ("quantization", QUANTIZATIONS),
                           ("kv_cache_dtype", SUPPORTED_KV_CACHE_DTYPES), ("vllm_version", known_versions())):
        if st.session_state.get(f"{key}_{field}") not in options:
            st.session_state[f"{key}_{field}"] = getattr(STARTERS[LETTERS.index(letter)], field)
    with column:
        st.markdown(f"**Scenario {letter.upper()}**")
        values = {
            "model": st.selectbox("Model", presets, key=f"{key}_model"),
            "gpu": st.selectbox("GPU", catalog, key=f"{key}_gpu", format_func=lambda k: names[k]),
            "tensor_parallel_size": st.number_input("TP", 1, 1024, key=f"{key}_tensor_parallel_size"),
            "quantization": st.selectbox("Quantization", QUANTIZATIONS, key=f"{key}_quantization"),
            "kv_cache_dtype": st.selectbox("KV cache dtype", SUPPORTED_KV_CACHE_DTYPES, key=f"{key}_kv_cache_dtype"),
            "max_model_len": st.number_input("max_model_len", 1, 10_000_000, key=f"{key}_max_model_len",
                                             placeholder="config"),
            "vllm_version": st.selectbox("vLLM", known_versions(), key=f"{key}_vllm_version"),
        }
    if values["quantization"] == FROM_CHECKPOINT:
        values["quantization"] = None
    try:
        return Scenario(**values)
    except ValueError as exc:
        return str(exc).splitlines()[-1]


page_setup("Compare")
for warning in read_link():
    st.warning(warning, icon="🔗")
count = st.segmented_control("Scenarios", (2, 3, 4), key=f"{PREFIX}_count") or 2
columns = st.columns(count)
results, params = [], {"k": str(count)} if count != 2 else {}
for letter, column in zip(LETTERS[:count], columns):
    scenario = scenario_editor(letter, column)
    if isinstance(scenario, str):
        column.error(scenario)
        continue
    params.update({f"{letter}.{k}": v for k, v in to_query_params(scenario).items()})
    column.link_button("Open in Plan", plan_link(scenario))
    try:
        results.append((f"{letter.upper()}: {scenario.model.split('/')[-1]} on {scenario.tensor_parallel_size}× "
                        f"{find_gpu(scenario.gpu).name}",
                        estimate(scenario, cached_model_spec(MODEL_SOURCES[0], scenario.model))))
    except CalculatorError as exc:
        column.error(sentence(exc))

if results:
    st.plotly_chart(compare_memory_figure(results), config=CHART_CONFIG, key="compare_chart")
    rows = []
    for name, result in results:
        rows.append({"scenario": name, "fits": "yes" if result.fits else "no", "GPUs": result.num_gpus,
                     "weights GiB/GPU": round(result.budget.weights_bytes / 2**30, 2),
                     "KV cache GiB/GPU": round(result.kv_cache_bytes / 2**30, 2),
                     "KV bytes/token": int(result.layout.kv_bytes_per_token),
                     "KV tokens": result.capacity.kv_cache_tokens,
                     "max concurrency": round(result.capacity.max_concurrency, 2),
                     "largest max_model_len": result.max_fitting_model_len})
    st.dataframe(rows, hide_index=True, key="compare_table")
st.markdown("#### Share this comparison")
st.code(share_link(params), language=None)
