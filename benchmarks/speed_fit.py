"""Fit the speed model's empirical terms on the measured runs, and measure the error on runs held out.

The fit minimises, per metric (TTFT, TPOT, output throughput, requests/s, end-to-end), the mean |log(predicted /
measured)|, five times gentler beyond ``ERROR_CAP`` (so a record that no physics explains, such as a run a GitHub
issue reports as anomalous, cannot drag every term, yet no source can be given up) and adds the metrics up, by
coordinate descent over a grid of each term within physical bounds. ROCm records refit the hardware-efficiency
terms only (one source: the CUDA kernels do not describe the 2024 ROCm stack).
Leave-one-source-out refits without every record of one publication and predicts those records.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from functools import cache

from calculator.speed.calibration import CUDA, SpeedConstants
from calculator.speed.costs import forward_costs

from benchmarks import speed_replay as replay

# term: (low, high, log-spaced grid?). The all-reduce efficiency stays at its prior: three TP sources cannot tell it
# from the all-reduce latency.
BOUNDS: dict[str, tuple[float, float, bool]] = {
    # NOTE: a share of the card's streaming rate, the rate vLLM's decode GEMMs were timed at (speed/hardware.py):
    # 0.92 of a datasheet, the bound before, is 1.12 of the median measured share (0.82)
    "bandwidth_efficiency": (0.6, 1.12, False),
    "compute_efficiency": (0.15, 1.0, False),
    # NOTE: at most half of the smaller of a step's memory and compute times left unhidden: a GEMM streams its
    # weight tiles while it computes on earlier ones (cuBLAS / CUTLASS pipelined loads), so memory and compute
    # adding up (a penalty near 1) is not a kernel's behaviour. Free to 1, the fit on 27 sources went to 0.98,
    # standing in for consumer cards that run faster than one efficiency gives, and with it EAGLE-3 paid at any
    # concurrency (the extra verify FLOPs never cost more than the saved weight reads).
    "overlap_penalty": (0.0, 0.5, False),
    "step_overhead_s": (1e-5, 2e-2, True),
    "sequence_overhead_s": (1e-7, 5e-4, True),
    "kernel_overhead_s": (1e-7, 5e-5, True),
    "full_graph_kernel_overhead_s": (1e-7, 5e-5, True),
    "moe_layer_overhead_s": (1e-7, 5e-4, True),
    "eager_kernel_overhead_s": (1e-7, 2e-4, True),
    "piecewise_layer_overhead_s": (1e-7, 2e-4, True),
    "all_reduce_latency_s": (1e-7, 2e-4, True),
    "request_overhead_s": (1e-5, 5e-2, True),
}
# Physical priors: what each term should be before any record speaks, and how well physics knows it (the width,
# in log-units: a term is pulled back with PRIOR_WEIGHT x (log(value / prior) / width)^2), so that a term that only
# one source constrains falls back to physics, not to an arbitrary bound, when that source is held out.
# Efficiencies: a decode step streams at the rate the card's GEMV kernels were timed at (1.0; well known: width 0.1),
# a model's GEMMs and attention ~0.75 of the card's best measured matmul (its shapes are not the best one; 0.25), NCCL
# all-reduce ~0.7 of the link. Times
# (known to a factor of 2-3: width 0.7-1): a V1 engine step ~1 ms of CPU work, ~30 us per running request (sampler,
# detokenizer, output), ~3 us per kernel under CUDA graphs (launch gap, ramp-up and tail of a small kernel), ~15 us
# per kernel without them (a PyTorch op dispatched and launched from Python), ~10 us per small all-reduce, ~10 ms
# per request of HTTP, tokenizer and detokenizer.
PRIORS: dict[str, float] = {
    "bandwidth_efficiency": 1.0, "compute_efficiency": 0.75, "overlap_penalty": 0.3, "step_overhead_s": 1e-3,
    "sequence_overhead_s": 30e-6, "kernel_overhead_s": 3e-6, "eager_kernel_overhead_s": 15e-6,
    "piecewise_layer_overhead_s": 10e-6, "full_graph_kernel_overhead_s": 1.5e-6, "moe_layer_overhead_s": 20e-6,
    "all_reduce_latency_s": 10e-6, "all_reduce_efficiency": 0.7, "request_overhead_s": 10e-3,
}
PRIOR_WIDTHS: dict[str, float] = {
    "bandwidth_efficiency": 0.1, "compute_efficiency": 0.25, "overlap_penalty": 1.0, "step_overhead_s": 1.0,
    "sequence_overhead_s": 1.0, "kernel_overhead_s": 0.7, "eager_kernel_overhead_s": 0.7,
    "piecewise_layer_overhead_s": 1.0, "full_graph_kernel_overhead_s": 0.7, "moe_layer_overhead_s": 1.0,
    "all_reduce_latency_s": 0.7, "all_reduce_efficiency": 0.2, "request_overhead_s": 1.0,
}
PRIOR_WEIGHT = 0.01
# Every fit starts from the priors, never from the shipped constants: a held-out fit must not see its source's
# records through its starting point.
PRIOR_CONSTANTS = SpeedConstants(**PRIORS, fallback_interconnect_bytes_s=CUDA.fallback_interconnect_bytes_s)
ROCM_TERMS = ("bandwidth_efficiency", "compute_efficiency", "step_overhead_s", "sequence_overhead_s",
              "all_reduce_latency_s")
ERROR_CAP = math.log(1.5)  # beyond a 50% error, a record pulls with TAIL_SLOPE of its weight
TAIL_SLOPE = 0.2
GRID_POINTS = 9
SWEEPS = 5


def loss(constants: SpeedConstants, records: list[dict]) -> float:
    """Sum over metrics of the mean over sources of each source's mean robust |log error|: a publication with
    nine rows weighs as much as one with a single row, so no one benchmark sets a term."""
    by_metric: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    try:
        rows = [row for record in records for row in _log_errors(constants, record)]
    except Exception:  # noqa: BLE001 - a term outside what the model accepts is just a bad point
        return math.inf
    for record_id, metric, error in rows:
        by_metric[metric][replay.source_of({"id": record_id})].append(_robust(abs(error)))
    fit_error = sum(statistics.fmean(statistics.fmean(errors) for errors in sources.values())
                    for sources in by_metric.values())
    return fit_error + PRIOR_WEIGHT * sum((math.log(max(getattr(constants, name), 1e-9) / prior)
                                           / PRIOR_WIDTHS[name]) ** 2 for name, prior in PRIORS.items())


# A sweep of coordinate descent moves one term; a record whose replay never reads that term gives the same errors
# at every point of the sweep, so its errors are kept by the values of the terms it reads (the loss is the same as
# replaying every record; a fold fit goes ~1.5x faster).
_REPLAYED: dict[tuple, list[tuple]] = {}


def _log_errors(constants: SpeedConstants, record: dict) -> list[tuple]:
    key = (record["id"], *(getattr(constants, name) for name in _terms_read(record["id"])))
    if key not in _REPLAYED:
        if len(_REPLAYED) > 200_000:
            _REPLAYED.clear()
        _REPLAYED[key] = replay.log_errors(constants, [record], step_by_step=False)
    return _REPLAYED[key]


@cache
def _terms_read(record_id: str) -> tuple[str, ...]:
    """The constants a record's replay reads (calculator/speed/step_time.py, predict.py, moe_dispatch.py): the
    eager launch cost only without CUDA graphs, the graph-mode gaps only with them (the full graph's only where
    decode steps replay one, or where an MLA block's measured latency is set against it), the MoE latency only
    with MoE layers (0 x the term otherwise), the collective's latency and efficiency only across GPUs (TP, PP, or
    an MoE model's DP dispatch)."""
    costs = forward_costs(replay.deployment(record_id))
    unread = set()
    if costs.cuda_graphs:
        unread.add("eager_kernel_overhead_s")
    else:
        unread |= {"piecewise_layer_overhead_s", "full_graph_kernel_overhead_s"}
    if not costs.full_decode_graphs and costs.mla_decode_excess is None:
        unread.add("full_graph_kernel_overhead_s")
    if not costs.moe_layers:
        unread.add("moe_layer_overhead_s")
    if costs.tensor_parallel_size == 1 and costs.pipeline_parallel_size == 1 and costs.moe_token_ranks == 1:
        unread |= {"all_reduce_latency_s", "all_reduce_efficiency", "fallback_interconnect_bytes_s"}
    return tuple(name for name in SpeedConstants.model_fields if name not in unread)


def _robust(error: float) -> float:
    """|log error| up to ERROR_CAP, then a gentler slope: a run no physics explains (a GitHub issue reporting an
    anomaly) cannot drag every term, yet still pulls, so a fit cannot give a whole source up (with a hard cap, a
    source pushed past 50 % exerts no pull at all)."""
    return error if error <= ERROR_CAP else ERROR_CAP + TAIL_SLOPE * (error - ERROR_CAP)


def _grid(name: str, centre: float, width: float) -> list[float]:
    low, high, logarithmic = BOUNDS[name]
    if logarithmic:
        lo, hi = max(math.log(low), math.log(centre) - width * 3), min(math.log(high), math.log(centre) + width * 3)
        return [math.exp(lo + (hi - lo) * i / (GRID_POINTS - 1)) for i in range(GRID_POINTS)]
    lo, hi = max(low, centre - width * (high - low) / 2), min(high, centre + width * (high - low) / 2)
    return [lo + (hi - lo) * i / (GRID_POINTS - 1) for i in range(GRID_POINTS)]


# Coordinate descent follows valleys slowly (bandwidth efficiency trades against the per-step overhead), so it
# starts from a few physically plausible corners and keeps the best.
STARTS = tuple({"bandwidth_efficiency": bw, "step_overhead_s": step, "kernel_overhead_s": kernel}
               for bw in (0.85, 1.05) for step in (0.5e-3, 2e-3) for kernel in (1.5e-6, 6e-6))


def fit(records: list[dict], start: SpeedConstants = PRIOR_CONSTANTS,
        terms: tuple[str, ...] = tuple(BOUNDS)) -> SpeedConstants:
    """The best of a local search from each of ``STARTS`` (applied to ``start``)."""
    starts = [start.model_copy(update=corner) for corner in STARTS] if terms == tuple(BOUNDS) else [start]
    fitted = [_descend(records, s, terms) for s in starts]
    return min(fitted, key=lambda c: loss(c, records))


def _descend(records: list[dict], start: SpeedConstants, terms: tuple[str, ...]) -> SpeedConstants:
    best, best_loss = start, loss(start, records)
    width = 1.0
    for _ in range(SWEEPS):  # the grid narrows each sweep around the best point so far
        for name in terms:
            for value in _grid(name, getattr(best, name), width):
                candidate = best.model_copy(update={name: value})
                value_loss = loss(candidate, records)
                if value_loss < best_loss - 1e-9:
                    best, best_loss = candidate, value_loss
        width /= 1.6
    return best


def split_by_platform(records: list[dict]) -> tuple[list[dict], list[dict]]:
    rocm = [r for r in records if replay.deployment(r["id"]).gpu.platform == "rocm"]
    return [r for r in records if r not in rocm], rocm


def fit_all(records: list[dict]) -> tuple[SpeedConstants, SpeedConstants]:
    """CUDA terms on the CUDA records, then the ROCm records' hardware terms starting from them; only the records
    whose run the steady-state replay stands for (``speed_replay.fitted_as_steady_state``)."""
    cuda_records, rocm_records = split_by_platform([r for r in records if replay.fitted_as_steady_state(r)])
    cuda = fit(cuda_records)
    rocm = fit(rocm_records, start=cuda, terms=ROCM_TERMS) if rocm_records else cuda
    return cuda, rocm
