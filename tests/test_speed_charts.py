"""The speed chart builders, tested as figure objects."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import plotly.io as pio
import pytest

from calculator import GpuPrice, Scenario, Slo, Traffic, concurrency_sweep, estimate, load_model_spec, recommend
from calculator.speed.charts import cost_latency_figure, pareto_front, two_ceilings_figure
from calculator.speed.sweep import default_concurrencies


def test_pareto_front_keeps_points_nothing_beats_on_both_axes() -> None:
    points = [(1.0, 100.0), (2.0, 50.0), (2.5, 60.0), (3.0, 20.0), (0.5, 500.0), (3.0, 25.0)]
    assert pareto_front(points) == [4, 0, 1, 3]  # (2.5, 60) and (3, 25) are beaten


def test_default_concurrencies_pass_the_ceiling() -> None:
    assert default_concurrencies(100) == (1, 2, 4, 8, 16, 32, 64, 100, 128, 200)


def test_two_ceilings_marks_kv_max_num_seqs_and_the_slo() -> None:
    result = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="l4-24gb", max_model_len=4096,
                               max_num_seqs=64))
    sweep = concurrency_sweep(result, Traffic(input_tokens=1024, output_tokens=256, concurrency=1), prices={})
    figure = two_ceilings_figure(sweep, Slo(tpot_ms=80))
    throughput, itl, throughput_low, throughput_high, itl_low, itl_high = figure.data
    assert list(throughput.x) == [p.traffic.concurrency for p in sweep.points]
    assert itl.yaxis == "y2" and list(itl.y) == [p.tpot_ms for p in sweep.points]
    lines = [(s.x0, s.y0, s.yref) for s in figure.layout.shapes]
    assert (sweep.kv_cache_concurrency, 0, "paper") in lines and (64, 0, "paper") in lines
    assert (0, 80, "y2") in lines
    # past the engine limit, throughput stops growing
    assert throughput.y[-1] == pytest.approx(throughput.y[-2], rel=1e-12)
    # the calibrated range: x / and x the spread measured on real runs (docs/speed-accuracy.md: 1.31 and 1.33)
    assert list(throughput_low.y) == pytest.approx([y / 1.31 for y in throughput.y], rel=1e-3)
    assert list(throughput_high.y) == pytest.approx([y * 1.31 for y in throughput.y], rel=1e-3)
    assert list(itl_low.y) == pytest.approx([y / 1.33 for y in itl.y], rel=1e-3)
    assert list(itl_high.y) == pytest.approx([y * 1.33 for y in itl.y], rel=1e-3)
    assert itl_high.yaxis == "y2" and itl_high.fill == throughput_high.fill == "tonexty"


def test_cost_latency_joins_the_pareto_front() -> None:
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    prices = {k: GpuPrice(usd_per_gpu_hour=v, source="test") for k, v in {"h100-sxm-80gb": 3.0, "l4-24gb": 0.5}.items()}
    result = recommend(spec, Traffic(input_tokens=512, output_tokens=128, concurrency=32), gpus=["h100", "l4"],
                       prices=prices)
    figure = cost_latency_figure(result, "tpot_ms")
    everything, front = figure.data
    assert len(everything.x) == len(result.by_cost_per_hour)
    assert list(front.x) == sorted(front.x) and list(front.y) == sorted(front.y, reverse=True)
    assert set(zip(front.x, front.y)) <= set(zip(everything.x, everything.y))
    assert figure.layout.yaxis.title.text == "inter-token latency (ms)"


def test_the_axis_reaches_a_ceiling_beyond_the_sweep() -> None:
    # Regression: max_num_seqs 1024 above a KV limit of a few hundred fell off the log axis, so the browser drew
    # neither its line nor its label. The axis now runs to the farthest ceiling (log10(1024 x 1.15) = 3.07).
    result = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb"))
    sweep = concurrency_sweep(result, Traffic(input_tokens=2000, output_tokens=300, concurrency=1), prices={})
    assert sweep.max_num_seqs == 1024 and max(p.traffic.concurrency for p in sweep.points) < 1024
    low, high = two_ceilings_figure(sweep).layout.xaxis.range
    assert low == 0 and 10 ** high == pytest.approx(1024 * 1.15)


def test_close_ceilings_label_at_opposite_ends_of_their_lines() -> None:
    # Issue 26 item 7: on the default Plan chart (Llama-3.1-8B on an H100, vLLM 0.34) the KV cache holds 375
    # default requests and max_num_seqs is 1024: less than a decade apart, the two labels printed over each other.
    result = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb"))
    sweep = concurrency_sweep(result, Traffic(input_tokens=1024, output_tokens=256, concurrency=1), prices={})
    assert (sweep.kv_cache_concurrency, sweep.max_num_seqs) == (375, 1024)
    notes = {a.text: (a.y, a.yanchor) for a in two_ceilings_figure(sweep).layout.annotations}
    assert notes["KV cache: 375"] == (1, "bottom") and notes["max_num_seqs: 1024"] == (0, "bottom")


def test_the_two_ceilings_figure_is_what_plotly_validation_would_build() -> None:
    # NOTE: built from plain dicts without plotly's per-property checks (a Plan rerun cost); plotly's validation must
    # accept every property and rewrite none (a bare string title, for one, would become {"text": ...}).
    result = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="l4-24gb", max_model_len=4096,
                               max_num_seqs=64))
    sweep = concurrency_sweep(result, Traffic(input_tokens=1024, output_tokens=256, concurrency=1), prices={})
    figure = two_ceilings_figure(sweep, Slo(tpot_ms=80))
    drawn = json.loads(pio.to_json(figure, validate=False))
    assert json.loads(pio.to_json(go.Figure(figure.to_dict()), validate=False)) == drawn
    assert figure.layout.title.text == "Two ceilings: throughput and latency against concurrency"
    assert figure.layout.yaxis2.title.text == "ITL (ms)"
