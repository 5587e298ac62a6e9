"""EPLB, vLLM's expert-parallel load balancer (``--enable-eplb``): redundant experts and the balancer's state.

Read from each release's wheel (``vllm/config/parallel.py`` ``ParallelConfig``/``EPLBConfig``,
``vllm/distributed/eplb/eplb_state.py`` ``EplbState.build``/``add_model``,
``vllm/distributed/eplb/rebalance_execute.py``, ``model_executor/layers/fused_moe/layer.py``):

* The checkpoint's E routed experts become ``E + R`` physical experts (``R = num_redundant_experts``:
  ``--num-redundant-experts`` 0.9-0.11, ``--eplb-config '{"num_redundant_experts": R}'`` 0.10+), split evenly over the
  ``tp x dp`` EP ranks: each rank holds ``(E + R) / ep_size`` whole experts in every MoE layer, and vLLM refuses a
  count that does not divide (FusedMoE: "EPLB currently only supports even distribution of experts across ranks").
* ``EplbState.add_model`` runs inside ``load_model``'s ``DeviceMemoryProfiler`` (``gpu_model_runner.py``), so what it
  allocates is counted with the weights, before the KV cache is sized. Per MoE layer L and logical expert:
  ``physical_to_logical_map`` (L, E + R) int64, ``logical_to_physical_map`` (L, E, slots) int64 with slots = R + 1
  before 0.10 and from 0.34 (without elastic EP), ``MAX_EXPERT_REDUNDANCY + 1 = 1024`` in 0.10-0.33,
  ``logical_replica_count`` (L, E) int64,
  ``expert_load_pass`` (L, P) int32 and ``expert_load_window`` (window_size = 1000, L, P) int32 with P the rank's
  own physical experts before 0.10 and all of them since, and (0.31+, see ``_LAST_LOAD_FROM``)
  ``last_expert_load`` (L, E) int64.
* The rearrangement's buffer, one MoE layer's local expert weights (``[torch.empty_like(w) for w in
  expert_weights[0]]``): 0.12+ make it in ``add_model`` and keep it (counted with the weights); 0.9-0.11 make it in
  ``rearrange_expert_weights_inplace`` each time, first in the profiling run's dummy rearrangement (freed after it).
  0.34's opt-in ``symm_mem`` communicator owns a buffer of the same layer instead.
* The communicators add no GPU memory of their own: NIXL (the default on CUDA where installed) registers the
  buffer and weights that exist, gloo stages in CPU memory (0.32 ``eplb_communicator.py``).
"""

from __future__ import annotations

from ..model.spec import ModelSpec
from ..model.weights import WeightsBreakdown
from .kv_cache import pp_layer_ranges
from .vllm_versions import VllmVersion

DEFAULT_WINDOW_SIZE = 1000  # EPLBConfig.window_size (0.10+), ParallelConfig.eplb_window_size (0.9)
MAX_EXPERT_REDUNDANCY = 1023  # eplb_state.py add_model, 0.10+: logical_to_physical_map has 1,024 slots per expert
FIRST_EPLB = VllmVersion.parse("0.9.0")  # --enable-eplb is in 0.9.2's parser, not 0.8.5's
_WHOLE_MAP_FROM = 10  # 0.10: 1,024 slots per logical expert, load statistics over every physical expert
_RESIDENT_BUFFER_FROM = 12  # 0.12: add_model keeps the rearrangement's one-layer buffer (0.11.2 makes it per rearrange)
_COUNTS_IN_ERROR_FROM = 24  # 0.24: the even-distribution error names the counts (0.23.0 does not)
_PCP_IN_ERROR_FROM = 26  # 0.26: "EPLB requires tensor, prefill-context, or data parallelism" (0.25.1: older text)
_LAST_LOAD_FROM = 31  # last_expert_load (L, E) int64: in 0.31.0's EplbModelState, not in 0.30.0's
_FITTED_SLOTS_FROM = 34  # 0.34: R + 1 slots per logical expert again, unless elastic EP (which the plan does not model)


# NOTE: MoE models whose vLLM code takes no part in EPLB in every release read (0.28, 0.30, 0.32, 0.33, 0.34 wheels):
# their class implements no ``MixtureOfExperts`` (so ``get_mixture_of_experts_model`` finds nothing and
# ``EplbState.add_model`` never runs) and their FusedMoE layers get no redundant experts (gpt_oss.py passes 0,
# minimax_m2.py, granitemoe.py, granitemoehybrid.py and qwen2_moe.py never read the EPLB config). For them
# ``--enable-eplb`` passes vLLM's flag checks and changes no memory.
NOT_IN_EPLB = frozenset({"GptOssForCausalLM", "MiniMaxM2ForCausalLM", "GraniteMoeForCausalLM",
                         "GraniteMoeHybridForCausalLM", "Qwen2MoeForCausalLM"})


# NOTE: Gemma 4 implements MixtureOfExperts (so EplbState.add_model builds the state) but sets
# num_redundant_experts = 0 and gives its FusedMoE layers neither redundant experts nor EPLB (gemma4.py, 0.28-0.34).
STATE_WITHOUT_REDUNDANT_EXPERTS = frozenset({"Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"})


def takes_part_in_eplb(spec: ModelSpec) -> bool:
    """Whether vLLM builds the balancer's state for this model (an MoE not in ``NOT_IN_EPLB``)."""
    return spec.moe is not None and spec.architecture not in NOT_IN_EPLB


def places_redundant_experts(spec: ModelSpec) -> bool:
    """Whether vLLM gives this model's experts EPLB's redundant copies (and refuses an uneven split of them)."""
    return takes_part_in_eplb(spec) and spec.architecture not in STATE_WITHOUT_REDUNDANT_EXPERTS


def partial_eplb_warning(spec: ModelSpec, num_redundant_experts: int) -> str | None:
    """What --enable-eplb does not do for this model, where it does less than for DeepSeek-V3 (None: all of it)."""
    if not takes_part_in_eplb(spec):
        return (f"{spec.architecture} takes no part in vLLM's EPLB (its model code implements no MixtureOfExperts "
                "and places no redundant experts): --enable-eplb passes vLLM's checks and changes no memory, so "
                "the plan has no redundant experts and no balancer state")
    if num_redundant_experts and not places_redundant_experts(spec):
        return (f"{spec.architecture} places no redundant experts (vLLM's model code sets num_redundant_experts to "
                f"0): the {num_redundant_experts} asked for take no memory; the balancer's state is counted")
    return None


def eplb_config_error(version: VllmVersion, *, enable_eplb: bool, num_redundant_experts: int,
                      enable_expert_parallel: bool, tensor_parallel_size: int, data_parallel_size: int) -> str | None:
    """What vLLM's ParallelConfig refuses about the EPLB flags, in its words (None: accepted)."""
    tp, dp, r = tensor_parallel_size, data_parallel_size, num_redundant_experts
    if not enable_eplb:
        if not r:
            return None
        if version.at_least(_WHOLE_MAP_FROM):
            return (f"num_redundant_experts is set to {r} but EPLB is not enabled. Either enable EPLB or unset "
                    "num_redundant_experts.")
        return f"num_redundant_experts should be used with EPLB.{r}."  # NOTE: vLLM 0.9's text, missing space and all
    if version < FIRST_EPLB:
        return f"vLLM {version} has no expert-parallel load balancer (--enable-eplb came in 0.9)"
    if r > MAX_EXPERT_REDUNDANCY:
        return f"num_redundant_experts {r} must be less than or equal to {MAX_EXPERT_REDUNDANCY}"
    if not enable_expert_parallel:
        if version.at_least(_WHOLE_MAP_FROM):
            return "enable_expert_parallel must be True to use EPLB."
        # NOTE: 0.9 does not check; its FusedMoE only places (and balances) experts where EP is on.
        return "EPLB balances experts over expert-parallel ranks: add --enable-expert-parallel (0.10+ refuse it so)"
    if tp * dp <= 1:
        if version.at_least(_PCP_IN_ERROR_FROM):
            return (f"EPLB requires tensor, prefill-context, or data parallelism, but got TP={tp}, PCP=1, DP={dp}.")
        if version.at_least(_WHOLE_MAP_FROM):
            return (f"EPLB requires tensor_parallel_size or data_parallel_size to be greater than 1, but got "
                    f"TP={tp},DP={dp}.")
    return None


def eplb_layout_error(version: VllmVersion, *, num_experts: int, num_redundant_experts: int,
                      ep_size: int) -> str | None:
    """FusedMoE's refusal when the physical experts do not split evenly over the EP ranks (None: they do)."""
    physical = num_experts + num_redundant_experts
    if ep_size <= 1 or physical % ep_size == 0:
        return None
    text = "EPLB currently only supports even distribution of experts across ranks."
    if version.at_least(_COUNTS_IN_ERROR_FROM):
        text += f" Got {physical} experts and {ep_size} EP ranks."
    return text


def eplb_state_bytes(version: VllmVersion, *, num_moe_layers: int, num_experts: int, num_redundant_experts: int,
                     ep_size: int, window_size: int = DEFAULT_WINDOW_SIZE) -> int:
    """Bytes of the tensors ``EplbState`` allocates on each rank for ``num_moe_layers`` MoE layers (not the
    rearrangement buffer: ``rearrangement_buffer_is_resident``)."""
    layers, logical = num_moe_layers, num_experts
    physical = num_experts + num_redundant_experts
    whole = version.at_least(_WHOLE_MAP_FROM)
    slots = (MAX_EXPERT_REDUNDANCY + 1 if whole and not version.at_least(_FITTED_SLOTS_FROM)
             else num_redundant_experts + 1)
    counted = physical if whole else physical // ep_size  # the experts the load statistics keep a column for
    int64, int32 = 8, 4
    total = layers * physical * int64  # physical_to_logical_map
    total += layers * logical * slots * int64  # logical_to_physical_map
    total += layers * logical * int64  # logical_replica_count
    total += layers * counted * int32  # expert_load_pass
    total += window_size * layers * counted * int32  # expert_load_window
    if version.at_least(_LAST_LOAD_FROM):
        total += layers * logical * int64  # last_expert_load
    return total


def rearrangement_buffer_is_resident(version: VllmVersion) -> bool:
    """Whether the one-layer expert buffer stays allocated from model loading on (0.12+)."""
    return version.at_least(_RESIDENT_BUFFER_FROM)


def with_eplb_state(weights: WeightsBreakdown, placed: ModelSpec, version: VllmVersion, *, ep_size: int,
                    num_redundant_experts: int, window_size: int = DEFAULT_WINDOW_SIZE) -> WeightsBreakdown:
    """``weights`` (of ``placed``, the spec with its experts already placed per rank) with EPLB's memory added to
    each stage as the role ``"eplb"``: the state of the stage's MoE layers and, where it stays (0.12+), the
    rearrangement buffer, one MoE layer's local experts. vLLM counts both in "Model loading took", so they are
    weights to the KV cache's budget."""
    if placed.moe is None:
        return weights
    moe_ranges = {t.layers for t in placed.weights if t.role == "expert" and t.loaded and t.layers}
    stages = pp_layer_ranges(placed.num_hidden_layers, weights.pipeline_parallel_size)
    by_role = []
    for stage, (first, last) in enumerate(stages):
        roles = dict(weights.per_stage_bytes_by_role[stage])
        layers = sum(max(0, min(high, last) - max(low, first)) for low, high in moe_ranges)  # type: ignore[misc]
        if layers:
            # NOTE: a PP stage's model counts only its own MoE layers (the others are PPMissingLayer).
            extra = eplb_state_bytes(version, num_moe_layers=layers, num_experts=placed.moe.num_experts,
                                     num_redundant_experts=num_redundant_experts, ep_size=ep_size,
                                     window_size=window_size)
            if rearrangement_buffer_is_resident(version):
                extra += roles.get("expert", 0) // layers  # every MoE layer holds the same local experts
            roles["eplb"] = extra
        by_role.append(roles)
    per_stage = tuple(sum(roles.values()) for roles in by_role)
    return weights.model_copy(update={"per_stage_bytes": per_stage, "per_stage_bytes_by_role": tuple(by_role),
                                      "total_bytes": sum(per_stage) * weights.tensor_parallel_size})


def rearrangement_buffer_bytes(weights: WeightsBreakdown, placed: ModelSpec) -> int:
    """One MoE layer's local expert bytes on the busiest stage (the buffer the rearrangement fills)."""
    moe_layers = {t.layers for t in placed.weights if t.role == "expert" and t.loaded and t.layers}
    stages = pp_layer_ranges(placed.num_hidden_layers, weights.pipeline_parallel_size)
    first, last = stages[weights.busiest_stage]
    layers = sum(max(0, min(high, last) - max(low, first)) for low, high in moe_layers)  # type: ignore[misc]
    return weights.busiest_stage_bytes_by_role.get("expert", 0) // layers if layers else 0


def transient_buffer_warning(version: VllmVersion, weights: WeightsBreakdown, placed: ModelSpec) -> str | None:
    """0.9-0.11 make the rearrangement's buffer per rearrangement: the profiling run's dummy one makes it once,
    after the forward pass has freed its activations, so vLLM's peak holds the larger of the two."""
    if rearrangement_buffer_is_resident(version):
        return None
    buffer = rearrangement_buffer_bytes(weights, placed)
    return (f"vLLM {version}'s EPLB allocates a buffer of one MoE layer's experts ({buffer / 2**30:.2f} GiB) in each "
            "rearrangement, first in the profiling run, after its forward pass: where it is larger than the "
            "activation peak, vLLM's profile (and the KV cache's budget) holds it instead; the plan leaves it out")
