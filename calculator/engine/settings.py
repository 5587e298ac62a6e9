"""Resolve a Scenario's ``None``s and ``auto``s to the values vLLM would use, and validate them like vLLM."""

from __future__ import annotations

from functools import lru_cache
from operator import itemgetter
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from ..computed import computed
from ..errors import InvalidInput
from ..gpus import GpuSpec, Interconnect
from ..model.spec import ModelSpec
from ..scenario import Scenario
from ..units import GIB
from .engine_support import PRE_AMPERE_FAMILIES, EngineSupport, chunked_prefill_on, engine_support
from .expert_parallel import (
    BATCHED_DP_MOE_BATCHED_TOKENS,
    MOONEP_EAGER_NOTE,
    batched_dp_moe,
    moonep_config_error,
    moonep_runs_eager,
)
from .flag_checks import flag_problems
from .interconnect import custom_gpu_link_note, interconnect_warning, resolve_interconnect
from .kv_cache import SUPPORTED_KV_CACHE_DTYPES
from .vllm_versions import (
    BatchDefaults,
    Device,
    MemoryFormula,
    VersionRules,
    as_v0_engine,
    batch_defaults,
    default_block_size,
)

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_DTYPE_ALIASES = {"half": "float16", "fp16": "float16", "bf16": "bfloat16", "float": "float32", "fp32": "float32"}


class ResolvedSettings(BaseModel):
    """Every knob after vLLM's defaults are applied."""

    model_config = ConfigDict(frozen=True)
    device: Device
    gpu_memory_bytes: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    interconnect: Interconnect  # the link between the GPUs (``interconnect.py``)
    dtype: str
    dtype_bytes: int
    kv_cache_dtype: str
    quantization: str | None
    block_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    extensible_kv_cache: bool
    memory_formula: MemoryFormula
    async_scheduling: bool
    enforce_eager: bool
    engine: Literal["v0", "v1"] = "v1"  # the engine this version runs for this deployment (a V0 fallback or V1)
    error: str | None = None  # a configuration vLLM refuses before sizing memory
    engine_fallback: str | None = None  # vLLM's warning when it falls back to V0 for this deployment
    refusal: str | None = None  # the error this version raises instead of serving the deployment, verbatim
    refusal_context: str | None = None  # what that error leaves unsaid
    warnings: tuple[str, ...] = ()


def resolve_dtype(requested: str, config_dtype: str | None, rules: VersionRules, gpu_family: str | None,
                  device: Device) -> tuple[str, list[str]]:
    """``--dtype`` as vLLM resolves it (§2.9): auto takes the config dtype; fp32 checkpoints run in 16 bits."""
    warnings: list[str] = []
    name = _DTYPE_ALIASES.get(requested.lower(), requested.lower())
    if name != "auto" and name not in DTYPE_BYTES:
        raise InvalidInput(f"unknown --dtype {requested!r}; use auto, bfloat16, float16 or float32")
    pre_ampere = (gpu_family or "").lower() in PRE_AMPERE_FAMILIES
    if name == "auto":
        config = _DTYPE_ALIASES.get((config_dtype or "").lower(), (config_dtype or "float32").lower())
        name = config if config in DTYPE_BYTES else "float32"
        if name == "float32":
            name = "float16" if pre_ampere else rules.fp32_auto_dtype
    # NOTE: an explicit --dtype bfloat16 (and auto up to 0.8.5) stays bfloat16 here; the worker then refuses it
    # (``engine_support``).
    if name == "bfloat16" and pre_ampere and requested.lower() == "auto" and rules.auto_dtype_falls_back_pre_ampere:
        warnings.append("bfloat16 is not supported on this GPU (compute capability < 8.0); vLLM falls back to float16")
        name = "float16"
    return name, warnings


# vLLM 0.7.2 engine/arg_utils.py ``create_engine_config`` (the same rule in the 0.6 releases): with
# --enable-chunked-prefill unset, a text model over 32K tokens on CUDA (not ROCm), without a sliding window, LoRA or a
# speculative model, gets chunked prefill ("Chunked prefill is enabled by default for models with max_model_len >
# 32K"), and config.py ``SchedulerConfig`` then batches 2,048 tokens instead of the whole prompt; 0.6 batched 512
# ("Chunked prefill is enabled with max_num_batched_tokens=512." in a 0.6.4.dev log, benchmarks/data/
# calibration-mined.jsonl: file-24gb-llama31-8b-v064dev-131k-failed).
V0_LONG_CONTEXT_TOKENS = 32768
V0_CHUNKED_PREFILL_BATCHED_TOKENS = 2048
V0_6_CHUNKED_PREFILL_BATCHED_TOKENS = 512


def v0_long_context_chunked_prefill(scenario: Scenario, spec: ModelSpec, rules: VersionRules, device: Device,
                                    max_model_len: int) -> bool:
    """Whether V0 turns chunked prefill on by itself for this long-context deployment."""
    sliding = any(layer.sliding_window for layer in spec.layers)
    return (rules.version.at_least(6) and device == "cuda" and max_model_len > V0_LONG_CONTEXT_TOKENS
            and not sliding and not spec.is_multimodal and not scenario.enable_lora
            and scenario.speculative_method is None)


def glm5_defaults_to_fp8_kv(rules: VersionRules, spec: ModelSpec, gpu: GpuSpec | None) -> bool:
    """GlmMoeDsaForCausalLM.verify_and_update_config (models/config.py, 0.32; absent in 0.30): "auto" becomes
    fp8_e4m3 on compute capability 10.x."""
    return (spec.architecture == "GlmMoeDsaForCausalLM" and rules.version.at_least(32) and gpu is not None
            and gpu.compute_capability is not None and gpu.compute_capability[0] == 10)


class DeploymentSettings(NamedTuple):
    dtype: str
    interconnect: Interconnect
    kv_cache_dtype: str
    quantization: str | None
    warnings: tuple[str, ...]


@lru_cache(maxsize=512)
def deployment_settings(spec: ModelSpec, rules: VersionRules, gpu: GpuSpec | None, device: Device, tp: int, pp: int,
                         requested_dtype: str, kv_dtype: str, quantization_flag: str | None,
                         interconnect_flag: Interconnect | None) -> DeploymentSettings:
    """The checks and settings of a deployment (model, version, GPU, parallelism, dtypes) that a sweep of
    max_model_len, utilization or the batch limits leaves alone: checked once per deployment."""
    warnings: list[str] = []
    if spec.num_attention_heads % tp:
        raise InvalidInput(f"Total number of attention heads ({spec.num_attention_heads}) must be divisible by "
                           f"tensor parallel size ({tp}).")
    if pp > spec.num_hidden_layers:
        raise InvalidInput(f"pipeline_parallel_size {pp} exceeds the model's {spec.num_hidden_layers} layers")
    dtype, dtype_warnings = resolve_dtype(requested_dtype, spec.config_dtype, rules, gpu.family if gpu else None,
                                          device)
    warnings += dtype_warnings
    interconnect = resolve_interconnect(interconnect_flag, gpu)
    if link_note := interconnect_warning(interconnect, gpu, tp * pp):
        warnings.append(link_note)
    if link_note := custom_gpu_link_note(interconnect_flag, gpu, tp * pp):
        warnings.append(link_note)
    if kv_dtype not in SUPPORTED_KV_CACHE_DTYPES:
        raise InvalidInput(f"unknown --kv-cache-dtype {kv_dtype!r}; vLLM {rules.version} accepts "
                           f"{', '.join(rules.kv_cache_dtypes)}")
    if kv_dtype not in rules.kv_cache_dtypes and kv_dtype not in ("fp16", "bf16", "float32"):
        warnings.append(f"--kv-cache-dtype {kv_dtype} is not accepted by vLLM {rules.version} "
                        f"(it accepts {', '.join(rules.kv_cache_dtypes)})")
    if kv_dtype.endswith("_ds_mla") and spec.mla is None:
        raise InvalidInput(f"--kv-cache-dtype {kv_dtype} is only for MLA models (DeepSeek-style)")
    if kv_dtype == "auto" and glm5_defaults_to_fp8_kv(rules, spec, gpu):
        kv_dtype = "fp8_e4m3"
        warnings.append("vLLM sets an fp8 KV cache for GLM-5 (GlmMoeDsaForCausalLM) on SM10x GPUs when "
                        "--kv-cache-dtype is auto; pass --kv-cache-dtype bfloat16 to keep 16 bits")
    quantization = quantization_flag or (spec.quantization.method if spec.quantization else None)
    if quantization == "bitsandbytes" and rules.version.at_least(28):
        warnings.append("bitsandbytes left vLLM core in 0.28 (it needs the out-of-tree vllm-bnb-plugin)")
    return DeploymentSettings(dtype, interconnect, kv_dtype, quantization, tuple(warnings))


class DeploymentChoices(NamedTuple):
    """What ``resolve_settings`` decides from the deployment alone (every Scenario field but the point's: max_model_len,
    utilization, the batch limits), for the rules before any V0 fallback: decided once per deployment."""

    device: Device
    gpu_family: str | None
    dtype: str
    interconnect: Interconnect
    kv_cache_dtype: str
    quantization: str | None
    extensible: bool
    block_size: int
    batch: BatchDefaults  # the version's max_num_seqs / max_num_batched_tokens defaults (V1; V0 recomputes them)
    gpu_memory_bytes: int
    warnings: tuple[str, ...]
    # NOTE: None where the engine is V0, whose refusal of a batch shorter than a prompt reads max_model_len.
    support: EngineSupport | None


def deployment_choices(scenario: Scenario, spec: ModelSpec, rules: VersionRules,
                       gpu: GpuSpec | None) -> DeploymentChoices:
    device: Device = scenario.device or (gpu.platform if gpu else "cuda")  # type: ignore[assignment]
    family = gpu.family if gpu else None
    dtype, interconnect, kv_dtype, quantization, fixed_warnings = deployment_settings(
        spec, rules, gpu, device, scenario.tensor_parallel_size, scenario.pipeline_parallel_size, scenario.dtype,
        scenario.kv_cache_dtype, scenario.quantization, scenario.interconnect)
    warnings = list(fixed_warnings)
    # NOTE: on CPU the pool is VLLM_CPU_KVCACHE_SPACE in every version; the flag is the GPU's (0.10.2+).
    if scenario.kv_cache_memory_bytes is not None and not rules.supports_kv_cache_memory_bytes and device != "cpu":
        warnings.append(f"--kv-cache-memory-bytes does not exist in vLLM {rules.version} (added in 0.10.2)")
    extensible = scenario.enable_extensible_kv_cache
    if extensible is None:
        extensible = (rules.version.at_least(34) and device in ("cuda", "rocm")
                      and scenario.kv_cache_memory_bytes is None and scenario.num_gpu_blocks_override is None)
    block_size = scenario.block_size or default_block_size(rules, device=device, uses_mla=spec.mla is not None,
                                                           gpu_family=family)
    batch = batch_defaults(rules, device=device, gpu_memory_gib=gpu.memory_gib if gpu else 0.0, gpu_family=family,
                           gpu_name=gpu.name if gpu else None)
    support = _engine_support(scenario, spec, rules, device, dtype, family, block_size, kv_dtype)
    return DeploymentChoices(device, family, dtype, interconnect, kv_dtype, quantization, extensible, block_size,
                             batch, gpu.memory_bytes if gpu else 0, tuple(warnings),
                             support if support.engine == "v1" else None)


def _engine_support(scenario: Scenario, spec: ModelSpec, rules: VersionRules, device: Device, dtype: str,
                    family: str | None, block_size: int, kv_dtype: str) -> EngineSupport:
    return engine_support(rules, device=device, dtype=dtype, gpu_family=family, spec=spec, block_size=block_size,
                          kv_cache_dtype=kv_dtype, block_size_given=scenario.block_size is not None,
                          max_model_len=scenario.max_model_len or spec.derived_max_model_len,
                          max_num_batched_tokens_given=scenario.max_num_batched_tokens,
                          prefix_caching_given=scenario.enable_prefix_caching,
                          chunked_prefill_given=scenario.enable_chunked_prefill,
                          speculative_method=scenario.speculative_method)


# NOTE: the Scenario fields resolve_settings reads, read once from the instance's __dict__: pydantic's __getattr__ puts
# every attribute read of a model on CPython's slower path (~300 instructions each under valgrind), and every slider
# move or sweep point resolves its settings anew.
_resolved_fields = itemgetter("tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization",
                              "max_model_len", "max_num_seqs", "max_num_batched_tokens", "all2all_backend",
                              "data_parallel_size", "enable_expert_parallel", "enforce_eager", "async_scheduling")


def resolve_settings(scenario: Scenario, spec: ModelSpec, rules: VersionRules, gpu: GpuSpec | None,
                     choices: DeploymentChoices | None = None) -> ResolvedSettings:
    """The settings vLLM runs ``scenario`` with; ``choices``: ``deployment_choices`` of the same deployment."""
    error: str | None = None
    device, family, dtype, interconnect, kv_dtype, quantization, extensible, block_size, batch, gpu_memory_bytes, \
        fixed_warnings, support = choices or deployment_choices(scenario, spec, rules, gpu)
    tp, pp, util, max_model_len_given, max_num_seqs_given, max_num_batched_tokens_given, backend, dp, ep, \
        enforce_eager, async_scheduling = _resolved_fields(scenario.__dict__)
    warnings = list(fixed_warnings)
    if util is None:
        util = 1.0 if extensible else rules.default_gpu_memory_utilization
    elif extensible and 0.7 < util < 1.0:
        warnings.append(f"gpu_memory_utilization={util} with the extensible KV cache withholds memory; it is "
                        "probably a habit from estimate-based sizing (vLLM 0.34 defaults to 1.0)")
    max_model_len = max_model_len_given or spec.derived_max_model_len
    support = support or _engine_support(scenario, spec, rules, device, dtype, family, block_size, kv_dtype)
    if support.fallback:
        warnings.append(f"vLLM {rules.version} runs the V0 engine here: {support.fallback}")
        rules = as_v0_engine(rules)
        batch = batch_defaults(rules, device=device, gpu_memory_gib=gpu.memory_gib if gpu else 0.0,
                               gpu_family=family, gpu_name=gpu.name if gpu else None)
    if max_model_len_given and max_model_len_given > spec.derived_max_model_len:
        error = (f"User-specified max_model_len ({max_model_len_given}) is greater than the derived max_model_len "
                 f"({spec.derived_max_model_len} from the model's config.json). This may lead to incorrect model "
                 "outputs or CUDA errors. Make sure the value is correct and within the model context size, or set "
                 "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.")
    max_num_seqs = max_num_seqs_given or batch.max_num_seqs
    chunked = chunked_prefill_on(rules.engine, rules, scenario.enable_chunked_prefill,
                                 v0_long_context=rules.engine == "v0" and v0_long_context_chunked_prefill(
                                     scenario, spec, rules, device, max_model_len))
    if max_num_batched_tokens_given:
        max_num_batched_tokens = max_num_batched_tokens_given
    elif rules.engine == "v0" and chunked:
        max_num_batched_tokens = (V0_CHUNKED_PREFILL_BATCHED_TOKENS if rules.version.at_least(7)
                                  else V0_6_CHUNKED_PREFILL_BATCHED_TOKENS)
    elif rules.engine == "v0":
        # NOTE: V0 without chunked prefill must fit a whole prompt in one batch.
        max_num_batched_tokens = max(max_model_len, batch.max_num_batched_tokens)
    elif rules.version.at_least(20) and batched_dp_moe(backend, data_parallel_size=dp, enable_expert_parallel=ep):
        max_num_batched_tokens = BATCHED_DP_MOE_BATCHED_TOKENS
    elif not chunked:
        # NOTE: V1 with --no-enable-chunked-prefill (0.11.1+, EngineArgs._set_default_args): a whole prompt per batch
        max_num_batched_tokens = min(max(max_model_len, batch.max_num_batched_tokens), max_num_seqs * max_model_len)
    else:
        max_num_batched_tokens = min(batch.max_num_batched_tokens, max_num_seqs * max_model_len)
    flag_error, flag_warnings = flag_problems(scenario, rules, device, uses_mla=spec.mla is not None,
                                              max_num_seqs=max_num_seqs,
                                              max_num_batched_tokens=max_num_batched_tokens,
                                              max_model_len=max_model_len)
    error, warnings = error or flag_error, [*warnings, *flag_warnings]
    error = error or moonep_config_error(backend, quantization=quantization, dtype=dtype)
    if not enforce_eager and moonep_runs_eager(backend, spec, data_parallel_size=dp, enable_expert_parallel=ep):
        # NOTE: vLLM sets cudagraph_mode NONE, not --enforce-eager; for memory and speed the effect is the same.
        enforce_eager = True
        warnings.append(MOONEP_EAGER_NOTE)
    if async_scheduling is None:
        async_scheduling = rules.async_scheduling_default and device != "cpu"
    formula: MemoryFormula = "v1_extensible" if extensible else (
        "v1_free_drop" if rules.memory_formula == "v1_extensible" else rules.memory_formula)
    if device != "cpu" and gpu_memory_bytes < GIB // 4:
        raise InvalidInput("GPU memory must be at least 0.25 GiB")
    return computed(ResolvedSettings, {"device": device, "gpu_memory_bytes": gpu_memory_bytes,
                                       "tensor_parallel_size": tp, "pipeline_parallel_size": pp,
                                       "interconnect": interconnect, "dtype": dtype, "dtype_bytes": DTYPE_BYTES[dtype],
                                       "kv_cache_dtype": kv_dtype, "quantization": quantization,
                                       "block_size": block_size, "max_model_len": max_model_len,
                                       "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
                                       "gpu_memory_utilization": util, "extensible_kv_cache": extensible,
                                       "memory_formula": formula, "async_scheduling": async_scheduling,
                                       "enforce_eager": enforce_eager, "engine": support.engine, "error": error,
                                       "engine_fallback": support.fallback, "refusal": support.refusal,
                                       "refusal_context": support.refusal_context, "warnings": tuple(warnings)})
