"""The Live page's latency panels: vLLM's latency histograms as p50/p95 per interval, the speed model's
prediction for the server's concurrency and lengths, achieved bandwidth and FLOPs, and the diagnosis."""

from __future__ import annotations

from collections import deque

import streamlit as st

from calculator import CalculatorError, Estimate, Workload
from calculator.charts import latency_percentiles_figure
from calculator.observe.latency import (
    COUNTED,
    LATENCY_HISTOGRAMS,
    Efficiency,
    diagnosis,
    efficiency,
    interval_percentiles,
    latency_history,
    notes_to_show,
    observed_concurrency,
    observed_traffic,
    predicted,
    prediction_vs_measured,
)
from calculator.observe.metrics import EngineMetrics, Rates
from calculator.observe.quantile import Quantile
from calculator.speed.calibration import MAX_BANDWIDTH_EFFICIENCY
from calculator.speed.hardware import gpu_rates
from calculator.speed.inputs import SpeedInputs

from . import sentence
from .outputs import CHART_CONFIG
from .state import plan_link

LABELS = dict(LATENCY_HISTOGRAMS)


def _ms(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    ms = seconds * 1e3
    return f"{ms:,.1f}" if ms >= 10 or ms == 0 else f"{ms:.3g}"


def _quantile_ms(quantile: Quantile) -> str | None:
    """A quantile as the histogram can vouch for it: where the first bucket holds it and the sum does not pin it,
    only its bound (the interpolated figure inside that bucket is an artefact)."""
    if quantile.first_bucket and not quantile.exact:
        return f"< {_ms(quantile.high)} (below the first bucket)"
    return _ms(quantile.value)


def latency_section(points: deque, engine: EngineMetrics, change: Rates | None, actual: Estimate | None,
                    workload: Workload | None, key: str, advice: list[str], on_cpu: bool = False) -> None:
    """Everything about latency for one engine, then the diagnosis; ``points`` holds (time, metrics, activity) per
    read, ``advice`` what the latest read alone says (shown where the diagnosis of the recent reads is silent)."""
    reads = [(t, e) for t, e, _ in points]
    recent = latency_record(reads, key)
    prediction = _prediction(engine, points, change, actual, workload, recent, key)
    _efficiency(reads, actual, workload, key)
    measured = change.generation_tokens_per_s if change is not None else None
    st.markdown("#### Diagnosis")
    shown = notes_to_show(diagnosis(reads, measured, prediction, on_cpu), advice)
    for note, diagnosed in shown:
        st.warning(note, icon="🩺" if diagnosed else "⚠️")
    if not shown:
        st.caption("Nothing in the recent reads points to a bottleneck.")


def latency_record(reads: list, key: str, unreachable: tuple[float, float] | None = None) -> dict:
    """The latest interval's quantile table and the p50/p95 chart over ``reads`` ((time, metrics) per read);
    ``unreachable`` (since, now) shades the time the server has not answered, the record kept from before it
    stopped. Returns the table's percentiles per latency."""
    st.markdown("#### Latency")
    latest = reads[-1][1]
    recent = interval_percentiles(reads[-2][1] if len(reads) > 1 else None, latest)
    since = "between the last two reads before the server stopped" if unreachable else "since the previous read"
    if not recent:
        recent, since = interval_percentiles(None, latest), "since the server started"
    if not recent:
        st.caption("The server has not finished a request yet: its latency histograms are empty.")
    else:
        st.dataframe([{"latency": LABELS[field], "p50 (ms)": _quantile_ms(p.p50), "p95 (ms)": _quantile_ms(p.p95),
                       "mean (ms)": _ms(p.mean_s), "counted": f"{p.count:,} {COUNTED.get(field, 'requests')}"}
                      for field, p in recent.items()], hide_index=True, key=f"latency_{key}")
        st.caption(f"Requests that finished {since}; quantiles interpolate inside vLLM's buckets, as PromQL's "
                   "histogram_quantile does, then are kept within what each histogram's count and sum allow.")
    history = latency_history(reads)
    if any(history.values()):
        series = {field: [(t, p.p50_s, p.p95_s) for t, p in values] for field, values in history.items()}
        st.plotly_chart(latency_percentiles_figure(series, LABELS, unreachable), config=CHART_CONFIG,
                        key=f"latency_chart_{key}")
    return recent


def _prediction(engine: EngineMetrics, points: deque, change: Rates | None, actual: Estimate | None,
                workload: Workload | None, measured: dict, key: str) -> float | None:
    """The speed model next to what the server measured; returns the predicted output tokens/s."""
    st.markdown("##### Speed model vs measured")
    if actual is None:
        st.caption("Choose the served model's config (sidebar) to see the speed model's prediction.")
        return None
    if not actual.on_gpu:
        st.info("The speed model covers GPUs; this server runs on the CPU, so no speed is predicted for it.",
                icon="ℹ️")
        return None
    _, latest, activity = points[-1]
    concurrency = observed_concurrency(latest.running, activity)
    try:
        traffic = observed_traffic(workload, concurrency) if workload is not None else None
        if traffic is None:
            st.caption("No request ran at or between the reads: the prediction needs the server's concurrency and "
                       "request lengths.")
            return None
        speed = predicted(actual, traffic)
    except CalculatorError as exc:
        st.warning(f"Speed model: {sentence(exc)}", icon="⚠️")
        return None
    rows = prediction_vs_measured(speed, measured, change.generation_tokens_per_s if change else None)
    st.dataframe([{"quantity": row.quantity, "predicted": round(row.predicted, 2),
                   "measured": None if row.measured is None else round(row.measured, 2),
                   "error %": None if row.error_pct is None else round(row.error_pct, 1)} for row in rows],
                 hide_index=True, key=f"speed_cmp_{key}")
    st.caption(f"Predicted for {traffic.concurrency:,} concurrent request(s) of {traffic.input_tokens:,} prompt "
               f"and {traffic.output_tokens:,} output tokens (the server's length histograms) on "
               f"{speed.gpu_name} × {speed.num_gpus}; times in ms.")
    return speed.output_throughput_tok_s


def _efficiency(reads: list, actual: Estimate | None, workload: Workload | None, key: str) -> None:
    """Achieved bandwidth and FLOPs from vLLM's roofline counters; on a GPU, a Plan link carrying them."""
    if len(reads) < 2 or reads[-1][1].estimated_read_bytes_total is None:
        return
    (before_t, before), (now_t, now) = reads[-2], reads[-1]
    on_gpu = actual is not None and actual.on_gpu
    rates = None
    if on_gpu and actual.gpu.memory_bandwidth_gb_s and actual.gpu.bf16_dense_tflops:
        rates = gpu_rates(actual.gpu, actual.quantization)
    achieved: Efficiency | None = efficiency(before, now, now_t - before_t,
                                             rates.memory_bandwidth_bytes_s if rates else 1.0,
                                             rates.peak_flops if rates else 1.0)
    if achieved is None:
        st.caption("vLLM's roofline counters (estimated bytes read and FLOPs per GPU) did not move since the "
                   "previous read.")
        return
    st.markdown("##### Achieved bandwidth and FLOPs (vLLM's estimates)")
    left, right = st.columns(2)
    bandwidth = f"{achieved.read_bytes_per_s / 1e9:,.2f} GB/s"
    flops = f"{achieved.flops_per_s / 1e12:,.3f} TFLOP/s"
    if rates is None:
        left.metric("Bytes read per GPU", bandwidth)
        right.metric("FLOPs per GPU", flops)
        st.caption("Utilisation needs a GPU's datasheet bandwidth and TFLOPS; this server runs on the CPU.")
        return
    left.metric("Bandwidth utilisation", f"{achieved.bandwidth_utilisation:.1%}", help=f"{bandwidth} per GPU")
    right.metric("FLOPs utilisation", f"{achieved.flops_utilisation:.1%}", help=f"{flops} per GPU")
    # NOTE: the speed model's efficiencies are shares of the card's measured streaming rate and matmul ceiling, not
    # of the datasheet peaks the utilisation above is shown against
    streamed = rates.share_of_streaming(achieved.read_bytes_per_s)
    measured = SpeedInputs(bandwidth_efficiency=min(MAX_BANDWIDTH_EFFICIENCY, max(streamed, 1e-6)),
                           compute_efficiency=min(1.0, max(rates.share_of_ceiling(achieved.flops_per_s), 1e-6)))
    st.link_button("Open the Plan page calibrated with these efficiencies",
                   plan_link(actual.scenario, workload, measured))
    st.caption(f"Over the last {achieved.interval_s:,.1f} s, idle time included: a busy interval measures the "
               "efficiency the speed model uses.")
