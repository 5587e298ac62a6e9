"""Why did my vLLM do that? A read start-up log reproduced by the estimate: printed vs predicted term by term, the
term that explains the difference, the cause of a failure in one sentence, the changes that make it start, and the
calibration that makes the estimate reproduce the user's machine.

Pure: the log is read by ``startup_log``; the GPU (which no log names) and a model that cannot be read here come
from the caller.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ..engine.advice import Fix, fixes
from ..engine.estimate import Estimate, estimate
from ..errors import CalculatorError, InvalidInput, one_line_validation_error
from ..model.model_source import load_model_spec
from ..model.spec import ModelSpec
from ..scenario import Scenario
from ..units import GIB
from .startup_log import Outcome, StartupLog

# Printed term -> its label; the order of the stacks.
TERMS: dict[str, str] = {
    "weights_gib": "Weights", "activation_peak_gib": "Activation peak", "non_torch_memory_gib": "Non-torch memory",
    "consumed_memory_gib": "Weights + non-torch (0.27+)", "cudagraph_gib": "CUDA graphs",
    "available_kv_cache_gib": "KV cache memory",
}
CAPACITY = ("num_gpu_blocks", "kv_cache_tokens", "max_concurrency")
_OVERHEADS = ("weights_gib", "activation_peak_gib", "non_torch_memory_gib", "consumed_memory_gib", "cudagraph_gib")
_SCENARIO_FIELDS = frozenset(Scenario.model_fields)
CALIBRATION_DECIMALS = 6  # GiB to the KiB
MAX_CALIBRATION_GIB = 1000  # what a link's adj takes (Scenario.overhead_adjustment_gib)


class TermRow(BaseModel):
    model_config = ConfigDict(frozen=True)
    key: str
    label: str
    printed: float | int | None
    predicted: float | int
    difference: float | None  # printed - predicted


class Diagnosis(BaseModel):
    """One log, explained."""

    model_config = ConfigDict(frozen=True)
    log: StartupLog
    scenario: Scenario
    result: Estimate
    rows: tuple[TermRow, ...]
    largest: str | None  # the term that explains the largest difference, in one sentence
    cause: str | None  # why it failed, in one sentence (None when it started)
    fixes: tuple[Fix, ...]
    calibration_gib: float | None  # the overhead to add to the estimate so it reproduces this machine
    calibration_note: str
    calibrated: Scenario | None
    notes: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        """The CLI's ``--json``: settings (vLLM's names), printed, predicted, outcome, cause, fixes."""
        return {
            "settings": dict(self.log.settings),
            "settings_used": self.scenario.model_dump(exclude_defaults=True),
            "printed": self.log.printed.present(),
            "predicted": {row.key: _rounded(row.predicted) for row in self.rows},
            "outcome": str(self.log.outcome),
            "check": self.log.outcome.check,
            "cause": self.cause,
            "largest_difference": self.largest,
            "fixes": [{"change": fix.description, "changes": fix.changes, "environment": fix.environment,
                       "kv_cache_tokens": fix.kv_cache_tokens, "max_concurrency": round(fix.max_concurrency, 2)}
                      for fix in self.fixes],
            "calibration": {"overhead_adjustment_gib": self.calibration_gib, "note": self.calibration_note},
            "missing": list(self.log.missing),
            "notes": list(self.notes),
        }


def scenario_from_log(log: StartupLog, *, gpu: str | None = None, model: str | None = None,
                      vllm_version: str | None = None, planned: Scenario | None = None) -> tuple[Scenario, list[str]]:
    """The Scenario the log describes, the GPU (and a model or version it lacks) from the caller, then from
    ``planned`` (the deployment the user planned: the plan to reproduce against) where neither says it;
    ``InvalidInput`` with one sentence for what is still missing."""
    fields = {key: value for key, value in log.settings.items() if key in _SCENARIO_FIELDS}
    notes: list[str] = []
    if model:
        fields["model"] = model
    if vllm_version:
        if fields.get("vllm_version") not in (None, vllm_version):
            notes.append(f"vLLM {vllm_version} as asked, though the log printed {fields['vllm_version']}")
        fields["vllm_version"] = vllm_version
    for need in ("model", "vllm_version") if planned is not None else ():
        if need not in fields:
            fields[need] = getattr(planned, need)
            notes.append(f"{need.replace('_', ' ')} {fields[need]} from your plan: the log does not print it")
    for need, flag in (("model", "--model"), ("vllm_version", "--vllm-version")):
        if need not in fields:
            raise InvalidInput(f"the log does not say the {need.replace('_', ' ')}: give it ({flag})")
    printed_total = log.printed.total_memory_gib
    if log.device == "cpu":
        fields.update(gpu=None, device="cpu")
        if "kv_cache_memory_bytes" not in fields and log.printed.available_kv_cache_gib is not None:
            fields["kv_cache_memory_bytes"] = round(log.printed.available_kv_cache_gib * GIB)
            notes.append(f"KV cache space {log.printed.available_kv_cache_gib:g} GiB, as the CPU worker printed it")
    elif gpu is None:
        seen = f" (vLLM printed {printed_total:g} GiB of device memory)" if printed_total else ""
        raise InvalidInput(f"the log does not say which GPU ran it{seen}: give the GPU (--gpu, e.g. h100-sxm-80gb)")
    else:
        fields["gpu"] = gpu
        if printed_total:
            fields["gpu_memory_gib"] = printed_total
            notes.append(f"GPU memory {printed_total:g} GiB, as vLLM printed it")
    try:
        return Scenario(**fields), notes
    except ValidationError as exc:
        raise InvalidInput(one_line_validation_error(exc)) from exc


def diagnose(log: StartupLog, scenario: Scenario, notes: list[str] | tuple[str, ...] = ()) -> Diagnosis:
    """Reproduce ``log`` with the estimate and explain it."""
    try:
        spec = load_model_spec(scenario.model)
    except CalculatorError as exc:
        if log.settings.get("model") != scenario.model:
            raise
        raise InvalidInput(f"the log's model {scenario.model!r} cannot be read here ({exc}): give the model "
                           "(--model: a Hub id, a bundled preset or a config.json)") from exc
    result = estimate(scenario, spec)
    rows = _rows(log, result)
    adjustment, how = _calibration(log, result)
    if adjustment is not None and abs(adjustment) > MAX_CALIBRATION_GIB:
        how = (f"the printed figures are {adjustment:+,.0f} GiB away from the estimate, too far to be an overhead "
               "the estimate missed: check the GPU and the settings")
        adjustment = None
    calibrated = scenario.replace(overhead_adjustment_gib=adjustment) if adjustment is not None else None
    reproduced = estimate(calibrated, spec) if calibrated is not None else result
    fix_list: list[Fix] = []
    if log.outcome.status != "started":  # NOTE: a server that started needs no fix, whatever the estimate says
        fix_list = fixes(reproduced) if not reproduced.fits else (
            _oom_fixes(log.outcome, reproduced, spec) if log.outcome.kind == "cuda_oom" else [])
    return Diagnosis(log=log, scenario=scenario, result=result, rows=rows, largest=_largest(rows),
                     cause=_cause(log, reproduced), fixes=tuple(fix_list), calibration_gib=adjustment,
                     calibration_note=how, calibrated=calibrated, notes=(*log.notes, *notes))


def diagnose_text(text: str | bytes, *, gpu: str | None = None, model: str | None = None,
                  vllm_version: str | None = None, planned: Scenario | None = None) -> Diagnosis:
    """Read, reproduce and explain a pasted log in one call (``planned``: see ``scenario_from_log``)."""
    from .startup_log import read_startup_log  # noqa: PLC0415 (one entry point for pages and the CLI)

    log = read_startup_log(text)
    scenario, notes = scenario_from_log(log, gpu=gpu, model=model, vllm_version=vllm_version, planned=planned)
    return diagnose(log, scenario, notes)


def predicted_figures(result: Estimate) -> dict[str, float | int]:
    """Our estimate under the names vLLM's printed figures have (GiB per GPU, like vLLM prints them)."""
    budget, capacity = result.budget, result.capacity
    return {
        "weights_gib": budget.weights_bytes / GIB, "activation_peak_gib": budget.activation_bytes / GIB,
        "non_torch_memory_gib": budget.non_torch_bytes / GIB,
        "consumed_memory_gib": (budget.weights_bytes + budget.non_torch_bytes) / GIB,
        "cudagraph_gib": budget.cudagraph_bytes / GIB, "available_kv_cache_gib": budget.kv_cache_bytes / GIB,
        "num_gpu_blocks": capacity.num_gpu_blocks, "kv_cache_tokens": capacity.kv_cache_tokens,
        "max_concurrency": capacity.max_concurrency,
    }


def _rows(log: StartupLog, result: Estimate) -> tuple[TermRow, ...]:
    printed, predicted = log.printed.present(), predicted_figures(result)
    rows = []
    for key, label in {**TERMS, "num_gpu_blocks": "KV cache blocks", "kv_cache_tokens": "KV cache tokens",
                       "max_concurrency": "Maximum concurrency"}.items():
        if key == "consumed_memory_gib" and key not in printed:
            continue  # NOTE: only 0.27+ prints weights and non-torch as one figure
        seen = printed.get(key)
        rows.append(TermRow(key=key, label=label, printed=seen, predicted=predicted[key],
                            difference=None if seen is None else seen - predicted[key]))
    return tuple(rows)


def _largest(rows: tuple[TermRow, ...]) -> str | None:
    compared = [row for row in rows if row.key in _OVERHEADS and row.difference is not None]
    if not compared:
        return None
    row = max(compared, key=lambda r: abs(r.difference or 0))
    direction = "more" if (row.difference or 0) > 0 else "less"
    return (f"{row.label} explains the largest difference: vLLM printed {row.printed:,.2f} GiB, the estimate "
            f"{row.predicted:,.2f} GiB ({abs(row.difference or 0):,.2f} GiB {direction} on this machine).")


def _calibration(log: StartupLog, result: Estimate) -> tuple[float | None, str]:
    """The overhead (GiB per GPU) that makes the estimate's KV cache what vLLM printed, and how it was found."""
    printed = log.printed
    if result.scenario.kv_cache_memory_bytes is not None or result.settings.device == "cpu":
        return None, ("the KV cache size was set explicitly (--kv-cache-memory-bytes or the CPU's KV space): "
                      "there is no overhead to calibrate")
    if printed.num_gpu_blocks is not None:  # NOTE: V0's block count is exact; its GiB figures are rounded
        # NOTE: the middle of the last block, as the Live page's calibration takes it, kept to the KiB: a link
        # rounded to the MiB can move a small model's count by a block.
        actual = (printed.num_gpu_blocks + 0.5) * result.layout.bytes_per_block
        return (round((result.budget.kv_cache_bytes - actual) / GIB, CALIBRATION_DECIMALS),
                "from the printed number of KV cache blocks")
    if printed.available_kv_cache_gib is not None:
        value = round((result.budget.kv_cache_bytes / GIB) - printed.available_kv_cache_gib, CALIBRATION_DECIMALS)
        return value, (f"estimated KV cache memory {result.budget.kv_cache_bytes / GIB:,.2f} GiB − printed "
                       f"{printed.available_kv_cache_gib:,.2f} GiB")
    terms = {key: value for key, value in printed.present().items() if key in _OVERHEADS and key != "cudagraph_gib"}
    if "consumed_memory_gib" in terms:
        terms.pop("weights_gib", None)
    if terms:
        ours = predicted_figures(result)
        value = round(sum(terms[key] - ours[key] for key in terms), CALIBRATION_DECIMALS)
        return value, f"printed − estimated {', '.join(TERMS[key].lower() for key in terms)}"
    return None, "the log prints no memory figure to calibrate with"


def _oom_fixes(outcome: Outcome, result: Estimate, spec: ModelSpec) -> list[Fix]:
    """Changes that free the memory the failed stage asked for (the estimate cannot see a CUDA OOM itself: it says
    the deployment fits), each with what it leaves."""
    s, stage = result.settings, outcome.check or ""
    util = round(s.gpu_memory_utilization - 0.05, 2)
    headroom = (f"lower gpu_memory_utilization to {util:g} (more room outside the KV cache)",
                {"gpu_memory_utilization": util})
    if "loading the weights" in stage:
        tp = 2 * s.tensor_parallel_size
        candidates = [(f"use tensor parallelism {tp} ({tp * s.pipeline_parallel_size} GPUs)",
                       {"tensor_parallel_size": tp}),
                      ("quantize the weights to fp8 while loading (--quantization fp8)", {"quantization": "fp8"})]
    elif "profiling memory" in stage:
        tokens = max(s.max_num_batched_tokens // 2, s.max_num_seqs)
        # NOTE: profiling runs before the KV cache is sized: gpu_memory_utilization does not change its peak.
        candidates = [(f"lower max_num_batched_tokens to {tokens:,} (a smaller profiling forward pass)",
                       {"max_num_batched_tokens": tokens})]
        if s.max_num_seqs > 64:
            candidates.append(("lower max_num_seqs to 64 (a smaller sampler warm-up)", {"max_num_seqs": 64}))
    else:
        candidates = [*([("run without CUDA graphs (--enforce-eager)", {"enforce_eager": True})]
                        if not s.enforce_eager else []), headroom]
    found = []
    for description, changes in candidates:
        try:
            fixed = estimate(result.scenario.replace(**changes), spec)
        except (CalculatorError, ValueError):
            continue
        if fixed.fits:
            found.append(Fix(description=description, changes=changes, max_concurrency=fixed.capacity.max_concurrency,
                             kv_cache_tokens=fixed.capacity.kv_cache_tokens))
    return found


def _cause(log: StartupLog, result: Estimate) -> str | None:
    outcome: Outcome = log.outcome
    if outcome.status != "failed":
        return None
    printed = log.printed
    length = log.settings.get("max_model_len", result.settings.max_model_len)
    if outcome.kind == "max_len":
        if printed.kv_cache_needed_gib is not None and printed.available_kv_cache_gib is not None:
            fit = (f"; the longest that fits is {printed.estimated_max_model_len:,} tokens"
                   if printed.estimated_max_model_len else "")
            return (f"One request of max_model_len {length:,} tokens needs {printed.kv_cache_needed_gib:,.2f} GiB of "
                    f"KV cache but only {printed.available_kv_cache_gib:,.2f} GiB is left after the weights and "
                    f"overheads{fit}.")
        held = printed.kv_cache_tokens
        return (f"One request of max_model_len {length:,} tokens does not fit in the KV cache, which holds "
                f"{held:,} tokens." if held else f"One request of max_model_len {length:,} tokens does not fit.")
    if outcome.kind == "no_kv_memory":
        return ("Weights, activation peak and non-torch memory take all of gpu_memory_utilization × GPU memory "
                f"({_requested(log, result):,.2f} GiB), so nothing is left for the KV cache.")
    if outcome.kind == "free_memory":
        free = printed.free_memory_at_startup_gib
        return (f"Less memory was free at start-up ({free:,.2f} GiB) than gpu_memory_utilization asks for "
                f"({_requested(log, result):,.2f} GiB): another process holds GPU memory, or the setting is too high."
                if free is not None else "Less memory was free at start-up than gpu_memory_utilization asks for.")
    if outcome.kind == "length_limit":
        return (f"max_model_len {length:,} is above the model's own context length "
                f"({result.model.derived_max_model_len:,} tokens), which vLLM refuses.")
    if outcome.kind == "cuda_oom":
        stage = (outcome.check or "").split(", while ", 1)[-1]
        return f"The GPU ran out of memory while {stage}."
    return f"vLLM stopped during start-up with {outcome.error}"


def _requested(log: StartupLog, result: Estimate) -> float:
    return log.printed.requested_memory_gib or result.budget.requested_bytes / GIB


def _rounded(value: float | int) -> float | int:
    return round(value, 4) if isinstance(value, float) else value

