"""Fit the speed model's empirical terms on the measured runs, and measure the error on runs held out.

The fit minimises, per metric (TTFT, TPOT, output throughput, requests/s, end-to-end), the mean |log(predicted /
measured)| capped at ``ERROR_CAP`` (so a record that no physics explains, such as a run a GitHub issue reports as
anomalous, cannot drag every term) and adds the metrics up, by coordinate descent over a grid of each term within physical bounds. ROCm
records refit the hardware-efficiency terms only (one source: the CUDA kernels do not describe the 2024 ROCm stack).
Leave-one-source-out refits without every record of one publication and predicts those records.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from calculator.speed.calibration import CUDA, SpeedConstants

from benchmarks import speed_replay as replay

# term: (low, high, log-spaced grid?)
BOUNDS: dict[str, tuple[float, float, bool]] = {
    "bandwidth_efficiency": (0.5, 0.92, False),
    "compute_efficiency": (0.15, 1.0, False),
    "overlap_penalty": (0.0, 1.0, False),
    "step_overhead_s": (1e-5, 2e-2, True),
    "sequence_overhead_s": (1e-7, 5e-4, True),
    "layer_overhead_s": (1e-7, 3e-4, True),
    "moe_layer_overhead_s": (1e-7, 1e-3, True),
    "eager_layer_overhead_s": (1e-7, 2e-3, True),
    "all_reduce_latency_s": (1e-7, 2e-4, True),
    "all_reduce_efficiency": (0.1, 1.0, False),
    "request_overhead_s": (1e-5, 5e-2, True),
}
ROCM_TERMS = ("bandwidth_efficiency", "compute_efficiency", "step_overhead_s", "sequence_overhead_s",
              "all_reduce_latency_s")
ERROR_CAP = math.log(1.5)  # an error beyond 50% counts as 50%
GRID_POINTS = 9
SWEEPS = 6


def loss(constants: SpeedConstants, records: list[dict]) -> float:
    """Sum over metrics of the mean over sources of each source's mean capped |log error|: a publication with
    nine rows weighs as much as one with a single row, so no one benchmark sets a term."""
    by_metric: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    try:
        rows = replay.log_errors(constants, records)
    except Exception:  # noqa: BLE001 - a term outside what the model accepts is just a bad point
        return math.inf
    for record_id, metric, error in rows:
        by_metric[metric][replay.source_of({"id": record_id})].append(min(abs(error), ERROR_CAP))
    return sum(statistics.fmean(statistics.fmean(errors) for errors in sources.values())
               for sources in by_metric.values())


def _grid(name: str, centre: float, width: float) -> list[float]:
    low, high, logarithmic = BOUNDS[name]
    if logarithmic:
        lo, hi = max(math.log(low), math.log(centre) - width * 3), min(math.log(high), math.log(centre) + width * 3)
        return [math.exp(lo + (hi - lo) * i / (GRID_POINTS - 1)) for i in range(GRID_POINTS)]
    lo, hi = max(low, centre - width * (high - low) / 2), min(high, centre + width * (high - low) / 2)
    return [lo + (hi - lo) * i / (GRID_POINTS - 1) for i in range(GRID_POINTS)]


def fit(records: list[dict], start: SpeedConstants = CUDA, terms: tuple[str, ...] = tuple(BOUNDS)) -> SpeedConstants:
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
    """CUDA terms on the CUDA records, then the ROCm records' hardware terms starting from them."""
    cuda_records, rocm_records = split_by_platform(records)
    cuda = fit(cuda_records)
    rocm = fit(rocm_records, start=cuda, terms=ROCM_TERMS) if rocm_records else cuda
    return cuda, rocm
