"""Real vLLM start-up records (settings + what vLLM printed) read as Scenarios, for calibration and accuracy.

The record layout is the one of ``shared/data/vllm-startup-logs/calibration.jsonl`` (its README explains every
field and the caveats used here: per-rank figures, V0 blocks, failed start-ups). The caller gives the path; the
repository keeps a copy in ``benchmarks/data/``. Each record becomes a ``CalibrationCase``: the ``Scenario`` a
user would type, the bundled preset it runs on, and the observed figures, all per GPU/rank like our estimate.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ..errors import CalculatorError, UnknownGpu
from ..gpus import Interconnect, find_gpu
from ..model.model_source import preset_ids
from ..scenario import Scenario
from .interconnect import INTERCONNECT_LABELS
from .vllm_versions import VllmVersion, rules_for

# NOTE: a record whose version is not printed (or names an engine the version never ran) is modelled as the
# last release of its engine's era that the log format proves. V0 -> 0.6.6: the per-instance
# "weights + peak + non-torch" V0 formula (§1.2) that every V0 breakdown in the records closes with.
# V1 -> 0.13.0: most unversioned V1 records are llm-d's table, whose first revision (Jan 2026) ran
# vllm/vllm-openai:latest (0.13-0.14 then; the Feb revision pins 0.11.0 for a replication template). Its
# gpt-oss-20b weights, 13.47 GiB, are what only the vendored Triton MXFP4 kernels with the Hopper swizzle hold
# (0.12+, ``quant_kernels.py``); 0.11.0 would load Marlin's padded experts (13.67). Every other rule we model is the
# same at 0.11.0 and 0.13.0: the 0.9.1-0.19 "sum of parts" budget without CUDA graphs, which is how every
# unversioned V1 breakdown in the records closes (README caveat 5), V1 overheads before 0.17, the same defaults.
DEFAULT_VERSION_BY_ENGINE = {"v0": "0.6.6", "v1": "0.13.0"}
FAILED_OUTCOME_WORDS = ("oom", "failed")  # README: six failed start-ups, two of them after the KV pool was printed

Engine = Literal["v0", "v1"]
_VERSION_FIRST = re.compile(r"^\s*v?\d+\.\d+")
_APPROXIMATE_VERSION = re.compile(r"~\s*v?(\d+\.\d+(?:\.\d+)?)")  # "main@73c8d677 (~0.4.1+)"


class Observed(BaseModel):
    """What vLLM printed, per GPU/rank (``None`` = not printed)."""

    model_config = ConfigDict(frozen=True)
    weights_gib: float | None = None  # "Model loading took X GiB" (V0 "GB" labels are GiB)
    available_kv_gib: float | None = None  # "Available KV cache memory" / "reserved for KV Cache", per rank
    kv_cache_tokens: int | None = None  # V1 "GPU KV cache size", or V0 blocks x block_size
    num_gpu_blocks: int | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens_per_request: int | None = None
    started: bool | None = True  # None: the source does not say how the start-up ended
    activation_peak_gib: float | None = None
    non_torch_gib: float | None = None
    cudagraph_gib: float | None = None


class CalibrationCase(BaseModel):
    """One record as the estimate sees it; ``scenario`` is None when the record cannot be run (``skip_reason``)."""

    model_config = ConfigDict(frozen=True)
    record_id: str
    engine: Engine
    vllm_version: str  # the version we model it with
    version_note: str | None  # why it is not the printed one
    model: str  # as the record names it
    preset: str | None  # the bundled preset it runs on
    scenario: Scenario | None
    skip_reason: str | None
    observed: Observed
    assumptions: tuple[str, ...] = ()  # settings taken from ``assumed_default`` or defaults, for the report


def load_records(path: str | Path) -> list[dict[str, Any]]:
    """Every JSON object of a ``calibration.jsonl`` file, in file order."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def load_cases(path: str | Path) -> tuple[CalibrationCase, ...]:
    """Every record of ``path`` as a ``CalibrationCase``."""
    return tuple(calibration_case(record) for record in load_records(path))


def calibration_case(record: dict[str, Any]) -> CalibrationCase:
    """Map one record to the Scenario a user would type for it, with what vLLM printed."""
    engine: Engine = record["engine"]
    version, version_note = modelled_version(record.get("vllm_version"), engine)
    observed = observed_figures(record)
    preset = preset_for(record["model"])
    common = dict(record_id=record["id"], engine=engine, vllm_version=version, version_note=version_note,
                  model=record["model"], preset=preset, observed=observed)
    if preset is None:
        return CalibrationCase(**common, scenario=None, skip_reason="no config (no bundled preset for this model)")
    assumptions: list[str] = []
    try:
        scenario = Scenario(model=preset, vllm_version=version, **_gpu_fields(record, assumptions),
                            **_engine_fields(record, assumptions))
    except (CalculatorError, ValueError) as exc:
        return CalibrationCase(**common, scenario=None, skip_reason=f"cannot build a scenario: {exc}")
    return CalibrationCase(**common, scenario=scenario, skip_reason=None, assumptions=tuple(assumptions))


def modelled_version(printed: str | None, engine: Engine) -> tuple[str, str | None]:
    """The version to model a record with, and a note when it is not the printed one."""
    default = DEFAULT_VERSION_BY_ENGINE[engine]
    if not printed:
        return default, f"version not printed; {engine.upper()} log format -> modelled as {default}"
    approximate = _APPROXIMATE_VERSION.search(printed)
    try:
        # NOTE: records annotate the printed version ("0.14.1 (stated in title; ...)"): the first word is the release.
        leading = printed.split()[0] if _VERSION_FIRST.match(printed) else printed
        version = VllmVersion.parse(approximate[1] if approximate and not _VERSION_FIRST.match(printed) else leading)
    except CalculatorError:
        return default, f"version {printed!r} is not one we model; {engine.upper()} log -> modelled as {default}"
    if rules_for(version).engine != engine:
        return default, (f"{printed} printed a {engine.upper()}-engine log (not that version's default engine) "
                         f"-> modelled as {default}")
    if approximate and not _VERSION_FIRST.match(printed):
        return str(version), f"approximate version {printed!r} -> modelled as {version}"
    return str(version), None


def preset_for(model: str) -> str | None:
    """The bundled preset a record's model names: its first word when that is a Hub id we ship."""
    first = model.split()[0] if model.split() else ""
    if "/" not in first:
        return None
    by_lower = {preset.lower(): preset for preset in preset_ids()}
    return by_lower.get(first.lower())


def observed_figures(record: dict[str, Any]) -> Observed:
    seen = record.get("observed") or {}
    other = seen.get("other") or {}
    block_size = _number(record.get("block_size")) or _number((record.get("assumed_default") or {}).get("block_size"))
    tokens = seen.get("kv_cache_tokens") or other.get("kv_cache_tokens_derived")
    if tokens is None and seen.get("num_gpu_blocks") and block_size:
        tokens = int(seen["num_gpu_blocks"] * block_size)  # V0: "# GPU blocks" x block_size (README caveat 3)
    outcome = str(seen.get("startup_outcome") or "").lower()
    started: bool | None = bool((record.get("annotations") or {}).get("startup_ok", True)) and not any(
        word in outcome for word in FAILED_OUTCOME_WORDS)
    if not outcome and started:
        started = None  # NOTE: blocks were printed but not whether the server then came up
    activation = seen.get("activation_peak_gib")
    if activation is None and other.get("peak_torch_memory_gib") is not None and seen.get("model_loading_gib"):
        activation = round(other["peak_torch_memory_gib"] - seen["model_loading_gib"], 4)  # V0 0.6.4: peak - weights
    return Observed(weights_gib=seen.get("model_loading_gib"), available_kv_gib=seen.get("available_kv_cache_gib"),
                    kv_cache_tokens=tokens, num_gpu_blocks=seen.get("num_gpu_blocks"),
                    max_concurrency=seen.get("max_concurrency"),
                    max_concurrency_tokens_per_request=seen.get("max_concurrency_tokens_per_request"),
                    started=started, activation_peak_gib=activation, non_torch_gib=seen.get("non_torch_memory_gib"),
                    cudagraph_gib=seen.get("cudagraph_gib"))


def _gpu_fields(record: dict[str, Any], assumptions: list[str]) -> dict[str, Any]:
    """GPU from the printed total memory (keeping the catalog GPU's family when the name matches), else by name."""
    name = _without_notes(record.get("gpu_name") or "")
    try:
        gpu = find_gpu(name).key if name else None
    except UnknownGpu:
        gpu = None
    device = "rocm" if name.lower().startswith("amd") else None
    memory = record.get("gpu_total_memory_gib")
    if memory is None and gpu is None:
        raise ValueError(f"GPU {record.get('gpu_name')!r} is not in the catalog and its memory was not printed")
    if memory is None:
        assumptions.append(f"GPU memory from the catalog ({gpu})")
    return {"gpu": gpu, "gpu_memory_gib": memory, "device": device, "interconnect": _interconnect(record, assumptions)}


def _interconnect(record: dict[str, Any], assumptions: list[str]) -> Interconnect | None:
    """The link the record's source names (its annotation, else the first word of its setting), as a user would pick it.

    Without it a GPU outside the catalog is taken as PCIe (``interconnect.CUSTOM_GPU_INTERCONNECT``).
    """
    if (record.get("tensor_parallel_size") or 1) * (record.get("pipeline_parallel_size") or 1) <= 1:
        return None
    for said in ((record.get("annotations") or {}).get("interconnect"),
                 (record.get("extra_settings") or {}).get("interconnect")):
        word = (_first_word(said) or "").strip(",;").lower()
        if word in INTERCONNECT_LABELS:
            return word  # type: ignore[return-value]
    assumptions.append("interconnect not stated: the card's usual link (PCIe outside the catalog)")
    return None


def _engine_fields(record: dict[str, Any], assumptions: list[str]) -> dict[str, Any]:
    assumed = record.get("assumed_default") or {}
    fields: dict[str, Any] = {"tensor_parallel_size": record.get("tensor_parallel_size") or 1,
                              "pipeline_parallel_size": record.get("pipeline_parallel_size") or 1}
    for key in ("gpu_memory_utilization", "max_model_len", "block_size", "max_num_seqs", "max_num_batched_tokens"):
        value = record.get(key)
        if value is None and _number(assumed.get(key)) is not None:
            value = _number(assumed[key])
            assumptions.append(f"{key}={value:g} (assumed default: {assumed[key]})")
        if value is not None:
            fields[key] = int(value) if key != "gpu_memory_utilization" else float(value)
    if record.get("dtype"):
        fields["dtype"] = record["dtype"]
    if record.get("enforce_eager") is not None:
        fields["enforce_eager"] = bool(record["enforce_eager"])
    if (record.get("extra_settings") or {}).get("enable_expert_parallel") is True:
        fields["enable_expert_parallel"] = True
    # NOTE: "install": "docker" where the source ran the vllm/vllm-openai image (FlashInfer's sampler in 0.10-0.11.0)
    if (record.get("extra_settings") or {}).get("install") in ("pip", "docker"):
        fields["install"] = record["extra_settings"]["install"]
    # NOTE: records note the flag as true, or as "True (--enable-chunked-prefill): why ..."
    chunked = _first_word((record.get("extra_settings") or {}).get("enable_chunked_prefill"))
    if chunked in ("True", "False"):
        fields["enable_chunked_prefill"] = chunked == "True"
    kv_dtype = _first_word(record.get("kv_cache_dtype"))
    if kv_dtype:
        fields["kv_cache_dtype"] = kv_dtype
    quantization = record.get("quantization")
    # NOTE: "(checkpoint)" = the method came from the checkpoint's quantization_config; the preset already has it.
    if quantization and "checkpoint" not in quantization and "(" not in quantization:
        fields["quantization"] = _first_word(quantization)
    return fields


def _number(value: Any) -> float | None:
    """A number, or the number a string such as "0.9 (default; printed as ...)" starts with."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    match = re.match(r"\s*(\d+(?:\.\d+)?)\b", str(value or ""))
    return float(match[1]) if match else None


def _first_word(value: Any) -> str | None:
    words = str(value or "").split()
    return words[0] if words else None


def _without_notes(name: str) -> str:
    """``"NVIDIA H100 80GB (79.18 GiB)"`` -> ``"NVIDIA H100 80GB"``: drop curator notes in parentheses."""
    return re.sub(r"\s*\([^)]*\)", "", name).strip()
