"""Recommend: every GPU × TP × quantization × KV dtype that serves this traffic within the SLOs, cheapest first;
why the others are out; cost against latency; each row opens on the Plan page."""

import sys
from pathlib import Path

# NOTE: a deep link or AppTest may run this page without app.py; the repo root must still be importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamlit as st
from pydantic import ValidationError

from calculator import CalculatorError, Scenario, Workload, gpu_catalog, preset_ids
from calculator.engine.vllm_versions import known_versions
from calculator.speed.inputs import RecommendRequest, SpeedInputs
from calculator.speed.prices import price_sets
from calculator.speed.recommend import MAX_BENCH_PROMPTS, Recommendations
from calculator.units import plural
from calculator.url_state import parse_price_list, recommend_query_params
from pages.common import first_error, page_setup, recommend_view, sentence, speed_view
from pages.common.inputs import adapters_and_speculation, cached_model_spec, hf_overrides_setting
from pages.common.state import CONTEXT, LOADS, MODEL_SOURCES, remember, share_link

P = recommend_view.PREFIX
GPUS = {gpu.key: gpu.name for gpu in gpu_catalog() if gpu.memory_bandwidth_gb_s}


@st.cache_data(max_entries=32, show_spinner="Planning every deployment")
def recommendations(request_json: str, workload_json: str, speed_json: str) -> Recommendations | str:
    request = RecommendRequest.model_validate_json(request_json)
    source = MODEL_SOURCES[0] if request.model in preset_ids() else MODEL_SOURCES[1]
    try:
        spec = cached_model_spec(source, request.model)
        return request.run(spec, Workload.model_validate_json(workload_json),
                           SpeedInputs.model_validate_json(speed_json))
    except CalculatorError as exc:
        return sentence(exc)


def remember_recommend(request: RecommendRequest, workload: Workload) -> None:
    """The model, length and workload asked for here, on the deployment last seen elsewhere, for the next page."""
    seen = st.session_state.get(CONTEXT, (Scenario(),))[0]
    try:
        remember(seen.replace(model=request.model, vllm_version=request.vllm_version or seen.vllm_version,
                              max_model_len=request.max_model_len), workload)
    except (ValidationError, CalculatorError):
        pass  # NOTE: a model or length no Scenario takes: the next page starts from what was seen before


def number(label: str, field: str, column=st, **kwargs):
    return column.number_input(label, key=f"{P}_{field}", **kwargs)


page_setup("Recommend")
link_warnings = recommend_view.init_from_url()
for warning in link_warnings:
    st.warning(warning, icon="🔗")
st.caption("Every GPU of the catalog × tensor parallel 1-8 (pipeline stages where TP 8 cannot hold the weights) × "
           "weight quantization × KV-cache dtype, planned for your traffic and SLOs by the speed model.")

with st.sidebar:
    st.subheader("Model")
    models = list(preset_ids())
    if recommend_view.widget("model") not in models:
        models.insert(0, recommend_view.widget("model"))
    model = st.selectbox("Model (a preset, or type a Hugging Face id)", models, key=f"{P}_model",
                         accept_new_options=True)
    st.subheader("Requests")
    left, right = st.columns(2)
    lengths = {
        "prompt_tokens_mean": number("Prompt tokens (mean)", "prompt_tokens_mean", left, min_value=1),
        "prompt_tokens_p95": number("Prompt tokens (p95)", "prompt_tokens_p95", right, min_value=1,
                                    placeholder="= mean"),
        "output_tokens_mean": number("Output tokens (mean)", "output_tokens_mean", left, min_value=1),
        "output_tokens_p95": number("Output tokens (p95)", "output_tokens_p95", right, min_value=1,
                                    placeholder="= mean"),
    }
    load, request_rate = speed_view.load_input(P)
    if load == LOADS[0]:
        lengths["target_concurrent_requests"] = number("Concurrent users", "target_concurrent_requests", min_value=1)
    bench_line = st.text_area(
        "Benchmark load (optional): a `vllm bench serve` line", key=f"{P}_bench", height=80,
        placeholder="vllm bench serve --dataset-name random --random-input-len 1024 --random-output-len 256 "
                    "--max-concurrency 32 --num-prompts 320",
        help="TTFT p95 is then judged and ranked on this run, simulated step by step on one replica of each "
             f"deployment (its first {MAX_BENCH_PROMPTS} prompts), instead of on the steady load above.")
    st.subheader("SLOs")
    speed_values = {"request_rate": request_rate, **speed_view.slo_inputs(P)}
    st.subheader("GPUs and budget")
    gpus = st.multiselect("GPUs (none: the whole catalog)", list(GPUS), format_func=GPUS.get, key=f"{P}_gpus")
    left, right = st.columns(2)
    max_gpus = number("Max GPUs", "max_gpus", left, value=None, min_value=1, placeholder="no limit")
    budget = number("Budget ($/hour)", "budget_per_hour", right, value=None, placeholder="no limit", format="%g",
                    step=10.0)
    price_list = st.selectbox(
        "Price list", [None, *price_sets()], key=f"{P}_price_set",
        format_func=lambda key: price_sets()[key].name if key else "Each GPU's own source (mixed)",
        help="The mixed list takes each GPU's best-known price, from several providers and tiers, so price sources "
             "can decide the ranking. One provider's list prices every GPU it rents the same way (GPUs it does not "
             "rent are not ranked unless you price them).")
    prices_text = st.text_input("Your prices ($ per GPU-hour)", key=f"{P}_prices", placeholder="h100:2.5,l40s:0.9",
                                help="gpu:dollars pairs, comma-separated; the others come from the price list.")
    versions = list(known_versions())
    version = st.selectbox("vLLM version", versions, key=f"{P}_vllm_version") if (
        recommend_view.widget("vllm_version") in versions) else recommend_view.widget("vllm_version")
    max_model_len = number("max_model_len", "max_model_len", value=None, min_value=1,
                           placeholder="longest request, to a power of two")
    features = {**adapters_and_speculation(P), "hf_overrides": hf_overrides_setting(P)}

price_warnings: list[str] = []
prices = parse_price_list(prices_text or "", price_warnings)
for warning in price_warnings:
    st.warning(warning, icon="💲")
if load == LOADS[1] and speed_values["request_rate"] is None:
    st.error("**Request rate: give the requests per second (or choose concurrent users).**", icon="✋")
    st.stop()
try:
    workload = Workload(**{k: v for k, v in lengths.items() if v is not None or k.endswith("_p95")})
    speed = SpeedInputs(**speed_values)
    request = RecommendRequest(model=model or "", gpus=tuple(gpus), max_gpus=max_gpus, budget_per_hour=budget,
                               vllm_version=version, max_model_len=max_model_len, prices=prices,
                               price_set=price_list, bench=bench_line or None, **features)
except ValidationError as exc:
    st.error(f"**{sentence(first_error(exc))}.** Change the highlighted input.", icon="✋")
    st.stop()

share_link(recommend_query_params(request, workload, speed))
remember_recommend(request, workload)
result = recommendations(request.model_dump_json(), workload.model_dump_json(), speed.model_dump_json())
if isinstance(result, str):
    st.error(f"**{result.rstrip('.')}.**", icon="✋")
    st.stop()

found = len(result.by_cost_per_hour)
load_words = (plural(workload.target_concurrent_requests, "concurrent user") if speed.request_rate is None
              else f"{speed.request_rate:g} requests/s")
st.markdown(f"**{found:,} deployments** of {request.model} serve {load_words} within the SLOs "
            f"({len(result.rejected):,} ruled out); each planned with max_model_len {result.max_model_len:,}.")
st.caption(f"TTFT p95 and its band assume {result.ttft_load}.")
left, middle, right = st.columns([2, 2, 1])
ranking = left.radio("Rank by", list(recommend_view.RANKINGS), key=f"{P}_view_rank", horizontal=True)
latency = middle.radio("Chart latency", list(recommend_view.LATENCIES), key=f"{P}_view_latency", horizontal=True)
show_all = right.checkbox("Show every deployment", key=f"{P}_view_all")
recommend_view.chart(result, latency)
recommend_view.ranked_table(result, ranking, request, workload, speed, show_all)
recommend_view.why_not(result)
