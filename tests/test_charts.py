"""Chart builders, tested as figures: traces, and stacks that add up to the GPU's memory."""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
import pytest

from calculator import Scenario, Workload, estimate, workload_capacity
from calculator.charts import (
    MAX_BLOCK_COLUMNS,
    block_grid_figure,
    compare_memory_figure,
    figure_total,
    live_history_figure,
    memory_stack_figure,
    paged_vs_naive_figure,
    samples_block_figure,
    sweep_figure,
)
from calculator.observe.live import with_actual_blocks
from calculator.sweeps import sweep
from calculator.units import GIB

LLAMA = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb", vllm_version="0.32.0",
                          other_processes_memory_gib=3.0))


def test_memory_stack_sums_to_the_gpu_memory():
    figure = memory_stack_figure(LLAMA)
    assert figure_total(figure, "GPU") == pytest.approx(LLAMA.budget.total_bytes / GIB)
    names = [trace.name for trace in figure.data]
    assert names[:2] == ["Weights", "Activation peak"]
    assert {"KV cache", "CUDA context", "Other processes", "Unused headroom (1 - util)"} <= set(names)
    kv = next(t for t in figure.data if t.name == "KV cache")
    assert kv.y[0] == pytest.approx(LLAMA.kv_cache_bytes / GIB)
    assert "GiB" in kv.hovertemplate and "%" in kv.hovertemplate


def test_pipeline_stages_get_a_bar_each():
    result = estimate(Scenario(model="meta-llama/Llama-3.1-70B-Instruct", gpu="a100-sxm-80gb",
                               pipeline_parallel_size=3, tensor_parallel_size=2))
    figure = memory_stack_figure(result)
    for stage in range(3):
        assert figure_total(figure, f"PP stage {stage}") == pytest.approx(result.budget.total_bytes / GIB)


def test_live_usage_splits_the_kv_segment():
    figure = memory_stack_figure(LLAMA, kv_used_fraction=0.25)
    used = next(t for t in figure.data if t.name == "KV cache in use (live)")
    free = next(t for t in figure.data if t.name == "KV cache free")
    assert used.y[0] == pytest.approx(0.25 * LLAMA.kv_cache_bytes / GIB, rel=1e-6)
    assert used.y[0] + free.y[0] == pytest.approx(LLAMA.kv_cache_bytes / GIB)


def test_compare_puts_one_stack_per_scenario():
    other = estimate(Scenario(model="Qwen/Qwen3-8B", gpu="l40s"))
    figure = compare_memory_figure([("Llama on H100", LLAMA), ("Qwen on L40S", other)])
    assert figure_total(figure, "Qwen on L40S") == pytest.approx(other.budget.total_bytes / GIB)
    assert sum(1 for t in figure.data if t.showlegend and t.name == "Weights") == 1


def test_sweep_marks_the_fit_boundary():
    scenario = Scenario(model="meta-llama/Llama-3.1-70B-Instruct", gpu="h100-sxm-80gb", tensor_parallel_size=2,
                        vllm_version="0.32.0")
    points = sweep(scenario, "max_model_len", [8192, 65536, 131072])
    figure = sweep_figure(points, "max_model_len")
    assert list(figure.data[0].x) == [8192, 65536, 131072]
    assert list(figure.data[0].marker.color) == ["#16a34a" if p.fits else "#dc2626" for p in points]


def test_paged_vs_naive_bars():
    capacity = workload_capacity(LLAMA, Workload(prompt_tokens_mean=500, output_tokens_mean=200))
    figure = paged_vs_naive_figure(capacity)
    assert list(figure.data[0].y) == [capacity.naive_concurrency, capacity.concurrency_p95]


def test_kv_band_is_an_error_bar_on_the_kv_segment():
    figure = memory_stack_figure(LLAMA, kv_band_bytes=(LLAMA.kv_cache_bytes - GIB, LLAMA.kv_cache_bytes + 2 * GIB))
    kv = next(t for t in figure.data if t.name == "KV cache")
    assert kv.error_y.array[0] == pytest.approx(2.0) and kv.error_y.arrayminus[0] == pytest.approx(1.0)


def test_live_history_is_drawn_against_clock_times_with_the_capacity_line():
    # 2026-12-02 19:00:00 UTC and 2 s later; 1,920 tokens of capacity.
    figure = live_history_figure([1796238000.0, 1796238002.0], [0, 960], 1920, [0, 3], [0, 1])
    used, running, waiting = figure.data
    assert [x.isoformat() for x in used.x] == ["2026-12-02T19:00:00+00:00", "2026-12-02T19:00:02+00:00"]
    assert list(used.y) == [0, 960] and list(running.y) == [0, 3] and list(waiting.y) == [0, 1]
    assert figure.layout.xaxis.title.text == "time (UTC)"
    assert [shape.y0 for shape in figure.layout.shapes] == [1920]
    assert tuple(figure.layout.yaxis.range) == (0, 1920 * 1.05)  # the server's pool, not an autorange


def test_a_peak_far_below_a_large_pool_zooms_and_an_outage_is_shaded():
    # the 1 GiB float32 server: 1,048,448 tokens; 1,920 in use at the peak would draw as a flat line
    figure = live_history_figure([1796238000.0, 1796238002.0], [0, 1920], 1048448, [0, 3], [0, 1],
                                 unreachable=(1796238002.0, 1796238060.0))
    assert tuple(figure.layout.yaxis.range) == (0, 1920 * 1.25)
    assert figure.layout.title.text == ("KV cache usage over time (peak 1,920 of the pool's 1,048,448 tokens: axis "
                                        "zoomed to the peak)")
    band = figure.layout.shapes[0]
    assert (band.type, band.x0.isoformat(), band.x1.isoformat()) == (
        "rect", "2026-12-02T19:00:02+00:00", "2026-12-02T19:01:00+00:00")
    assert figure.layout.annotations[0].text == "server unreachable since 19:00:02 UTC"


def test_a_cpu_server_is_drawn_in_mib_as_what_it_holds_without_a_utilization_line():
    tiny = Path(__file__).parent / "data" / "tiny-configs" / "tiny-llama.config.json"
    result = estimate(Scenario(model=str(tiny), gpu=None, device="cpu", vllm_version="0.32.0",
                               kv_cache_memory_bytes=GIB, num_gpu_blocks_override=16, max_model_len=1024,
                               dtype="float32"))
    actual = with_actual_blocks(result, 16)
    figure = memory_stack_figure(actual, kv_used_fraction=0.25)
    assert not figure.layout.shapes and figure.layout.yaxis.title.text == "MiB"
    # tiny-llama: 2 layers x 2 KV heads x 32 head dims x (K + V) x 4 bytes = 1 KiB per token; 16 blocks of 128.
    kv = {trace.legendgroup: trace.y[0] for trace in figure.data if trace.legendgroup in ("kv_used", "kv_cache")}
    assert kv == {"kv_used": 0.5, "kv_cache": 1.5}
    assert {trace.x[0] for trace in figure.data} == {"CPU"}
    total_mib = sum(trace.y[0] for trace in figure.data)
    assert figure.layout.title.text == f"Memory on the CPU for the model ({total_mib:.1f} MiB)"


def test_weights_over_a_low_utilization_line_draw_an_over_budget_segment_not_spare_room():
    # Llama-3.1-8B bf16 weights, 14.96 GiB, above 0.15 x 79.19 GiB = 11.88 GiB: nothing is left for the KV cache.
    result = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", vllm_version="0.32.0",
                               gpu_memory_utilization=0.15))
    assert result.budget.kv_cache_bytes < 0
    figure = memory_stack_figure(result)
    assert "Unused headroom (1 - util)" not in [trace.name for trace in figure.data]
    over = -result.budget.kv_cache_bytes / GIB
    assert any(a.text.startswith(f"over budget by {over:,.2f} GiB") for a in figure.layout.annotations)
    rect = next(shape for shape in figure.layout.shapes if shape.type == "rect")
    assert rect.y0 == pytest.approx(result.budget.requested_bytes / GIB)
    assert rect.y1 - rect.y0 == pytest.approx(over)


def test_the_kv_pool_is_labelled_with_its_size_share_and_tokens():
    figure = memory_stack_figure(LLAMA)
    label = next(a for a in figure.layout.annotations if a.text.startswith("KV cache"))
    kv_gib = LLAMA.kv_cache_bytes / GIB
    assert label.text == (f"KV cache {kv_gib:,.2f} GiB ({100 * LLAMA.kv_cache_bytes / LLAMA.budget.total_bytes:.1f}%)"
                          f"<br>{LLAMA.capacity.kv_cache_tokens:,} tokens")
    below = sum(t.y[0] for t in figure.data[: [t.name for t in figure.data].index("KV cache")])
    assert label.y == pytest.approx(below + kv_gib / 2)


def test_the_mode_bar_stands_aside_from_the_title():
    figure = memory_stack_figure(LLAMA)
    assert figure.layout.modebar.orientation == "v" and figure.layout.title.x == 0.01


def test_a_request_of_twenty_million_one_token_blocks_draws_two_hundred_cells_per_sample():
    """Issue 28: /learn?in=10000000&out=10000000&n=16&bs=1 drew 320 million labelled cells (out of memory)."""
    import tracemalloc

    tracemalloc.start()
    figure = samples_block_figure(10_000_000, 10_000_000, 16, 1, shared_prefix_tokens=5_000_000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    heatmap = figure.data[0]
    # 20,000,000 blocks in at most 200 cells: ceil(20,000,000 / 200) = 100,000 blocks per cell. The 5,000,000-token
    # prefix fills cells 0-49, the rest of the 10,000,000-token prompt cells 50-99, the output cells 100-199.
    assert len(heatmap.z) == 16 and all(len(row) == MAX_BLOCK_COLUMNS == 200 for row in heatmap.z)
    assert list(heatmap.z[15]) == [3] * 50 + [2] * 50 + [1] * 100
    assert heatmap.text[0][49] == ("blocks 4,900,000–4,999,999: 100,000 system prompt blocks (one copy for every "
                                   "request)")
    assert heatmap.text[15][199] == "blocks 19,900,000–19,999,999: 100,000 blocks of sample 16 alone"
    assert figure.layout.title.text.endswith("— each cell is 100,000 blocks (more than 200 are not drawn one by one)")
    assert peak < 8 << 20


def test_a_cell_of_several_blocks_takes_the_kind_most_of_them_have_and_counts_each():
    # 100,000,000 one-token blocks: 500,000 per cell. The 70-token request: 32 shared + 38 full blocks in cell 0.
    # The 500,001-token one: cell 0 holds 32 shared and 499,968 full blocks, cell 1 its last (full) block.
    figure = block_grid_figure([70, 100_000_000, 500_001], 1, shared_prefix_tokens=32)
    heatmap = figure.data[0]
    assert list(heatmap.z[0]) == [1] + [None] * 199 and list(heatmap.z[2]) == [1, 1] + [None] * 198
    assert heatmap.text[0][0] == "blocks 0–499,999: 32 shared prefix blocks, 38 full blocks"
    assert heatmap.text[0][1] == ""
    assert heatmap.text[2][1] == "blocks 500,000–999,999: 1 full block"
    assert list(heatmap.x[:3]) == [0, 500_000, 1_000_000]
    assert "each cell is 500,000 blocks" in figure.layout.title.text


def test_a_short_request_is_drawn_block_by_block_as_before():
    figure = block_grid_figure([70, 33], 16, shared_prefix_tokens=32)
    heatmap = figure.data[0]
    assert [list(row) for row in heatmap.z] == [[2, 2, 1, 1, 0], [2, 2, 0, None, None]]
    assert list(heatmap.text[0]) == ["shared prefix block 0: 16/16", "shared prefix block 1: 16/16",
                                     "block 2: 16/16 tokens", "block 3: 16/16 tokens", "block 4: 6/16 tokens"]
    assert "each cell" not in figure.layout.title.text


@pytest.mark.parametrize("seed", range(200))
def test_block_figures_of_any_size_stay_within_their_cells_and_count_every_block(seed):
    """Seeded: requests up to 1e8 tokens in blocks of 1 to 128; each row has at most MAX_BLOCK_COLUMNS cells and
    the cells' labels together count exactly the request's blocks."""
    import random
    import re

    rng = random.Random(seed)
    block = rng.choice([1, 2, 16, 128])
    prompt, output = rng.randrange(1, 10**rng.randrange(1, 8)), rng.randrange(0, 10**rng.randrange(1, 8))
    samples = rng.randrange(1, 17)
    figure = samples_block_figure(prompt, output, samples, block, shared_prefix_tokens=rng.randrange(0, prompt + 1))
    blocks = -(-(prompt + output) // block)
    heatmap = figure.data[0]
    step = -(-blocks // MAX_BLOCK_COLUMNS)  # blocks per cell: the fewest that keep a row within the limit
    assert len(heatmap.z) == samples and all(len(row) == -(-blocks // step) <= MAX_BLOCK_COLUMNS for row in heatmap.z)
    if blocks > MAX_BLOCK_COLUMNS:
        counted = sum(int(n.replace(",", "")) for label in heatmap.text[0]
                      for n in re.findall(r"(?:: |, )([\d,]+) ", label))
        assert counted == blocks


def _as_plotly_validates_it(figure):
    """The figure's JSON, after checking that plotly's own validation accepts every property and changes none."""
    drawn = json.loads(pio.to_json(figure, validate=False))
    assert json.loads(pio.to_json(go.Figure(figure.to_dict()), validate=False)) == drawn
    return drawn


def test_figures_built_without_plotly_validation_are_what_validation_would_build():
    # NOTE: the builders skip plotly's per-property checks (they cost half of a Plan rerun's chart time); a misspelt
    # property or a value plotly would rewrite shows up here instead.
    gpus = [LLAMA, estimate(Scenario(model="meta-llama/Llama-3.1-70B-Instruct", gpu="a100-sxm-80gb",
                                     tensor_parallel_size=2, pipeline_parallel_size=3)),
            estimate(Scenario(model="Qwen/Qwen3-8B", gpu="l40s", device="cpu")),
            estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="l4-24gb", gpu_memory_utilization=0.3))]
    for result in gpus:
        _as_plotly_validates_it(memory_stack_figure(result))
        _as_plotly_validates_it(memory_stack_figure(result, kv_used_fraction=0.25, kv_band_bytes=(1 << 30, 2 << 30)))
    _as_plotly_validates_it(compare_memory_figure([("A", LLAMA), ("B", gpus[1])]))
    scenario = Scenario(model="meta-llama/Llama-3.1-70B-Instruct", gpu="h100-sxm-80gb", tensor_parallel_size=2)
    _as_plotly_validates_it(sweep_figure(sweep(scenario, "max_model_len", [8192, 131072]), "max_model_len"))
    capacity = workload_capacity(LLAMA, Workload(prompt_tokens_mean=500, output_tokens_mean=200))
    drawn = _as_plotly_validates_it(paged_vs_naive_figure(capacity))
    assert drawn["layout"]["title"]["text"] == "Requests the KV cache holds at once (p95 lengths)"
