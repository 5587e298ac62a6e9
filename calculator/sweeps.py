"""Sweeps: one knob moved over a range, everything else fixed (pure; the engine memoises the heavy parts)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from .engine.estimate import estimate
from .errors import CalculatorError
from .model.spec import ModelSpec
from .scenario import Scenario
from .units import GIB

SWEEPABLE = {
    "max_model_len": "max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "tensor_parallel_size": "tensor parallel size",
    "kv_cache_dtype": "KV-cache dtype",
    "max_num_seqs": "max_num_seqs",
    "block_size": "block size",
}


class SweepPoint(BaseModel):
    """The outcome at one value of the swept knob."""

    model_config = ConfigDict(frozen=True)
    value: Any
    fits: bool
    num_gpus: int
    num_gpu_blocks: int
    kv_cache_tokens: int
    max_concurrency: float
    kv_cache_gib: float
    weights_gib: float
    error: str | None = None


def sweep(scenario: Scenario, field: str, values: Iterable[Any], spec: ModelSpec | None = None) -> tuple[SweepPoint, ...]:
    """Estimate ``scenario`` with ``field`` set to each value; invalid combinations become non-fitting points."""
    if field not in SWEEPABLE:
        raise CalculatorError(f"cannot sweep {field!r}; choose one of {', '.join(SWEEPABLE)}")
    points = []
    for value in values:
        try:
            result = estimate(scenario.replace(**{field: value}), spec)
        except (CalculatorError, ValidationError) as exc:
            message = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            points.append(SweepPoint(value=value, fits=False, num_gpus=0, num_gpu_blocks=0, kv_cache_tokens=0,
                                     max_concurrency=0.0, kv_cache_gib=0.0, weights_gib=0.0, error=message))
            continue
        points.append(SweepPoint(value=value, fits=result.fits, num_gpus=result.num_gpus,
                                 num_gpu_blocks=result.capacity.num_gpu_blocks,
                                 kv_cache_tokens=result.capacity.kv_cache_tokens,
                                 max_concurrency=result.capacity.max_concurrency,
                                 kv_cache_gib=result.kv_cache_bytes / GIB,
                                 weights_gib=result.budget.weights_bytes / GIB, error=result.error))
    return tuple(points)


def default_values(field: str, scenario: Scenario, spec: ModelSpec, points: int = 40) -> list[Any]:
    """A sensible range for each knob around the scenario."""
    if field == "max_model_len":
        top = spec.derived_max_model_len
        step = max(1, top // points)
        # NOTE: the headline's "largest max_model_len" is a point of its own, so the sweep's fit boundary is that
        # exact value rather than the last fitting point of the coarse grid.
        largest = _largest_max_model_len(scenario, spec)
        return sorted({*range(step, top + 1, step), top, *([largest] if 0 < largest <= top else [])})
    if field == "gpu_memory_utilization":
        return [round(0.50 + i * 0.01, 2) for i in range(51)]
    if field == "tensor_parallel_size":
        return [tp for tp in (1, 2, 4, 8, 16) if spec.num_attention_heads % tp == 0]
    if field == "kv_cache_dtype":
        return ["auto", "fp8"] + (["fp8_ds_mla"] if spec.mla is not None else [])
    if field == "max_num_seqs":
        return [16, 32, 64, 128, 256, 512, 1024, 2048]
    if field == "block_size":
        return [16, 32, 64, 128]
    raise CalculatorError(f"cannot sweep {field!r}")


def _largest_max_model_len(scenario: Scenario, spec: ModelSpec) -> int:
    try:
        return estimate(scenario, spec).max_fitting_model_len
    except CalculatorError:
        return 0


def fit_boundary(points: Sequence[SweepPoint]) -> Any | None:
    """The last swept value that still fits (in sweep order), or None when none fits."""
    fitting = [p.value for p in points if p.fits]
    return fitting[-1] if fitting else None


def points_to_csv(points: Sequence[SweepPoint], field: str) -> str:
    """CSV export of a sweep, one row per value."""
    buffer = io.StringIO()
    columns = ["fits", "num_gpus", "num_gpu_blocks", "kv_cache_tokens", "max_concurrency", "kv_cache_gib",
               "weights_gib", "error"]
    writer = csv.writer(buffer)
    writer.writerow([field, *columns])
    for point in points:
        writer.writerow([point.value, *(getattr(point, c) for c in columns)])
    return buffer.getvalue()
