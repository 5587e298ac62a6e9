"""One estimate: a Scenario in, everything vLLM would decide at start-up out.

This module wires the pure parts together (model facts, weights, overheads, budget, KV layout, capacity);
it holds no formula of its own beyond the order in which vLLM applies them.
"""

from __future__ import annotations

from functools import lru_cache
from operator import itemgetter
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, computed_field

from ..computed import computed
from ..errors import InvalidInput
from ..gpus import GpuSpec, Interconnect, custom_gpu, find_gpu
from ..model.hf_overrides import with_hf_overrides
from ..model.model_source import load_model_spec
from ..model.quantization import quantization_from_flag
from ..model.spec import ModelSpec, QuantizationSpec
from ..model.weights import WeightsBreakdown, weight_bytes_per_rank
from ..scenario import Scenario
from ..units import GIB
from .cudagraph_budget import subtracts_cudagraph_estimate, uses_model_runner_v2
from .engine_support import (
    attention_kernel_blocks,
    kernel_refusal,
    sliding_window_block_size,
)
from .expert_parallel import (
    DEFAULT_GPUS_PER_NODE,
    TWO_SIDED_BACKENDS,
    all2all_buffer_bytes,
    all2all_pre_snapshot_bytes,
    all2all_warning,
    moonep_later_buffers_warning,
)
from .flag_checks import oversized_kv_pool_error
from .interconnect import has_nvls
from .free_memory import free_memory_reading, host_pool_free_bytes, host_use_counts, unified_memory_warning
from .known_issues import known_issues
from .kv_cache import (
    CapacityFigures,
    KvCacheLayout,
    as_cached_by,
    capacity_figures,
    group_blocks_per_request,
    in_flight_tokens,
    largest_fitting_model_len,
    plan_kv_cache,
    stage_bytes_for_blocks,
)
from .memory import MemoryBudget, load_oom_error, memory_budget, no_memory_error
from .overheads import (
    PENALTY_STATE_FROM_MINOR,
    activation_peak_bytes,
    cuda_context_bytes,
    cudagraph_bytes,
    free_drop_persistent_bytes,
    max_capture_size,
    non_torch_bytes,
    penalty_state_bytes,
)
from .lora import LoraSlots, lora_dtype_bytes, lora_error, lora_slots
from .moe_workspace import kept_moe_workspace_bytes, moe_workspace_bytes
from .eplb import (
    eplb_config_error,
    eplb_layout_error,
    partial_eplb_warning,
    places_redundant_experts,
    takes_part_in_eplb,
    transient_buffer_warning,
    with_eplb_state,
)
from .placement import cpu_offloaded_bytes, experts_placed
from .recurrent_state import (
    cpu_state_dtype_warning,
    has_mamba2_mixer,
    mamba_slots_fix,
    mamba_slots_refusal,
    mamba_state_blocks_per_request,
    speculative_state_tokens,
    state_slots,
    state_slots_warning,
    with_speculative_state,
)
from .quant_kernels import expert_storage, resident_quantization
from .settings import (
    DeploymentChoices,
    ResolvedSettings,
    deployment_choices,
    deployment_settings,
    resolve_settings,
)
from .speculative import Proposer, drafter_activation_bytes, proposer, with_proposer_layers
from .vllm_versions import (
    ESTIMATE_HINT,
    Device,
    EXTENSIBLE_HINT_UTIL_BELOW_ONE,
    EXTENSIBLE_HINT_UTIL_ONE,
    VersionRules,
    as_v0_engine,
    flashinfer_sampler,
    rules_for,
)

CPU_DEFAULT_KV_CACHE_BYTES = 4 * GIB  # NOTE: VLLM_CPU_KVCACHE_SPACE unset -> vLLM picks a size; we assume 4 GiB
V0_SWAP_SPACE_BYTES = 4 * GIB  # V0 CacheConfig.swap_space default (4 GiB per GPU): "# CPU blocks" in its log line



def applied_quantization(scenario: Scenario, spec: ModelSpec) -> QuantizationSpec | None:
    """The weight quantization vLLM applies: ``--quantization``'s when given, else the checkpoint's."""
    return quantization_from_flag(scenario.quantization, spec) if scenario.quantization else spec.quantization


def all2all_bytes(scenario: Scenario, spec: ModelSpec, rules: VersionRules, settings: ResolvedSettings) -> int:
    """The all-to-all backend's buffers on one rank for this deployment (part of its non-torch memory)."""
    if spec.moe is None:
        return 0  # NOTE: no experts, no all-to-all: a dense model's estimate skips the call and its lookups
    return all2all_buffer_bytes(scenario.all2all_backend, spec, version=rules.version,
                                data_parallel_size=scenario.data_parallel_size,
                                enable_expert_parallel=scenario.enable_expert_parallel,
                                tensor_parallel_size=settings.tensor_parallel_size,
                                max_num_batched_tokens=settings.max_num_batched_tokens,
                                quantization=applied_quantization(scenario, spec), sm_count=_sm_count(scenario),
                                gpus_per_node=_gpus_per_node(scenario))


def moe_workspace(result: Estimate) -> int:
    """The fused-MoE kernel's workspace in the estimate's profiled forward pass (``overheads.moe_workspace_bytes``)."""
    s = result.settings
    return moe_workspace_bytes(result.model, max_num_batched_tokens=s.max_num_batched_tokens,
                               activation_dtype_bytes=s.dtype_bytes, tensor_parallel_size=s.tensor_parallel_size,
                               data_parallel_size=result.scenario.data_parallel_size,
                               enable_expert_parallel=result.scenario.enable_expert_parallel, rules=result.rules)


def _gpus_per_node(scenario: Scenario) -> int:
    """The GPUs on one node's NVLink, which DeepEP v2 sizes its scale-up domain by (8 for a GPU not in the catalog)."""
    gpu = resolve_gpu(scenario) if scenario.all2all_backend == "deepep_v2" else None  # NOTE: no lookup otherwise
    return gpu.gpus_per_node if gpu is not None else DEFAULT_GPUS_PER_NODE


def _sm_count(scenario: Scenario) -> int | None:
    """The GPU's SM count, which FlashInfer's two-sided all-to-all sizes its channels by (None: unknown)."""
    if scenario.all2all_backend not in TWO_SIDED_BACKENDS:
        return None  # NOTE: no GPU lookup on the path every estimate takes
    gpu = resolve_gpu(scenario)
    return gpu.sm_count if gpu is not None else None


class Estimate(BaseModel):
    """What vLLM will do with one deployment, per GPU (the busiest rank) unless a name says otherwise."""

    model_config = ConfigDict(frozen=True)
    scenario: Scenario
    model: ModelSpec
    gpu: GpuSpec | None
    rules: VersionRules
    settings: ResolvedSettings
    budget: MemoryBudget  # the busiest pipeline stage
    budgets_per_stage: tuple[MemoryBudget, ...]
    layout: KvCacheLayout
    capacity: CapacityFigures
    fits: bool
    error: str | None
    refusal: str | None = None  # the error this vLLM version raises instead of serving the deployment, verbatim
    max_fitting_model_len: int
    weights_by_role: dict[str, int]  # the busiest stage's weights: embedding, attention, mlp, expert, ...
    warnings: tuple[str, ...]
    lora: LoraSlots | None = None  # --enable-lora: the adapter slots on each stage
    proposer: Proposer | None = None  # speculative decoding: the draft model, heads or n-gram look-up
    state_slots: int | None = None  # hybrid models: sequences whose recurrent state the block pool holds at once

    @property
    def on_gpu(self) -> bool:
        """Whether the deployment runs on a GPU (the speed model covers GPUs, not the CPU backend)."""
        return self.gpu is not None and self.settings.device != "cpu"

    @property
    def quantization(self) -> QuantizationSpec | None:
        """The weight quantization vLLM applies (``--quantization``'s, else the checkpoint's)."""
        return applied_quantization(self.scenario, self.model)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def num_gpus(self) -> int:
        return self.settings.tensor_parallel_size * self.settings.pipeline_parallel_size

    @computed_field  # type: ignore[prop-decorator]
    @property
    def kv_cache_bytes(self) -> int:
        """Memory vLLM hands to the KV cache on the busiest GPU."""
        return max(self.budget.kv_cache_bytes, 0)

    def log_lines(self) -> tuple[str, ...]:
        """The capacity lines vLLM prints for this version and engine (§2.5), e.g.
        ``("CPU KV cache size: 1,024,000 tokens, Maximum concurrency for 1,000 tokens per request: 1024.00x",)``."""
        cap, s, rules = self.capacity, self.settings, self.rules
        if rules.engine == "v0":
            return _v0_log_lines(rules, s.device, cap, s.max_model_len, self.layout.bytes_per_block)
        concurrency = f"Maximum concurrency for {s.max_model_len:,} tokens per request: {cap.max_concurrency:.2f}x"
        if rules.version.at_least(28):
            # NOTE: _kv_cache_device_name (0.30+) says "CPU" on CPU; 0.28-0.29 said "GPU" on every device.
            device = "CPU" if s.device == "cpu" and rules.version.at_least(30) else "GPU"
            return (f"{device} KV cache size: {cap.kv_cache_tokens:,} tokens, {concurrency}",)
        return (f"GPU KV cache size: {cap.kv_cache_tokens:,} tokens", concurrency)


def _v0_log_lines(rules: VersionRules, device: str, cap: CapacityFigures, max_model_len: int,
                  bytes_per_block: int) -> tuple[str, ...]:
    """The V0 executor's ``initialize_cache`` lines (executor_base.py; gpu_executor.py/cpu_executor.py before 0.7)."""
    swap_blocks = 0 if device == "cpu" else V0_SWAP_SPACE_BYTES // max(bytes_per_block, 1)
    if rules.v0_blocks_label == "gpu":
        blocks = (f"# CPU blocks: {cap.num_gpu_blocks}" if device == "cpu"
                  else f"# GPU blocks: {cap.num_gpu_blocks}, # CPU blocks: {swap_blocks}")
    else:
        label = (("CPU" if device == "cpu" else "CUDA") if rules.v0_blocks_label == "dispatch_key" else device)
        blocks = f"# {label} blocks: {cap.num_gpu_blocks}, # CPU blocks: {swap_blocks}"
    if not rules.v0_logs_max_concurrency or (device == "cpu" and rules.v0_blocks_label == "gpu"):
        return (blocks,)
    # NOTE: "%s" of the int: no thousands separator, unlike V1's lines.
    return (blocks, f"Maximum concurrency for {max_model_len} tokens per request: {cap.max_concurrency:.2f}x")


def resolve_gpu(scenario: Scenario) -> GpuSpec | None:
    if scenario.gpu_memory_gib is not None:
        base = find_gpu(scenario.gpu) if scenario.gpu else None
        if base is None:
            return custom_gpu(scenario.gpu_memory_gib)
        custom = custom_gpu(scenario.gpu_memory_gib, name=base.name)  # validates the amount
        return base.model_copy(update={"memory_gib": custom.memory_gib})
    if scenario.gpu is None:
        return None
    return find_gpu(scenario.gpu)


def estimate(scenario: Scenario, spec: ModelSpec | None = None) -> Estimate:
    """Everything vLLM decides at start-up for ``scenario``; ``spec`` skips loading the model again."""
    rules = rules_for(scenario.vllm_version)
    spec = as_cached_by(with_hf_overrides(spec or load_model_spec(scenario.model), scenario.hf_overrides), rules)
    gpu = resolve_gpu(scenario)
    # NOTE: a V0 fallback follows from the deployment too (engine_support), so the rules before it make the key.
    key = (_deployment_fields(scenario.__dict__), spec, rules, gpu)
    deployment = _DEPLOYMENTS.get(key)
    choices = deployment.choices if deployment else deployment_choices(scenario, spec, rules, gpu)
    settings = resolve_settings(scenario, spec, rules, gpu, choices)
    if settings.engine == "v0":
        rules = as_v0_engine(rules)
    tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
    lora = _lora_slots(scenario, spec, rules, settings)
    if deployment is None:
        if len(_DEPLOYMENTS) >= _MAX_DEPLOYMENTS:
            _DEPLOYMENTS.clear()
        deployment = _DEPLOYMENTS[key] = _new_deployment(scenario, spec, rules, gpu, settings, choices)
    layout, fixed = deployment.layout, deployment.fixed
    warnings = [*spec.warnings, *settings.warnings, *deployment.warnings]
    budgets = _stage_budgets(scenario, spec, rules, settings, deployment, lora)
    # NOTE: list comprehensions, not generators, on this path: a generator costs more to start and resume than its one
    # or two items (the stages, the KV groups) cost to compute.
    num_blocks = min([max(b.kv_cache_bytes, 0) // per_block
                      for b, per_block in zip(budgets, layout.bytes_per_block_per_stage)])
    if scenario.num_gpu_blocks_override:
        num_blocks = scenario.num_gpu_blocks_override
        warnings.append(f"Overriding num_gpu_blocks with num_gpu_blocks_override={num_blocks}")
    in_flight = in_flight_tokens(rules, max_num_batched_tokens=settings.max_num_batched_tokens,
                                 pipeline_parallel_size=pp, async_scheduling=settings.async_scheduling)
    # NOTE: the block ids one request needs in each group, read by the log line's figures and the one-request check.
    request_blocks = tuple([group_blocks_per_request(g, settings.max_model_len, in_flight) for g in layout.groups])
    capacity = capacity_figures(layout, rules, num_gpu_blocks=num_blocks, max_model_len=settings.max_model_len,
                                in_flight=in_flight, per_request=sum(request_blocks))
    usable = _usable_for_one_request(rules, layout, budgets, scenario.num_gpu_blocks_override)
    # NOTE: above the model's own length vLLM refuses to start (without VLLM_ALLOW_LONG_MAX_MODEL_LEN=1), so no
    # longer max_model_len is one that "fits", however much KV cache is free.
    upper = spec.derived_max_model_len
    max_fitting = largest_fitting_model_len(layout, available_bytes_per_stage=usable, upper=upper, in_flight=in_flight)
    busiest = 0 if len(budgets) == 1 else min(
        range(len(budgets)), key=lambda s: budgets[s].kv_cache_bytes - layout.bytes_per_block_per_stage[s])
    refusal = settings.refusal or deployment.kernel_refusal
    lora_problem = lora_error(spec, rules.version, max_lora_rank=scenario.max_lora_rank, max_loras=scenario.max_loras,
                              max_cpu_loras=scenario.max_cpu_loras, tensor_parallel_size=tp,
                              fully_sharded=scenario.fully_sharded_loras,
                              data_parallel_size=scenario.data_parallel_size,
                              enable_expert_parallel=scenario.enable_expert_parallel,
                              all2all_backend=scenario.all2all_backend) if lora else None
    if not settings.error and (flag_problem := _eplb_error(scenario, spec, rules, tp) or lora_problem):
        # NOTE: vLLM's ParallelConfig, FusedMoE and LoRA checks refuse these flags before memory is sized: a settings
        # error (the verdict's "does not fit" whatever the band), not a start that more memory would allow.
        settings = settings.model_copy(update={"error": flag_problem})
    error = (_refusal_error(rules, settings, refusal) if refusal else settings.error
             or oversized_kv_pool_error(scenario, budgets, layout.bytes_per_block_per_stage)
             or _fit_error(rules, settings, layout, budgets, usable, request_blocks, max_fitting)
             or _mamba_slots_error(rules, settings, layout, num_blocks))
    slots = state_slots(layout, num_blocks)
    if error is None and (slots_note := state_slots_warning(slots, settings.max_num_seqs)):
        warnings.append(slots_note)
    if cpu_note := cpu_state_dtype_warning(rules, layout, device=settings.device, dtype_bytes=settings.dtype_bytes):
        warnings.append(cpu_note)
    if lora and not lora.in_kv_budget:
        warnings.append(f"vLLM {rules.version}'s V0 worker measures the weights before it creates the LoRA slots: "
                        f"their {max(lora.bytes_per_stage) / GIB:.2f} GiB are not taken out of the KV cache's budget "
                        "and must fit in the (1 - gpu_memory_utilization) headroom")
    warnings += fixed.closing_warnings
    if scenario.enable_eplb and spec.moe is not None and (
            eplb_note := partial_eplb_warning(spec, scenario.num_redundant_experts)):
        warnings.append(eplb_note)
    if scenario.all2all_backend == "moonep" and (later := moonep_later_buffers_warning(
            "moonep", spec, version=rules.version, data_parallel_size=scenario.data_parallel_size,
            enable_expert_parallel=scenario.enable_expert_parallel, tensor_parallel_size=tp,
            max_num_batched_tokens=settings.max_num_batched_tokens)):
        warnings.append(later)
    return computed(Estimate, {"scenario": scenario, "model": spec, "gpu": gpu, "rules": rules, "settings": settings,
                               "budget": budgets[busiest], "budgets_per_stage": tuple(budgets), "layout": layout,
                               "capacity": capacity, "fits": error is None, "error": error, "refusal": refusal,
                               "max_fitting_model_len": max_fitting,
                               "weights_by_role": fixed.weights.per_stage_bytes_by_role[busiest],
                               "warnings": tuple(warnings), "lora": lora, "proposer": deployment.drafter,
                               "state_slots": slots})


def _lora_slots(scenario: Scenario, spec: ModelSpec, rules: VersionRules,
                settings: ResolvedSettings) -> LoraSlots | None:
    """The adapter slots ``--enable-lora`` allocates (None without it: vLLM ignores the other LoRA flags then)."""
    if not scenario.enable_lora:
        return None
    # NOTE: FusedMoEWithLoRA (vLLM 0.32 lora/layers/fused_moe.py) sizes its slots by the rank's local experts and
    # intermediate_size_per_partition: the same placement as the experts' weights.
    placed = experts_placed(spec, tensor_parallel_size=settings.tensor_parallel_size,
                            data_parallel_size=scenario.data_parallel_size,
                            enable_expert_parallel=scenario.enable_expert_parallel,
                            all2all_backend=scenario.all2all_backend,
                            num_redundant_experts=eplb_redundant_experts(scenario, spec))
    return lora_slots(placed, rules.version, max_loras=scenario.max_loras, max_lora_rank=scenario.max_lora_rank,
                      dtype_bytes=lora_dtype_bytes(scenario.lora_dtype, settings.dtype_bytes),
                      tensor_parallel_size=settings.tensor_parallel_size,
                      pipeline_parallel_size=settings.pipeline_parallel_size,
                      fully_sharded=scenario.fully_sharded_loras,
                      max_num_batched_tokens=settings.max_num_batched_tokens, max_num_seqs=settings.max_num_seqs)


def eplb_redundant_experts(scenario: Scenario, spec: ModelSpec, *, eplb_runs: bool = False) -> int | None:
    """The redundant experts EPLB places on the EP ranks (0 without them). With ``eplb_runs``: None where no EPLB
    state is built (EPLB off, no experts or a model that takes no part, no expert parallelism over more than one
    rank)."""
    runs = (scenario.enable_eplb and scenario.enable_expert_parallel and takes_part_in_eplb(spec)
            and scenario.tensor_parallel_size * scenario.data_parallel_size > 1)
    if not runs:
        return None if eplb_runs else 0
    return scenario.num_redundant_experts if places_redundant_experts(spec) else 0


def _eplb_error(scenario: Scenario, spec: ModelSpec, rules: VersionRules, tp: int) -> str | None:
    """What vLLM refuses about ``--enable-eplb`` and the redundant experts (``eplb.py``), in its words."""
    if not (scenario.enable_eplb or scenario.num_redundant_experts):
        return None
    dp = scenario.data_parallel_size
    return (eplb_config_error(rules.version, enable_eplb=scenario.enable_eplb,
                              num_redundant_experts=scenario.num_redundant_experts,
                              enable_expert_parallel=scenario.enable_expert_parallel, tensor_parallel_size=tp,
                              data_parallel_size=dp)
            or (eplb_layout_error(rules.version, num_experts=spec.moe.num_experts,
                                  num_redundant_experts=scenario.num_redundant_experts, ep_size=tp * dp)
                if places_redundant_experts(spec) and scenario.enable_eplb else None))


def _proposer(scenario: Scenario, spec: ModelSpec, settings: ResolvedSettings,
              quantization: QuantizationSpec | None) -> Proposer | None:
    """The speculative proposer (None without --speculative-config)."""
    method = scenario.speculative_method
    if method is None:
        return None
    if settings.pipeline_parallel_size > 1 and method != "ngram":
        raise InvalidInput("speculative decoding with pipeline parallelism is not modelled: the plan puts the "
                           "proposer's layers beside the target's on one stage; plan it at "
                           "--pipeline-parallel-size 1")
    draft = None
    if method == "draft_model":
        if not scenario.speculative_model:
            raise InvalidInput("speculative method draft_model needs a draft model (the config's \"model\")")
        draft = load_model_spec(scenario.speculative_model)
    return proposer(spec, method=method, num_speculative_tokens=scenario.num_speculative_tokens,
                    acceptance_rate=scenario.speculative_acceptance_rate, draft_spec=draft,
                    tensor_parallel_size=settings.tensor_parallel_size,
                    draft_tensor_parallel_size=scenario.draft_tensor_parallel_size,
                    dtype_bytes=settings.dtype_bytes, quantization=quantization)


def clear_caches() -> None:
    """Forget memoised layouts, weights and searches (for cold-start benchmarks and tests)."""
    for cached in (_cached_weights, _deployment_terms, deployment_settings, plan_kv_cache, largest_fitting_model_len,
                   rules_for):
        cached.cache_clear()
    _DEPLOYMENTS.clear()


@lru_cache(maxsize=512)
def _cached_weights(spec: ModelSpec, dtype_bytes: int, tp: int, pp: int, quantization: object,
                    storage: object = None) -> WeightsBreakdown:
    """Weights do not change while a sweep moves max_model_len or utilization: compute them once."""
    return weight_bytes_per_rank(spec, dtype_bytes=dtype_bytes, tensor_parallel_size=tp, pipeline_parallel_size=pp,
                                 quantization=quantization, expert_storage=storage)  # type: ignore[arg-type]


class _DeploymentTerms(NamedTuple):
    """What the estimate of a deployment (model, version, GPU, parallelism, dtype) reads that max_model_len,
    gpu_memory_utilization and the batch limits leave alone: a sweep or a slider move computes it once."""

    weights: WeightsBreakdown
    resident_bytes_per_stage: tuple[int, ...]  # the weights that stay on the GPU (--cpu-offload-gb moves the rest)
    offload_warning: str | None
    free_pool_bytes: int | None
    context_bytes: int
    non_torch_bytes: int
    subtracts_cudagraph: bool
    cudagraph_note: str
    closing_warnings: tuple[str, ...]  # reported failures, the all-to-all backend, unified memory
    model_runner_v2: bool  # vLLM's default model runner for this model is Model Runner V2 (cudagraph_budget.py)


@lru_cache(maxsize=512)
def _deployment_terms(spec: ModelSpec, rules: VersionRules, gpu: GpuSpec | None,
                      quantization: QuantizationSpec | None, device: Device, dtype_bytes: int, tp: int, pp: int,
                      interconnect: Interconnect, enforce_eager: bool, data_parallel_size: int,
                      enable_expert_parallel: bool, cpu_offload_gb: float, all2all_backend: str | None,
                      num_redundant_experts: int | None = None) -> _DeploymentTerms:
    # NOTE: num_redundant_experts is None without EPLB, else EPLB's R (0 or more) redundant experts.
    placed = experts_placed(spec, tensor_parallel_size=tp, data_parallel_size=data_parallel_size,
                            enable_expert_parallel=enable_expert_parallel, all2all_backend=all2all_backend,
                            num_redundant_experts=num_redundant_experts or 0)
    storage = expert_storage(quantization, rules, gpu, device)
    held_as = resident_quantization(quantization, gpu, device, dtype_bytes)
    weights = _cached_weights(placed, dtype_bytes, tp, pp, held_as, storage)
    if num_redundant_experts is not None:
        weights = with_eplb_state(weights, placed, rules.version, ep_size=tp * data_parallel_size,
                                  num_redundant_experts=num_redundant_experts)
    offloaded = cpu_offloaded_bytes(placed, dtype_bytes=dtype_bytes, tensor_parallel_size=tp,
                                    pipeline_parallel_size=pp, quantization=held_as,
                                    cpu_offload_bytes=int(cpu_offload_gb * GIB))
    offload_warning = (f"--cpu-offload-gb {cpu_offload_gb:g}: {max(offloaded) / GIB:,.2f} GiB of weights per GPU "
                       "stay in pinned CPU memory and cross the host link on every forward pass (slower)"
                       if any(offloaded) else None)
    reading = free_memory_reading(gpu, rules, device)
    host_counts, free_pool_bytes = host_use_counts(reading), host_pool_free_bytes(gpu, reading)
    subtracts, cudagraph_note = subtracts_cudagraph_estimate(rules, spec, quantization, device=device,
                                                             enforce_eager=enforce_eager)
    # NOTE: where free memory is read from a host pool larger than the GPU, the host's own use is taken out of that
    # pool (host_pool_free_bytes), not out of the GPU's memory.
    context = cuda_context_bytes(tensor_parallel_size=tp, pipeline_parallel_size=pp, device=device,
                                 unified_memory=host_counts and free_pool_bytes is None,
                                 interconnect=interconnect, rules=rules,
                                 compute_capability=gpu.compute_capability if gpu else None)
    context += all2all_pre_snapshot_bytes(all2all_backend, spec, data_parallel_size=data_parallel_size,
                                          enable_expert_parallel=enable_expert_parallel)
    non_torch = non_torch_bytes(tensor_parallel_size=tp, pipeline_parallel_size=pp, device=device, rules=rules,
                                unified_memory=host_counts, interconnect=interconnect, nvls=has_nvls(interconnect, gpu))
    closing = [f"Reported failure: {issue.summary}. {issue.url}" for issue in known_issues(rules, spec, gpu, tp)]
    if num_redundant_experts is not None and (eplb_note := transient_buffer_warning(rules.version, weights, placed)):
        closing.append(eplb_note)
    if a2a_note := all2all_warning(all2all_backend, spec, data_parallel_size=data_parallel_size,
                                   enable_expert_parallel=enable_expert_parallel, quantization=quantization,
                                   sm_count=gpu.sm_count if gpu is not None else None, tensor_parallel_size=tp,
                                   gpus_per_node=gpu.gpus_per_node if gpu is not None else DEFAULT_GPUS_PER_NODE):
        closing.append(a2a_note)
    if gpu is not None and (memory_note := unified_memory_warning(gpu, rules, reading)):
        closing.append(memory_note)
    return _DeploymentTerms(
        weights=weights, resident_bytes_per_stage=tuple(stage - moved for stage, moved in
                                                        zip(weights.per_stage_bytes, offloaded)),
        offload_warning=offload_warning, free_pool_bytes=free_pool_bytes, context_bytes=context,
        non_torch_bytes=non_torch, subtracts_cudagraph=subtracts, cudagraph_note=cudagraph_note,
        closing_warnings=tuple(closing), model_runner_v2=uses_model_runner_v2(rules, spec, quantization))


class _Deployment(NamedTuple):
    """What an estimate computes from the deployment alone (model, GPU, version, parallelism, dtypes, the other
    flags): the estimate of a sweep point or a slider move reuses it and computes only what its point changes."""

    choices: DeploymentChoices
    drafter: Proposer | None
    layout: KvCacheLayout
    fixed: _DeploymentTerms
    kernel_refusal: str | None
    layers_on_stage: tuple[int, ...]  # PP stage -> its layers with a KV cache (CUDA graphs are captured per layer)
    warnings: tuple[str, ...]  # the MLA cache of old versions, the proposer, the CPU offload
    capture_ceiling: int  # the largest batch the default CUDA-graph capture list may reach on the GPU


# NOTE: what a sweep point or a slider move changes; every other Scenario field names the deployment.
POINT_FIELDS = ("max_model_len", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens",
                "other_processes_memory_gib", "overhead_adjustment_gib")
# NOTE: read from the instance's __dict__: pydantic's __getattr__ puts every attribute read of a model through a
# slower path, and these are ~60 reads per estimate (valgrind: ~12 k of ~343 k instructions).
_deployment_fields = itemgetter(*(name for name in Scenario.model_fields if name not in POINT_FIELDS))
_DEPLOYMENTS: dict[tuple[object, ...], _Deployment] = {}
_MAX_DEPLOYMENTS = 512


def _new_deployment(scenario: Scenario, spec: ModelSpec, rules: VersionRules, gpu: GpuSpec | None,
                    settings: ResolvedSettings, choices: DeploymentChoices) -> _Deployment:
    warnings = []
    if spec.mla is not None and rules.mla_cache != "latent":
        warnings.append(f"vLLM {rules.version} caches this model's MLA attention as full K and V per head "
                        f"({spec.layers[0].head_size} wide); 0.7.1+ cache the compressed latent, "
                        f"{spec.mla.latent_size} values per token and layer")
    quantization = applied_quantization(scenario, spec)
    tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
    drafter = _proposer(scenario, spec, settings, quantization)
    if drafter is not None:
        warnings.append(f"speculative decoding ({drafter.method}, {drafter.num_speculative_tokens} tokens per step, "
                        f"acceptance {drafter.acceptance_rate:g}): {drafter.note}")
        if _draft_outside_profile(drafter, settings, rules) and drafter.weights_bytes:
            warnings.append(f"vLLM {rules.version}'s V0 engine profiles the target model alone: the proposer's "
                            f"{drafter.weights_bytes / GIB:.2f} GiB of weights are not taken out of the KV cache's "
                            "budget and must fit in the (1 - gpu_memory_utilization) headroom")
    kernel = attention_kernel_blocks(rules, device=settings.device)
    # NOTE: the proposer's attention layers join the target's pool (one block holds the pages of both).
    cached = with_proposer_layers(spec, drafter.layers if drafter else ())
    draft_tokens = drafter.num_speculative_tokens if drafter else 0
    cached = with_speculative_state(cached, speculative_state_tokens(rules, draft_tokens))
    layout = plan_kv_cache(cached, block_size=settings.block_size, kv_cache_dtype=settings.kv_cache_dtype,
                           model_dtype_bytes=settings.dtype_bytes, tensor_parallel_size=tp,
                           pipeline_parallel_size=pp, hybrid_kv_cache_manager=rules.hybrid_kv_cache_manager,
                           kernel_block_alignment=kernel.smallest,
                           sliding_window_block_size=sliding_window_block_size(rules, kernel, settings.block_size),
                           mamba_state_blocks=mamba_state_blocks_per_request(
                               rules, prefix_caching_given=scenario.enable_prefix_caching,
                               num_speculative_tokens=draft_tokens, mamba2=has_mamba2_mixer(spec)))
    fixed = _deployment_terms(spec, rules, gpu, quantization, settings.device, settings.dtype_bytes, tp, pp,
                              settings.interconnect, settings.enforce_eager, scenario.data_parallel_size,
                              scenario.enable_expert_parallel, scenario.cpu_offload_gb, scenario.all2all_backend,
                              eplb_redundant_experts(scenario, spec, eplb_runs=True))
    if fixed.offload_warning:
        warnings.append(fixed.offload_warning)
    return _Deployment(choices=choices, drafter=drafter, layout=layout, fixed=fixed,
                       kernel_refusal=kernel_refusal(rules, kernel, layout, uses_mla=spec.mla is not None),
                       layers_on_stage=tuple(sum(g.layers_per_stage[stage] for g in layout.groups)
                                             for stage in range(pp)),
                       warnings=tuple(warnings),
                       capture_ceiling=max_capture_size(rules, gpu.compute_capability if gpu else None))


def _draft_outside_profile(drafter: Proposer | None, settings: ResolvedSettings, rules: VersionRules) -> bool:
    """V0's SpecDecodeWorker profiles the scorer alone (its weights_memory, its forward pass); the draft loaded
    beside it is outside the profile (vLLM 0.9.2 spec_decode_worker.py, worker/worker.py, utils memory_profiling;
    the same in the 0.7.3 and 0.8.5 wheels; 0.6 read its peak from the device, draft included)."""
    return drafter is not None and settings.engine == "v0" and rules.version.at_least(7)


# NOTE: the fields a stage's budget reads, once per estimate from the instances' __dict__ (see _deployment_fields).
_budget_settings = itemgetter("tensor_parallel_size", "pipeline_parallel_size", "device", "max_num_seqs",
                              "max_num_batched_tokens", "memory_formula", "dtype_bytes", "enforce_eager",
                              "gpu_memory_bytes", "gpu_memory_utilization")
_budget_fields = itemgetter("kv_cache_memory_bytes", "other_processes_memory_gib", "overhead_adjustment_gib",
                            "data_parallel_size", "enable_expert_parallel", "cudagraph_capture_sizes")


def _stage_budgets(scenario: Scenario, spec: ModelSpec, rules: VersionRules, settings: ResolvedSettings,
                   deployment: _Deployment, lora: LoraSlots | None) -> list[MemoryBudget]:
    fixed, drafter = deployment.fixed, deployment.drafter
    tp, pp, device, max_num_seqs, max_num_batched_tokens, formula, dtype_bytes, enforce_eager, total_bytes, util = \
        _budget_settings(settings.__dict__)
    kv_given, other_processes_gib, adjustment_gib, dp, ep, capture_sizes = _budget_fields(scenario.__dict__)
    if device == "cpu" and kv_given is None:
        kv_given = CPU_DEFAULT_KV_CACHE_BYTES
    other_processes = int(other_processes_gib * GIB)
    adjustment = int(adjustment_gib * GIB)
    # NOTE: the all-to-all buffers are sized for the batch budget, a point field (not in the cached deployment terms)
    all2all = all2all_bytes(scenario, spec, rules, settings)
    v0_drafter = _draft_outside_profile(drafter, settings, rules)
    # NOTE: from 0.27 vLLM prints what stays allocated after profiling as consumed memory ("weights + non-torch"),
    # so the fused-MoE workspace its WorkspaceManager keeps moves from the peak to that term (same total).
    consumed_workspace = kept_moe_workspace_bytes(
        spec, max_num_batched_tokens=max_num_batched_tokens, activation_dtype_bytes=dtype_bytes,
        tensor_parallel_size=tp, data_parallel_size=dp, enable_expert_parallel=ep,
        rules=rules) if formula in ("v1_free_drop", "v1_extensible") else 0
    # NOTE: Model Runner V2 builds its sampler, and with it the penalty tensors, on the last PP stage only.
    penalty_state = (penalty_state_bytes(max_num_seqs=max_num_seqs, vocab_size=spec.vocab_size)
                     if fixed.model_runner_v2 and rules.version.at_least(PENALTY_STATE_FROM_MINOR) else 0)
    budgets = []
    for stage, stage_weights in enumerate(fixed.resident_bytes_per_stage):
        layers_on_stage = deployment.layers_on_stage[stage]
        budgets.append(memory_budget(
            formula=formula,
            total_bytes=total_bytes,
            gpu_memory_utilization=util,
            other_processes_bytes=other_processes,
            context_bytes=fixed.context_bytes,
            weights_bytes=stage_weights,
            activation_bytes=activation_peak_bytes(
                spec, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                activation_dtype_bytes=dtype_bytes, tensor_parallel_size=tp, is_last_stage=stage == pp - 1,
                rules=rules, data_parallel_size=dp, enable_expert_parallel=ep,
                drafter_forward_bytes=drafter_activation_bytes(
                    drafter, spec, max_num_batched_tokens=max_num_batched_tokens,
                    activation_dtype_bytes=dtype_bytes) if drafter and not v0_drafter else 0,
                flashinfer_sampler=flashinfer_sampler(rules.version, scenario.install, engine=rules.engine,
                                                      device=device))
            + (lora.shrink_buffer_bytes if lora else 0) - consumed_workspace,
            non_torch_bytes=fixed.non_torch_bytes + all2all + consumed_workspace + free_drop_persistent_bytes(
                rules, device=device, enforce_eager=enforce_eager,
                penalty_state=penalty_state if stage == pp - 1 else 0),
            cudagraph_bytes=cudagraph_bytes(spec, layers_on_rank=layers_on_stage, max_num_seqs=max_num_seqs,
                                            enforce_eager=enforce_eager, rules=rules, device=device,
                                            max_num_batched_tokens=max_num_batched_tokens,
                                            capture_sizes=capture_sizes, ceiling=deployment.capture_ceiling),
            subtracts_cudagraph=fixed.subtracts_cudagraph and formula != "v1_extensible",
            cudagraph_note=fixed.cudagraph_note,
            has_startup_check=rules.has_startup_free_memory_check,
            platform=device,
            kv_cache_memory_bytes=kv_given,
            adjustment_bytes=adjustment,
            free_pool_bytes=fixed.free_pool_bytes,
            lora_bytes=lora.bytes_per_stage[stage] if lora else 0,
            draft_weights_bytes=drafter.weights_bytes if drafter and stage == pp - 1 else 0,
            charges_other_processes=rules.non_torch_counts_other_processes,
            draft_profiled=not v0_drafter,
            lora_profiled=lora.in_kv_budget if lora else True,
        ))
    return budgets


def _usable_for_one_request(rules: VersionRules, layout: KvCacheLayout, budgets: list[MemoryBudget],
                            override: int | None) -> tuple[int, ...]:
    """Memory the one-request check compares against, per stage (§2.6; the null block excluded in 0.30+)."""
    null_block = rules.one_request_check_excludes_null_block
    usable = []
    for budget, per_block in zip(budgets, layout.bytes_per_block_per_stage):
        pool = override * per_block if override else max(budget.kv_cache_bytes, 0)
        usable.append(pool - (per_block if null_block else 0))
    return tuple(usable)


def _fit_error(rules: VersionRules, settings: ResolvedSettings, layout: KvCacheLayout, budgets: list[MemoryBudget],
               usable: tuple[int, ...], request_blocks: tuple[int, ...], max_fitting: int) -> str | None:
    """vLLM's own start-up error for this scenario, or None when it starts."""
    for budget in budgets:
        if budget.startup_error:
            return budget.startup_error
    for budget in budgets:
        if oom := load_oom_error(budget, settings.device):
            return oom
    if any([b.kv_cache_bytes <= 0 for b in budgets]):
        return no_memory_error(rules.version, _hint(settings))
    for stage, available in enumerate(usable):
        needed = stage_bytes_for_blocks(layout, request_blocks, stage)
        if needed > available:
            return rules.max_len_error_template.format(
                max_model_len=settings.max_model_len, needed_gib=needed / GIB, available_gib=available / GIB,
                estimated=max_fitting, hint=_hint(settings),
                kv_cache_tokens=max(available, 0) // max(1, layout.bytes_per_block) * layout.block_size)
    return None


def _mamba_slots_error(rules: VersionRules, settings: ResolvedSettings, layout: KvCacheLayout,
                       num_blocks: int) -> str | None:
    refusal = mamba_slots_refusal(rules, layout, device=settings.device, enforce_eager=settings.enforce_eager,
                                  max_num_seqs=settings.max_num_seqs, num_blocks=num_blocks)
    if refusal is None:
        return None
    fix = mamba_slots_fix(layout, max_num_seqs=settings.max_num_seqs, num_blocks=num_blocks)
    return f"vLLM {rules.version} sizes the cache, then refuses to capture CUDA graphs: {refusal} {fix}"


def _refusal_error(rules: VersionRules, settings: ResolvedSettings, refusal: str) -> str:
    """Why the version does not run the deployment, ending with vLLM's own error."""
    why = "".join(f"{part} " for part in (settings.engine_fallback, settings.refusal_context) if part)
    return f"vLLM {rules.version} does not run this on {settings.device.upper()}. {why}vLLM raises: {refusal}"


def _hint(settings: ResolvedSettings) -> str:
    if settings.memory_formula != "v1_extensible":
        return ESTIMATE_HINT
    if settings.gpu_memory_utilization >= 1.0:
        return EXTENSIBLE_HINT_UTIL_ONE
    return EXTENSIBLE_HINT_UTIL_BELOW_ONE.format(util=settings.gpu_memory_utilization)

