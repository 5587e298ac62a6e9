"""The memory stack twice, side by side: what vLLM printed and what the estimate predicts, per GPU (pure Plotly)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from ..charts import SEGMENT_COLORS
from ..units import GIB, MIB
from .diagnose import Diagnosis

PRINTED, PREDICTED = "vLLM printed", "Estimate"
# Printed term -> (segment colour key, label), bottom first.
_STACK = (("weights_gib", "weights", "Weights"), ("activation_peak_gib", "activation", "Activation peak"),
          ("non_torch_memory_gib", "non_torch", "Non-torch (NCCL, cuBLAS)"),
          ("cudagraph_gib", "cudagraph", "CUDA graphs"),
          ("available_kv_cache_gib", "kv_cache", "KV cache"))


def printed_vs_predicted_figure(found: Diagnosis) -> go.Figure:
    """Two stacked bars; a term the log does not print is left out of its bar and named in the hover."""
    values = {row.key: (row.printed, row.predicted) for row in found.rows}
    if "weights_gib" in values and values["weights_gib"][0] is None and "consumed_memory_gib" in values:
        values["weights_gib"] = (values["consumed_memory_gib"][0], values["weights_gib"][1])
    tallest = max(sum(max(pair[i] or 0, 0) for key, *_ in _STACK for pair in [values.get(key, (0, 0))])
                  for i in (0, 1))
    # NOTE: a tiny model on the CPU build would read as 0.00 GiB.
    unit_name, unit = ("MiB", MIB / GIB) if tallest < 1 else ("GiB", 1.0)
    traces: list[dict[str, Any]] = []
    for key, color, label in _STACK:
        printed, predicted = values.get(key, (None, 0.0))
        shown = [None if printed is None else max(printed, 0) / unit, max(predicted, 0) / unit]
        traces.append(dict(type="bar", x=[PRINTED, PREDICTED], y=shown, name=label,
                           marker={"color": SEGMENT_COLORS[color]},
                           customdata=[["printed" if printed is not None else "not printed"], ["predicted"]],
                           hovertemplate=f"{label}: %{{y:.2f}} {unit_name} (%{{customdata[0]}})<extra></extra>"))
    layout: dict[str, Any] = dict(barmode="stack", title={"text": "Memory per GPU: what vLLM printed vs the estimate",
                                                          "x": 0.01},
                                  yaxis={"title": {"text": unit_name}, "gridcolor": "#e2e8f0"},
                                  plot_bgcolor="white", legend=dict(orientation="h", y=-0.15), bargap=0.45,
                                  margin=dict(l=10, r=40, t=50, b=10))
    requested = found.log.printed.requested_memory_gib or found.result.budget.requested_bytes / GIB
    if found.result.settings.device != "cpu":
        layout["shapes"] = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": requested / unit,
                             "y1": requested / unit, "line": {"dash": "dash", "color": "#0f172a"}}]
        layout["annotations"] = [{"text": f"gpu_memory_utilization × total ({requested:,.2f} GiB)", "showarrow": False,
                                  "xref": "paper", "x": 0, "xanchor": "left", "yref": "y", "y": requested / unit,
                                  "yanchor": "bottom"}]
    return go.Figure(data=traces, layout=layout)
