"""The Plan page's Speed section: load, SLO and price inputs (sidebar), KPIs and the two-ceilings chart; the
capacity plan it returns is drawn by ``capacity_view``. The numbers come from ``calculator.speed.inputs.speed_plan``."""

from __future__ import annotations

import math
from typing import Any

import streamlit as st
from pydantic import ValidationError

from calculator import CalculatorError, Estimate, GpuSpec, Workload, find_gpu
from calculator.limits import field_bounds
from calculator.speed.bands import SpeedBands, speed_bands
from calculator.speed.charts import two_ceilings_figure
from calculator.speed.front_end import ENDPOINT_PATHS, ENDPOINTS
from calculator.speed.inputs import SpeedInputs, SpeedPlan, speed_plan
from calculator.speed.predict import ceiling_note
from calculator.speed.prices import gpu_price
from calculator.speed.speculation import speculation_gain, speculation_sentence
from calculator.units import format_ms, plural

from . import first_error, sentence
from .inputs import lazy_expander
from .state import CUSTOM_GPU, LOADS

# (field, label, placeholder, step): optional numbers; an empty box means "no limit" or "the default".
SLO_FIELDS = (
    ("ttft_p95_ms", "TTFT p95 SLO (ms)", "no limit", 100.0),
    ("tpot_ms", "ITL SLO (ms)", "no limit", 5.0),
    ("min_tok_s_per_user", "Min tokens/s per user", "no limit", 1.0),
    ("e2e_s", "End-to-end SLO (s)", "no limit", 1.0),
)
MEASURED_FIELDS = (
    ("bandwidth_efficiency", "Bandwidth efficiency (measured)", "fitted", 0.01),
    ("compute_efficiency", "Compute efficiency (measured)", "fitted", 0.01),
)


LABELS = {"usd_per_gpu_hour": "Price ($ per GPU-hour)", "gpu_memory_bandwidth_gb_s": "GPU bandwidth (GB/s)",
          "gpu_bf16_tflops": "GPU BF16 TFLOPS", "request_rate": "Request rate (requests/s)",
          **{field: label for field, label, _, _ in (*SLO_FIELDS, *MEASURED_FIELDS)}}


def _named(problem: str) -> str:
    """``usd_per_gpu_hour: input should ...`` as the sidebar labels the input: ``Price ($ per GPU-hour): ...``."""
    field, _, rest = problem.partition(": ")
    return f"{LABELS[field]}: {rest}" if field in LABELS else problem


def _number(prefix: str, field: str, label: str, placeholder: str, step: float, column=st) -> float | None:
    """An optional number within what SpeedInputs accepts for ``field`` (the same range as a link's)."""
    low, high = field_bounds(SpeedInputs, field)
    return column.number_input(label, value=None, step=step, placeholder=placeholder, format="%g",
                               min_value=None if low is None else float(low),
                               max_value=None if high is None else float(high), key=f"{prefix}_speed_{field}")


def _catalog_gpu(prefix: str) -> GpuSpec | None:
    key = st.session_state.get(f"{prefix}_gpu")
    if key in (None, CUSTOM_GPU):
        return None
    try:
        return find_gpu(key)
    except CalculatorError:
        return None


def inputs_section(prefix: str) -> SpeedInputs | str:
    """Sidebar: how the load arrives, SLOs, price, a custom GPU's rates; returns SpeedInputs or the reason."""
    st.subheader("Speed and cost")
    load, request_rate = load_input(prefix)
    endpoint = st.radio("Requests go to", ENDPOINTS, key=f"{prefix}_speed_endpoint", horizontal=True,
                        format_func=ENDPOINT_PATHS.get,
                        help="The chat endpoint renders the model's chat template; vLLM 0.8.2-0.9.1 and 0.11.0 "
                             "parse it on every request, one request at a time on the API server's event loop.")
    values: dict[str, Any] = {"request_rate": request_rate, "endpoint": endpoint, **slo_inputs(prefix)}
    values["usd_per_gpu_hour"] = _number(prefix, "usd_per_gpu_hour", "Price ($ per GPU-hour)", "price list", 0.1)
    # NOTE: shown for every GPU, as the CLI's --gpu-memory-bandwidth-gb-s overrides a catalog GPU's rate too.
    gpu = _catalog_gpu(prefix)
    values["gpu_memory_bandwidth_gb_s"] = _number(
        prefix, "gpu_memory_bandwidth_gb_s", "Custom GPU bandwidth (GB/s)" if gpu is None else
        "GPU bandwidth (GB/s), if not the catalog's", _rate_placeholder(gpu and gpu.memory_bandwidth_gb_s), 100.0)
    values["gpu_bf16_tflops"] = _number(
        prefix, "gpu_bf16_tflops", "Custom GPU BF16 TFLOPS (dense)" if gpu is None else
        "GPU BF16 TFLOPS (dense), if not the catalog's", _rate_placeholder(gpu and gpu.bf16_dense_tflops), 10.0)
    box = lazy_expander("Measured efficiencies (from the Live page)", f"{prefix}_speed_measured_open")
    for field, label, placeholder, step in MEASURED_FIELDS:
        values[field] = _number(prefix, field, label, placeholder, step, box)
    if load == LOADS[1] and values["request_rate"] is None:
        return "request rate: give the requests per second (or choose concurrent requests)"
    try:
        return SpeedInputs(**values)
    except ValidationError as exc:
        return _named(first_error(exc))


def _rate_placeholder(catalog_value: float | None) -> str:
    return f"{catalog_value:,.0f} (catalog)" if catalog_value else "needed for speed"


def load_input(prefix: str) -> tuple[str, float | None]:
    """How the load arrives (``LOADS``) and, for a request rate, how many requests per second."""
    load = st.radio("Load", LOADS, key=f"{prefix}_speed_load", horizontal=True,
                    help="Concurrent requests (closed loop: the workload's target) or a Poisson request rate.")
    if load == LOADS[1]:
        return load, _number(prefix, "request_rate", "Request rate (requests/s)", "requests/s", 1.0)
    return load, None


def slo_inputs(prefix: str) -> dict[str, float | None]:
    """The SLO fields, two per row (empty: no SLO)."""
    left, right = st.columns(2)
    return {field: _number(prefix, field, label, placeholder, step, left if i % 2 == 0 else right)
            for i, (field, label, placeholder, step) in enumerate(SLO_FIELDS)}


def usd(value: float | None, decimals: int = 2) -> str:
    """Dollars to the cent (or whole dollars); an amount below that shows its first digits rather than $0.00."""
    if value is None or not math.isfinite(value):
        return "no cost (nothing is generated)"
    if 0 < value < 10 ** -decimals:
        return f"${value:.2g}"
    return f"${value:,.{decimals}f}"


def band_note(bands: SpeedBands) -> None:
    """The regime the spreads come from, and a warning when the deployment lies outside the measured runs."""
    spreads = (f"TTFT p95 {format_ms(bands.ttft_p95_ms.low)}–{format_ms(bands.ttft_p95_ms.high)}, ITL "
               f"{format_ms(bands.tpot_ms.low)}–{format_ms(bands.tpot_ms.high)}")
    if bands.widened:
        st.warning(" ".join(bands.outside) + f" Spread ({bands.regime}): {spreads}.", icon="📏")
    else:
        st.caption(f"Measured spread ({bands.regime}: 80 % of real runs that the model never saw fell within "
                   f"it): {spreads}.")


def section(result: Estimate, workload: Workload, inputs: SpeedInputs | str) -> SpeedPlan | None:
    """KPIs and the two-ceilings chart; returns the plan for both ceilings (None: the speed model has no answer)."""
    st.markdown("### Speed")
    if not result.fits and result.on_gpu:  # NOTE: on a CPU the speed model's own reason comes first
        st.info("No speed or cost: vLLM does not start this deployment (see \"What would make it fit\" above).",
                icon="🛑")
        return None
    if isinstance(inputs, str):
        st.error(f"**Speed inputs: {inputs}.** Fix the highlighted value in the sidebar.", icon="✋")
        return None
    try:
        plan = speed_plan(result, workload, inputs, layouts=True)
    except CalculatorError as exc:
        st.info(sentence(exc).rstrip(".") + ".", icon="ℹ️")
        return None
    ceilings = plan.ceilings
    capacity = ceilings.plan
    per = capacity.per_replica
    bands = speed_bands(result, per)
    cost = capacity.cost_per_million_output_tokens
    with st.container(key="speed_kpis"):
        columns = st.columns(5)
        columns[0].metric("ITL", format_ms(per.tpot_ms),
                          help="Mean inter-token latency (time per output token), as the ITL SLO reads it.")
        columns[4].metric("Tokens/s per user", f"{per.per_user_tok_s:,.1f}",
                          help=f"1 / ITL ({format_ms(per.tpot_ms)}); measured spread "
                               f"{bands.per_user_tok_s.low:,.1f}–{bands.per_user_tok_s.high:,.1f}.")
        columns[1].metric("TTFT p95", format_ms(per.ttft_p95_ms),
                          help=f"Prefill of the p95 prompt plus the p95 of the queue wait and of the step in flight at "
                               f"arrival, under the "
                               f"{per.traffic.arrival}; spread "
                               f"{format_ms(bands.ttft_p95_ms.low)}–{format_ms(bands.ttft_p95_ms.high)}.")
        columns[2].metric("Throughput per replica", f"{per.output_throughput_tok_s:,.0f} tok/s",
                          help=f"Output tokens/s of one replica; spread {bands.output_throughput_tok_s.low:,.0f}"
                               f"–{bands.output_throughput_tok_s.high:,.0f}.")
        columns[3].metric("Cost per million output tokens", "no price" if per.gpu_price is None else usd(cost),
                          help="GPU-hours paid over the tokens generated at the planned load (idle capacity "
                               "is paid for too).")
    st.caption(f"TTFT figures assume the {per.traffic.arrival}. A `vllm bench serve` run (its burst, ramp-up and "
               "tail) is another load: the Recommend page's benchmark load and `python -m calculator bench` "
               "simulate it.")
    price = per.gpu_price or gpu_price(result.gpu)
    load = (plural(per.traffic.concurrency, "concurrent request") if per.traffic.concurrency is not None
            else f"{per.traffic.request_rate:,.3g} requests/s")
    # NOTE: under a request rate the engine's limit binds only once the cache or max_num_seqs is full; below that
    # the arrivals set how many run (issue 29 item 8: "limited by kv_cache" with 39 of 184 slots in use).
    limit = (f"the arrival rate ({per.running_requests:,.1f} of the {per.concurrency.served:,} requests the "
             f"{per.concurrency.binding} allows run on average)"
             if per.traffic.request_rate is not None and not per.saturated
             and per.running_requests < per.concurrency.served else per.concurrency.binding)
    st.caption(f"Per replica at the planned {plural(capacity.replicas, 'replica')}, each serving {load}; decode is "
               f"{per.decode_bound}-bound; {per.compute_path} {ceiling_note(per)}; served concurrency limited by "
               f"{limit}. "
               + (f"Price {usd(price.usd_per_gpu_hour)}/GPU-hour ({price.source})." if price else
                  "No price for this GPU: give one in the sidebar."))
    band_note(bands)
    if per.front_end.seconds:
        st.caption(f"TTFT includes the API server's front end: {per.front_end.reason}.")
    if (gain := speculation_gain(result, per.traffic)) is not None:
        st.caption(f"Speculative decoding {speculation_sentence(gain)}.")
    st.plotly_chart(two_ceilings_figure(plan.sweep, plan.slo), key="two_ceilings",
                    config={"displaylogo": False})
    return plan

