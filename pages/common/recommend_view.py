"""The Recommend page's state and outputs: its link read once into widget keys, the ranked table (each row a
link to the Plan page), the "why not" table and the cost-against-latency chart."""

from __future__ import annotations

from typing import Any

import streamlit as st

from calculator import Workload
from calculator.speed.charts import cost_latency_figure
from calculator.speed.inputs import RecommendRequest, SpeedInputs
from calculator.speed.recommend import Option, Recommendations
from calculator.units import format_ms
from calculator.url_state import RECOMMEND_WORKLOAD_FIELDS, price_list_text, read_recommend_link

from .state import apply_speed, plan_link

PREFIX = "rec"
SHOWN_ROWS = 25
RANKINGS = {"cost per hour": "by_cost_per_hour", "cost per million output tokens": "by_cost_per_million_tokens"}
LATENCIES = {"TTFT p95": "ttft_p95_ms", "inter-token latency": "tpot_ms"}


def init_from_url() -> list[str]:
    """Fill the page's widget keys from the share link, once per session; returns the link's warnings."""
    flag = f"{PREFIX}__initialised"
    if st.session_state.get(flag):
        return []
    link = read_recommend_link(st.query_params.to_dict())
    state = st.session_state
    request = link.request
    state[f"{PREFIX}_model"] = request.model
    state[f"{PREFIX}_gpus"] = list(request.gpus)
    state[f"{PREFIX}_max_gpus"] = request.max_gpus
    state[f"{PREFIX}_budget_per_hour"] = request.budget_per_hour
    state[f"{PREFIX}_vllm_version"] = request.vllm_version
    state[f"{PREFIX}_max_model_len"] = request.max_model_len
    state[f"{PREFIX}_prices"] = price_list_text(request.prices)
    for field in RECOMMEND_WORKLOAD_FIELDS:
        state[f"{PREFIX}_{field}"] = getattr(link.workload, field)
    apply_speed(PREFIX, link.speed)
    state[flag] = True
    return [f"Share link: {warning}" for warning in link.warnings]


def widget(field: str) -> Any:
    return st.session_state.get(f"{PREFIX}_{field}")


def name(option: Option) -> str:
    d = option.deployment
    parts = [d.gpu_name, f"TP {d.tensor_parallel_size}"]
    if d.pipeline_parallel_size > 1:
        parts.append(f"PP {d.pipeline_parallel_size}")
    parts.append(d.quantization or "checkpoint weights")
    parts.append(f"KV {d.kv_cache_dtype}")
    return " · ".join(parts)


def ranked_table(result: Recommendations, ranking: str, request: RecommendRequest, workload: Workload,
                 speed: SpeedInputs, show_all: bool) -> None:
    """The deployments that qualify, cheapest first; each row's last cell opens it on the Plan page."""
    options = getattr(result, RANKINGS[ranking])
    if not options:
        st.warning("No deployment meets the SLOs within the limits: see why below.", icon="🚫")
        return
    rows = ["| # | Deployment | Replicas | GPUs | $/hour | $/month | $/M output tokens | TTFT p95 | ITL | "
            "tok/s per user | |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for rank, option in enumerate(options if show_all else options[:SHOWN_ROWS], start=1):
        plan, per = option.plan, option.plan.per_replica
        scenario, plan_speed = request.plan_inputs(option, result.max_model_len, speed)
        link = plan_link(scenario, workload, plan_speed)
        rows.append(f"| {rank} | {name(option)} | {plan.replicas:,} | {plan.gpus:,} | ${plan.cost_per_hour:,.2f} | "
                    f"${plan.cost_per_month:,.0f} | ${plan.cost_per_million_output_tokens:,.3f} | "
                    f"{format_ms(per.ttft_p95_ms)} | {format_ms(per.tpot_ms)} | {per.per_user_tok_s:,.1f} | "
                    f"[Open in Plan]({link}) |")
    with st.container(key="ranked"):
        st.markdown("\n".join(rows))
    if not show_all and len(options) > SHOWN_ROWS:
        st.caption(f"The {SHOWN_ROWS} cheapest of {len(options):,}; tick \"Show every deployment\" for the rest.")


def why_not(result: Recommendations) -> None:
    """Every deployment that is out, with its reason."""
    with st.expander(f"Why not: {len(result.rejected):,} deployments ruled out", expanded=False):
        st.dataframe([{"deployment": name(o), "why not": o.reason} for o in result.rejected], hide_index=True,
                     key="rejected", width="stretch")


def chart(result: Recommendations, latency: str) -> None:
    if result.by_cost_per_hour:
        st.plotly_chart(cost_latency_figure(result, LATENCIES[latency]), key="cost_latency",
                        config={"displaylogo": False})
