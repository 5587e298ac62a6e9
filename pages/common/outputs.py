"""The Plan page's outputs: header, verdict, KPIs, charts, explanations, sweeps, plan, command and exports."""

from __future__ import annotations

import json

import streamlit as st

from calculator import Estimate, ModelSpec, Scenario, Workload, WorkloadCapacity
from calculator.charts import memory_stack_figure, paged_vs_naive_figure, sweep_figure
from calculator.engine import uncertainty
from calculator.engine.advice import (
    fixes,
    quantization_ladder,
    utilization_effect,
    weights_exceed,
)
from calculator.explain import deployment_line, explanation, lead_sentence, verdict_word
from calculator.serve_command import serve_command
from calculator.summary import estimate_summary
from calculator.sweeps import SWEEPABLE, default_values, points_to_csv, sweep
from calculator.units import GIB

CHART_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}
# NOTE: greys a result that no longer matches the inputs; a compact two-column KPI grid on phones.
PAGE_CSS = """<style>
.st-key-stale_result { opacity: 0.45; filter: grayscale(1); pointer-events: none; }
.st-key-deployment_header p { font-size: 1.05rem; margin-bottom: 0.2rem; overflow-wrap: anywhere; }
@media (max-width: 640px) {
  [class*="st-key-kpis"] [data-testid="stHorizontalBlock"] { flex-wrap: wrap; gap: 0.5rem; }
  [class*="st-key-kpis"] [data-testid="stColumn"] { min-width: calc(50% - 0.5rem) !important;
                                                    flex: 1 1 calc(50% - 0.5rem) !important; }
  [data-testid="stMetricValue"] { font-size: 1.4rem; }
}
</style>"""


def page_css() -> None:
    st.html(PAGE_CSS)


def header(result: Estimate, substituted: dict[str, str]) -> None:
    """model · GPUs × N · TP/PP · max_model_len · dtype/KV dtype · vLLM version — and what stands in for what."""
    line = deployment_line(result)
    with st.container(key="deployment_header"):
        st.markdown(f"**{line}**")
        for field, asked in substituted.items():
            st.caption(f"⚠️ {field}: {asked!r} was asked for; the numbers are for the {field} shown instead.")


def verdict(result: Estimate, substituted: dict[str, str]) -> None:
    """One plain sentence first, the calibrated band and vLLM's own words second, then what would make it fit."""
    call = uncertainty.verdict(result)
    low_bytes, high_bytes, low_tokens, high_tokens = uncertainty.kv_band(result)
    weights_problem = weights_exceed(result) if not result.fits else None
    lead = lead_sentence(result, call, weights_problem)
    if substituted:
        asked = ", ".join(f"{field} {value!r}" for field, value in substituted.items())
        lead = f"Substituted ({asked} not available): {lead[0].lower()}{lead[1:]}"
    band_name = {"calibrated": "Calibrated error band", "unknown architecture": "Error band (widened: unknown "
                 "architecture)", "outside the records": "Error band (widened: outside the calibration records)"}[
        uncertainty.confidence(result)]
    band = (f"{band_name}: KV cache {low_bytes / GIB:,.2f}–{high_bytes / GIB:,.2f} GiB, "
            f"{low_tokens:,}–{high_tokens:,} tokens.")
    log = f"vLLM {result.rules.version} would log: `{' | '.join(result.log_lines())}`"
    quote = f"vLLM's message:\n\n> {result.error}"
    if call == "fits with margin":
        st.success(f"**{lead}**\n\n{band} {log}", icon="✅")
    elif call == "borderline":
        reason = uncertainty.verdict_reason(result) if result.fits or not result.model.known_architecture else None
        st.warning(f"**{lead}**\n\n" + (f"Why borderline: {reason}\n\n" if reason else "") + f"{band} "
                   + (log if result.fits else quote), icon="⚖️")
    else:
        st.error(f"**{lead}**\n\n" + quote, icon="🚫" if call == "does not run" else "🛑")
    if call != "does not run" and (call == "does not fit" or not result.fits):
        options = _fixes(result.scenario.model_dump_json(), hash(result.model), result)
        if options:
            st.markdown("**What would make it fit:**\n" + "\n".join(
                f"- {fix.description} → {_gives(fix, result)}" for fix in options))
    for warning in result.warnings:
        st.warning(warning, icon="⚠️")
    for note in uncertainty.coverage_notes(result):
        st.caption(f"📏 {note}")


def _gives(fix, result: Estimate) -> str:
    """What a fix gives; a pool of the same blocks is said as such, not as a token figure one off the headline's
    (vLLM's "GPU KV cache size" is concurrency × max_model_len in some versions, so it moves with max_model_len)."""
    if fix.num_gpu_blocks == result.capacity.num_gpu_blocks:
        return f"the same {fix.num_gpu_blocks:,}-block KV cache, {fix.max_concurrency:,.2f}x"
    return f"{fix.kv_cache_tokens:,} KV tokens, {fix.max_concurrency:,.2f}x"


@st.cache_data(max_entries=128, show_spinner=False)
def _fixes(scenario_json: str, spec_hash: int, _result: Estimate):
    return fixes(_result)


def _delta(prefix: str, label: str, value: float, unit: str = "", digits: int = 0) -> str | None:
    """The change against the previous run of this page (None when unchanged or the first run)."""
    previous = st.session_state.get(f"{prefix}__kpi_previous", {}).get(label)
    st.session_state.setdefault(f"{prefix}__kpi_current", {})[label] = value
    if previous is None or abs(value - previous) < 10 ** -(digits + 1):
        return None
    return f"{value - previous:+,.{digits}f}{unit}"


# The KPIs that describe a running server: struck out when vLLM refuses to start.
RUNNING_SERVER_FIGURES = frozenset({"KV cache tokens", "Max concurrency", "Workload concurrency", "KV cache per GPU",
                                    "GPU blocks"})


def kpis(result: Estimate, capacity: WorkloadCapacity, prefix: str) -> None:
    """The key figures, each with its change against the previous run."""
    cap, s = result.capacity, result.settings
    low_bytes, high_bytes, low_tokens, high_tokens = uncertainty.kv_band(result)
    st.session_state[f"{prefix}__kpi_current"] = {}
    limit = capacity.limited_by_p95
    figures = [
        ("KV cache tokens", cap.kv_cache_tokens, "", 0, f"{cap.kv_cache_tokens:,}",
         f"vLLM's 'GPU KV cache size'; calibrated range {low_tokens:,}–{high_tokens:,}"
         + ("; vLLM prints maximum concurrency × max_model_len here, so it need not be a multiple of the "
            f"{s.block_size}-token block" if result.rules.token_semantics == "concurrency_times_len" else "")),
        ("Max concurrency", cap.max_concurrency, "x", 2, f"{cap.max_concurrency:,.2f}x",
         f"vLLM's 'Maximum concurrency': KV blocks for requests of the full max_model_len ({s.max_model_len:,})"),
        ("Workload concurrency", capacity.concurrency_p95, "", 0, f"{capacity.concurrency_p95:,}",
         f"requests of the workload's p95 lengths that run at once: min(the KV cache holds "
         f"{capacity.kv_concurrency_p95:,}, max_num_seqs {s.max_num_seqs:,} // n = {capacity.seqs_concurrency:,})"),
        ("Weights per GPU", result.budget.weights_bytes / GIB, " GiB", 2, f"{result.budget.weights_bytes / GIB:,.2f} GiB",
         None),
        ("KV per token per GPU", result.layout.kv_bytes_per_token / 1024, " KiB", 1,
         f"{result.layout.kv_bytes_per_token / 1024:,.1f} KiB", None),
        ("KV cache per GPU", result.kv_cache_bytes / GIB, " GiB", 2, f"{result.kv_cache_bytes / GIB:,.2f} GiB",
         f"calibrated range {low_bytes / GIB:,.2f}–{high_bytes / GIB:,.2f} GiB"),
        ("GPU blocks", cap.num_gpu_blocks, "", 0, f"{cap.num_gpu_blocks:,}", f"{s.block_size} tokens each"),
        ("Largest max_model_len", result.max_fitting_model_len, "", 0, f"{result.max_fitting_model_len:,}",
         "the longest max_model_len for which vLLM would start with these settings"),
        ("Parameters", result.model.num_params / 1e9, " B", 2, f"{result.model.num_params / 1e9:,.2f} B", None),
        ("GPUs per engine", result.num_gpus, "", 0, f"{result.num_gpus}",
         f"TP × PP; {result.scenario.data_parallel_size} engine(s) in all" if result.scenario.data_parallel_size > 1
         else "TP × PP"),
    ]
    if not result.fits:
        st.caption("🛑 vLLM does not start with these settings: the figures of a running server (KV cache, "
                   "concurrency, blocks) are struck out; \"What would make it fit\" above lists the fixes.")
    with st.container(key="kpis"):
        for row in (figures[:5], figures[5:]):
            for column, (label, value, unit, digits, shown, help_text) in zip(st.columns(5), row):
                if not result.fits and label in RUNNING_SERVER_FIGURES:
                    # NOTE: what vLLM would allocate had it started; it does not, so no figure is shown as one.
                    column.metric(label, "—", delta="does not start", delta_color="off", delta_arrow="off",
                                  help=f"{help_text}; with these settings it would be {shown}, but vLLM refuses "
                                       "to start" if help_text else "vLLM refuses to start")
                    continue
                change = _delta(prefix, label, value, unit, digits)
                if label == "Workload concurrency":  # the binding limit is always named under it (short: no cut)
                    column.metric(label, shown, delta=f"cap: {limit}", delta_color="off", delta_arrow="off",
                                  help=help_text + (f"; {change} against the previous run" if change else ""))
                else:
                    column.metric(label, shown, delta=change, delta_color="off", help=help_text)
    st.session_state[f"{prefix}__kpi_previous"] = st.session_state[f"{prefix}__kpi_current"]


def utilization_note(result: Estimate, placeholder) -> None:
    """Under the slider: when moving it changes nothing here, or means something else in this version."""
    note = utilization_effect(result)
    if note:
        placeholder.caption(f"ℹ️ gpu_memory_utilization: {note}.")


def memory_chart(result: Estimate) -> None:
    low_bytes, high_bytes, _, _ = uncertainty.kv_band(result)
    st.plotly_chart(memory_stack_figure(result, kv_band_bytes=(low_bytes, high_bytes)), config=CHART_CONFIG,
                    key="memory_stack")


@st.cache_data(max_entries=128, show_spinner=False)
def _ladder(scenario_json: str, spec_hash: int, _result: Estimate) -> list[dict[str, object]]:
    return [row.model_dump() for row in quantization_ladder(_result)]


def ladder(result: Estimate) -> None:
    """Each weight precision of this model on this GPU: weights, verdict and the GPUs it needs (as hf-mem lists)."""
    # NOTE: a closed expander's content is neither computed nor sent (on_change="rerun"): most reruns are slider
    # moves with it closed, and its eight estimates and table cost a few milliseconds each time.
    expander = st.expander("Quantization ladder: what each precision needs", key="ladder_open", on_change="rerun")
    if not expander.open:
        return
    with expander:
        rows = _ladder(result.scenario.model_dump_json(), hash(result.model), result)
        st.dataframe([{"precision": r["precision"] + (" ← now" if r["current"] else ""), "how": r["how"],
                       "weights / GPU": f"{r['weights_gib_per_gpu']:,.2f} GiB", "here": verdict_word(r["verdict"]),
                       "KV tokens here": f"{r['kv_cache_tokens']:,}",
                       "GPUs needed (TP)": "more than 64" if r["gpus_needed"] is None else f"{r['gpus_needed']}"}
                      for r in rows], hide_index=True, key="ladder_table")


def how_calculated(result: Estimate) -> None:
    expander = st.expander("How it was calculated", key="how_calculated_open", on_change="rerun")
    if not expander.open:  # NOTE: drawn only when open, as the ladder above
        return
    with expander:
        for step, text in explanation(result):
            st.markdown(f"**{step}.** {text}")


def paged_vs_naive(capacity: WorkloadCapacity, result: Estimate) -> None:
    st.markdown("#### PagedAttention vs contiguous allocation")
    left, right = st.columns([2, 1])
    left.plotly_chart(paged_vs_naive_figure(capacity), config=CHART_CONFIG, key="paged_vs_naive")
    right.metric("Contiguous: requests at once", f"{capacity.naive_concurrency:,}",
                 help=f"every request reserves max_model_len = {result.settings.max_model_len:,} tokens")
    right.metric("Paged: requests the KV cache holds (p95)", f"{capacity.kv_concurrency_p95:,}",
                 delta=f"{capacity.kv_concurrency_p95 - capacity.naive_concurrency:+,}")
    right.metric("Memory wasted: contiguous vs paged",
                 f"{100 * capacity.naive_waste_fraction:.1f}% vs {100 * capacity.paged_waste_fraction:.1f}%")


@st.cache_data(max_entries=256, show_spinner=False)
def _sweep(scenario_json: str, spec_hash: int, field: str, _spec: ModelSpec):
    scenario = Scenario.model_validate_json(scenario_json)
    return sweep(scenario, field, default_values(field, scenario, _spec), _spec)


@st.fragment
def sweeps(scenario: Scenario, spec: ModelSpec, prefix: str) -> None:
    """Switching the swept knob reruns only this fragment (and updates the link's ``sweep`` key itself)."""
    st.markdown("#### Sweeps")
    fields = ("max_model_len", "gpu_memory_utilization", "tensor_parallel_size", "kv_cache_dtype", "max_num_seqs")
    st.session_state.setdefault(f"{prefix}_view_sweep", fields[0])
    if st.session_state[f"{prefix}_view_sweep"] not in fields:
        st.session_state[f"{prefix}_view_sweep"] = fields[0]
    field = st.segmented_control("Sweep", fields, key=f"{prefix}_view_sweep", format_func=SWEEPABLE.get) or fields[0]
    if st.query_params.get("sweep", fields[0]) != field and prefix == "plan":
        if field == fields[0]:
            del st.query_params["sweep"]
        else:
            st.query_params["sweep"] = field
    metric = "kv_cache_tokens" if field == "gpu_memory_utilization" else "max_concurrency"
    points = _sweep(scenario.model_dump_json(), hash(spec), field, spec)
    st.plotly_chart(sweep_figure(points, field, metric), config=CHART_CONFIG, key=f"sweep_{field}")
    st.download_button("Download this sweep (CSV)", points_to_csv(points, field), file_name=f"sweep-{field}.csv",
                       mime="text/csv", key=f"{prefix}_sweep_csv")


def launch(scenario: Scenario, result: Estimate) -> None:
    """The command to run; for a deployment vLLM refuses, the command with the fix picked (or marked as refused)."""
    st.markdown("#### Launch it")
    if result.fits:
        st.code(serve_command(scenario), language="bash", wrap_lines=True)
        return
    options = [fix for fix in _fixes(scenario.model_dump_json(), hash(result.model), result)
               if fix.checkpoint is None]  # NOTE: another checkpoint is not a flag the command can carry
    as_set = "as set: will not start"
    picked = st.radio("This deployment does not start. Command with the fix:", [*options, as_set], index=0,
                      format_func=lambda fix: fix if isinstance(fix, str) else fix.description, key="launch_fix")
    if isinstance(picked, str):
        error = (result.error or "vLLM refuses to start").splitlines()[0]
        st.error(f"**Will not start.** vLLM's error:\n\n> {error}", icon="🛑")
        st.code("# will not start (see vLLM's error above)\n" + serve_command(scenario), language="bash",
                wrap_lines=True)
        return
    environment = "".join(f"{name}={value} " for name, value in picked.environment.items())
    st.code(environment + serve_command(scenario.replace(**picked.changes)), language="bash", wrap_lines=True)


def share_and_export(link: str | None, result: Estimate, workload: Workload) -> None:
    st.markdown("#### Share and export")
    if link is None:
        st.caption("A link cannot carry an uploaded config.json: share the file and the JSON below instead.")
    else:
        st.caption("This link reproduces exactly this view (no token is ever put in it); use the copy icon.")
        st.code(link, language=None, wrap_lines=True)
    st.download_button("Download the estimate (JSON)", json.dumps(estimate_summary(result, workload), indent=2),
                       file_name="vllm-estimate.json", mime="application/json", key="estimate_json")
