"""Share links: a Scenario, a Workload and the speed inputs <-> short, readable URL query parameters (pure);
and the Recommend page's request.

Only values that differ from the defaults are written. Reading accepts what the engine accepts (GPU names as
``nvidia-smi`` prints them, vLLM's dtype spellings) and is otherwise forgiving: an unknown key or a bad value is
dropped with a warning and the default stays, so an old or edited link still opens, and nothing changes silently.
A GPU the catalog does not know is reported as substituted, so pages can say whose numbers they show.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from .engine.kv_cache import SUPPORTED_KV_CACHE_DTYPES
from .engine.vllm_versions import LATEST_VERSION, VllmVersion
from .engine.workload import Workload
from .errors import CalculatorError
from .gpus import find_gpu
from .limits import field_bounds
from .model.quantization import SUPPORTED_FLAGS
from .scenario import DEFAULT_GPU, Scenario, capture_sizes_from_text
from .serve_command import DTYPE_NAMES
from .speed.inputs import (
    FEATURE_FIELDS,
    MAX_USD_PER_GPU_HOUR,
    MIN_USD_PER_GPU_HOUR,
    RecommendRequest,
    SpeedInputs,
)
from .speed.traffic import Traffic
from .units import parse_size

SCENARIO_KEYS: dict[str, str] = {
    "model": "m", "gpu": "g", "gpu_memory_gib": "mem", "device": "dev", "tensor_parallel_size": "tp",
    "pipeline_parallel_size": "pp", "gpu_memory_utilization": "u", "max_model_len": "len", "max_num_seqs": "seqs",
    "max_num_batched_tokens": "mbt", "block_size": "bs", "dtype": "dt", "kv_cache_dtype": "kv", "quantization": "q",
    "kv_cache_memory_bytes": "kvb", "num_gpu_blocks_override": "blocks", "enforce_eager": "eager",
    "enable_extensible_kv_cache": "ext", "async_scheduling": "async", "vllm_version": "v",
    "other_processes_memory_gib": "other", "overhead_adjustment_gib": "adj", "data_parallel_size": "dp",
    "enable_expert_parallel": "ep", "cpu_offload_gb": "offload", "enable_prefix_caching": "pc",
    "enable_chunked_prefill": "cp",
    "cudagraph_capture_sizes": "cgs", "interconnect": "link", "all2all_backend": "a2a", "enable_eplb": "eplb",
    "num_redundant_experts": "redundant", "install": "inst",
    "enable_lora": "lora", "max_loras": "loras", "max_lora_rank": "lrank", "max_cpu_loras": "cpuloras",
    "lora_dtype": "ldt", "fully_sharded_loras": "lshard", "speculative_method": "spec", "speculative_model": "draft",
    "num_speculative_tokens": "ntok", "draft_tensor_parallel_size": "dtp", "speculative_acceptance_rate": "accept",
    "hf_overrides": "hfo",
}
WORKLOAD_KEYS: dict[str, str] = {
    "prompt_tokens_mean": "in", "output_tokens_mean": "out", "prompt_tokens_p95": "in95",
    "output_tokens_p95": "out95", "shared_prefix_tokens": "prefix", "parallel_samples": "n",
    "target_concurrent_requests": "users",
}
# The speed section's load, SLOs, price, custom GPU rates and measured efficiencies (Plan and Recommend).
SPEED_KEYS: dict[str, str] = {
    "request_rate": "rate", "ttft_p95_ms": "ttft", "tpot_ms": "itl", "min_tok_s_per_user": "toks", "e2e_s": "e2e",
    "usd_per_gpu_hour": "price", "gpu_memory_bandwidth_gb_s": "bw", "gpu_bf16_tflops": "tflops",
    "bandwidth_efficiency": "mbu", "compute_efficiency": "mfu", "endpoint": "api",
}
# The Recommend page: its own request, the lengths and users of a Workload, and the load and SLOs of SpeedInputs.
RECOMMEND_KEYS: dict[str, str] = {
    "model": "m", "gpus": "gpus", "max_gpus": "maxg", "budget_per_hour": "budget", "vllm_version": "v",
    "max_model_len": "len", "prices": "prices", "price_set": "pset", "bench": "bench",
}
# NOTE: a Recommend link carries the LoRA and speculative settings under the Plan link's keys.
RECOMMEND_KEYS.update({field: SCENARIO_KEYS[field] for field in FEATURE_FIELDS})
RECOMMEND_WORKLOAD_FIELDS = ("prompt_tokens_mean", "output_tokens_mean", "prompt_tokens_p95", "output_tokens_p95",
                             "target_concurrent_requests")
RECOMMEND_SPEED_FIELDS = ("request_rate", "ttft_p95_ms", "tpot_ms", "min_tok_s_per_user", "e2e_s")
_NONE = "none"
_SHOWN_CHARS = 200  # of a refused link value, in a warning
# Where a page's widget is narrower than the model, a link may ask only for what the widget can show (the widget
# would refuse the value and the page would stop).
UTILIZATION_SLIDER = (0.01, 1.0)  # the Plan page's gpu_memory_utilization slider moves in hundredths
PLAN_WIDGET_BOUNDS = {"gpu_memory_utilization": (*UTILIZATION_SLIDER, "the Plan page's slider")}
# The speed model predicts generated tokens: the Recommend page asks for at least one per request.
RECOMMEND_WIDGET_BOUNDS = {"output_tokens_mean": (*field_bounds(Traffic, "output_tokens"), "the Recommend page"),
                           "output_tokens_p95": (*field_bounds(Traffic, "output_tokens_p95"), "the Recommend page")}
# Keys a page may add for its own view (e.g. which sweep is shown); they pass through untouched.
VIEW_KEYS = frozenset({"view", "sweep"})
# Never written to a link, whatever a caller passes.
SECRET_KEYS = frozenset({"token", "hf_token", "api_key", "key", "password"})


def _encode(value: Any) -> str:
    if value is None:
        return _NONE
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return ",".join(map(str, value))  # cudagraph_capture_sizes: cgs=1,2,4,8
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) >= 1 else str(value)
    return str(value)


# NOTE: the flags vLLM reads with human_readable_int (128k, 8G): a link takes the same spellings as the CLI.
SIZE_FIELDS = ("max_model_len", "max_num_batched_tokens", "kv_cache_memory_bytes")


def _sizes(values: dict[str, Any]) -> None:
    """``128k`` -> 128000, ``8G`` -> 8 GiB in place, as ``vllm serve`` reads them; anything else is left for
    validation to name."""
    for field in SIZE_FIELDS:
        raw = values.get(field)
        if isinstance(raw, str) and raw.strip()[-1:].isalpha():
            try:
                values[field] = parse_size(raw)
            except ValueError:
                pass  # validation says it is not a whole number, with the link key


def _decode(value: str) -> Any:
    if value.strip().lower() == _NONE:  # "None" and "NONE" too: a link typed by hand means the same
        return None
    return value  # pydantic coerces "0.9", "4096", "1"/"0" (bools) while validating


def _changed(model: BaseModel | None, keys: Mapping[str, str]) -> dict[str, str]:
    """The fields of ``model`` that differ from their defaults, under their link keys."""
    if model is None:
        return {}
    fields = type(model).model_fields
    return {key: _encode(getattr(model, field)) for field, key in keys.items()
            if getattr(model, field) != fields[field].get_default(call_default_factory=True)}


def to_query_params(scenario: Scenario, workload: Workload | None = None,
                    view: Mapping[str, str] | None = None, speed: SpeedInputs | None = None) -> dict[str, str]:
    """Query parameters for a share link (only non-defaults; never a secret)."""
    params = {**_changed(scenario, SCENARIO_KEYS), **_changed(workload, WORKLOAD_KEYS), **_changed(speed, SPEED_KEYS)}
    for key, value in (view or {}).items():
        if key in VIEW_KEYS and key not in SECRET_KEYS:
            params[key] = str(value)
    return params


class LinkState(BaseModel):
    """What a link opens: the inputs, the page's view keys, warnings, and what was asked but replaced."""

    model_config = ConfigDict(frozen=True)
    scenario: Scenario
    workload: Workload
    speed: SpeedInputs = SpeedInputs()
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
    by_key.update({key: ("speed", field) for field, key in SPEED_KEYS.items()})
    chosen: dict[str, dict[str, Any]] = {"scenario": {}, "workload": {}, "speed": {}}
    view: dict[str, str] = {}
    for key, raw in flat.items():
        if key in VIEW_KEYS:
            view[key] = raw
        elif key in by_key:
            part, field = by_key[key]
            chosen[part][field] = _decode(raw)
        elif key not in SECRET_KEYS:
            warnings.append(f"ignored unknown link parameter {key!r}")
    sizes = chosen["scenario"].get("cudagraph_capture_sizes")
    if isinstance(sizes, str):
        try:
            chosen["scenario"]["cudagraph_capture_sizes"] = capture_sizes_from_text(sizes)
        except ValueError as exc:
            del chosen["scenario"]["cudagraph_capture_sizes"]
            warnings.append(f"ignored link value cgs={sizes[:60]!r}: {exc}")
    _sizes(chosen["scenario"])
    substituted = _check_choices(chosen["scenario"], warnings)
    scenario = _validated(Scenario, chosen["scenario"], SCENARIO_KEYS, warnings, PLAN_WIDGET_BOUNDS)
    workload = _validated(Workload, chosen["workload"], WORKLOAD_KEYS, warnings)
    speed = _validated(SpeedInputs, chosen["speed"], SPEED_KEYS, warnings)
    # NOTE: a release newer than modelled is kept as given; the estimate's own warnings say whose rules apply.
    return LinkState(scenario=scenario, workload=workload, speed=speed, view=view, warnings=tuple(warnings),
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
    _normalise_version(values, warnings)
    return substituted


def _validated(model_type: type[BaseModel], values: dict[str, Any], keys: Mapping[str, str], warnings: list[str],
               widget_bounds: Mapping[str, tuple[float | None, float | None, str]] | None = None) -> Any:
    """Validate all values at once; drop each offending field (and, when a rule across fields fails, the fewest
    fields that satisfy it), with a warning that names it and why, and keep the rest."""
    values = dict(values)
    for field, (low, high, widget) in (widget_bounds or {}).items():
        if field in values and values[field] is not None:
            reason = _outside(values[field], low, high, widget)
            if reason:
                _drop(values, field, keys, reason, warnings)
    for _ in range(len(values) + 1):
        try:
            return model_type(**values)
        except ValidationError as exc:
            bad_fields = {str(error["loc"][0]) for error in exc.errors() if error["loc"]} & set(values)
            if bad_fields:
                for field in sorted(bad_fields):
                    _drop(values, field, keys, _reason(exc, field, values[field]), warnings)
                continue
            rule = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors() if not e["loc"])
            for field, key in keys.items():  # the rule names the fields as the link does: "(gpu_memory_gib)" -> "(mem)"
                rule = rule.replace(f"({field})", f"({key})")
            for field in _fewest_to_drop(model_type, values):
                _drop(values, field, keys, rule or "inconsistent with the other values", warnings)
    return model_type()


def _drop(values: dict[str, Any], field: str, keys: Mapping[str, str], reason: str, warnings: list[str]) -> None:
    value = values.pop(field)
    shown = repr(_NONE if value is None else value)
    if len(shown) > _SHOWN_CHARS:  # a 4 KB value is named, not repeated
        shown = f"{shown[:_SHOWN_CHARS - 3]}...' ({len(str(value)):,} characters)"
    warnings.append(f"ignored link value {keys.get(field, field)}={shown}: {reason}; using the default")


def _fewest_to_drop(model_type: type[BaseModel], values: dict[str, Any]) -> list[str]:
    """The fields a rule across fields blames: one whose default satisfies it (the last in the model's order, as
    later fields depend on earlier ones: a p95 on its mean, a prefix on its prompt), else every field given."""
    for field in reversed([f for f in model_type.model_fields if f in values]):
        try:
            model_type(**{k: v for k, v in values.items() if k != field})
        except ValidationError:
            continue
        return [field]
    return sorted(values)


def _outside(value: Any, low: float | None, high: float | None, widget: str) -> str | None:
    """Why ``value`` lies outside a page widget's range (None: inside it, or not a number, which pydantic says)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if low is not None and number < low:
        return f"below {low:g}, the least {widget} takes"
    if high is not None and number > high:
        return f"above {high:g}, the most {widget} takes"
    return None


def _reason(exc: ValidationError, field: str, value: Any) -> str:
    try:
        if not math.isfinite(float(value)):
            return "not a finite number"
    except (TypeError, ValueError, OverflowError):
        pass
    for error in exc.errors():
        if error["loc"] and error["loc"][0] == field:
            message = str(error["msg"])
            # NOTE: a validator's own sentence (--hf-overrides) is kept as written; pydantic's are lowercased
            return message.removeprefix("Value error, ") if message.startswith("Value error, ") else message.lower()
    return "inconsistent with the other values"


# --- the Recommend page ---------------------------------------------------------------------------------------

class RecommendLink(BaseModel):
    """What a Recommend link opens: the request, the lengths and users, the load and SLOs, and warnings."""

    model_config = ConfigDict(frozen=True)
    request: RecommendRequest
    workload: Workload
    speed: SpeedInputs
    warnings: tuple[str, ...]


def recommend_query_params(request: RecommendRequest, workload: Workload, speed: SpeedInputs) -> dict[str, str]:
    """Query parameters for a Recommend link (only non-defaults): ``gpus=h100-sxm-80gb,l40s``,
    ``prices=h100-sxm-80gb:2.5``."""
    params = _changed(request.model_copy(update={"gpus": (), "prices": {}}), RECOMMEND_KEYS)
    if request.gpus:
        params["gpus"] = ",".join(request.gpus)
    if request.prices:
        params["prices"] = price_list_text(request.prices)
    params.update(_changed(workload, {f: WORKLOAD_KEYS[f] for f in RECOMMEND_WORKLOAD_FIELDS}))
    params.update(_changed(speed, {f: SPEED_KEYS[f] for f in RECOMMEND_SPEED_FIELDS}))
    return params


def read_recommend_link(params: Mapping[str, str | list[str]]) -> RecommendLink:
    """A Recommend link, checked like a Plan link: bad parts fall back to defaults with a warning each."""
    warnings: list[str] = []
    flat = {key: (value[-1] if isinstance(value, list) else value) for key, value in params.items()}
    parts: dict[str, tuple[str, dict[str, str]]] = {
        "request": ("request", RECOMMEND_KEYS), "workload": ("workload", {f: WORKLOAD_KEYS[f] for f in
                                                                         RECOMMEND_WORKLOAD_FIELDS}),
        "speed": ("speed", {f: SPEED_KEYS[f] for f in RECOMMEND_SPEED_FIELDS})}
    by_key = {key: (part, field) for part, (_, keys) in parts.items() for field, key in keys.items()}
    chosen: dict[str, dict[str, Any]] = {part: {} for part in parts}
    for key, raw in flat.items():
        if key in by_key:
            part, field = by_key[key]
            chosen[part][field] = _decode(raw)
        elif key not in SECRET_KEYS and key not in VIEW_KEYS:
            warnings.append(f"ignored link parameter {key!r}: the Recommend page does not use it")
    request = chosen["request"]
    if "gpus" in request:
        request["gpus"] = _gpu_list(request["gpus"] or "", warnings)
    if "prices" in request:
        request["prices"] = parse_price_list(request["prices"] or "", warnings)
    _normalise_version(request, warnings)
    _sizes(request)
    return RecommendLink(request=_validated(RecommendRequest, request, RECOMMEND_KEYS, warnings),
                         workload=_validated(Workload, chosen["workload"], WORKLOAD_KEYS, warnings,
                                             RECOMMEND_WIDGET_BOUNDS),
                         speed=_validated(SpeedInputs, chosen["speed"], SPEED_KEYS, warnings),
                         warnings=tuple(warnings))


def _gpu_list(text: str, warnings: list[str]) -> tuple[str, ...]:
    """Catalog keys from names or aliases; each unknown one dropped with a warning."""
    keys: list[str] = []
    for name in filter(None, (part.strip() for part in text.split(","))):
        try:
            key = find_gpu(name).key
        except CalculatorError as exc:
            warnings.append(f"ignored GPU in the link: {str(exc).split(' The catalog')[0]}")
            continue
        if key not in keys:
            keys.append(key)
    return tuple(keys)


def price_list_text(prices: Mapping[str, float]) -> str:
    """``h100-sxm-80gb:2.123456789,l40s:1``: every price as typed (Python's shortest exact form, never rounded)."""
    return ",".join(f"{key}:{_encode(float(value))}" for key, value in prices.items())


def parse_price_list(text: str, warnings: list[str]) -> dict[str, float]:
    """``gpu:dollars`` pairs by catalog key (``h100:2.5,l40s:1``); each bad pair dropped with a warning."""
    prices: dict[str, float] = {}
    for pair in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = pair.rpartition(":")
        try:
            key, dollars = find_gpu(name).key, float(value)
        except (CalculatorError, ValueError):
            warnings.append(f"ignored price {pair!r} in the link: write gpu:dollars per GPU-hour")
            continue
        if not MIN_USD_PER_GPU_HOUR <= dollars < MAX_USD_PER_GPU_HOUR:
            warnings.append(f"ignored price {pair!r} in the link: dollars per GPU-hour must be at least "
                            f"{MIN_USD_PER_GPU_HOUR:g} and below {MAX_USD_PER_GPU_HOUR:,}")
            continue
        prices[key] = dollars
    return prices


def _normalise_version(values: dict[str, object], warnings: list[str]) -> None:
    """A link's ``v`` as the version it names ("0.32" -> "0.32.0"), or dropped with a warning when it names none."""
    version = values.get("vllm_version")
    if version is None:
        return
    try:
        values["vllm_version"] = str(VllmVersion.parse(str(version)))
    except CalculatorError as exc:
        del values["vllm_version"]
        warnings.append(f"ignored link value v={version!r}: {exc}; using {LATEST_VERSION}")
