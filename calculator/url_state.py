"""Share links: a Scenario and a Workload <-> short, readable URL query parameters (pure).

Only values that differ from the defaults are written. Reading accepts what the engine accepts (GPU names as
``nvidia-smi`` prints them, vLLM's dtype spellings) and is otherwise forgiving: an unknown key or a bad value is
dropped with a warning and the default stays, so an old or edited link still opens, and nothing changes silently.
A GPU the catalog does not know is reported as substituted, so pages can say whose numbers they show.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from .engine.kv_cache import SUPPORTED_KV_CACHE_DTYPES
from .engine.vllm_versions import LATEST_VERSION, VllmVersion
from .engine.workload import Workload
from .errors import CalculatorError
from .gpus import find_gpu
from .model.quantization import SUPPORTED_FLAGS
from .scenario import DEFAULT_GPU, Scenario
from .serve_command import DTYPE_NAMES

SCENARIO_KEYS: dict[str, str] = {
    "model": "m", "gpu": "g", "gpu_memory_gib": "mem", "device": "dev", "tensor_parallel_size": "tp",
    "pipeline_parallel_size": "pp", "gpu_memory_utilization": "u", "max_model_len": "len", "max_num_seqs": "seqs",
    "max_num_batched_tokens": "mbt", "block_size": "bs", "dtype": "dt", "kv_cache_dtype": "kv", "quantization": "q",
    "kv_cache_memory_bytes": "kvb", "num_gpu_blocks_override": "blocks", "enforce_eager": "eager",
    "enable_extensible_kv_cache": "ext", "async_scheduling": "async", "vllm_version": "v",
    "other_processes_memory_gib": "other", "overhead_adjustment_gib": "adj", "data_parallel_size": "dp",
    "enable_expert_parallel": "ep", "cpu_offload_gb": "offload", "enable_prefix_caching": "pc",
}
WORKLOAD_KEYS: dict[str, str] = {
    "prompt_tokens_mean": "in", "output_tokens_mean": "out", "prompt_tokens_p95": "in95",
    "output_tokens_p95": "out95", "shared_prefix_tokens": "prefix", "parallel_samples": "n",
    "target_concurrent_requests": "users",
}
_NONE = "none"
# Keys a page may add for its own view (e.g. which sweep is shown); they pass through untouched.
VIEW_KEYS = frozenset({"view", "sweep"})
# Never written to a link, whatever a caller passes.
SECRET_KEYS = frozenset({"token", "hf_token", "api_key", "key", "password"})


def _encode(value: Any) -> str:
    if value is None:
        return _NONE
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) >= 1 else str(value)
    return str(value)


def _decode(value: str) -> Any:
    if value == _NONE:
        return None
    return value  # pydantic coerces "0.9", "4096", "1"/"0" (bools) while validating


def to_query_params(scenario: Scenario, workload: Workload | None = None,
                    view: Mapping[str, str] | None = None) -> dict[str, str]:
    """Query parameters for a share link (only non-defaults; never a secret)."""
    params: dict[str, str] = {}
    for model, keys in ((scenario, SCENARIO_KEYS), (workload, WORKLOAD_KEYS)):
        if model is None:
            continue
        for field, key in keys.items():
            value = getattr(model, field)
            if value != type(model).model_fields[field].default:
                params[key] = _encode(value)
    for key, value in (view or {}).items():
        if key in VIEW_KEYS and key not in SECRET_KEYS:
            params[key] = str(value)
    return params


class LinkState(BaseModel):
    """What a link opens: the inputs, the page's view keys, warnings, and what was asked but replaced."""

    model_config = ConfigDict(frozen=True)
    scenario: Scenario
    workload: Workload
    view: dict[str, str]
    warnings: tuple[str, ...]
    substituted: dict[str, str]  # field -> the value the link asked for (e.g. {"gpu": "tpu-v5"})


def from_query_params(params: Mapping[str, str | list[str]]) -> tuple[Scenario, Workload, dict[str, str], list[str]]:
    """Scenario, Workload, view keys and warnings from a link; bad parts fall back to defaults."""
    state = read_link(params)
    return state.scenario, state.workload, state.view, list(state.warnings)


def read_link(params: Mapping[str, str | list[str]]) -> LinkState:
    """Everything a link says, checked the way the engine checks it."""
    warnings: list[str] = []
    flat = {key: (value[-1] if isinstance(value, list) else value) for key, value in params.items()}
    by_key = {key: ("scenario", field) for field, key in SCENARIO_KEYS.items()}
    by_key.update({key: ("workload", field) for field, key in WORKLOAD_KEYS.items()})
    chosen: dict[str, dict[str, Any]] = {"scenario": {}, "workload": {}}
    view: dict[str, str] = {}
    for key, raw in flat.items():
        if key in VIEW_KEYS:
            view[key] = raw
        elif key in by_key:
            part, field = by_key[key]
            chosen[part][field] = _decode(raw)
        elif key not in SECRET_KEYS:
            warnings.append(f"ignored unknown link parameter {key!r}")
    substituted = _check_choices(chosen["scenario"], warnings)
    scenario = _validated(Scenario, chosen["scenario"], SCENARIO_KEYS, warnings)
    workload = _validated(Workload, chosen["workload"], WORKLOAD_KEYS, warnings)
    # NOTE: a release newer than modelled is kept as given; the estimate's own warnings say whose rules apply.
    return LinkState(scenario=scenario, workload=workload, view=view, warnings=tuple(warnings),
                     substituted=substituted)


def _check_choices(values: dict[str, Any], warnings: list[str]) -> dict[str, str]:
    """Resolve names the engine accepts (GPU aliases, dtype spellings); drop what it would refuse, with a warning.

    Returns the fields whose asked-for value was replaced by a default the page then shows instead."""
    substituted: dict[str, str] = {}
    gpu = values.get("gpu")
    if gpu is not None:
        try:
            values["gpu"] = find_gpu(gpu).key
        except CalculatorError as exc:
            del values["gpu"]
            substituted["gpu"] = gpu
            warnings.append(f"{str(exc).split(' The catalog')[0]} The numbers are for the default GPU "
                            f"({find_gpu(DEFAULT_GPU).name}) instead")
    checks = {"dtype": (DTYPE_NAMES, "auto, half, float16, bfloat16, float, float32"),
              "kv_cache_dtype": (SUPPORTED_KV_CACHE_DTYPES, ", ".join(SUPPORTED_KV_CACHE_DTYPES)),
              "quantization": (SUPPORTED_FLAGS, ", ".join(SUPPORTED_FLAGS))}
    for field, (accepted, listed) in checks.items():
        value = values.get(field)
        if value is None:
            continue
        if field == "dtype" and str(value).lower() in DTYPE_NAMES:
            values[field] = DTYPE_NAMES[str(value).lower()]
        elif value not in accepted:
            del values[field]
            warnings.append(f"ignored link value {SCENARIO_KEYS[field]}={value!r}: vLLM accepts {listed}; "
                            "using the default")
    version = values.get("vllm_version")
    if version is not None:
        try:
            values["vllm_version"] = str(VllmVersion.parse(version))
        except CalculatorError as exc:
            del values["vllm_version"]
            warnings.append(f"ignored link value v={version!r}: {exc}; using {LATEST_VERSION}")
    return substituted


def _validated(model_type: type, values: dict[str, Any], keys: dict[str, str], warnings: list[str]) -> Any:
    """Validate all values at once; on failure drop each offending field and retry."""
    values = dict(values)
    for _ in range(len(values) + 1):
        try:
            return model_type(**values)
        except ValidationError as exc:
            bad_fields = {str(error["loc"][0]) for error in exc.errors() if error["loc"]}
            if not bad_fields or not bad_fields & set(values):
                bad_fields = set(values)  # a cross-field rule failed: fall back to all defaults for this part
            for field in sorted(bad_fields & set(values)):
                warnings.append(f"ignored link value {keys.get(field, field)}={values.pop(field)!r}: "
                                f"{_reason(exc, field)}; using the default")
    return model_type()


def _reason(exc: ValidationError, field: str) -> str:
    for error in exc.errors():
        if error["loc"] and error["loc"][0] == field:
            return str(error["msg"]).lower()
    return "inconsistent with the other values"
