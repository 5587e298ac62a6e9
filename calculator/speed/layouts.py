"""The one capacity plan a page shows: the deployment as set (memory and speed together, ``plan_both_ceilings``),
beside the other tensor x pipeline layouts of the same GPU, weights and KV dtype, each with why it loses.

The memory-only search of layouts (``engine.advice.capacity_plan``) answers "how many GPUs hold the requests",
which ignores the SLOs; here every layout is planned for both ceilings, so the page has one GPU count for the load
and every other count is a layout it considered, with its reason.

    plan = layout_plan(result, workload, traffic, slo)
    plan.chosen.plan.gpus           -> 5 (the deployment as set)
    plan.alternatives[0].reason     -> "needs 8 GPUs, 3 more"
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from ..engine.estimate import Estimate, estimate
from ..engine.workload import Workload
from ..errors import CalculatorError
from .calibration import SpeedConstants
from .ceilings import CeilingsPlan, plan_both_ceilings
from .plan import Slo
from .prices import GpuPrice
from .recommend import TENSOR_PARALLEL_SIZES
from .traffic import Traffic

PIPELINE_PARALLEL_SIZES = (1, 2, 4)  # every one with every TP size: the page asks about its own GPU, not the catalog


class Layout(BaseModel):
    """One tensor x pipeline layout of the deployment, planned for both ceilings (``None``: it does not start)."""

    model_config = ConfigDict(frozen=True)
    tensor_parallel_size: int
    pipeline_parallel_size: int
    ceilings: CeilingsPlan | None
    reason: str  # why it loses to the deployment as set, or why it would win ("fewer GPUs: ...")
    better: bool = False  # meets what the deployment as set meets, with fewer GPUs or at a lower cost


class LayoutPlan(BaseModel):
    """The deployment as set (``chosen``) and every other layout considered, best first."""

    model_config = ConfigDict(frozen=True)
    chosen: CeilingsPlan
    alternatives: tuple[Layout, ...]


def layout_plan(result: Estimate, workload: Workload, traffic: Traffic, slo: Slo, *,
                prices: Mapping[str, GpuPrice] | None = None, constants: SpeedConstants | None = None,
                chosen: CeilingsPlan | None = None) -> LayoutPlan:
    """``result`` planned for both ceilings, and each other TP x PP layout with why it loses to it."""
    chosen = chosen or plan_both_ceilings(result, workload, traffic, slo, prices=prices, constants=constants)
    s, spec = result.settings, result.model
    others = []
    for tp in TENSOR_PARALLEL_SIZES:
        for pp in PIPELINE_PARALLEL_SIZES:
            if (tp, pp) == (s.tensor_parallel_size, s.pipeline_parallel_size) or spec.num_attention_heads % tp \
                    or pp > spec.num_hidden_layers:
                continue
            others.append(_layout(result, tp, pp, workload, traffic, slo, chosen, prices, constants))
    started = sorted((o for o in others if o.ceilings), key=lambda o: (
        not o.better, not o.ceilings.plan.meets_slo, o.ceilings.plan.gpus, o.ceilings.plan.cost_per_hour or 0))
    return LayoutPlan(chosen=chosen, alternatives=(*started, *(o for o in others if o.ceilings is None)))


def _layout(result: Estimate, tp: int, pp: int, workload: Workload, traffic: Traffic, slo: Slo,
            chosen: CeilingsPlan, prices: Mapping[str, GpuPrice] | None,
            constants: SpeedConstants | None) -> Layout:
    try:
        other = estimate(result.scenario.replace(tensor_parallel_size=tp, pipeline_parallel_size=pp), result.model)
    except (CalculatorError, ValueError) as exc:
        return Layout(tensor_parallel_size=tp, pipeline_parallel_size=pp, ceilings=None,
                      reason=f"not valid: {str(exc).splitlines()[0]}")
    if not other.fits:
        return Layout(tensor_parallel_size=tp, pipeline_parallel_size=pp, ceilings=None,
                      reason="does not start: " + _first_sentence(other.error or "vLLM refuses it"))
    if other.gpu is not None and result.gpu is not None:
        other = other.model_copy(update={"gpu": result.gpu})  # the page's own GPU rates (a custom one's too)
    try:
        plan = plan_both_ceilings(other, workload, traffic, slo, prices=prices, constants=constants)
    except CalculatorError as exc:
        return Layout(tensor_parallel_size=tp, pipeline_parallel_size=pp, ceilings=None,
                      reason=_first_sentence(str(exc)))
    reason, better = why(plan, chosen)
    return Layout(tensor_parallel_size=tp, pipeline_parallel_size=pp, ceilings=plan, reason=reason, better=better)


def why(other: CeilingsPlan, chosen: CeilingsPlan) -> tuple[str, bool]:
    """Why ``other`` loses to ``chosen`` in words (``False``), or why it would win (``True``)."""
    mine, theirs = chosen.plan, other.plan
    if mine.meets_slo and not theirs.meets_slo:
        return "misses the SLOs: " + "; ".join(theirs.violations), False
    held = (f"; its KV cache holds only {other.requests_per_replica:,} "
            f"request{'s' if other.requests_per_replica != 1 else ''} per replica"
            if other.binding == "memory" else "")
    if theirs.gpus > mine.gpus:
        return f"needs {theirs.gpus:,} GPUs, {theirs.gpus - mine.gpus:,} more{held}", False
    if theirs.gpus < mine.gpus and (theirs.meets_slo or not mine.meets_slo):
        return f"fewer GPUs: {theirs.gpus:,} instead of {mine.gpus:,}", True
    if theirs.gpus < mine.gpus:
        return "misses the SLOs: " + "; ".join(theirs.violations), False
    cost, own_cost = theirs.cost_per_million_output_tokens, mine.cost_per_million_output_tokens
    if cost is not None and own_cost is not None and cost < own_cost * 0.995:
        return f"same {theirs.gpus:,} GPUs at a lower cost per million output tokens", True
    return f"same {theirs.gpus:,} GPUs, no cheaper per output token", False


def _first_sentence(text: str) -> str:
    first = text.strip().split("\n")[0]
    first = first.split(". ")[0].rstrip(".")
    return first if len(first) <= 140 else first[:137] + "..."
