"""The page's one capacity plan: replicas and GPUs for the load with memory and speed together, the ceiling that
binds, the memory ceiling labelled as such, and every other layout considered with why it loses."""

from __future__ import annotations

import streamlit as st

from calculator import Estimate, Workload, WorkloadCapacity
from calculator.speed.inputs import SpeedPlan
from calculator.units import format_ms, plural

from .speed_view import usd


def gpu_count(replicas: int, gpus_per_replica: int) -> str:
    """"3 replicas × 2 GPU(s) = 6 GPUs": the page's one way to say a GPU count."""
    return f"{plural(replicas, 'replica')} × {gpus_per_replica} GPU(s) = {plural(replicas * gpus_per_replica, 'GPU')}"


def draw(plan: SpeedPlan, workload: Workload) -> None:
    """The plan for the deployment as set, then the other layouts (the numbers of ``calculator.speed.layouts``)."""
    ceilings, capacity = plan.ceilings, plan.ceilings.plan
    st.markdown("#### Capacity plan")
    slo_given = bool(plan.slo.model_dump(exclude_none=True))
    memory = ("under a request rate the KV cache queues the excess (its wait is in TTFT)"
              if ceilings.memory_replicas is None else
              f"**{plural(ceilings.memory_replicas, 'replica')}** to hold "
              f"{plural(workload.target_concurrent_requests, 'concurrent request')} "
              f"({ceilings.requests_per_replica:,} per replica at p95 lengths; memory only, no SLO)")
    speed = f"**{plural(ceilings.speed_replicas, 'replica')}** " + (
        "to meet the SLOs" if slo_given else "to serve the load (no SLO set)")
    if not capacity.meets_slo and ceilings.binding == "speed":
        speed = (f"no replica count meets the SLOs; at **{plural(ceilings.speed_replicas, 'replica')}** each serves "
                 "its smallest share of the load and still misses them")
    money = ""
    if capacity.cost_per_hour is not None:
        money = (f", **{usd(capacity.cost_per_hour)}/hour** ({usd(capacity.cost_per_month, 0)}/month), "
                 f"{usd(capacity.cost_per_million_output_tokens)} per million output tokens")
    per = capacity.per_replica
    st.markdown(f"**Plan: {gpu_count(capacity.replicas, capacity.gpus_per_replica)}**{money}; TTFT p95 "
                f"{format_ms(per.ttft_p95_ms)}, ITL {format_ms(per.tpot_ms)}; the {ceilings.binding} ceiling binds.\n\n"
                f"- Memory ceiling: {memory}\n- Speed ceiling: {speed}")
    if not capacity.meets_slo:
        st.warning("Even at this count the SLOs are missed: " + "; ".join(capacity.violations) + ".", icon="⏱️")
    layouts = plan.layouts
    if layouts is None or not layouts.alternatives:
        return
    better = [o for o in layouts.alternatives if o.better]
    if better:
        best = better[0]
        st.info(f"Another layout does better: TP {best.tensor_parallel_size} × PP {best.pipeline_parallel_size} "
                f"({best.reason}). Set it in the sidebar to plan with it.", icon="💡")
    expander = st.expander(f"Other layouts considered ({len(layouts.alternatives)}), each planned for memory and speed",
                           key="layouts_open", on_change="rerun")
    if expander.open:  # NOTE: the table is built and sent only when open (the hint above needs the layouts anyway)
        expander.dataframe([_row(o) for o in layouts.alternatives], hide_index=True, key="layouts_considered",
                            width="stretch")


def _row(option) -> dict[str, str]:
    plan = option.ceilings.plan if option.ceilings else None
    return {"layout": f"TP {option.tensor_parallel_size} × PP {option.pipeline_parallel_size}",
            "GPUs": f"{plan.gpus:,}" if plan else "—",
            "$/hour": usd(plan.cost_per_hour) if plan and plan.cost_per_hour is not None else "—",
            "TTFT p95": format_ms(plan.per_replica.ttft_p95_ms) if plan else "—",
            "ITL": format_ms(plan.per_replica.tpot_ms) if plan else "—",
            "verdict": option.reason}


def memory_only(result: Estimate, capacity: WorkloadCapacity, workload: Workload, why: str) -> None:
    """The plan when the speed model has no answer: the memory ceiling alone, labelled as such."""
    st.markdown("#### Capacity plan")
    if not result.fits:
        st.info("No capacity plan: vLLM does not start this deployment (see \"What would make it fit\" above).",
                icon="🛑")
        return
    st.markdown(f"**Plan (memory ceiling only: {why}): {gpu_count(capacity.replicas_for_target, result.num_gpus)}**, "
                f"each holding {plural(capacity.concurrency_p95, 'request')} of "
                f"{workload.target_concurrent_requests:,} at p95 lengths (limited by {capacity.limited_by_p95}).")
