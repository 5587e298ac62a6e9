"""Pure chart builders for speed: the two ceilings (throughput and ITL against concurrency) and cost against
latency with the Pareto front. Figures are data: tested as objects."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import plotly.graph_objects as go

from .plan import Slo
from .recommend import Option, Recommendations
from .sweep import ConcurrencySweep

THROUGHPUT_COLOR, ITL_COLOR, CEILING_COLOR, SLO_COLOR = "#1d4ed8", "#ea580c", "#16a34a", "#dc2626"
LABEL_APART_DECADES = 1.0  # ceilings closer than 10x on the log axis get their labels at opposite ends
LatencyMetric = Literal["ttft_p95_ms", "tpot_ms"]
LATENCY_LABELS = {"ttft_p95_ms": "TTFT p95 (ms)", "tpot_ms": "inter-token latency (ms)"}


def _translucent(hex_color: str, alpha: float = 0.15) -> str:
    red, green, blue = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({red}, {green}, {blue}, {alpha})"


def _vertical(x: float, text: str, color: str, anchor: str = "left") -> tuple[dict, dict]:
    return ({"type": "line", "xref": "x", "x0": x, "x1": x, "yref": "paper", "y0": 0, "y1": 1,
             "line": {"dash": "dash", "color": color}},
            # NOTE: on a log axis plotly places annotations in log10 units (shapes take data values)
            {"text": text, "xref": "x", "x": math.log10(x), "yref": "paper", "y": 1, "showarrow": False,
             "xanchor": anchor, "yanchor": "bottom"})


def two_ceilings_figure(sweep: ConcurrencySweep, slo: Slo | None = None) -> go.Figure:
    """Output throughput (left axis) and ITL (right axis) against concurrency, with the KV-cache ceiling, the
    ``max_num_seqs`` ceiling and the ITL SLO marked."""
    x = [p.traffic.concurrency for p in sweep.points]
    traces = [
        dict(type="scatter", x=x, y=[p.output_throughput_tok_s for p in sweep.points], name="output tokens/s",
             mode="lines+markers", line={"color": THROUGHPUT_COLOR}),
        dict(type="scatter", x=x, y=[p.tpot_ms for p in sweep.points], name="ITL (ms)", mode="lines+markers",
             yaxis="y2", line={"color": ITL_COLOR}),
    ]
    # The calibrated range around each line (BAND_FACTOR: the residual spread on measured runs), as the KV band.
    for name, bands, color, axis in (
            ("output tokens/s", [p.output_throughput_band_tok_s for p in sweep.points], THROUGHPUT_COLOR, "y"),
            ("ITL (ms)", [p.tpot_band_ms for p in sweep.points], ITL_COLOR, "y2")):
        traces.append(dict(type="scatter", x=x, y=[b.low for b in bands], yaxis=axis, mode="lines",
                           line={"width": 0}, showlegend=False, hoverinfo="skip", legendgroup=name))
        traces.append(dict(type="scatter", x=x, y=[b.high for b in bands], yaxis=axis, mode="lines",
                           line={"width": 0}, fill="tonexty", fillcolor=_translucent(color),
                           name=f"{name}: calibrated range", hoverinfo="skip", legendgroup=name))
    shapes, annotations = [], []
    for value, text in ((sweep.kv_cache_concurrency, f"KV cache: {sweep.kv_cache_concurrency}"),
                        (sweep.max_num_seqs, f"max_num_seqs: {sweep.max_num_seqs}")):
        # the farther ceiling sits at the axis' end: its label reads leftwards so it is not cut off
        farther = value == max(sweep.kv_cache_concurrency, sweep.max_num_seqs) != min(sweep.kv_cache_concurrency,
                                                                                        sweep.max_num_seqs)
        shape, note = _vertical(value, text, CEILING_COLOR, "right" if farther else "left")
        if farther and math.log10(value / min(sweep.kv_cache_concurrency, sweep.max_num_seqs)) < LABEL_APART_DECADES:
            # NOTE: two ceilings close together (KV 371, max_num_seqs 1024) would print one label over the other:
            # the farther one's goes to the foot of its line.
            note = {**note, "y": 0, "yanchor": "bottom", "yref": "paper"}
        shapes.append(shape)
        annotations.append(note)
    limit = slo.tpot_limit_ms if slo else None
    if limit is not None:
        shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y2", "y0": limit, "y1": limit,
                       "line": {"dash": "dot", "color": SLO_COLOR}})
        annotations.append({"text": f"ITL SLO {limit:g} ms", "xref": "paper", "x": 0, "yref": "y2", "y": limit,
                            "showarrow": False, "xanchor": "left", "yanchor": "bottom"})
    # NOTE: a ceiling past the sweep (max_num_seqs 1024 above a KV limit of 200) would fall off the axis, and
    # plotly draws no line or label outside it: the axis runs to the farthest ceiling.
    farthest = max([*x, sweep.kv_cache_concurrency, sweep.max_num_seqs])
    # NOTE: one Figure built from every trace and the layout at once: adding traces and layout one call at a time
    # validated the figure again each time (half of its cost on every Plan rerun). Plain dicts and _validate=False
    # skip plotly's per-property checks too (as ``calculator.charts._figure``; tests/test_speed_charts.py validates).
    return go.Figure(traces, _validate=False, layout={
        "title": {"text": "Two ceilings: throughput and latency against concurrency"}, "shapes": shapes,
        "annotations": annotations,
        "xaxis": {"title": {"text": "concurrent requests"}, "type": "log", "range": [0, math.log10(farthest * 1.15)]},
        "yaxis": {"title": {"text": "output tokens/s per replica"}},
        "yaxis2": {"title": {"text": "ITL (ms)"}, "overlaying": "y", "side": "right"}, "plot_bgcolor": "white",
        "legend": {"orientation": "h", "y": -0.2}})


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both cost and latency (lower is better), by cost."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front, best_latency = [], float("inf")
    for i in order:
        if points[i][1] < best_latency:
            front.append(i)
            best_latency = points[i][1]
    return front


def _label(option: Option) -> str:
    d = option.deployment
    parts = [f"{d.gpu_name} TP{d.tensor_parallel_size}"]
    if d.pipeline_parallel_size > 1:
        parts.append(f"PP{d.pipeline_parallel_size}")
    if d.quantization:
        parts.append(d.quantization)
    if d.kv_cache_dtype != "auto":
        parts.append(f"KV {d.kv_cache_dtype}")
    return " ".join(parts) + f" x{option.plan.replicas}" if option.plan else " ".join(parts)


def cost_latency_figure(result: Recommendations, latency: LatencyMetric = "ttft_p95_ms") -> go.Figure:
    """Every qualifying deployment's cost per hour against its latency, the Pareto front joined."""
    options = list(result.by_cost_per_hour)
    # NOTE: TTFT p95 is the one ranked on: the benchmark load's when Recommend was given one
    points = [(o.plan.cost_per_hour,
               o.ttft_p95_ms if latency == "ttft_p95_ms" else getattr(o.plan.per_replica, latency)) for o in options]
    front = pareto_front(points)
    figure = go.Figure([
        go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="markers", name="deployments",
                   text=[_label(o) for o in options], marker={"color": "#94a3b8", "size": 8}),
        go.Scatter(x=[points[i][0] for i in front], y=[points[i][1] for i in front], mode="lines+markers",
                   name="Pareto front", text=[_label(options[i]) for i in front],
                   marker={"color": THROUGHPUT_COLOR, "size": 10}, line={"color": THROUGHPUT_COLOR}),
    ])
    figure.update_layout(title="Cost against latency (each point meets the SLOs)", plot_bgcolor="white",
                         xaxis={"title": "dollars per hour"}, yaxis={"title": LATENCY_LABELS[latency]},
                         legend={"orientation": "h", "y": -0.2})
    return figure
