"""Streamlit pieces of the Fleet page: the sidebar sections and one panel per group of replicas."""

from __future__ import annotations

import time

import streamlit as st

from calculator import CalculatorError, ModelSpec, Scenario, Workload, estimate, gpu_catalog, preset_ids
from calculator.charts import live_history_figure
from calculator.engine.kv_cache import SUPPORTED_KV_CACHE_DTYPES
from calculator.engine.vllm_versions import LATEST_VERSION, known_versions
from calculator.observe.fleet import (
    FleetPlan,
    Replica,
    ReplicaGroup,
    flags,
    fleet_plan,
    gpu_change,
    observed_workload,
    replica_scenario,
    requests_that_fit,
    what_if,
)
from calculator.observe.fleet_client import FleetReading, default_prometheus_url
from calculator.observe.live_client import ServerModel
from calculator.observe.fleet_latency import QUANTILES, latency_of
from calculator.observe.latency import LATENCY_HISTOGRAMS
from calculator.url_state import to_query_params

from . import sentence
from .inputs import cached_model_spec
from .live_view import access_policy, resolve_spec
from .outputs import CHART_CONFIG
from .state import DTYPES, MODEL_SOURCES, QUANTIZATIONS, link_to, plan_link

GROUP_PANELS = 8  # groups drawn in full (each runs estimates and charts); the rest are named
ESTIMATED_REPLICAS = 50  # replicas per group whose blocks are checked against the estimate
NOTES_SHOWN = 10  # flags and value warnings per group
TABLE_ROWS = 500
RANGES_S = {"5 min": 300, "15 min": 900, "1 h": 3600, "6 h": 6 * 3600, "24 h": 86400, "7 days": 7 * 86400}
# NOTE: each refresh runs a handful of range queries; Prometheus' own scrape interval is rarely under 15 s.
REFRESH_EVERY_S = {"off": None, "30 s": 30, "1 min": 60, "5 min": 300}
AUTH = ("none", "bearer token", "user and password")
CPU = "cpu"
SAME = "same"


def connection_section() -> tuple[str, dict[str, object], str]:
    """Prometheus address, credentials (only in this session's state, sent only as a header) and a filter."""
    st.subheader("Prometheus")
    st.session_state.setdefault("fleet_url", default_prometheus_url())
    url = st.text_input("Base URL", key="fleet_url", help="e.g. http://prometheus:9090 (a path prefix is fine)")
    auth = st.radio("Authentication", AUTH, key="fleet_auth", horizontal=True)
    credentials: dict[str, object] = {}
    if auth == AUTH[1]:
        token = st.text_input("Bearer token (kept only in this browser session)", type="password", key="fleet_token")
        credentials = {"bearer_token": token or None}
    elif auth == AUTH[2]:
        user = st.text_input("User", key="fleet_user")
        password = st.text_input("Password (kept only in this browser session)", type="password",
                                 key="fleet_password")
        credentials = {"basic_auth": (user, password)} if user else {}
    filters = st.text_input("Only series with", key="fleet_filter", placeholder='namespace="prod", job=~"vllm.*"',
                            help="Label matchers, comma-separated: label=value, !=, =~ regex, !~ regex")
    return url, credentials, filters


def range_section() -> tuple[float | None, float, int | None]:
    """(frozen end or None, duration, auto-refresh seconds or None); while "Freeze" is ticked the end stays put,
    so refreshes compare like with like."""
    label = st.selectbox("Time range", list(RANGES_S), index=1, key="fleet_range")
    if st.checkbox("Freeze the end of the range", key="fleet_freeze"):
        st.session_state.setdefault("fleet_end_s", time.time())
        st.caption(f"Ends at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(st.session_state['fleet_end_s']))}")
    else:
        st.session_state.pop("fleet_end_s", None)
    left, right = st.columns([2, 1], vertical_alignment="bottom")
    refresh = REFRESH_EVERY_S[left.selectbox("Refresh every", list(REFRESH_EVERY_S), key="fleet_refresh_every")]
    right.button("Refresh", key="fleet_refresh")
    return st.session_state.get("fleet_end_s"), float(RANGES_S[label]), refresh


def estimate_section() -> Scenario:
    """What the replicas run on (Prometheus does not say), for the estimate and the what-ifs."""
    st.subheader("For the estimate")
    gpus = {g.key: g.name for g in gpu_catalog()}
    st.session_state.setdefault("fleet_gpu", "h100-sxm-80gb")
    gpu = st.selectbox("GPU the replicas run on", [*gpus, CPU], key="fleet_gpu",
                       format_func=lambda k: "CPU (vLLM CPU build)" if k == CPU else gpus[k])
    dtype = st.selectbox("dtype they run", DTYPES, key="fleet_dtype")
    tp = st.number_input("Tensor parallel", 1, 1024, 1, key="fleet_tp")
    version = st.selectbox("vLLM version", known_versions(), index=known_versions().index(LATEST_VERSION),
                           key="fleet_vllm_version")
    return Scenario(gpu=None if gpu == CPU else gpu, device=CPU if gpu == CPU else None, dtype=dtype,
                    tensor_parallel_size=tp, vllm_version=version)


def plan_section() -> tuple[int | None, int, list[tuple[str, dict[str, object]]]]:
    """Target (None: the observed peak), headroom, and the what-if changes to ask the engine about."""
    st.subheader("Capacity plan")
    target = st.number_input("Target concurrent requests (empty: the observed peak)", min_value=1,
                             max_value=10_000_000, value=None, key="fleet_target")
    headroom = st.number_input("Headroom %", min_value=0, max_value=1000, value=20, key="fleet_headroom")
    st.subheader("What if")
    gpus = {g.key: g.name for g in gpu_catalog()}
    gpu = st.selectbox("GPU", [SAME, *gpus], key="fleet_whatif_gpu", format_func=lambda k: gpus.get(k, k))
    quantization = st.selectbox("quantization", [SAME, *QUANTIZATIONS[1:]], key="fleet_whatif_quantization")
    kv_dtype = st.selectbox("kv_cache_dtype", [SAME, *SUPPORTED_KV_CACHE_DTYPES], key="fleet_whatif_kv_cache_dtype")
    max_len = st.number_input("max_model_len (empty: the same)", min_value=1, max_value=10_000_000, value=None,
                              key="fleet_whatif_max_model_len")
    changes: list[tuple[str, dict[str, object]]] = []
    if gpu != SAME:
        changes.append((f"on {gpus[gpu]}", gpu_change(gpu)))
    if quantization != SAME:
        changes.append((f"quantization {quantization}", {"quantization": quantization}))
    if kv_dtype != SAME:
        changes.append((f"kv_cache_dtype {kv_dtype}", {"kv_cache_dtype": kv_dtype}))
    if max_len:
        changes.append((f"max_model_len {max_len:,}", {"max_model_len": int(max_len)}))
    if len(changes) > 1:
        changes.append(("all of these", {k: v for _, change in changes for k, v in change.items()}))
    return int(target) if target else None, int(headroom), changes


def fleet_summary(reading: FleetReading, replicas: list[Replica], groups: list[ReplicaGroup], seen: int) -> None:
    cols = st.columns(5)
    cols[0].metric("Replicas now", f"{len(replicas):,}", help=f"{seen:,} engine series seen within the range")
    cols[1].metric("Served models", f"{len({r.now.model_name for r in replicas}):,}")
    cols[2].metric("Running now", f"{sum(r.now.running or 0 for r in replicas):,.0f}")
    cols[3].metric("Waiting now", f"{sum(r.now.waiting or 0 for r in replicas):,.0f}")
    cols[4].metric("Read in", f"{reading.elapsed_s * 1e3:,.0f} ms", help=f"step {reading.time_range.step_s} s")
    for warning in reading.warnings:
        st.warning(f"Prometheus: {warning}")


def model_specs(models: list[str]) -> dict[str, ModelSpec | None]:
    """Each served model's config (Prometheus only knows its name): what the user gives, else a bundled preset or
    local folder matching the name."""
    specs = {}
    with st.expander("Model configs (for the estimate and the what-ifs)"):
        for model in models:
            given = st.text_input(f"Config for {model}: preset, Hugging Face id or local folder",
                                  key=f"fleet_model__{model}").strip()
            spec, source = resolve_spec(ServerModel(id=model)) if not given else _given_spec(given)
            if spec is None and not given:
                source = "no bundled preset or local folder matches the served model name; give its config here"
            st.caption(f"{model}: {source}.")
            specs[model] = spec
    return specs


def _given_spec(given: str) -> tuple[ModelSpec | None, str]:
    try:
        if given in preset_ids():
            return cached_model_spec(MODEL_SOURCES[0], given), given
        if (folder := access_policy().local_folder(given)) is not None:  # where this deployment reads folders
            return cached_model_spec(MODEL_SOURCES[0], str(folder)), given
        return cached_model_spec(MODEL_SOURCES[1], given), f"{given} from the Hugging Face Hub"
    except CalculatorError as exc:
        return None, str(exc)


def replica_rows(group: ReplicaGroup, workload: Workload | None, labels: list[str]) -> list[dict[str, object]]:
    rows = []
    for r in group.replicas:
        now, config = r.now, r.now.cache_config or {}
        fits = requests_that_fit(r, workload) if workload else None
        rows.append({
            "replica": r.name, **{label: r.labels.get(label, "") for label in labels},
            "num_gpu_blocks": r.now.config_int("num_gpu_blocks"), "block_size": r.now.config_int("block_size"),
            "KV tokens": r.now.config_int("kv_cache_size_tokens"),
            "max concurrency (vLLM)": r.now.config_float("kv_cache_max_concurrency"),
            "cache_dtype": config.get("cache_dtype"),
            "KV usage %": None if now.kv_cache_usage is None else now.kv_cache_usage * 100,
            "running": now.running, "waiting": now.waiting, "peak running": r.peak_running,
            "peak waiting": r.peak_waiting,
            "peak KV usage %": None if r.peak_usage is None else r.peak_usage * 100,
            "preemptions": r.increases["preemptions_total"],
            "preemptions/min": None if (rate := r.per_second("preemptions_total")) is None else rate * 60,
            "prefix hit rate %": None if r.prefix_cache_hit_rate is None else r.prefix_cache_hit_rate * 100,
            "prompt tokens": r.increases["prompt_tokens_total"],
            "generation tokens": r.increases["generation_tokens_total"],
            "prompt tok/s": r.per_second("prompt_tokens_total"),
            "generation tok/s": r.per_second("generation_tokens_total"),
            "p95 requests that fit": fits,
        })
    return rows


def group_panel(group: ReplicaGroup, spec: ModelSpec | None, base: Scenario, target: int | None, headroom: int,
                changes: list[tuple[str, dict[str, object]]], labels: list[str]) -> None:
    """One group: its replicas, flags, load over time, the plan and the what-ifs."""
    st.subheader(group.title)
    estimated: dict[str, int] = {}
    for replica in group.replicas[:ESTIMATED_REPLICAS] if spec else ():
        try:
            result = estimate(replica_scenario(replica, base.replace(model=spec.model_id)), spec)
            estimated[replica.name] = result.capacity.num_gpu_blocks
        except CalculatorError as exc:
            st.caption(f"Estimate for {replica.name}: {exc}")
    try:
        workload, unusable = observed_workload(group.replicas), None
    except CalculatorError as exc:
        workload, unusable = None, sentence(exc)
    rows = replica_rows(group, workload, labels)
    st.dataframe(rows[:TABLE_ROWS], hide_index=True, key=f"replicas_{group.title}")
    if len(rows) > TABLE_ROWS:
        st.caption(f"{len(rows) - TABLE_ROWS:,} more replicas not listed (the table shows {TABLE_ROWS:,}).")
    notes = [(flag.kind, flag.message) for replica in group.replicas
             for flag in flags(replica, estimated.get(replica.name))]
    notes += [("value", f"{replica.name}: {anomaly}") for replica in group.replicas for anomaly in replica.now.anomalies]
    for kind, message in notes[:NOTES_SHOWN]:
        (st.info if kind == "idle" else st.warning)(message, icon="💤" if kind == "idle" else "⚠️")
    if len(notes) > NOTES_SHOWN:
        st.caption(f"{len(notes) - NOTES_SHOWN:,} more notes about these replicas not shown.")
    if spec and len(group.replicas) > ESTIMATED_REPLICAS:
        st.caption(f"Blocks checked against the estimate for the first {ESTIMATED_REPLICAS} replicas only.")
    if group.times:
        st.plotly_chart(live_history_figure(group.times, group.used_tokens, group.kv_cache_tokens, group.running,
                                            group.waiting), config=CHART_CONFIG, key=f"load_{group.title}")
    if workload is None:
        if unusable:
            st.warning(unusable, icon="⚠️")
        else:
            st.info("No request finished within the range: there are no lengths to plan with.")
        return
    plan = fleet_plan(group, workload, target, headroom)
    plan_panel(plan, group)
    if spec is not None:
        what_if_panel(group, plan, spec, base, changes)


def plan_panel(plan: FleetPlan, group: ReplicaGroup) -> None:
    w = plan.workload
    st.markdown(f"#### Capacity plan\nRequests seen in the range: prompts {w.prompt_tokens_mean:,} tokens on "
                f"average (p95 {w.prompt_tokens_p95:,}), outputs {w.output_tokens_mean:,} (p95 "
                f"{w.output_tokens_p95:,}), shared prefix ≈ {w.shared_prefix_tokens:,} tokens.")
    cols = st.columns(4)
    cols[0].metric("Target concurrent requests", f"{plan.target_concurrent_requests:,}",
                   help="the observed peak of running + waiting" if group.peak_demand else None)
    cols[1].metric(f"With {plan.headroom_percent} % headroom", f"{plan.required_concurrent_requests:,}")
    cols[2].metric("The replicas hold now (p95 requests)", f"{plan.fleet_concurrent_requests:,}")
    needed = plan.replicas_needed
    cols[3].metric("Replicas needed", "–" if needed is None else f"{needed:,}",
                   delta=None if needed is None else f"{needed - plan.replicas_now:+,} vs {plan.replicas_now} now",
                   delta_color="inverse")
    with st.expander("How this is calculated"):
        st.markdown(
            "- Each replica holds `(usable blocks − shared prefix blocks) // blocks per p95 request` requests, from "
            "its real pool (vllm:cache_config_info): "
            + ", ".join(f"{k}: **{v}**" for k, v in plan.per_replica.items())
            + f".\n- Required: ⌈{plan.target_concurrent_requests} × (100 + {plan.headroom_percent}) / 100⌉ = "
            f"**{plan.required_concurrent_requests}** concurrent requests.\n- Replicas like these (on average "
            f"{plan.fleet_concurrent_requests / max(1, len(plan.per_replica)):.2f} requests each): "
            f"⌈{plan.required_concurrent_requests} × {len(plan.per_replica)} / {plan.fleet_concurrent_requests}⌉ = "
            f"**{'–' if needed is None else needed}**.")


def what_if_panel(group: ReplicaGroup, plan: FleetPlan, spec: ModelSpec, base: Scenario,
                  changes: list[tuple[str, dict[str, object]]]) -> None:
    """The engine's answer for the group's first replica's settings, changed as the sidebar asks."""
    first = group.replicas[0]
    deployed = replica_scenario(first, base.replace(model=spec.model_id))
    options = [what_if(deployed, spec, plan.workload, plan.required_concurrent_requests, description, change)
               for description, change in [("as deployed, KV cache sized from memory", {}), *changes]]
    # NOTE: the Plan page plans for its workload's target, so the link carries the target with headroom.
    workload = plan.workload.model_copy(update={"target_concurrent_requests": plan.required_concurrent_requests})
    st.markdown(f"#### What if\nThe engine's estimate for {first.name}'s settings; choose changes in the sidebar.")
    st.dataframe([{"deployment": o.description, "p95 requests per replica": o.concurrency_per_replica or None,
                   "GPUs per replica": o.gpus_per_replica or None, "replicas": o.replicas, "GPUs": o.total_gpus,
                   "note": o.error or "; ".join(o.notes) or None,
                   "Plan page": None if o.error else plan_link_with(o.scenario, workload)} for o in options],
                 hide_index=True, key=f"whatif_{group.title}",
                 column_config={"Plan page": st.column_config.LinkColumn(display_text="open in Plan")})


def plan_link_with(scenario: Scenario, workload: Workload) -> str:
    """A Plan-page link with the scenario and the observed workload filled in."""
    return link_to(plan_link(scenario).split("?")[0], to_query_params(scenario, workload))


def latency_panel(replicas: list[Replica], latency: dict | str) -> None:
    """p50/p95 of each latency per replica over the range, by Prometheus's histogram_quantile."""
    st.markdown("#### Latency per replica (p50 / p95 over the range)")
    if isinstance(latency, str):
        st.warning(f"Latency: {latency}", icon="⏱️")
        return
    rows = []
    for replica in replicas:
        found = latency_of(latency, replica)
        if found is None:
            continue
        row: dict[str, object] = {"replica": replica.name, "model": replica.now.model_name}
        for field, label in LATENCY_HISTOGRAMS:
            for quantile in QUANTILES:
                value = found.get(field, quantile)
                row[f"{label} p{quantile * 100:g} (ms)"] = None if value is None else round(value * 1e3, 2)
        rows.append(row)
    if not rows:
        st.caption("No request finished in the range, or the servers export no latency histograms.")
        return
    st.dataframe(rows[:TABLE_ROWS], hide_index=True, key="fleet_latency")
    st.caption("histogram_quantile over each replica's bucket increase in the range, computed by Prometheus; "
               "empty where no request of that kind finished.")
