"""The capacity plan that counts both ceilings of one deployment: memory (every concurrent request's KV cache
held at once, at the workload's p95 lengths) and speed (the SLOs met), and what the larger count costs.

The speed plan alone lets requests past the KV-cache limit wait (their wait shows in TTFT), so without a TTFT
SLO it could plan one replica for any crowd; the memory count is the other ceiling, the one the Plan page's
memory figures already show. The plan takes the larger of the two, and names which one binds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ..engine.estimate import Estimate
from ..engine.workload import Workload, workload_capacity
from ..errors import InvalidInput
from .calibration import SpeedConstants
from .plan import MAX_REPLICAS, CapacityPlan, Slo, capacity_plan, share, slo_violations
from .predict import speed_estimate
from .inputs import SpeedInputs
from .prices import GpuPrice
from .sweep import ConcurrencySweep, concurrency_sweep
from .traffic import Traffic


class CeilingsPlan(BaseModel):
    """Replicas for memory and for speed; ``plan`` is the larger count, with its speed, SLO misses and cost."""

    model_config = ConfigDict(frozen=True)
    memory_replicas: int | None  # None under a request rate: requests past the KV limit queue (speed plan)
    requests_per_replica: int  # the workload's p95 requests one replica holds at once (KV cache, max_num_seqs)
    speed_replicas: int
    plan: CapacityPlan
    binding: Literal["memory", "speed"]


def plan_both_ceilings(result: Estimate, workload: Workload, traffic: Traffic, slo: Slo, *,
                       prices: Mapping[str, GpuPrice] | None = None,
                       constants: SpeedConstants | None = None) -> CeilingsPlan:
    """The replicas of ``result`` that hold ``workload``'s concurrent requests and serve ``traffic`` within
    ``slo``."""
    speed = capacity_plan(result, traffic, slo, prices=prices, constants=constants)
    held = workload_capacity(result, workload).concurrency_p95
    if held < 1:
        raise InvalidInput("not one request of the workload's p95 lengths fits in the KV cache")
    memory = min(MAX_REPLICAS, math.ceil(traffic.concurrency / held)) if traffic.concurrency else None
    if memory is None or memory <= speed.replicas:
        return CeilingsPlan(memory_replicas=memory, requests_per_replica=held, speed_replicas=speed.replicas,
                            plan=speed, binding="speed")
    per_replica = speed_estimate(result, share(traffic, memory), prices=prices, constants=constants)
    missed = slo_violations(per_replica, slo)
    plan = CapacityPlan(replicas=memory, gpus_per_replica=result.num_gpus, per_replica=per_replica,
                        meets_slo=not missed, violations=missed)
    return CeilingsPlan(memory_replicas=memory, requests_per_replica=held, speed_replicas=speed.replicas,
                        plan=plan, binding="memory")


class SpeedPlan(BaseModel):
    """What the Plan page's Speed section shows: the plan for both ceilings and the two-ceilings sweep of one
    replica at the workload's lengths."""

    model_config = ConfigDict(frozen=True)
    ceilings: CeilingsPlan
    sweep: ConcurrencySweep
    slo: Slo


def speed_plan(result: Estimate, workload: Workload, inputs: SpeedInputs) -> SpeedPlan:
    """``result`` with the inputs' GPU rates, price and measured efficiencies, planned for the workload's load;
    ``InvalidInput`` (one line) when the speed model cannot answer (a CPU deployment, a GPU without rates)."""
    if result.gpu is None or result.settings.device == "cpu":
        raise InvalidInput("the speed model covers GPUs; this deployment runs on the CPU, so no speed is predicted")
    traffic = inputs.traffic(workload)
    rated = inputs.with_gpu_rates(result)
    prices, constants = inputs.prices(rated.gpu), inputs.constants(rated.gpu.platform)
    ceilings = plan_both_ceilings(rated, workload, traffic, inputs.slo, prices=prices, constants=constants)
    sweep = concurrency_sweep(rated, traffic, prices=prices, constants=constants)
    return SpeedPlan(ceilings=ceilings, sweep=sweep, slo=inputs.slo)
