"""Where a deployment lies outside what the calibration records cover, and how much that widens its KV band.

``python benchmarks/accuracy.py`` writes, beside the bands of ``calculator/data/uncertainty.json``, which interconnects
(at TP > 1), overhead eras, weight quantization methods and architecture classes the scored start-ups span. A
deployment outside them is estimated by the same mechanisms, but no start-up has checked them there, so the band
grows by one term per gap, each the size of what that gap leaves unmeasured:

* interconnect: NCCL's buffers range from the P2P figure over PCIe to the NVLS figure of the era on NVSwitch
  (``interconnect.py``); a link no record measured may sit anywhere between them;
* overhead era: the era's own end-to-end residual is unknown, so the pooled one counts once more;
* quantization method: the weights of a method no record loaded may be off like the worst weights residual;
* architecture class: the layout and activation of a class no record ran may be off like the pooled end-to-end one.

The terms add in quadrature to ``uncertainty.kv_uncertainty_bytes``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .estimate import Estimate
from .interconnect import P2P_BUFFER_BYTES
from .memory import MemoryBudget
from .overheads import ERA_CONSTANTS


class CoverageGap(NamedTuple):
    """One dimension of the deployment no calibration record covers, and what it adds to the KV band."""

    dimension: str  # "interconnect", "overhead era", "quantization", "architecture"
    value: str  # what the deployment has there, e.g. "xgmi at TP 8"
    note: str  # a sentence for the page and the CLI


def architecture_class(result: Estimate) -> str:
    """The architecture class the records are grouped by: mla, hybrid (linear or sliding layers), moe or dense."""
    spec = result.model
    if spec.mla is not None:
        return "mla"
    if any(layer.kind != "full" for layer in spec.layers):
        return "hybrid"
    return "moe" if spec.moe is not None else "dense"


def quantization_class(result: Estimate) -> str:
    """The weight quantization method as the records name it ("none" for 16-bit weights)."""
    quantization = result.quantization
    return quantization.method if quantization is not None else "none"


def interconnect_class(result: Estimate) -> str | None:
    """The link the records are grouped by at TP > 1 (None on one GPU, where no link is used)."""
    return result.settings.interconnect if result.settings.tensor_parallel_size > 1 else None


def coverage_gaps(result: Estimate, covered: dict) -> tuple[CoverageGap, ...]:
    """The dimensions of ``result`` outside ``covered`` (uncertainty.json's "coverage"; empty: nothing checked)."""
    if not covered or result.settings.device == "cpu":
        return ()
    gaps = []
    link = interconnect_class(result)
    if link is not None and link not in covered.get("interconnects", ()):
        gaps.append(CoverageGap("interconnect", f"{link} at TP {result.settings.tensor_parallel_size}",
                                f"no start-up record measured NCCL's buffers over {link} at TP > 1; the band spans "
                                "the PCIe to NVSwitch figures"))
    era = result.rules.overhead_era
    if era not in covered.get("eras", ()):
        gaps.append(CoverageGap("overhead era", era, f"no start-up record of the {result.rules.era} era is scored; "
                                "the band counts the pooled residual of all eras once more"))
    method = quantization_class(result)
    if method not in covered.get("quantizations", ()):
        gaps.append(CoverageGap("quantization", method, f"no start-up record loaded {method} weights; the band "
                                "counts the worst weights residual once more"))
    kind = architecture_class(result)
    if kind not in covered.get("architectures", ()):
        gaps.append(CoverageGap("architecture", kind, f"no start-up record ran a {kind} model; the band counts the "
                                "pooled end-to-end residual once more"))
    return tuple(gaps)


def coverage_extra_bytes(result: Estimate, budget: MemoryBudget, gaps: tuple[CoverageGap, ...],
                         pooled: dict[str, float]) -> int:
    """What the gaps add to one GPU's KV half-width, in quadrature (``pooled``: the pooled band of each term)."""
    terms = []
    for gap in gaps:
        if gap.dimension == "interconnect":
            era = ERA_CONSTANTS[result.rules.overhead_era]
            tp = result.settings.tensor_parallel_size
            nvls = era.nccl_first_peer_bytes + era.nccl_extra_peer_bytes * (tp - 2)
            terms.append(abs(nvls - P2P_BUFFER_BYTES["pcie"]))
        elif gap.dimension == "quantization":
            terms.append(budget.weights_bytes * pooled.get("weights_rel", 0.0))
        else:
            terms.append(abs(budget.kv_cache_bytes) * pooled.get("kv_rel", 0.0))
    return int(math.sqrt(sum(term * term for term in terms)))


def gap_notes(gaps: tuple[CoverageGap, ...]) -> list[str]:
    """One sentence per gap, for the page, the CLI and the JSON."""
    return [f"Outside the calibration records ({gap.dimension}: {gap.value}): {gap.note}." for gap in gaps]


__all__ = ["CoverageGap", "architecture_class", "coverage_extra_bytes", "coverage_gaps", "gap_notes",
           "interconnect_class", "quantization_class"]
