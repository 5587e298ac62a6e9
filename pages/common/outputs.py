"""The Plan page's outputs: verdict, KPIs, charts, explanations, sweeps, plan, command and exports."""

from __future__ import annotations

import json

import streamlit as st

from calculator import CalculatorError, Estimate, ModelSpec, Scenario, Workload, WorkloadCapacity
from calculator.charts import memory_stack_figure, paged_vs_naive_figure, sweep_figure
from calculator.engine import uncertainty
from calculator.engine.advice import capacity_plan, fixes
from calculator.explain import explanation
from calculator.serve_command import parse_serve_command, serve_command
from calculator.summary import estimate_summary
from calculator.sweeps import SWEEPABLE, default_values, points_to_csv, sweep
from calculator.units import GIB

from . import sentence
from .state import request_apply

CHART_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}


def verdict(result: Estimate) -> None:
    """Fits with margin / borderline / does not fit, with vLLM's own message and the changes that would help."""
    call = uncertainty.verdict(result)
    low_bytes, high_bytes, low_tokens, high_tokens = uncertainty.kv_band(result)
    band = (f"KV cache {low_bytes / GIB:,.2f}–{high_bytes / GIB:,.2f} GiB, {low_tokens:,}–{high_tokens:,} tokens "
            "within the calibrated error band")
    if call == "fits with margin":
        st.success(f"**Fits with margin.** vLLM {result.rules.version} would log: "
                   f"`{' | '.join(result.log_lines())}` ({band}).", icon="✅")
    elif call == "borderline":
        outcome = "starts at the estimate but may not" if result.fits else "fails at the estimate but may start"
        st.warning(f"**Borderline**: {outcome} once the measured overheads vary as much as on real start-ups "
                   f"({band}). " + (f"vLLM would log: `{' | '.join(result.log_lines())}`" if result.fits
                                    else f"vLLM's message:\n\n> {result.error}"), icon="⚖️")
    if call == "does not run":
        st.error(f"**Does not run.** {result.error}", icon="🚫")
    if call == "does not fit" or (call == "borderline" and not result.fits):
        if call == "does not fit":
            st.error(f"**Does not fit.** vLLM {result.rules.version} would refuse to start:\n\n> {result.error}",
                     icon="🛑")
        options = fixes(result)
        if options:
            st.markdown("**What would make it fit:**\n" + "\n".join(
                f"- {fix.description} → {fix.kv_cache_tokens:,} KV tokens, {fix.max_concurrency:.2f}x"
                for fix in options))
    for warning in result.warnings:
        st.warning(warning, icon="⚠️")


def kpis(result: Estimate, capacity: WorkloadCapacity | None) -> None:
    cap, s = result.capacity, result.settings
    low_bytes, high_bytes, low_tokens, high_tokens = uncertainty.kv_band(result)
    row = st.columns(5)
    row[0].metric("KV cache tokens", f"{cap.kv_cache_tokens:,}",
                  help=f"vLLM's 'GPU KV cache size'; calibrated range {low_tokens:,}–{high_tokens:,}")
    row[1].metric(f"Max concurrency @ {s.max_model_len:,}", f"{cap.max_concurrency:,.2f}x")
    row[2].metric("Workload concurrency", f"{capacity.concurrency_p95:,}" if capacity else "–",
                  help="requests of the workload's p95 lengths (prompt + output) that fit in the KV cache at once")
    row[3].metric("Weights per GPU", f"{result.budget.weights_bytes / GIB:,.2f} GiB")
    row[4].metric("KV per token per GPU", f"{result.layout.kv_bytes_per_token / 1024:,.1f} KiB")
    row = st.columns(5)
    row[0].metric("KV cache per GPU", f"{result.kv_cache_bytes / GIB:,.2f} GiB",
                  delta=f"± {(high_bytes - low_bytes) / 2 / GIB:,.2f} GiB calibrated", delta_color="off",
                  delta_arrow="off", help=f"calibrated range {low_bytes / GIB:,.2f}–{high_bytes / GIB:,.2f} GiB")
    row[1].metric("GPU blocks", f"{cap.num_gpu_blocks:,}", help=f"{s.block_size} tokens each")
    row[2].metric("Largest max_model_len", f"{result.max_fitting_model_len:,}",
                  help="the longest max_model_len for which vLLM would start with these settings")
    row[3].metric("Parameters", f"{result.model.num_params / 1e9:,.2f} B")
    row[4].metric("GPUs per replica", f"{result.num_gpus}")


def memory_chart(result: Estimate) -> None:
    low_bytes, high_bytes, _, _ = uncertainty.kv_band(result)
    st.plotly_chart(memory_stack_figure(result, kv_band_bytes=(low_bytes, high_bytes)), config=CHART_CONFIG,
                    key="memory_stack")


def how_calculated(result: Estimate) -> None:
    with st.expander("How it was calculated"):
        for step, text in explanation(result):
            st.markdown(f"**{step}.** {text}")


def paged_vs_naive(capacity: WorkloadCapacity, result: Estimate) -> None:
    st.markdown("#### PagedAttention vs contiguous allocation")
    left, right = st.columns([2, 1])
    left.plotly_chart(paged_vs_naive_figure(capacity), config=CHART_CONFIG, key="paged_vs_naive")
    right.metric("Contiguous: requests at once", f"{capacity.naive_concurrency:,}",
                 help=f"every request reserves max_model_len = {result.settings.max_model_len:,} tokens")
    right.metric("Paged: requests at once (p95)", f"{capacity.concurrency_p95:,}",
                 delta=f"{capacity.concurrency_p95 - capacity.naive_concurrency:+,}")
    right.metric("Memory wasted: contiguous vs paged",
                 f"{100 * capacity.naive_waste_fraction:.1f}% vs {100 * capacity.paged_waste_fraction:.1f}%")


def sweeps(scenario: Scenario, spec: ModelSpec, prefix: str) -> None:
    st.markdown("#### Sweeps")
    fields = ("max_model_len", "gpu_memory_utilization", "tensor_parallel_size", "kv_cache_dtype", "max_num_seqs")
    st.session_state.setdefault(f"{prefix}_view_sweep", fields[0])
    if st.session_state[f"{prefix}_view_sweep"] not in fields:
        st.session_state[f"{prefix}_view_sweep"] = fields[0]
    field = st.segmented_control("Sweep", fields, key=f"{prefix}_view_sweep", format_func=SWEEPABLE.get) or fields[0]
    metric = "kv_cache_tokens" if field == "gpu_memory_utilization" else "max_concurrency"
    points = sweep(scenario, field, default_values(field, scenario, spec), spec)
    st.plotly_chart(sweep_figure(points, field, metric), config=CHART_CONFIG, key=f"sweep_{field}")
    st.download_button("Download this sweep (CSV)", points_to_csv(points, field), file_name=f"sweep-{field}.csv",
                       mime="text/csv", key=f"{prefix}_sweep_csv")


def plan_for_target(result: Estimate, workload: Workload) -> None:
    st.markdown(f"#### Capacity plan for {workload.target_concurrent_requests:,} concurrent requests")
    options = capacity_plan(result, workload)[:6]
    if not options:
        st.info("No tensor/pipeline layout up to 16 × 4 GPUs fits this model on this GPU.")
        return
    best = options[0]
    st.markdown(f"**{best.total_gpus} GPU(s)**: {best.replicas} replica(s) of TP={best.tensor_parallel_size} × "
                f"PP={best.pipeline_parallel_size}, each serving {best.concurrency_per_replica:,} requests at p95 lengths.")
    st.dataframe([option.model_dump() for option in options], hide_index=True)


def serve_round_trip(scenario: Scenario, prefix: str) -> None:
    st.markdown("#### Launch it")
    st.code(serve_command(scenario), language="bash")
    with st.expander("Import a `vllm serve` command"):
        text = st.text_area("Paste a `vllm serve ...` or `python -m vllm.entrypoints.openai.api_server ...` command",
                            key=f"{prefix}_import_text")
        if st.button("Fill the page from this command", key=f"{prefix}_import_button"):
            try:
                imported, notes = parse_serve_command(text, base=scenario)
            except CalculatorError as exc:
                st.error(sentence(exc))
                return
            request_apply(prefix, imported, None, [f"Imported command: {note}" for note in notes])


def share_and_export(link: str, result: Estimate) -> None:
    st.markdown("#### Share and export")
    st.caption("This link reproduces exactly this view (no token is ever put in it); use the copy icon.")
    st.code(link, language=None)
    st.download_button("Download the estimate (JSON)", json.dumps(estimate_summary(result), indent=2),
                       file_name="vllm-estimate.json", mime="application/json", key="estimate_json")
