"""Streamlit pieces of the Live page, in sections: access and header, server, one engine (settings, usage,
activity between reads, estimate vs reality, workload). Per-user history lives in the session, never in globals."""

from __future__ import annotations

import sys
import time
from collections import deque
from pathlib import Path

import streamlit as st

from calculator import (
    CalculatorError,
    ModelSpec,
    Scenario,
    Workload,
    estimate,
    gpu_catalog,
    preset_ids,
    workload_capacity,
)
from calculator.charts import histogram_figure, live_history_figure, memory_stack_figure
from calculator.engine.estimate import Estimate
from calculator.model.model_source import load_model_spec
from calculator.observe.access import (
    DEPLOYMENT_ENV,
    AccessPolicy,
    LocalPathRefused,
    how_to_allow,
    policy_from_environment,
)
from calculator.observe.activity import IntervalActivity, describe, interval_activity
from calculator.observe.device import DeviceEvidence, detect_device, device_mismatch
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
from calculator.observe.reconcile import Reconciliation, reconcile
from calculator.scenario import DEFAULT_GPU
from calculator.units import GIB

from . import sentence
from .live_latency import latency_record, latency_section
from .inputs import MODEL_SOURCES, cached_model_spec
from .outputs import CHART_CONFIG
from .state import plan_link

HISTORY_POINTS = 720  # an hour at a 5 s refresh, per user session
PACE_READS = 6  # the reads whose spacing the page reports
SLOW_PACE = 1.5  # reads this much further apart than asked are said to be late
ENGINE_PANELS = 4  # engines drawn in full; the others go in one table (a panel runs an estimate and charts)
ENGINE_TABLE_ROWS = 60
AUTO = "auto"
CPU = "cpu"
_LABEL_CHARS = 80


# --- access and header ---------------------------------------------------------------------------------------

@st.cache_resource
def access_policy() -> AccessPolicy:
    """The deployment's policy, read once per process; bad rules are reported once, here, and on the page."""
    policy = policy_from_environment(dashboard=True)
    for problem in policy.problems:
        print(f"vllm-capacity-planner: {problem}", file=sys.stderr)
    return policy


def access_notice(policy: AccessPolicy, about: str = "") -> None:
    """What this deployment may reach; where it may reach nothing, what the page does and how to open it."""
    st.caption(f"🔒 This dashboard may contact: {policy.describe()}. Cloud metadata and link-local addresses are "
               "never contacted.")
    if policy.mode == "closed" and not policy.rules:
        st.info(f"{about} This dashboard runs as a shared one (the default for `streamlit run`), so it contacts no "
                f"server until told which. {how_to_allow()}", icon="🔒")
        st.code(f"{DEPLOYMENT_ENV}=local streamlit run app.py", language="bash")
    for problem in policy.problems:
        st.warning(f"Configuration: {problem}", icon="⚙️")


def header_line(report: ServerReport, device: DeviceEvidence | None) -> None:
    """Which server and deployment the numbers below are about."""
    models = ", ".join(_short(m.id) for m in report.models[:3]) or "no model listed"
    where = {"cpu": "a CPU build", "gpu": device.gpu_name or "a GPU"}.get(device.device or "", "device not stated") \
        if device else "device not stated"
    st.markdown(f"**Numbers about** `{report.base_url}` · vLLM {_short(report.version or 'version unknown')} · "
                f"{models} · {where}")


def _short(text: str) -> str:
    return text if len(text) <= _LABEL_CHARS else text[:_LABEL_CHARS - 1] + "…"


# --- the model config ----------------------------------------------------------------------------------------

def resolve_spec(model: ServerModel, policy: AccessPolicy | None = None) -> tuple[ModelSpec | None, str]:
    """The served model's config: a local folder the server names (where this deployment reads local folders),
    else a bundled preset with that id."""
    policy = policy or access_policy()
    for candidate in (model.root, model.id):
        try:
            folder = policy.local_folder(candidate) if candidate else None
        except LocalPathRefused:
            continue  # the server's own path: not ours to read in a shared deployment
        if folder is not None and folder.is_dir() and (folder / "config.json").is_file():
            try:
                return load_model_spec(str(folder)), f"the model folder {candidate}"
            except CalculatorError:
                continue
    for candidate in (model.id, model.root or "", model.parent or ""):
        for preset in preset_ids():
            if candidate and (candidate == preset or candidate.lower().endswith(preset.lower())):
                return load_model_spec(preset), f"the bundled preset {preset}"
    return None, "no bundled preset or local folder matches the served model; choose its config in the sidebar"


# --- the server ----------------------------------------------------------------------------------------------

def server_panel(report: ServerReport) -> None:
    cols = st.columns(4)
    health = {True: "healthy", False: "UNHEALTHY", None: "unknown"}[report.healthy]
    cols[0].metric("Server", health)
    cols[1].metric("vLLM version", _short(report.version or "unknown"))
    cols[2].metric("Served models", _short(", ".join(m.id for m in report.models[:5])) or "none")
    cols[3].metric("Read in", f"{report.elapsed_s * 1e3:.0f} ms", help="all endpoints at once, under one deadline")
    for problem in report.problems:
        if problem.path != "/server_info" or problem.timed_out:
            st.warning(f"{problem.path}: {problem.message}. Shown without it.", icon="🐢" if problem.timed_out else None)
    if report.metrics is not None:
        for warning in report.metrics.warnings:
            st.warning(f"/metrics: {warning}")
        if report.metrics.warnings_left_out:
            st.warning(f"/metrics: {report.metrics.warnings_left_out:,} more values were clamped or ignored.")
    if report.server_info is not None:
        with st.expander("Server configuration (/server_info, VLLM_SERVER_DEV_MODE)"):
            st.json(report.server_info, expanded=False)


def engines_beyond_panels(report: ServerReport) -> None:
    """Engines past ENGINE_PANELS in one table, and how many the page left out altogether."""
    metrics = report.metrics
    if metrics is None or len(metrics.engines) <= ENGINE_PANELS and not metrics.engines_left_out:
        return
    rest = metrics.engines[ENGINE_PANELS:]
    total = len(metrics.engines) + metrics.engines_left_out
    st.markdown(f"#### {total:,} engines reported")
    st.caption(f"{ENGINE_PANELS} drawn in full above; {min(len(rest), ENGINE_TABLE_ROWS):,} in this table"
               + (f"; {len(rest) - ENGINE_TABLE_ROWS:,} more read but not listed" if len(rest) > ENGINE_TABLE_ROWS
                  else "")
               + (f"; {metrics.engines_left_out:,} not read (this page reads at most {len(metrics.engines):,})"
                  if metrics.engines_left_out else "") + ".")
    st.dataframe([{"model": _short(e.model_name), "engine": _short(e.engine), "running": e.running,
                   "waiting": e.waiting, "KV usage %": None if e.kv_cache_usage is None else round(e.kv_cache_usage * 100, 1)}
                  for e in rest[:ENGINE_TABLE_ROWS]], hide_index=True, key="live_other_engines")


# --- one engine ----------------------------------------------------------------------------------------------

def history_name(base_url: str, engine: EngineMetrics) -> str:
    return f"{base_url}|{engine.model_name}|{engine.engine}"


def history(name: str) -> deque:
    """This session's bounded history for one server engine: (time, metrics, activity since the previous read)."""
    store = st.session_state.setdefault("live_history", {})
    return store.setdefault(name, deque(maxlen=HISTORY_POINTS))


def engine_panel(report: ServerReport, engine: EngineMetrics, spec: ModelSpec | None, base: Scenario,
                 gpu_choice: str) -> None:
    """Everything about one engine, section by section."""
    key = f"{_short(engine.model_name)} · engine {_short(engine.engine)}"
    points = history(history_name(report.base_url, engine))
    now = report.metrics.scraped_at if report.metrics else time.time()
    previous = points[-1] if points else None
    activity = interval_activity(previous[1], engine, now - previous[0]) if previous else None
    change = rates(previous[1], engine, now - previous[0]) if previous else None
    points.append((now, engine, activity))
    st.subheader(key)
    settings_section(engine, key)
    usage_section(engine, change)
    activity_section(points, key)
    usage = estimate_section(report, engine, spec, base, gpu_choice, points, key)
    try:
        workload = workload_from_server(engine, change)
    except CalculatorError as exc:
        st.warning(sentence(exc), icon="⚠️")
        workload = None
    if usage is not None and workload is not None:
        workload_section(engine, workload, usage, key)
    on_cpu = device_for(engine, report, gpu_choice)[0] is None
    latency_section(points, engine, change, usage, workload, key,
                    advice(engine, change, preemptions_rising([(t, e) for t, e, _ in points]), on_cpu), on_cpu)


def settings_section(engine: EngineMetrics, key: str) -> None:
    config = engine.cache_config or {}
    shown = ("block_size", "num_gpu_blocks", "cache_dtype", "gpu_memory_utilization", "kv_cache_size_tokens",
             "kv_cache_max_concurrency", "kv_cache_memory_bytes", "enable_prefix_caching", "num_gpu_blocks_override")
    st.dataframe([{"setting": k, "value": config.get(k, "—")} for k in shown], hide_index=True, key=f"cfg_{key}")


def usage_section(engine: EngineMetrics, change) -> None:
    def count(value: float | None) -> str:
        return "—" if value is None else f"{value:,.0f}"

    cols = [*st.columns(3), *st.columns(3)]  # NOTE: six in one row cut the longer values short
    cols[0].metric("KV cache usage", "—" if engine.kv_cache_usage is None else f"{engine.kv_cache_usage * 100:.1f}%",
                   help=f"from {engine.usage_metric or 'no usage metric'}")
    cols[1].metric("Running", count(engine.running))
    cols[2].metric("Waiting", count(engine.waiting))
    cols[3].metric("Preemptions (total)", count(engine.preemptions_total),
                   delta=None if change is None or change.preemptions_per_s is None
                   else f"{change.preemptions_per_s:.2f}/s",
                   delta_color="inverse" if change is not None and change.preemptions_per_s else "off",
                   delta_arrow="auto" if change is not None and change.preemptions_per_s else "off")
    hits, queries = engine.prefix_cache_hits_total or 0, engine.prefix_cache_queries_total or 0
    cols[4].metric("Prefix cache hits", f"{hits:,.0f} / {queries:,.0f} tokens",
                   help="hit rate " + (f"{hits / queries:.1%}" if queries else "n/a"))
    cols[5].metric("Throughput (prompt / generation)",
                   "–" if change is None or change.generation_tokens_per_s is None
                   else f"{change.prompt_tokens_per_s or 0:,.0f} / {change.generation_tokens_per_s:,.0f} tok/s")


def activity_section(points: deque, key: str) -> None:
    """What happened between reads, from counters and histograms: a burst between two refreshes still shows."""
    st.markdown("#### Between reads")
    latest: IntervalActivity | None = points[-1][2]
    if latest is None:
        st.caption("The next refresh shows what happened since this read (requests finished, tokens, the peak).")
        return
    cols = st.columns(4)
    cols[0].metric("Requests finished (since last read)", _count(latest.requests_finished))
    cols[1].metric("Prompt tokens (since last read)", _count(latest.prompt_tokens))
    cols[2].metric("Generated tokens (since last read)", _count(latest.generation_tokens))
    cols[3].metric("Peak requests in the server (at least)", _count(latest.peak_requests_at_least),
                   help="Little's law on the end-to-end latency histogram: the finished requests' time in the "
                        "server, summed, over the window they lived in; never more than really were")
    st.caption(describe(latest))
    busy = [(t, a) for t, _, a in points if a is not None and a.busy]
    if busy and not latest.busy:
        when, last = busy[-1]
        st.info(f"Last activity, read {time.time() - when:,.0f} s ago: {describe(last)}")
    if len(busy) > 1:
        st.caption(session_totals(busy))


def session_totals(busy: list) -> str:
    """What this session saw finish, over its busy intervals ((time, activity) pairs)."""
    return (f"This session: {sum(a.requests_finished or 0 for _, a in busy):,} requests finished, "
            f"{sum(a.prompt_tokens or 0 for _, a in busy):,} prompt and "
            f"{sum(a.generation_tokens or 0 for _, a in busy):,} generated tokens over {len(busy)} busy intervals.")


def _count(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def history_chart(points: deque, capacity_tokens: int, key: str,
                  unreachable: tuple[float, float] | None = None) -> None:
    series = usage_history([(t, e) for t, e, _ in points], capacity_tokens)
    finished = [None if a is None else a.requests_finished for _, _, a in points]
    st.plotly_chart(live_history_figure(series["times"], series["used_tokens"], capacity_tokens,
                                        series["running"], series["waiting"], finished=finished,
                                        unreachable=unreachable), config=CHART_CONFIG, key=f"history_{key}")


# --- reads: their pace, and the history kept when the server stops ---------------------------------------------

def _clock(when: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(when))


def read_pace(url: str, now: float, asked_s: float | None) -> None:
    """When the page read the server, and how often reads really came: under load a 5 s refresh can take 15 s."""
    reads = st.session_state.setdefault("live_reads", {}).setdefault(url, deque(maxlen=PACE_READS))
    reads.append(now)
    st.session_state.setdefault("live_unreachable", {}).pop(url, None)
    gaps = [b - a for a, b in zip(reads, list(reads)[1:], strict=False)]
    measured = sum(gaps) / len(gaps) if gaps else None
    line = f"Read at {_clock(now)} UTC"
    if measured is not None:
        line += f"; the last {len(gaps)} read(s) came every {measured:,.1f} s"
        if asked_s and measured > SLOW_PACE * asked_s:
            line += (f", not every {asked_s:g} s as asked: each read and redraw takes longer than that on this "
                     "machine now")
    st.caption(line + ".")


def unreachable_panel(url: str, base_url: str | None, problem: str) -> None:
    """The server stopped answering: say since when, and keep what this session saw (the KV and latency charts,
    the last latency table, session totals)."""
    since = st.session_state.setdefault("live_unreachable", {}).setdefault(url, time.time())
    store = st.session_state.get("live_history", {})
    kept = {name: points for name, points in store.items()
            if base_url and name.startswith(f"{base_url}|") and points} if base_url else {}
    if not kept:
        st.error(problem, icon="🔌")
        return
    st.error(f"Server unreachable since {_clock(since)} UTC: {problem} What this session saw until then is kept "
             "below.", icon="🔌")
    for name, points in kept.items():
        model, engine = name[len(base_url) + 1:].rsplit("|", 1)
        key = f"{_short(model)} · engine {_short(engine)}"
        st.subheader(f"{key} (last read {_clock(points[-1][0])} UTC)")
        busy = [(t, a) for t, _, a in points if a is not None and a.busy]
        st.caption(session_totals(busy) if busy else "No request finished while this session read the server.")
        band = (since, time.time())
        capacity = st.session_state.get("live_capacity", {}).get(name)
        if capacity:
            history_chart(points, capacity, key, unreachable=band)
        latency_record([(t, e) for t, e, _ in points], key, unreachable=band)


# --- estimate vs reality -------------------------------------------------------------------------------------

def device_for(engine: EngineMetrics, report: ServerReport, gpu_choice: str) -> tuple[str | None, DeviceEvidence]:
    """(catalog GPU key, or None for the CPU; the evidence): the user's choice, or what the server says (auto)."""
    evidence = detect_device(report.version, report.server_info, engine)
    if gpu_choice != AUTO:
        return (None if gpu_choice == CPU else gpu_choice), evidence
    if evidence.device == "cpu":
        return None, evidence
    return evidence.gpu_key or DEFAULT_GPU, evidence


def estimate_section(report: ServerReport, engine: EngineMetrics, spec: ModelSpec | None, base: Scenario,
                     gpu_choice: str, points: deque, key: str):
    model = next((m for m in report.models if m.id == engine.model_name), report.models[0] if report.models else None)
    gpu, evidence = device_for(engine, report, gpu_choice)
    if spec is None:
        device_notice(None, evidence, gpu_choice, gpu, engine, key)
        st.info("Choose the served model's config (sidebar) to compare with the estimate.")
        return None
    chosen = base.replace(model=spec.model_id, gpu=gpu, device=CPU if gpu is None else None)
    try:
        result = estimate(scenario_from_server(engine, model, report.version, chosen), spec)
    except CalculatorError as exc:
        device_notice(None, evidence, gpu_choice, gpu, engine, key)
        st.error(f"Estimate for the server's settings: {exc}")
        return None
    device_notice(result, evidence, gpu_choice, gpu, engine, key)
    dtype_notice(reconcile(result, spec, engine, report.server_info), key)
    blocks = engine.config_int("num_gpu_blocks")
    actual = with_actual_blocks(result, blocks) if blocks else result
    usage = live_usage(engine, actual)
    if usage is not None:
        cols = st.columns(3)
        cols[0].metric("KV tokens in use", f"{usage.used_tokens:,.0f} / {usage.capacity_tokens:,}")
        cols[1].metric("KV memory in use", f"{usage.used_bytes / GIB:,.3f} / {usage.pool_bytes / GIB:,.3f} GiB",
                       help=_pool_help(engine, usage.pool_bytes))
        cols[2].metric("Blocks in use", f"{usage.used_blocks:,.1f} / {usage.usable_blocks:,}")
        st.session_state.setdefault("live_capacity", {})[history_name(report.base_url, engine)] = \
            usage.capacity_tokens  # NOTE: kept for the charts drawn after the server stops answering
        history_chart(points, usage.capacity_tokens, key)
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
    return actual


def dtype_notice(found: Reconciliation | None, key: str) -> None:
    """Why the estimate and the server differ by a setting; a one-click fix when a dtype reconciles them."""
    if found is None:
        return
    st.warning(found.message, icon="🧮")
    if found.proposed_dtype is not None and st.button(
            f"Use --dtype {found.proposed_dtype} for the estimate", key=f"use_dtype_{key}",
            on_click=_choose_dtype, args=(found.proposed_dtype,)):
        st.rerun()  # the whole page, so the sidebar shows the new choice too


def _choose_dtype(dtype: str) -> None:
    st.session_state["live_dtype"] = dtype


def _pool_help(engine: EngineMetrics, pool_bytes: int) -> str:
    """How the server sized its pool, in its own figures."""
    memory, override = engine.config_int("kv_cache_memory_bytes"), engine.config_int("num_gpu_blocks_override")
    if memory and override is not None:
        return (f"--num-gpu-blocks-override {override:,} fixes the pool at {pool_bytes / GIB:,.3f} GiB of the "
                f"{memory / GIB:,.3f} GiB (kv_cache_memory_bytes) the server set aside")
    if memory:
        return f"kv_cache_memory_bytes {memory:,}: the pool the server set aside, in whole blocks"
    return "blocks in use × the estimate's bytes per block"


def device_notice(result: Estimate | None, evidence: DeviceEvidence, gpu_choice: str, gpu: str | None,
                  engine: EngineMetrics, key: str) -> None:
    """Which device the estimate assumes and why; next to the chart, a one-click fix when it cannot be right."""
    name = "the CPU (vLLM CPU build)" if gpu is None else gpu_options().get(gpu, gpu)
    if gpu_choice == AUTO:
        why = "; ".join(evidence.reasons) if evidence.device else "the server does not say which GPU; assumed"
        st.caption(f"Device for the estimate: **{name}** — detected from the server: {why}.")
    else:
        st.caption(f"Device for the estimate: **{name}** (chosen in the sidebar).")
    mismatch = device_mismatch(evidence, gpu, name, result, engine)
    if mismatch is None:
        return
    st.warning(mismatch.message, icon="🧭")
    if mismatch.suggestion is not None and mismatch.suggestion != (gpu or CPU):
        if st.button(f"Use {mismatch.suggestion_name} for the estimate", key=f"use_device_{key}",
                     on_click=_choose_device, args=(mismatch.suggestion,)):
            st.rerun()  # the whole page, so the sidebar shows the new choice too


def _choose_device(choice: str) -> None:
    st.session_state["live_gpu"] = choice


def gpu_options() -> dict[str, str]:
    """The sidebar's device choices: auto-detect, the catalog, the CPU."""
    return {AUTO: "Auto-detect from the server", **{g.key: g.name for g in gpu_catalog()},
            CPU: "CPU (vLLM CPU build)"}


# --- the deployment the user planned ------------------------------------------------------------------------

def plan_section(report: ServerReport, engine: EngineMetrics, planned: Scenario, load: Workload | None,
                 key: str) -> None:
    """The deployment the user was just looking at (Plan, Compare ...) next to what this server really set up."""
    st.markdown("#### Your plan vs this server")
    served = engine.model_name
    model = next((m for m in report.models if m.id == served), None)
    names = {served, *(n for n in (model.root, model.parent) if n)} if model else {served}
    if not any(n == planned.model or n.lower().endswith(planned.model.lower()) for n in names):
        st.caption(f"This server serves `{_short(served)}`; your plan is for `{_short(planned.model)}`.")
    try:
        source = MODEL_SOURCES[0] if planned.model in preset_ids() else MODEL_SOURCES[1]
        plan = estimate(planned, cached_model_spec(source, planned.model))
    except CalculatorError as exc:
        st.caption(f"Your plan (`{_short(planned.model)}`) cannot be estimated here: {sentence(exc)}")
        return
    blocks, block_size = engine.config_int("num_gpu_blocks"), engine.config_int("block_size")
    tokens = engine.config_int("kv_cache_size_tokens") or (blocks * block_size if blocks and block_size else None)
    rows = [("KV cache tokens (per engine)", plan.capacity.kv_cache_tokens, tokens),
            ("block size (tokens)", plan.settings.block_size, block_size),
            ("max_model_len", plan.settings.max_model_len, model.max_model_len if model else None),
            ("requests of max_model_len at once", round(plan.capacity.max_concurrency, 2),
             engine.config_float("kv_cache_max_concurrency"))]
    st.dataframe([{"quantity": name, "planned": planned_value, "this server": actual}
                  for name, planned_value, actual in rows], hide_index=True, key=f"plan_vs_server_{key}")
    gpu = plan.gpu.name if plan.gpu else "the CPU"
    st.caption(f"Planned: `{_short(planned.model)}` on {gpu} × {plan.num_gpus}, vLLM {planned.vllm_version} "
               "(the deployment you were looking at on another page).")
    st.link_button("Back to your plan", plan_link(planned, load))


# --- the workload it really sees -----------------------------------------------------------------------------

def workload_section(engine: EngineMetrics, workload: Workload, actual: Estimate, key: str) -> None:
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


def local_model_path(text: str) -> Path | None:
    """The sidebar's local folder, as this deployment allows (``LocalPathRefused`` otherwise)."""
    return access_policy().local_folder(text)
