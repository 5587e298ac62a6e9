"""Pure chart builders: Estimate -> plotly Figure. Figures are data, so they are tested as objects."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any, NamedTuple

import plotly.graph_objects as go

from .engine.estimate import Estimate
from .engine.memory import MemoryBudget, MemorySegment
from .engine.workload import WorkloadCapacity
from .sweeps import SWEEPABLE, SweepPoint, fit_boundary
from .units import GIB, MIB, format_bytes

SEGMENT_COLORS = {
    "weights": "#1d4ed8", "activation": "#f59e0b", "non_torch": "#a855f7", "cudagraph": "#ec4899",
    "extensible_reserve": "#94a3b8", "kv_cache": "#16a34a", "kv_used": "#15803d", "context": "#64748b",
    "other": "#ef4444", "unused": "#e2e8f0", "calibration": "#0ea5e9", "lora": "#6366f1", "draft": "#0d9488",
}
# NOTE: no plotly template: building one costs ~70 ms per figure, and Streamlit applies its own theme anyway.
# NOTE: a vertical mode bar at the right edge never covers a title; the title starts at the left.
_LAYOUT = dict(margin=dict(l=10, r=40, t=50, b=10), legend=dict(orientation="h", y=-0.15),
               plot_bgcolor="white", yaxis=dict(gridcolor="#e2e8f0"), modebar=dict(orientation="v"),
               title_x=0.01)


def _figure(data: list[dict[str, Any]], title: str, **layout: Any) -> go.Figure:
    """One figure built in one go from plain dicts: a fifth of the cost of add_trace + update_layout calls, which
    re-validate the whole figure each time (this runs on every slider move)."""
    merged: dict[str, Any] = {key: dict(value) if isinstance(value, dict) else value for key, value in _LAYOUT.items()}
    merged.pop("title_x")
    merged["title"] = {"text": title, "x": _LAYOUT["title_x"]}
    for key, value in layout.items():
        if key.endswith("_title"):
            merged.setdefault(key[: -len("_title")], {})["title"] = {"text": value}
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    # NOTE: _validate=False skips plotly's per-property checks, half of the figure's cost on every Plan rerun; the
    # browser gets the same JSON, and tests/test_charts.py validates every figure's dict (a misspelt key fails there).
    return go.Figure(data=data, layout=merged, _validate=False)
OVER_BUDGET_COLOR = "#dc2626"


def _reference_line(axis: str, value: object, text: str, color: str) -> dict[str, list[dict]]:
    """A dashed line across the plot with a label (what add_hline/add_vline draw, for a fraction of the cost)."""
    spanning = {"xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": value, "y1": value} if axis == "y" else \
        {"yref": "paper", "y0": 0, "y1": 1, "xref": "x", "x0": value, "x1": value}
    label = {"xref": "paper", "x": 0, "yref": "y", "y": value, "xanchor": "left"} if axis == "y" else \
        {"yref": "paper", "y": 1, "xref": "x", "x": value, "xanchor": "left"}
    return {"shapes": [{"type": "line", "line": {"dash": "dash", "color": color}, **spanning}],
            "annotations": [{"text": text, "showarrow": False, "yanchor": "bottom", **label}]}


def _drawn_segments(budget: MemoryBudget) -> tuple[MemorySegment, ...]:
    """The stack to draw: when nothing is left for the KV cache, no "unused headroom" that looks like spare room."""
    if budget.kv_cache_bytes < 0 and not budget.kv_cache_memory_bytes_given:
        return tuple(s for s in budget.segments() if s.key != "unused")
    return budget.segments()


def over_budget_bytes(budget: MemoryBudget) -> int:
    """How far the parts inside ``total × gpu_memory_utilization`` exceed it (0 when the KV cache gets memory)."""
    return max(-budget.kv_cache_bytes, 0) if not budget.kv_cache_memory_bytes_given else 0


def _stack_traces(budget: MemoryBudget, column: str, *, show_legend: bool,
                  kv_used_fraction: float | None = None,
                  unit: tuple[str, int] = ("GiB", GIB)) -> list[dict[str, Any]]:
    unit_name, unit_bytes = unit
    traces = []
    for segment in _drawn_segments(budget):
        pieces: list[MemorySegment | tuple[str, str, int]] = [segment]
        if segment.key == "kv_cache" and kv_used_fraction is not None:
            used = int(segment.bytes * min(max(kv_used_fraction, 0.0), 1.0))
            pieces = [("kv_used", "KV cache in use (live)", used), ("kv_cache", "KV cache free", segment.bytes - used)]
        for piece in pieces:
            key, label, size = ((piece.key, piece.label, piece.bytes) if isinstance(piece, MemorySegment) else piece)
            percent = 100 * size / budget.total_bytes if budget.total_bytes else 0.0
            traces.append(dict(
                type="bar", x=[column], y=[size / unit_bytes], name=label, legendgroup=key, showlegend=show_legend,
                marker={"color": SEGMENT_COLORS.get(key, "#cbd5e1")},
                customdata=[[percent]],
                hovertemplate=f"{label}: %{{y:.2f}} {unit_name} (%{{customdata[0]:.1f}}%)<extra>{column}</extra>",
            ))
    return traces


def memory_stack_figure(result: Estimate, *, kv_used_fraction: float | None = None,
                        kv_band_bytes: tuple[int, int] | None = None) -> go.Figure:
    """Stacked bar of one GPU's memory per pipeline stage; the stack sums to the GPU's memory.

    ``kv_band_bytes`` (low, high) draws the calibrated uncertainty of the KV pool as an error bar on its top.
    """
    traces: list[dict[str, Any]] = []
    stages = result.budgets_per_stage
    on_cpu = result.settings.device == "cpu"
    stacked = max(sum(segment.bytes for segment in budget.segments()) for budget in stages)
    # NOTE: tiny models on the CPU build would read as 0.00 GiB.
    unit = ("MiB", MIB) if stacked < GIB else ("GiB", GIB)
    for index, budget in enumerate(stages):
        column = ("CPU" if on_cpu else "GPU") if len(stages) == 1 else f"PP stage {index}"
        for trace in _stack_traces(budget, column, show_legend=index == 0, kv_used_fraction=kv_used_fraction,
                                   unit=unit):
            if kv_band_bytes is not None and trace["legendgroup"] == "kv_cache" and budget is result.budget:
                nominal = max(budget.kv_cache_bytes, 0)
                trace["error_y"] = dict(type="data", symmetric=False, color="#0f172a", thickness=2, width=12,
                                        array=[max(kv_band_bytes[1] - nominal, 0) / unit[1]],
                                        arrayminus=[max(nominal - kv_band_bytes[0], 0) / unit[1]])
            traces.append(trace)
    budget = result.budget
    if on_cpu:
        # NOTE: the CPU build takes a fixed KV space (VLLM_CPU_KVCACHE_SPACE); there is no device total to fill.
        return _figure(traces, f"Memory on the CPU for the model ({format_bytes(stacked)})", barmode="stack",
                       yaxis_title=unit[0], bargap=0.55)
    marks = _kv_and_overflow_marks(result, unit, "GPU" if len(stages) == 1 else
                                   f"PP stage {result.budgets_per_stage.index(budget)}")
    line = _reference_line("y", budget.requested_bytes / unit[1],
                           f"gpu_memory_utilization {budget.gpu_memory_utilization:g}", "#0f172a")
    return _figure(traces, f"Memory per GPU ({budget.total_bytes / GIB:.2f} GiB)", barmode="stack",
                   yaxis_title=unit[0], bargap=0.55 if len(stages) == 1 else 0.3,
                   shapes=line["shapes"] + marks["shapes"], annotations=line["annotations"] + marks["annotations"])


def _kv_and_overflow_marks(result: Estimate, unit: tuple[str, int], column: str) -> dict[str, list[dict]]:
    """A label pointing at the KV pool (it can be a thin sliver), or the over-budget part drawn in red."""
    budget, (unit_name, unit_bytes) = result.budget, unit
    segments = _drawn_segments(budget)
    bottom = sum(s.bytes for s in segments[: [s.key for s in segments].index("kv_cache")])
    kv = max(budget.kv_cache_bytes, 0)
    over = over_budget_bytes(budget)
    if over:
        top = budget.requested_bytes + over
        return {"shapes": [{"type": "rect", "xref": "paper", "x0": 0.25, "x1": 0.75, "yref": "y",
                            "y0": budget.requested_bytes / unit_bytes, "y1": top / unit_bytes,
                            "fillcolor": OVER_BUDGET_COLOR, "opacity": 0.3, "line": {"color": OVER_BUDGET_COLOR}}],
                "annotations": [{"text": f"over budget by {over / unit_bytes:,.2f} {unit_name}: nothing left for "
                                         "the KV cache", "showarrow": False, "xref": "paper", "x": 0.5,
                                 "yref": "y", "y": top / unit_bytes, "yanchor": "bottom",
                                 "font": {"color": OVER_BUDGET_COLOR}}]}
    share = 100 * kv / budget.total_bytes if budget.total_bytes else 0.0
    text = (f"KV cache {kv / unit_bytes:,.2f} {unit_name} ({share:.1f}%)<br>"
            f"{result.capacity.kv_cache_tokens:,} tokens")
    return {"shapes": [], "annotations": [{"text": text, "x": column, "y": (bottom + kv / 2) / unit_bytes,
                                           "xref": "x", "yref": "y", "showarrow": True, "arrowhead": 2, "ax": 90,
                                           "ay": 0, "xanchor": "left", "align": "left",
                                           "bgcolor": "rgba(255,255,255,0.85)",
                                           "font": {"color": SEGMENT_COLORS["kv_used"]}}]}


def compare_memory_figure(results: Sequence[tuple[str, Estimate]]) -> go.Figure:
    """One stacked bar per scenario (the busiest GPU of each), for side-by-side comparison."""
    traces: list[dict[str, Any]] = []
    seen: set[str] = set()
    for name, result in results:
        for trace in _stack_traces(result.budget, name, show_legend=True):
            trace["showlegend"] = trace["legendgroup"] not in seen
            seen.add(trace["legendgroup"])
            traces.append(trace)
    return _figure(traces, "Memory per GPU by scenario", barmode="stack", yaxis_title="GiB")


def sweep_figure(points: Sequence[SweepPoint], field: str, metric: str = "max_concurrency") -> go.Figure:
    """A metric across a sweep; points that do not fit are drawn in red and the fit boundary is marked."""
    label = {"max_concurrency": "max concurrency (x)", "kv_cache_tokens": "KV cache tokens",
             "kv_cache_gib": "KV cache (GiB)"}[metric]
    xs = [p.value for p in points]
    line = dict(type="scatter", x=xs, y=[getattr(p, metric) for p in points], mode="lines+markers", name=label,
                line={"color": "#2563eb"}, marker={"color": ["#16a34a" if p.fits else "#dc2626" for p in points]},
                customdata=[["fits" if p.fits else "does not fit"] for p in points],
                hovertemplate="%{x}: %{y:,.2f} (%{customdata[0]})<extra></extra>")
    boundary = fit_boundary(points)
    numeric = all(isinstance(x, (int, float)) for x in xs)
    marks = (_reference_line("x", boundary, f"fit boundary: {boundary:,}", "#dc2626")
             if boundary is not None and numeric and any(not p.fits for p in points) else {})
    axis = {"type": "category"} if not numeric else {}
    return _figure([line], f"{label} vs {SWEEPABLE.get(field, field)}", xaxis={**axis, "title": {
        "text": SWEEPABLE.get(field, field)}}, yaxis_title=label, **marks)


def paged_vs_naive_figure(capacity: WorkloadCapacity) -> go.Figure:
    """Requests the KV cache holds and memory wasted: PagedAttention vs reserving max_model_len per request."""
    names = ["Contiguous (max_model_len each)", "PagedAttention (blocks)"]
    served = [capacity.naive_concurrency, capacity.kv_concurrency_p95]
    waste = [100 * capacity.naive_waste_fraction, 100 * capacity.paged_waste_fraction]
    bars = dict(type="bar", x=names, y=served, name="requests the KV cache holds",
                marker={"color": ["#94a3b8", "#16a34a"]}, text=[f"{v:,}" for v in served], textposition="outside",
                customdata=[[w] for w in waste],
                hovertemplate="%{y:,} requests, %{customdata[0]:.1f}% of reserved KV memory wasted<extra></extra>")
    return _figure([bars], "Requests the KV cache holds at once (p95 lengths)", yaxis_title="concurrent requests")


def figure_total(figure: go.Figure, column: Any) -> float:
    """Sum of the stacked bar segments in one column (GiB) — for tests and sanity checks."""
    return sum(trace.y[0] for trace in figure.data if trace.type == "bar" and trace.x[0] == column)


def kv_per_token_figure(rows: Sequence[tuple[str, float]]) -> go.Figure:
    """KV bytes per token under different attention layouts (MHA, the model's GQA, MLA, fp8)."""
    figure = go.Figure(go.Bar(x=[name for name, _ in rows], y=[size / 1024 for _, size in rows],
                              marker_color=["#94a3b8", "#2563eb", "#16a34a", "#f59e0b"][: len(rows)],
                              text=[f"{size / 1024:,.1f} KiB" for _, size in rows], textposition="outside",
                              hovertemplate="%{x}: %{y:,.1f} KiB per token<extra></extra>"))
    figure.update_layout(title="KV cache per token (all layers, K and V)", yaxis_title="KiB per token", **_LAYOUT)
    return figure


MAX_BLOCK_COLUMNS = 200  # cells per row of a block figure; a longer request draws each cell for several blocks


class _Run(NamedTuple):
    """Consecutive blocks of one kind in a row: [start, end), the cell value, and how a block of it is named."""

    start: int
    end: int
    value: int | None
    name: str  # for a cell of several blocks, with "{s}" for the plural: "shared prefix block{s}"
    label: Callable[[int], str]  # for a cell of one block, by its index


def _block_step(blocks: int) -> int:
    """Blocks per drawn cell: 1 up to MAX_BLOCK_COLUMNS blocks, else as many as keep the row within it."""
    return max(1, -(-blocks // MAX_BLOCK_COLUMNS))


def _block_row(runs: Sequence[_Run], width: int, step: int) -> tuple[list[int | None], list[str]]:
    """A row of ``ceil(width / step)`` cells; a cell of several blocks takes the kind most of its drawn blocks have
    and its label counts each kind. Work and size grow with the cells drawn, never with the blocks."""
    row, labels = [], []
    for first in range(0, width, step):
        last = min(first + step, width)
        inside = [(min(run.end, last) - max(run.start, first), run) for run in runs
                  if run.start < last and run.end > first]
        if step == 1:
            run = inside[0][1]
            row.append(run.value)
            labels.append(run.label(first))
            continue
        drawn = [(n, run) for n, run in inside if run.value is not None]  # a request ending inside a cell shows
        _, biggest = max(drawn or inside, key=lambda pair: pair[0])
        row.append(biggest.value)
        parts = [f"{n:,} " + run.name.format(s="" if n == 1 else "s") for n, run in drawn]
        labels.append(f"blocks {first:,}–{last - 1:,}: " + ", ".join(parts) if parts else "")
    return row, labels


def _drawn_per_cell(step: int) -> str:
    return "" if step == 1 else (f" — each cell is {step:,} blocks (more than {MAX_BLOCK_COLUMNS} are not drawn one "
                                 "by one)")


MAX_BLOCK_TICKS = 12  # block-index labels along the grid's axis


def block_grid_figure(request_tokens: Sequence[int], block_size: int, shared_prefix_tokens: int = 0) -> go.Figure:
    """Each request's blocks as a row of cells: full, partly filled (the only waste) and shared prefix blocks.
    A row of more than ``MAX_BLOCK_COLUMNS`` blocks draws each cell for several, and the title says so."""
    shared_blocks = shared_prefix_tokens // block_size
    width = max(-(-tokens // block_size) for tokens in request_tokens)
    step = _block_step(width)
    z, text = [], []
    for tokens in request_tokens:
        blocks = -(-tokens // block_size)
        full = tokens // block_size
        runs = [_Run(0, min(shared_blocks, blocks), 2, "shared prefix block{s}",
                     lambda i: f"shared prefix block {i}: {block_size}/{block_size}"),
                _Run(min(shared_blocks, blocks), max(full, min(shared_blocks, blocks)), 1, "full block{s}",
                     lambda i: f"block {i}: {block_size}/{block_size} tokens"),
                _Run(max(full, shared_blocks), blocks, 0, "partly filled block",
                     lambda i, rest=tokens - full * block_size: f"block {i}: {rest}/{block_size} tokens"),
                _Run(blocks, width, None, "", lambda i: "")]
        row, labels = _block_row([run for run in runs if run.start < run.end], width, step)
        z.append(row)
        text.append(labels)
    figure = go.Figure(go.Heatmap(
        z=z, text=text, hoverinfo="text", xgap=2 if step == 1 else 0, ygap=2, showscale=False, zmin=0, zmax=2,
        colorscale=[[0, "#fde68a"], [0.5, "#2563eb"], [1, "#16a34a"]],
        x=[index * step for index in range(-(-width // step))],
        y=[f"request {i + 1} ({t:,} tokens)" for i, t in enumerate(request_tokens)]))
    figure.update_layout(title=f"Paged KV cache: {block_size}-token blocks (yellow = partly filled, green = shared)"
                               + _drawn_per_cell(step), xaxis_title="block index", **_LAYOUT)
    columns = -(-width // step)
    # NOTE: a block index is a whole number; plotly's automatic ticks put 0.5 steps on a narrow grid
    figure.update_xaxes(tickmode="linear", tick0=0, dtick=step * -(-columns // MAX_BLOCK_TICKS), tickformat="d")
    figure.update_yaxes(autorange="reversed")
    return figure


LIVE_ZOOM_BELOW = 0.1  # a peak under 10 % of the pool would draw as a flat line against it: zoom to the peak


def live_history_figure(times: Sequence[float], used_tokens: Sequence[float], capacity_tokens: float,
                        running: Sequence[float], waiting: Sequence[float],
                        finished: Sequence[float | None] | None = None,
                        unreachable: tuple[float, float] | None = None) -> go.Figure:
    """KV usage over time in tokens against the pool's capacity, with running and waiting requests, and (when
    given) the requests that finished in each interval, so a burst between two reads still shows. The token axis
    runs to the pool, or to the peak when the peak stays under a tenth of it (the title then names the pool);
    ``unreachable`` (since, now) shades the time the server has not answered.

    ``times`` are Unix seconds (a scrape's clock, Prometheus' timestamps); the axis shows them as UTC times."""
    moments = [datetime.fromtimestamp(t, tz=timezone.utc) for t in times]
    figure = go.Figure()
    if finished is not None:
        figure.add_trace(go.Bar(x=moments, y=list(finished), name="requests finished since the previous read",
                                yaxis="y2", marker_color="#a855f7", opacity=0.45,
                                hovertemplate="%{y:,.0f} finished since the previous read<extra></extra>"))
    figure.add_trace(go.Scatter(x=moments, y=list(used_tokens), name="KV tokens in use", fill="tozeroy",
                                line_color=SEGMENT_COLORS["kv_used"],
                                hovertemplate="%{y:,.0f} tokens in use<extra></extra>"))
    figure.add_trace(go.Scatter(x=moments, y=list(running), name="running requests", yaxis="y2",
                                line=dict(color="#2563eb", dash="dot")))
    figure.add_trace(go.Scatter(x=moments, y=list(waiting), name="waiting requests", yaxis="y2",
                                line=dict(color="#dc2626", dash="dot")))
    peak = max(used_tokens, default=0.0)
    zoomed = capacity_tokens > 0 and 0 < peak < LIVE_ZOOM_BELOW * capacity_tokens
    title = "KV cache usage over time" + (
        f" (peak {peak:,.0f} of the pool's {capacity_tokens:,.0f} tokens: axis zoomed to the peak)" if zoomed else "")
    top = peak * 1.25 if zoomed else capacity_tokens * 1.05
    figure.update_layout(title=title, yaxis_title="tokens", xaxis_title="time (UTC)",
                         yaxis2=dict(title="requests", overlaying="y", side="right", rangemode="tozero"),
                         **{**_LAYOUT, "yaxis": dict(gridcolor="#e2e8f0", range=[0, top] if top > 0 else None)},
                         **({} if zoomed else _reference_line("y", capacity_tokens,
                                                              f"capacity {capacity_tokens:,.0f} tokens", "#0f172a")))
    _unreachable_band(figure, unreachable)
    figure.update_layout(legend_y=-0.3)  # below the date line and the axis title
    return figure


def _unreachable_band(figure: go.Figure, unreachable: tuple[float, float] | None) -> None:
    """Shade (since, now), the Unix seconds the server has not answered, on a time axis."""
    if unreachable is None:
        return
    since, until = (datetime.fromtimestamp(t, tz=timezone.utc) for t in unreachable)
    figure.add_vrect(x0=since, x1=until, fillcolor="#fecaca", opacity=0.5, line_width=0,
                     annotation_text=f"server unreachable since {since:%H:%M:%S} UTC",
                     annotation_position="top left")


def histogram_figure(title: str, buckets: Sequence[tuple[float, float]]) -> go.Figure:
    """A Prometheus histogram (cumulative buckets) as per-bucket counts."""
    labels, counts, previous, lower = [], [], 0.0, 0.0
    for upper, cumulative in buckets:
        labels.append(f"{lower:g}–{upper:g}" if upper != float("inf") else f"> {lower:g}")
        counts.append(cumulative - previous)
        previous, lower = cumulative, upper
    figure = go.Figure(go.Bar(x=labels, y=counts, marker_color="#2563eb",
                              hovertemplate="%{x} tokens: %{y:,.0f} requests<extra></extra>"))
    figure.update_layout(title=title, xaxis_title="tokens", yaxis_title="requests", **_LAYOUT)
    figure.update_xaxes(type="category")
    return figure


def samples_block_figure(prompt_tokens: int, output_tokens: int, samples: int, block_size: int,
                         shared_prefix_tokens: int = 0, prefix_caching: bool = True) -> go.Figure:
    """One row per parallel sample of one request: which of its blocks are the shared prefix, the prompt blocks
    the ``n`` samples share, and the blocks each sample holds alone (the copied last prompt block and its output).
    A request of more than ``MAX_BLOCK_COLUMNS`` blocks draws each cell for several, and the title says so."""
    total = prompt_tokens + output_tokens
    width = -(-total // block_size)
    full = total // block_size
    prefix_blocks = min(shared_prefix_tokens // block_size if prefix_caching else 0, width)
    shared_prompt = max(prefix_blocks, min(prompt_tokens // block_size if prefix_caching else 0, width))
    step = _block_step(width)
    z, text = [], []
    for sample in range(samples):
        own = max(shared_prompt, full)
        runs = [_Run(0, prefix_blocks, 3, "system prompt block{s} (one copy for every request)",
                     lambda i: f"block {i}: system prompt, one copy for every request"),
                _Run(prefix_blocks, shared_prompt, 2, f"prompt block{{s}} (one copy for the {samples} samples)",
                     lambda i: f"block {i}: this request's prompt, one copy for its {samples} samples"),
                _Run(shared_prompt, own, 1, f"block{{s}} of sample {sample + 1} alone",
                     lambda i, n=sample + 1: f"block {i}: sample {n} alone, {block_size}/{block_size} tokens"),
                _Run(own, width, 0, f"partly filled block of sample {sample + 1}",
                     lambda i, n=sample + 1: f"block {i}: sample {n} alone, {total - full * block_size}/{block_size} "
                                             "tokens")]
        row, labels = _block_row([run for run in runs if run.start < run.end], width, step)
        z.append(row)
        text.append(labels)
    figure = go.Figure(go.Heatmap(
        z=z, text=text, hoverinfo="text", xgap=1 if step == 1 else 0, ygap=3, showscale=False, zmin=0, zmax=3,
        colorscale=[[0, "#fde68a"], [0.33, "#2563eb"], [0.67, "#7c3aed"], [1, "#16a34a"]],
        x=[index * step for index in range(-(-width // step))],
        y=[f"sample {i + 1}" for i in range(samples)]))
    figure.update_layout(title=f"One request, n = {samples}: {block_size}-token blocks (green = shared prefix, "
                               "purple = prompt shared by the samples, blue/yellow = each sample's own)"
                               + _drawn_per_cell(step), xaxis_title="block index", **{**_LAYOUT, "title_font_size": 13})
    figure.update_yaxes(autorange="reversed")
    return figure


LATENCY_COLORS = ("#64748b", "#2563eb", "#ea580c", "#16a34a", "#a855f7", "#0f172a")


def latency_percentiles_figure(series: dict[str, Sequence[tuple[float, float, float]]],
                               labels: dict[str, str],
                               unreachable: tuple[float, float] | None = None) -> go.Figure:
    """p50 (solid) and p95 (dashed) of each latency per interval between reads; ``series`` maps a latency to
    (Unix time, p50 s, p95 s) points, shown in ms on a log axis (queue waits and decodes differ by 1000x);
    ``unreachable`` (since, now) shades the time the server has not answered."""
    figure = go.Figure()
    for color, (name, points) in zip(LATENCY_COLORS, series.items(), strict=False):
        if not points:
            continue
        moments = [datetime.fromtimestamp(t, tz=timezone.utc) for t, _, _ in points]
        for index, dash in ((1, "solid"), (2, "dash")):
            quantile = "p50" if index == 1 else "p95"
            figure.add_trace(go.Scatter(x=moments, y=[p[index] * 1e3 for p in points], mode="lines+markers",
                                        name=f"{labels[name]} {quantile}", line=dict(color=color, dash=dash),
                                        hovertemplate=f"{labels[name]} {quantile}: %{{y:,.1f}} ms<extra></extra>"))
    figure.update_layout(title="Latency p50 and p95 per interval between reads", xaxis_title="time (UTC)",
                         **{**_LAYOUT, "yaxis": dict(gridcolor="#e2e8f0", type="log", title="ms")})
    _unreachable_band(figure, unreachable)
    figure.update_layout(legend_y=-0.3)
    return figure
