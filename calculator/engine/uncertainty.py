"""How far off the estimate may be: bands from the residuals on real start-ups, per budget term and version era.

``calculator/data/uncertainty.json`` holds the 90th percentile of |predicted - printed| per term (weights and the
activation peak relative, non-torch in GiB) and of the available KV memory itself, per overhead era, written by
``python benchmarks/accuracy.py`` from ``benchmarks/data/calibration.jsonl``. An era with fewer than three residuals
for a term uses the pooled value of all eras.

The KV band is the larger of the terms' root-sum-square (independent errors) and the era's end-to-end KV residual:
the terms dominate when the pool is a thin remainder of large terms, the end-to-end residual when settings we do not
model (draft models, encoders, other tenants) move the pool. CUDA graphs have no reliable printed counterpart in the
records, so their part is carried by the end-to-end term.

Verdict: "fits with margin" when the deployment starts at the low end of the band; "borderline" when it starts at the
nominal estimate but not at the low end, or fails at the nominal estimate but would start at the high end; "does not
fit" when it fails even at the high end (or vLLM refuses the settings before sizing memory); "does not run" when
this vLLM version cannot serve the model or settings on the device at all (``Estimate.refusal``). More reasons make
a start "borderline" (``verdict_reason`` says which): a reported vLLM failure covers the deployment
(``known_issues``); CUDA graphs captured after the KV cache need more than the (1 - util) headroom; or the start-up
free-memory check passes only with a quiet host on an integrated GPU (``overheads.py``:
``UMA_HOST_BASELINE_HIGH_BYTES``) or only with the checkpoint's page cache dropped where vLLM counts it as used
(``free_memory.py``).

Unknown architectures (``ModelSpec.known_architecture`` false, estimated by ``generic_decoder_tensors``) get a wider
band: the weights may be off by ``GENERIC_WEIGHTS_REL`` and the KV bytes per token by ``GENERIC_KV_PER_TOKEN_REL``, on
top of the calibrated terms. A verdict that band straddles is "borderline" with the reason "unknown architecture"
first (``confidence``), so the generic path never gives a green or red verdict its band cannot support.

A deployment outside what the records cover (a link no TP > 1 record used, an overhead era, a quantization method
or an architecture class none of them has; ``coverage.py``) gets one more term per gap in the band, and a verdict
that band straddles is "borderline" with the gaps named first ("outside the records").
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources
from typing import Literal

from ..units import GIB
from .coverage import CoverageGap, coverage_extra_bytes, coverage_gaps, gap_notes
from .estimate import Estimate
from .free_memory import free_memory_reading, host_use_counts, page_cache_counts, page_cache_reason
from .known_issues import known_issues
from .kv_cache import capacity_figures, in_flight_tokens, kv_bytes_needed_for_one_request
from .memory import MemoryBudget, requested_bytes
from .overheads import UMA_HOST_BASELINE_BYTES, UMA_HOST_BASELINE_HIGH_BYTES
from .recurrent_state import mamba_slots_refusal

Verdict = Literal["fits with margin", "borderline", "does not fit", "does not run"]
Confidence = Literal["calibrated", "unknown architecture", "outside the records"]
# NOTE: measured by estimating every preset through the generic path (its model_type renamed, class defaults
# filled in) against its known inventory and KV layers (tests/test_frontier_models.py keeps these honest). The worst
# miss per family, over 35 families: weights 221.6 % (nemotron_h), 52.1 % (opt), 40.5 % (lfm2), 34.6 % (falcon_h1:
# its Mamba2 mixers, read as a plain decoder), 30.2 % (gemma3_text), 30.15 % (phi), 20.6 % (granitemoehybrid),
# 11.0 % (qwen3_5), 9.9 % (gemma2), 7.6 % (lfm2_moe), 4.6 % (gemma4), 4.5 % (glm4_moe_lite), 4.3 % (llava_next),
# 3.1 % (qwen3_5_moe), 2.6 % (deepseek_v3), 2.5 % (deepseek_v32), 2.3 % (kimi_linear), 1.8 % (mistral3),
# 1.7 % (qwen3_vl_moe), 1.5 % (gemma3), 1.3 % (glm_moe_dsa), under 1 % for the other fourteen; the 90th percentile
# (the 32nd of 35) is falcon_h1's 34.62 %. KV bytes per token: 9.09 % (gemma4: its per-layer head dims read as
# uniform), 0 for the other 34 families, whose caches the config spells out; the band takes that one miss.
GENERIC_WEIGHTS_REL = 0.3462
GENERIC_KV_PER_TOKEN_REL = 0.0909
BANDS_FILE = "uncertainty.json"


@cache
def band_table() -> dict:
    """The bands file as written by the accuracy benchmark (loaded once from package data)."""
    return json.loads((resources.files("calculator") / "data" / BANDS_FILE).read_text(encoding="utf-8"))


def term_band(term: str, era: str) -> float:
    """The band of one term (``weights_rel``, ``activation_rel``, ``non_torch_gib``, ``kv_rel``) in one era."""
    entry = band_table()["terms"].get(term)
    if entry is None:
        return 0.0
    era_entry = entry["eras"].get(era)
    return float(era_entry["band"] if era_entry else entry["pooled"])


def kv_uncertainty_bytes(budget: MemoryBudget, era: str) -> int:
    """Half-width of the KV band of one GPU's budget (0 when the pool was given with --kv-cache-memory-bytes)."""
    if budget.kv_cache_memory_bytes_given:
        return 0
    terms = math.sqrt((budget.weights_bytes * term_band("weights_rel", era)) ** 2
                      + (budget.activation_bytes * term_band("activation_rel", era)) ** 2
                      + (term_band("non_torch_gib", era) * GIB) ** 2)
    end_to_end = abs(budget.kv_cache_bytes) * term_band("kv_rel", era)
    return int(max(terms, end_to_end))


def kv_band(result: Estimate) -> tuple[int, int, int, int]:
    """(low_kv_bytes, high_kv_bytes, low_tokens, high_tokens) on the busiest GPU; tokens per engine."""
    low, high = _stage_pools(result, -1), _stage_pools(result, +1)
    busiest = result.budgets_per_stage.index(result.budget)
    return (max(low[busiest], 0), max(high[busiest], 0), _tokens(result, low), _tokens(result, high))


def verdict(result: Estimate) -> Verdict:
    """Whether the deployment starts across the uncertainty band (see the module docstring)."""
    if result.refusal:
        return "does not run"  # the version refuses the model or settings on this device, whatever the memory
    if result.settings.error or any(b.startup_error for b in result.budgets_per_stage):
        return "does not fit"
    if _pool_is_fixed(result):
        return "fits with margin" if result.fits else "does not fit"
    if result.fits:
        starts_low = _starts(result, _stage_pools(result, -1))
        return "fits with margin" if starts_low and not start_risks(result) else "borderline"
    return "borderline" if _starts(result, _stage_pools(result, +1)) else "does not fit"


def confidence(result: Estimate) -> Confidence:
    """"unknown architecture" when the model was estimated as a generic decoder; "outside the records" when the
    deployment has a link, era, quantization or architecture class no start-up record covers (``coverage.py``).
    Either way the band is the wider one."""
    if not result.model.known_architecture:
        return "unknown architecture"
    return "outside the records" if gaps(result) else "calibrated"


def gaps(result: Estimate) -> tuple[CoverageGap, ...]:
    """What of the deployment no calibration record covers (the coverage ``benchmarks/accuracy.py`` wrote)."""
    return coverage_gaps(result, band_table().get("coverage", {}))


def coverage_notes(result: Estimate) -> list[str]:
    """A sentence per gap in what the records cover (empty when the band is the calibrated one)."""
    return gap_notes(gaps(result))


def unknown_architecture_note(result: Estimate) -> str:
    """What "unknown architecture" means for this estimate, with the band it was given."""
    return (f"Unknown architecture {result.model.architecture}: estimated as a generic decoder, and generic "
            f"estimates of known families have missed the weights by up to {GENERIC_WEIGHTS_REL:.0%} and the KV "
            f"bytes per token by {GENERIC_KV_PER_TOKEN_REL:.0%}; the band is widened by that much")


def verdict_reason(result: Estimate) -> str | None:
    """Why the verdict is not "fits with margin": vLLM's error, a reported failure, the free-memory check, the band.

    For an unknown architecture whose widened band straddles the verdict, the reason says so first ("Unknown
    architecture ...")."""
    call = verdict(result)
    widened = confidence(result)
    if call == "borderline" and widened != "calibrated":
        detail = result.error if not result.fits else " ".join(start_risks(result)) or None
        why = (unknown_architecture_note(result) + "." if widened == "unknown architecture"
               else " ".join(coverage_notes(result)))
        return why + (f" {detail}" if detail else "")
    if call == "fits with margin":
        return None
    if call == "does not fit" or not result.fits:
        return result.error
    reasons = start_risks(result)
    if reasons:
        return " ".join(reasons)
    return "the KV cache does not hold one request at the low end of the calibrated error band"


def start_risks(result: Estimate) -> list[str]:
    """What can stop a start the budget says fits: reported failures, the host's memory or page cache in the way."""
    s = result.settings
    reasons = [issue.summary + "." for issue in known_issues(result.rules, result.model, result.gpu,
                                                              s.tensor_parallel_size)]
    gpu, budget = result.gpu, result.budget
    if graphs_reason := _graphs_outside_headroom(result):
        reasons.append(graphs_reason)
    if gpu is None or not result.rules.has_startup_free_memory_check or s.extensible_kv_cache \
            or budget.kv_cache_memory_bytes_given:
        return reasons
    requested = requested_bytes(s.gpu_memory_bytes, s.gpu_memory_utilization)
    reading = free_memory_reading(gpu, result.rules, s.device)
    if host_use_counts(reading):
        busy_host_free = budget.free_at_start_bytes + UMA_HOST_BASELINE_BYTES - UMA_HOST_BASELINE_HIGH_BYTES
        if busy_host_free < requested:
            reasons.append(
                f"{gpu.name} counts the host's own memory use as used: vLLM needs {requested / GIB:.2f} GiB free at "
                f"start, which a host using {UMA_HOST_BASELINE_HIGH_BYTES / GIB:.1f} GiB (reported on DGX Spark "
                f"kits) does not leave; lower gpu_memory_utilization to {busy_host_free / s.gpu_memory_bytes:.2f}.")
    if page_cache_counts(reading):
        checkpoint = budget.weights_bytes * s.tensor_parallel_size * s.pipeline_parallel_size
        reason = page_cache_reason(gpu, result.rules, free_at_start_bytes=budget.free_at_start_bytes,
                                   requested_bytes=requested, checkpoint_bytes=checkpoint)
        if reason:
            reasons.append(reason)
    return reasons


def _graphs_outside_headroom(result: Estimate) -> str | None:
    """CUDA graphs captured after the KV cache (outside the budget) that the (1 - util) headroom cannot hold."""
    budget, s = result.budget, result.settings
    if budget.cudagraph_in_budget or budget.cudagraph_bytes == 0 or s.device == "cpu":
        return None
    headroom = budget.total_bytes - budget.requested_bytes
    needed = budget.context_bytes + budget.other_processes_bytes + budget.cudagraph_bytes
    if needed <= headroom:
        return None
    fitting = (budget.total_bytes - needed) / budget.total_bytes
    return (f"the CUDA graphs ({budget.cudagraph_bytes / GIB:.2f} GiB, {budget.cudagraph_note}) and the "
            f"{budget.context_bytes / GIB:.2f} GiB taken before vLLM's snapshot "
            f"need more than the {headroom / GIB:.2f} GiB that gpu_memory_utilization {s.gpu_memory_utilization:g} "
            f"leaves: capturing them can run out of memory; lower it to {math.floor(fitting * 100) / 100:.2f} or "
            "pass --enforce-eager.")


def _pool_is_fixed(result: Estimate) -> bool:
    """No band: the user fixed the pool (--kv-cache-memory-bytes, --num-gpu-blocks-override) or it is the CPU's."""
    return bool(result.scenario.num_gpu_blocks_override or result.budget.kv_cache_memory_bytes_given)


def _stage_pools(result: Estimate, sign: int) -> list[int]:
    if _pool_is_fixed(result):
        return [b.kv_cache_bytes for b in result.budgets_per_stage]
    era = result.rules.overhead_era
    found, pooled = gaps(result), _pooled_bands()
    if result.model.known_architecture:
        return [b.kv_cache_bytes + sign * _widened(kv_uncertainty_bytes(b, era),
                                                   coverage_extra_bytes(result, b, found, pooled))
                for b in result.budgets_per_stage]
    # NOTE: a generic estimate's weights error moves the pool byte for byte; its per-token error is a pool that
    # holds (1 +- e) times fewer or more tokens, so the pool is scaled by the same factor.
    return [int((b.kv_cache_bytes + sign * (kv_uncertainty_bytes(b, era) + b.weights_bytes * GENERIC_WEIGHTS_REL))
                / (1 - sign * GENERIC_KV_PER_TOKEN_REL)) for b in result.budgets_per_stage]


def _pooled_bands() -> dict[str, float]:
    return {term: float(entry["pooled"]) for term, entry in band_table()["terms"].items()}


def _widened(half_width: int, extra: int) -> int:
    """The calibrated half-width with the coverage gaps' terms added in quadrature."""
    return int(math.hypot(half_width, extra)) if extra else half_width


def _num_blocks(result: Estimate, pools: list[int]) -> int:
    if result.scenario.num_gpu_blocks_override:
        return result.scenario.num_gpu_blocks_override
    return min(max(pool, 0) // per_block for pool, per_block in zip(pools, result.layout.bytes_per_block_per_stage))


def _tokens(result: Estimate, pools: list[int]) -> int:
    s = result.settings
    in_flight = in_flight_tokens(result.rules, max_num_batched_tokens=s.max_num_batched_tokens,
                                 pipeline_parallel_size=s.pipeline_parallel_size, async_scheduling=s.async_scheduling)
    return capacity_figures(result.layout, result.rules, num_gpu_blocks=_num_blocks(result, pools),
                            max_model_len=s.max_model_len, in_flight=in_flight).kv_cache_tokens


def _starts(result: Estimate, pools: list[int]) -> bool:
    """vLLM's two KV checks at these pools: some memory, and room for one request of max_model_len per stage."""
    if any(pool <= 0 for pool in pools):
        return False
    s, layout = result.settings, result.layout
    in_flight = in_flight_tokens(result.rules, max_num_batched_tokens=s.max_num_batched_tokens,
                                 pipeline_parallel_size=s.pipeline_parallel_size, async_scheduling=s.async_scheduling)
    null_block = result.rules.one_request_check_excludes_null_block
    for stage, (pool, per_block) in enumerate(zip(pools, layout.bytes_per_block_per_stage)):
        usable = pool - (per_block if null_block else 0)
        if kv_bytes_needed_for_one_request(layout, s.max_model_len, in_flight, stage) > usable:
            return False
    # NOTE: a hybrid model's recurrent-state pool must also hold max_num_seqs sequences (recurrent_state.py).
    blocks = min(pool // per_block for pool, per_block in zip(pools, layout.bytes_per_block_per_stage))
    return mamba_slots_refusal(result.rules, layout, device=s.device, enforce_eager=s.enforce_eager,
                               max_num_seqs=s.max_num_seqs, num_blocks=blocks) is None
