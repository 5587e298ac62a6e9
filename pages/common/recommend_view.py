"""The Recommend page's state and outputs: its link read once into widget keys, the ranked table (each row a
link to the Plan page), the "why not" table and the cost-against-latency chart."""

from __future__ import annotations

from typing import Any

import streamlit as st

from calculator import Workload
from calculator.speed.charts import cost_latency_figure
from calculator.speed.inputs import FEATURE_FIELDS, RecommendRequest, SpeedInputs
from calculator.gpus import find_gpu
from calculator.speed.prices import gpu_price, price_set, price_table
from calculator.speed.recommend import Option, Recommendations
from calculator.units import format_ms
from calculator.url_state import RECOMMEND_WORKLOAD_FIELDS, price_list_text, read_recommend_link

from .state import apply_speed, carried_context, plan_link

PREFIX = "rec"
SHOWN_ROWS = 25
# NOTE: a phone shows each ranked row as a card (the 11-column table is 783 px wide in a 390 px screen): every cell
# on its own line, named by its column, the deployment first.
CARD_LABELS = ("#", "", "Replicas", "GPUs", "$/hour", "$/month", "$/M output tokens", "TTFT p95", "TTFT p95 band",
               "SLO", "ITL", "tok/s per user", "")
CARDS_ON_PHONES = "<style>@media (max-width: 640px) {" + " ".join([
    ".st-key-ranked table, .st-key-ranked tbody, .st-key-ranked tr, .st-key-ranked td { display: block; "
    "width: 100% !important; }",
    ".st-key-ranked thead { display: none; }",
    ".st-key-ranked tr { border: 1px solid rgba(128,128,128,.35); border-radius: .5rem; margin: 0 0 .6rem; "
    "padding: .3rem .6rem; }",
    ".st-key-ranked td { border: none !important; padding: .1rem 0 !important; text-align: left !important; }",
    ".st-key-ranked td:nth-child(2) { font-weight: 600; }",
    *(f'.st-key-ranked td:nth-child({i})::before {{ content: "{label}: "; color: #6b7280; }}'
      for i, label in enumerate(CARD_LABELS, start=1) if label)]) + "}</style>"
RANKINGS = {"cost per hour": "by_cost_per_hour", "cost per million output tokens": "by_cost_per_million_tokens",
            "TTFT p95": "by_ttft_p95"}
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
    state[f"{PREFIX}_price_set"] = request.price_set
    state[f"{PREFIX}_bench"] = request.bench or ""
    for field in FEATURE_FIELDS:  # LoRA and speculative decoding (inputs.adapters_and_speculation's keys)
        state[f"{PREFIX}_{field}"] = getattr(request, field)
    for field in RECOMMEND_WORKLOAD_FIELDS:
        state[f"{PREFIX}_{field}"] = getattr(link.workload, field)
    apply_speed(PREFIX, link.speed)
    if (carried := carried_context()) is not None:  # opened without a link: start from the page just seen
        scenario, workload = carried
        state[f"{PREFIX}_model"] = scenario.model
        state[f"{PREFIX}_vllm_version"] = scenario.vllm_version
        state[f"{PREFIX}_max_model_len"] = scenario.max_model_len
        for field in FEATURE_FIELDS:
            state[f"{PREFIX}_{field}"] = getattr(scenario, field)
        for field in RECOMMEND_WORKLOAD_FIELDS if workload is not None else ():
            state[f"{PREFIX}_{field}"] = getattr(workload, field)
    state[flag] = True
    return [f"Share link: {warning}" for warning in link.warnings]


def widget(field: str) -> Any:
    return st.session_state.get(f"{PREFIX}_{field}")


def name(option: Option) -> str:
    d = option.deployment
    parts = [d.gpu_name, d.layout]
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
    rows = ["| # | Deployment | Replicas | GPUs | $/hour | $/month | $/M output tokens | TTFT p95 | TTFT p95 band | "
            "SLO | ITL | tok/s per user | |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|"]
    for rank, option in enumerate(options if show_all else options[:SHOWN_ROWS], start=1):
        plan, per = option.plan, option.plan.per_replica
        scenario, plan_speed = request.plan_inputs(option, result.max_model_len, speed)
        link = plan_link(scenario, workload, plan_speed)
        rows.append(f"| {rank} | {name(option)} | {plan.replicas:,} | {plan.gpus:,} | ${plan.cost_per_hour:,.2f} | "
                    f"${plan.cost_per_month:,.0f} | ${plan.cost_per_million_output_tokens:,.3f} | "
                    f"{format_ms(option.ttft_p95_ms)} | {band_cell(option)} | {slo_cell(option)} | "
                    f"{format_ms(per.tpot_ms)} | {per.per_user_tok_s:,.1f} | [Open in Plan]({link}) |")
    st.markdown(CARDS_ON_PHONES, unsafe_allow_html=True)  # NOTE: in the page (st.html sends styles elsewhere)
    with st.container(key="ranked"):
        st.markdown("\n".join(rows))
    shown = options if show_all else options[:SHOWN_ROWS]
    if notes := sorted({note for o in shown if o.bands for note in o.bands.outside}):
        st.warning("Outside the measured runs (bands marked ⚠ are widened): " + " ".join(notes), icon="📏")
    st.caption("TTFT p95 band: where 80 % of real runs of the same regime fell against the model. **at risk**: "
               "the SLO holds at the estimate but not at the band's pessimistic edge.")
    if not show_all and len(options) > SHOWN_ROWS:
        st.caption(f"The {SHOWN_ROWS} cheapest of {len(options):,}; tick \"Show every deployment\" for the rest.")
    price_sources(options if show_all else options[:SHOWN_ROWS], request)


def band_cell(option: Option) -> str:
    band = option.ttft_p95_band
    if band is None or option.bands is None:
        return "—"
    return f"{format_ms(band.low)}–{format_ms(band.high)}" + (" ⚠" if option.bands.widened else "")


def slo_cell(option: Option) -> str:
    """"met", or "at risk" with the SLOs that hold only towards the optimistic edge of their band."""
    if option.slo_status != "at risk":
        return option.slo_status or "—"
    return "**at risk**: " + "; ".join(r.replace("|", "/") for r in option.risks)


def price_sources(options: tuple[Option, ...], request: RecommendRequest) -> None:
    """Where each price in the ranking comes from, and when: they decide the order, so they are shown with it."""
    table = price_table(request.price_overrides(), request.price_set)
    gpus = dict.fromkeys(o.deployment.gpu for o in options)
    prices = {key: gpu_price(find_gpu(key), table) for key in gpus}
    estimates = sum(1 for p in prices.values() if p and "ESTIMATE" in p.source)
    origin = (price_set(request.price_set).name + ", one provider and one tier" if request.price_set
              else "from different providers and tiers")
    with st.expander(f"Prices behind this ranking: {len(prices)} GPU(s), {origin}"
                     + (f", {estimates} estimated" if estimates else ""), expanded=False):
        st.caption("The ranking follows these prices; they differ 2-5x between providers. Choose one provider's "
                   "prices under \"Price list\", or type your own in \"Your prices\", to rank with them.")
        st.markdown("\n".join(["| GPU | $ per GPU-hour | as of | source |", "|---|---:|---|---|", *(
            f"| {find_gpu(key).name} | " + (f"${p.usd_per_gpu_hour:,.2f} | {p.as_of or '—'} | "
                                             f"{p.source.replace('|', '/')} |" if p else "— | — | no price |")
            for key, p in prices.items())]))


def why_not(result: Recommendations) -> None:
    """Every deployment that is out, with its reason."""
    with st.expander(f"Why not: {len(result.rejected):,} deployments ruled out", expanded=False):
        st.dataframe([{"deployment": name(o), "why not": o.reason} for o in result.rejected], hide_index=True,
                     key="rejected", width="stretch")


def chart(result: Recommendations, latency: str) -> None:
    if result.by_cost_per_hour:
        st.plotly_chart(cost_latency_figure(result, LATENCIES[latency]), key="cost_latency",
                        config={"displaylogo": False})
