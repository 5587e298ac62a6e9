"""What would make a scenario fit, and how many GPUs a target load needs — both asked of the engine itself."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from ..errors import CalculatorError
from ..model.spec import ModelSpec
from ..scenario import Scenario
from .estimate import Estimate, estimate
from .workload import Workload, workload_capacity

TP_OPTIONS = (1, 2, 4, 8, 16)
PP_OPTIONS = (1, 2, 4)


class Fix(BaseModel):
    """One change that makes the scenario start, with what it then gives."""

    model_config = ConfigDict(frozen=True)
    description: str
    changes: dict[str, object]
    max_concurrency: float
    kv_cache_tokens: int


def _estimate_or_none(scenario: Scenario, spec: ModelSpec, **changes: object) -> Estimate | None:
    try:
        return estimate(scenario.replace(**changes), spec)
    except (CalculatorError, ValueError):
        return None


def _try(scenario: Scenario, spec: ModelSpec, **changes: object) -> Estimate | None:
    """The estimate with ``changes`` applied, if it fits."""
    result = _estimate_or_none(scenario, spec, **changes)
    return result if result is not None and result.fits else None


def fixes(result: Estimate) -> list[Fix]:
    """Single-knob changes that make a non-fitting scenario fit (empty when it already fits)."""
    if result.fits:
        return []
    scenario, spec, settings = result.scenario, result.model, result.settings
    candidates: list[tuple[str, dict[str, object]]] = []
    if result.max_fitting_model_len > 0 and result.max_fitting_model_len < settings.max_model_len:
        candidates.append((f"lower max_model_len to {result.max_fitting_model_len:,} (the largest that fits)",
                           {"max_model_len": result.max_fitting_model_len}))
    for seqs in (128, 64, 32):
        if seqs < settings.max_num_seqs:
            candidates.append((f"lower max_num_seqs to {seqs} (smaller sampler peak)", {"max_num_seqs": seqs}))
            break
    if settings.kv_cache_dtype == "auto":
        kv = "fp8_ds_mla" if spec.mla is not None and result.rules.version.at_least(14) else "fp8"
        candidates.append((f"store the KV cache in {kv} (half the bytes per token)", {"kv_cache_dtype": kv}))
    for tp in TP_OPTIONS:  # the smallest wider TP that fits as it is
        if tp > settings.tensor_parallel_size and spec.num_attention_heads % tp == 0:
            candidates.append((f"use tensor parallelism {tp} ({tp * settings.pipeline_parallel_size} GPUs)",
                               {"tensor_parallel_size": tp}))
            if _try(scenario, spec, tensor_parallel_size=tp) is not None:
                break
    if scenario.gpu_memory_utilization is not None and scenario.gpu_memory_utilization < 0.95:
        candidates.append(("raise gpu_memory_utilization to 0.95", {"gpu_memory_utilization": 0.95}))
    if scenario.other_processes_memory_gib > 0:
        candidates.append(("free the memory other processes hold on the GPU", {"other_processes_memory_gib": 0.0}))
    for tp in TP_OPTIONS:  # more GPUs *and* the context that then fits
        if tp <= settings.tensor_parallel_size or spec.num_attention_heads % tp:
            continue
        wider = _estimate_or_none(scenario, spec, tensor_parallel_size=tp)
        if wider is not None and not wider.fits and 0 < wider.max_fitting_model_len < settings.max_model_len:
            candidates.append((f"use tensor parallelism {tp} with max_model_len {wider.max_fitting_model_len:,}",
                               {"tensor_parallel_size": tp, "max_model_len": wider.max_fitting_model_len}))
            break
    found = []
    for description, changes in candidates:
        fixed = _try(scenario, spec, **changes)
        if fixed is not None:
            found.append(Fix(description=description, changes=changes, max_concurrency=fixed.capacity.max_concurrency,
                             kv_cache_tokens=fixed.capacity.kv_cache_tokens))
    return found


class DeploymentOption(BaseModel):
    """One way to serve the target load: a parallelism layout and how many replicas of it."""

    model_config = ConfigDict(frozen=True)
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpus_per_replica: int
    concurrency_per_replica: int
    replicas: int
    total_gpus: int


def capacity_plan(result: Estimate, workload: Workload) -> list[DeploymentOption]:
    """Parallelism layouts that fit, each with the replicas needed for the target; fewest GPUs first."""
    options = []
    spec, scenario = result.model, result.scenario
    for tp in TP_OPTIONS:
        if spec.num_attention_heads % tp:
            continue
        for pp in PP_OPTIONS:
            if pp > spec.num_hidden_layers:
                continue
            candidate = _try(scenario, spec, tensor_parallel_size=tp, pipeline_parallel_size=pp)
            if candidate is None:
                continue
            per_replica = workload_capacity(candidate, workload).concurrency_p95
            if per_replica < 1:
                continue
            replicas = math.ceil(workload.target_concurrent_requests / per_replica)
            options.append(DeploymentOption(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                                            gpus_per_replica=tp * pp, concurrency_per_replica=per_replica,
                                            replicas=replicas, total_gpus=replicas * tp * pp))
    return sorted(options, key=lambda o: (o.total_gpus, o.gpus_per_replica))
