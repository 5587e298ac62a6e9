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
from .plan import MAX_REPLICAS, CapacityPlan, Slo, capacity_plan, plan_at
from .prices import GpuPrice
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
    plan = plan_at(result, memory, traffic, slo, prices=prices, constants=constants)
    return CeilingsPlan(memory_replicas=memory, requests_per_replica=held, speed_replicas=speed.replicas,
                        plan=plan, binding="memory")



def workload_of(traffic: Traffic) -> Workload:
    """The memory engine's Workload for ``traffic``'s lengths and concurrency (one user under a request rate)."""
    return Workload(prompt_tokens_mean=traffic.input_tokens, output_tokens_mean=traffic.output_tokens,
                    prompt_tokens_p95=traffic.prompt_p95, output_tokens_p95=traffic.output_p95,
                    target_concurrent_requests=traffic.concurrency or 1)
