"""Streamlit pieces of the Live page: per-user history, the model resolution and the rendered panels."""

from __future__ import annotations

from collections import deque
from pathlib import Path

import streamlit as st

from calculator import CalculatorError, ModelSpec, Scenario, estimate, preset_ids, workload_capacity
from calculator.charts import histogram_figure, live_history_figure, memory_stack_figure
from calculator.model.model_source import load_model_spec
from calculator.observe.live import (
    advice,
    calibration_gib,
    compare,
    live_usage,
    preemptions_rising,
    scenario_from_server,
    usage_history,
    with_actual_blocks,
    workload_from_server,
)
from calculator.observe.live_client import ServerModel, ServerReport
from calculator.observe.metrics import EngineMetrics, rates
from calculator.units import GIB

from .outputs import CHART_CONFIG
from .state import plan_link

HISTORY_POINTS = 720  # an hour at a 5 s refresh, per user session


def history(base_url: str, engine_key: str) -> deque:
    """This session's bounded history for one server engine (never module-level state)."""
    store = st.session_state.setdefault("live_history", {})
    return store.setdefault(f"{base_url}|{engine_key}", deque(maxlen=HISTORY_POINTS))


def resolve_spec(model: ServerModel) -> tuple[ModelSpec | None, str]:
    """The served model's config: a local folder the server names, else a bundled preset with that id."""
    for candidate in (model.root, model.id):
        if candidate and Path(candidate).is_dir() and (Path(candidate) / "config.json").is_file():
            try:
                return load_model_spec(candidate), f"the model folder {candidate}"
            except CalculatorError:
                continue
    for candidate in (model.id, model.root or "", model.parent or ""):
        for preset in preset_ids():
            if candidate and (candidate == preset or candidate.lower().endswith(preset.lower())):
                return load_model_spec(preset), f"the bundled preset {preset}"
    return None, "no bundled preset or local folder matches the served model; choose its config in the sidebar"


def server_panel(report: ServerReport) -> None:
    cols = st.columns(4)
    cols[0].metric("Server", "healthy" if report.healthy else "UNHEALTHY")
    cols[1].metric("vLLM version", report.version or "unknown")
    cols[2].metric("Served models", ", ".join(m.id for m in report.models) or "none")
    cols[3].metric("Read in", f"{report.elapsed_s * 1e3:.0f} ms")
    for warning in report.metrics.warnings:
        st.warning(f"/metrics: {warning}")
    if report.server_info is not None:
        with st.expander("Server configuration (/server_info, VLLM_SERVER_DEV_MODE)"):
            st.json(report.server_info, expanded=False)


def engine_panel(report: ServerReport, engine: EngineMetrics, spec: ModelSpec | None, base: Scenario) -> None:
    """Everything about one engine: config, usage, rates, charts, estimate vs reality, calibration, advice."""
    key = f"{engine.model_name} · engine {engine.engine}"
    points = history(report.base_url, key)
    previous = points[-1][1] if points else None
    points.append((report.metrics.scraped_at, engine))
    change = rates(previous, engine, report.metrics.scraped_at - points[-2][0]) if previous is not None and \
        len(points) > 1 else None
    st.subheader(key)
    config = engine.cache_config or {}
    shown = ("block_size", "num_gpu_blocks", "cache_dtype", "gpu_memory_utilization", "kv_cache_size_tokens",
             "kv_cache_max_concurrency", "kv_cache_memory_bytes", "enable_prefix_caching", "num_gpu_blocks_override")
    st.dataframe([{"setting": k, "value": config.get(k, "—")} for k in shown], hide_index=True, key=f"cfg_{key}")
    cols = [*st.columns(3), *st.columns(3)]  # NOTE: six in one row cut the longer values short
    cols[0].metric("KV cache usage", f"{(engine.kv_cache_usage or 0) * 100:.1f}%",
                   help=f"from {engine.usage_metric or 'no usage metric'}")
    cols[1].metric("Running", f"{engine.running or 0:,.0f}")
    cols[2].metric("Waiting", f"{engine.waiting or 0:,.0f}")
    cols[3].metric("Preemptions (total)", f"{engine.preemptions_total or 0:,.0f}",
                   delta=None if change is None or change.preemptions_per_s is None
                   else f"{change.preemptions_per_s:.2f}/s")
    hits, queries = engine.prefix_cache_hits_total or 0, engine.prefix_cache_queries_total or 0
    cols[4].metric("Prefix cache hits", f"{hits:,.0f} / {queries:,.0f} tokens",
                   help="hit rate " + (f"{hits / queries:.1%}" if queries else "n/a"))
    cols[5].metric("Throughput (prompt / generation)",
                   "–" if change is None or change.generation_tokens_per_s is None
                   else f"{change.prompt_tokens_per_s or 0:,.0f} / {change.generation_tokens_per_s:,.0f} tok/s")
    model = next((m for m in report.models if m.id == engine.model_name), report.models[0] if report.models else None)
    if spec is None:
        st.info("Choose the served model's config (sidebar) to compare with the estimate.")
        return
    try:
        result = estimate(scenario_from_server(engine, model, report.version, base.replace(model=spec.model_id)), spec)
    except CalculatorError as exc:
        st.error(f"Estimate for the server's settings: {exc}")
        return
    blocks = engine.config_int("num_gpu_blocks")
    actual = with_actual_blocks(result, blocks) if blocks else result
    usage = live_usage(engine, actual)
    if usage is not None:
        cols = st.columns(3)
        cols[0].metric("KV tokens in use", f"{usage.used_tokens:,.0f} / {usage.capacity_tokens:,}")
        cols[1].metric("KV memory in use", f"{usage.used_bytes / GIB:,.3f} / {usage.pool_bytes / GIB:,.3f} GiB")
        cols[2].metric("Blocks in use", f"{usage.used_blocks:,.1f} / {usage.usable_blocks:,}")
        series = usage_history(list(points), usage.capacity_tokens)
        st.plotly_chart(live_history_figure(series["times"], series["used_tokens"], usage.capacity_tokens,
                                            series["running"], series["waiting"]),
                        config=CHART_CONFIG, key=f"history_{key}")
    for note in advice(engine, change, preemptions_rising(list(points))):
        st.warning(note, icon="⚠️")
    st.markdown("#### Estimate vs reality")
    st.dataframe([{"quantity": r.quantity, "predicted": round(r.predicted, 4),
                   "actual": None if r.actual is None else round(r.actual, 4),
                   "error %": None if r.error_percent is None else round(r.error_percent, 2)}
                  for r in compare(result, engine)], hide_index=True, key=f"cmp_{key}")
    fraction = usage.used_bytes / result.kv_cache_bytes if usage and result.kv_cache_bytes else None
    st.plotly_chart(memory_stack_figure(actual, kv_used_fraction=fraction), config=CHART_CONFIG, key=f"stack_{key}")
    if blocks and result.settings.device != "cpu" and result.scenario.kv_cache_memory_bytes is None:
        adjustment = calibration_gib(result, blocks)
        st.link_button(f"Open the Plan page calibrated to this server ({adjustment:+.2f} GiB overhead)",
                       plan_link(result.scenario.replace(overhead_adjustment_gib=adjustment,
                                                         num_gpu_blocks_override=None)))
    workload = workload_from_server(engine, change)
    if workload is not None:
        capacity = workload_capacity(actual, workload)
        st.markdown(f"#### This server's real workload\nPrompts {workload.prompt_tokens_mean:,} tokens on average "
                    f"(p95 {workload.prompt_tokens_p95:,}), outputs {workload.output_tokens_mean:,} "
                    f"(p95 {workload.output_tokens_p95:,}), shared prefix ≈ {workload.shared_prefix_tokens:,} tokens: "
                    f"**about {capacity.concurrency_p95:,} such requests fit at once** "
                    f"({capacity.concurrency_mean:,} at mean lengths).")
        left, right = st.columns(2)
        for column, name, title in ((left, "prompt_tokens", "Prompt lengths"),
                                    (right, "generation_tokens", "Generated lengths")):
            column.plotly_chart(histogram_figure(title, engine.histograms[name].buckets), config=CHART_CONFIG,
                                key=f"hist_{name}_{key}")
