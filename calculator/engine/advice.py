"""What would make a scenario fit, and what each weight precision needs — both asked of the engine itself."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..errors import CalculatorError
from ..model.spec import ModelSpec, QuantizationSpec
from ..scenario import Scenario
from ..units import GIB
from .estimate import Estimate, estimate
from .memory import EXTENSIBLE_MARGIN_FLOOR_BYTES, EXTENSIBLE_MARGIN_FRACTION

TP_OPTIONS = (1, 2, 4, 8, 16)


class Fix(BaseModel):
    """One change that makes the scenario start, with what it then gives."""

    model_config = ConfigDict(frozen=True)
    description: str
    changes: dict[str, object]
    max_concurrency: float
    kv_cache_tokens: int
    num_gpu_blocks: int = 0  # the KV pool the fix gives (the same as now: only the per-request figures change)
    checkpoint: str | None = None  # the fix needs another checkpoint of the model (e.g. a 4-bit one)
    environment: dict[str, str] = Field(default_factory=dict)  # variables the command must set (e.g. VLLM_ALLOW_...)


# A typical 4-bit checkpoint of a 16-bit model: AWQ, 128-input groups, fp16 scales and zero points (GPTQ with
# act-order off is the same size within a few MiB).
FOUR_BIT_CHECKPOINT = QuantizationSpec(method="awq", weight_bits=4, group_size=128, has_zeros=True,
                                       scale_granularity="group", scale_bytes=2)
FOUR_BIT_NAME = "a 4-bit AWQ/GPTQ checkpoint of this model"


def _estimate_or_none(scenario: Scenario, spec: ModelSpec, **changes: object) -> Estimate | None:
    try:
        return estimate(scenario.replace(**changes), spec)
    except (CalculatorError, ValueError):
        return None


def _try(scenario: Scenario, spec: ModelSpec, **changes: object) -> Estimate | None:
    """The estimate with ``changes`` applied, if it fits."""
    result = _estimate_or_none(scenario, spec, **changes)
    return result if result is not None and result.fits else None


def four_bit_spec(spec: ModelSpec) -> ModelSpec:
    """The same model as a 4-bit checkpoint (what a user would download instead)."""
    return spec.model_copy(update={"quantization": FOUR_BIT_CHECKPOINT})


def sixteen_bit_spec(spec: ModelSpec) -> ModelSpec:
    """The model's 16-bit original (for a checkpoint that is already quantized)."""
    return spec.model_copy(update={"quantization": None})


def weights_exceed(result: Estimate) -> str | None:
    """A plain sentence when the weights alone cannot fit on one GPU (then no KV or context setting helps)."""
    weights, budget = result.budget.weights_bytes, result.budget
    if result.settings.device == "cpu":
        return None
    if weights > budget.total_bytes:
        return (f"the weights alone ({weights / GIB:,.2f} GiB per GPU) exceed the GPU "
                f"({budget.total_bytes / GIB:,.2f} GiB)")
    if weights > budget.requested_bytes and not budget.kv_cache_memory_bytes_given:
        return (f"the weights alone ({weights / GIB:,.2f} GiB per GPU) exceed gpu_memory_utilization × GPU "
                f"({budget.gpu_memory_utilization:g} × {budget.total_bytes / GIB:,.2f} = "
                f"{budget.requested_bytes / GIB:,.2f} GiB)")
    return None


def utilization_effect(result: Estimate) -> str | None:
    """When moving ``gpu_memory_utilization`` would change nothing, or means something else, say why."""
    budget, settings = result.budget, result.settings
    if settings.device == "cpu":
        return "the CPU backend ignores it: VLLM_CPU_KVCACHE_SPACE sets the KV cache"
    if budget.kv_cache_memory_bytes_given:
        return "ignored: --kv-cache-memory-bytes fixes the KV cache"
    if result.scenario.num_gpu_blocks_override:
        return "only decides whether vLLM starts: --num-gpu-blocks-override fixes the block count"
    if budget.formula != "v1_extensible":
        return None
    margin = max(EXTENSIBLE_MARGIN_FLOOR_BYTES.get(settings.device, 1 << 30),
                 int(budget.activation_bytes * EXTENSIBLE_MARGIN_FRACTION))
    free_after_margin = budget.total_bytes - budget.other_processes_bytes - budget.context_bytes - margin
    threshold = free_after_margin / budget.total_bytes
    version = result.rules.version
    if budget.gpu_memory_utilization >= threshold:
        return (f"vLLM {version}'s extensible KV cache takes what is free minus a {margin / GIB:,.2f} GiB margin; "
                f"from {max(threshold, 0):.2f} up, that binds before gpu_memory_utilization, so moving it changes "
                "nothing here")
    return (f"vLLM {version} reinterprets it: with the extensible KV cache it caps weights + peak + KV cache "
            "(default 1.0) instead of reserving that share")


def fixes(result: Estimate) -> list[Fix]:
    """Single-knob changes that make a non-fitting scenario fit (empty when it already fits)."""
    if result.fits:
        return []
    scenario, spec, settings = result.scenario, result.model, result.settings
    candidates: list[tuple[str, dict[str, object]]] = []
    too_long = settings.max_model_len > spec.derived_max_model_len
    if result.max_fitting_model_len > 0 and result.max_fitting_model_len < settings.max_model_len:
        why = ("the model's own limit, from its config.json" if too_long
               and result.max_fitting_model_len == spec.derived_max_model_len else "the largest that fits")
        candidates.append((f"lower max_model_len to {result.max_fitting_model_len:,} ({why})",
                           {"max_model_len": result.max_fitting_model_len}))
    for seqs in (128, 64, 32):
        if seqs < settings.max_num_seqs:
            candidates.append((f"lower max_num_seqs to {seqs} (smaller sampler peak)", {"max_num_seqs": seqs}))
            break
    if settings.quantization is None:
        candidates.append(("quantize the weights to fp8 while loading (--quantization fp8)", {"quantization": "fp8"}))
        if result.max_fitting_model_len < settings.max_model_len:
            fp8 = _estimate_or_none(scenario, spec, quantization="fp8")
            if fp8 is not None and not fp8.fits and 0 < fp8.max_fitting_model_len < settings.max_model_len:
                candidates.append((f"quantize the weights to fp8 with max_model_len {fp8.max_fitting_model_len:,}",
                                   {"quantization": "fp8", "max_model_len": fp8.max_fitting_model_len}))
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
                             kv_cache_tokens=fixed.capacity.kv_cache_tokens,
                             num_gpu_blocks=fixed.capacity.num_gpu_blocks))
    if too_long and result.settings.error and _fits_but_for_length(result):
        found.append(Fix(description=f"set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 to keep max_model_len "
                                     f"{settings.max_model_len:,} (risk: past the {spec.derived_max_model_len:,} "
                                     "tokens the model was trained for, outputs may be wrong or CUDA may fail)",
                         changes={}, environment={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"},
                         max_concurrency=result.capacity.max_concurrency,
                         kv_cache_tokens=result.capacity.kv_cache_tokens,
                         num_gpu_blocks=result.capacity.num_gpu_blocks))
    if spec.quantization is None or spec.quantization.weight_bits > 4:
        variant, plain = four_bit_spec(spec), scenario.replace(quantization=None)
        four_bit, changes = _try(plain, variant), {}
        if four_bit is None:
            attempt = _estimate_or_none(plain, variant)
            if attempt is not None and 0 < attempt.max_fitting_model_len < settings.max_model_len:
                changes = {"max_model_len": attempt.max_fitting_model_len}
                four_bit = _try(plain, variant, **changes)
        if four_bit is not None:
            length = f" with max_model_len {changes['max_model_len']:,}" if changes else ""
            found.append(Fix(description=f"serve {FOUR_BIT_NAME}{length} (about a quarter of the 16-bit weights)",
                             changes=changes, checkpoint=FOUR_BIT_NAME,
                             max_concurrency=four_bit.capacity.max_concurrency,
                             kv_cache_tokens=four_bit.capacity.kv_cache_tokens,
                             num_gpu_blocks=four_bit.capacity.num_gpu_blocks))
    return found


def _fits_but_for_length(result: Estimate) -> bool:
    """Whether memory alone would start ``result`` (its only refusal being max_model_len above the model's)."""
    return (result.refusal is None and result.kv_cache_bytes > 0 and weights_exceed(result) is None
            and result.capacity.max_concurrency >= 1)


class LadderRow(BaseModel):
    """One weight precision of the model on the scenario's GPU: its weights, and whether and how it fits."""

    model_config = ConfigDict(frozen=True)
    precision: str  # "bf16 (as published)", "fp8 (--quantization fp8)", "4-bit AWQ/GPTQ checkpoint"
    how: str  # the flag or checkpoint that gives it
    current: bool  # the scenario's own precision
    weights_gib_per_gpu: float  # at the scenario's TP/PP
    verdict: str  # the uncertainty verdict at the scenario's TP/PP ("does not fit" when vLLM refuses)
    kv_cache_tokens: int
    gpus_needed: int | None  # the fewest TP x PP GPUs (TP dividing the heads) at which it fits; None: none up to 64


def quantization_ladder(result: Estimate) -> list[LadderRow]:
    """Each precision of the model (16-bit, fp8, 4-bit) on this GPU, as hf-mem lists them, computed by the engine."""
    from .uncertainty import verdict  # NOTE: uncertainty imports estimate; advice stays importable without it

    scenario, spec = result.scenario, result.model
    original = spec if spec.quantization is None else sixteen_bit_spec(spec)
    dtype = result.settings.dtype.replace("bfloat16", "bf16").replace("float16", "fp16")
    current_bits = spec.quantization.weight_bits if spec.quantization else 16
    flag = result.settings.quantization
    on_fp8 = (flag is not None and "fp8" in flag) or (current_bits == 8 and spec.quantization is not None)
    fp8_how = "--quantization fp8 on the 16-bit checkpoint" if spec.quantization is None else "an fp8 checkpoint"
    rungs = [(f"{dtype} (16-bit)", "the published 16-bit weights", original, None,
              spec.quantization is None and flag is None),
             ("fp8", fp8_how, original, "fp8", on_fp8),
             ("4-bit (AWQ/GPTQ)", FOUR_BIT_NAME, four_bit_spec(original), None, current_bits <= 4)]
    rows = []
    for precision, how, variant, quantization, current in rungs:
        candidate = scenario.replace(quantization=quantization)
        at_scenario = _estimate_or_none(candidate, variant)
        needed = None
        for tp in TP_OPTIONS + (32, 64):
            if variant.num_attention_heads % tp:
                continue
            if _try(candidate, variant, tensor_parallel_size=tp, pipeline_parallel_size=1) is not None:
                needed = tp
                break
        rows.append(LadderRow(precision=precision, how=how, current=current,
                              weights_gib_per_gpu=at_scenario.budget.weights_bytes / GIB if at_scenario else 0.0,
                              verdict=verdict(at_scenario) if at_scenario else "does not fit",
                              kv_cache_tokens=at_scenario.capacity.kv_cache_tokens if at_scenario else 0,
                              gpus_needed=needed))
    return rows
