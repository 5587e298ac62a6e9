"""What ``vllm serve`` refuses, or warns about, in the flags it is given, per version.

Read from vLLM's own validation: ``SchedulerConfig.verify_max_model_len`` and the KV-cache allocation, which fails with CUDA out of memory
when ``--kv-cache-memory-bytes`` or ``--num-gpu-blocks-override`` asks for more than the device has left (vLLM
bounds neither flag). Errors are vLLM start-up failures; warnings are what vLLM logs or what we cannot model.
The ``--block-size`` choices and the attention kernels' block sizes are the version's: ``engine_support``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..scenario import Scenario
from ..units import GIB
from .memory import MemoryBudget
from .vllm_versions import Device, VersionRules, version_notice


def flag_problems(scenario: Scenario, rules: VersionRules, device: Device, *, uses_mla: bool, max_num_seqs: int,
                  max_num_batched_tokens: int, max_model_len: int) -> tuple[str | None, list[str]]:
    """vLLM's start-up error for these flags (or None) and the warnings it would log."""
    warnings: list[str] = []
    if (notice := version_notice(rules.version)) is not None:
        warnings.append(notice)
    error = None
    if max_num_batched_tokens < max_num_seqs:
        error = (f"max_num_batched_tokens ({max_num_batched_tokens}) must be greater than or equal to "
                 f"max_num_seqs ({max_num_seqs}).")
    if scenario.max_num_batched_tokens and max_num_batched_tokens < max_model_len and rules.engine == "v0":
        warnings.append(f"max_num_batched_tokens ({max_num_batched_tokens}) is smaller than max_model_len "
                        f"({max_model_len}): vLLM {rules.version} refuses this unless chunked prefill is enabled")
    if uses_mla and mla_forces_chunked_prefill_off(rules):
        if max_num_batched_tokens < max_model_len:
            warnings.append(
                f"vLLM {rules.version} turns chunked prefill off for MLA models ('MLA is enabled; forcing chunked "
                f"prefill and prefix caching to be disabled.') but keeps max_num_batched_tokens at "
                f"{max_num_batched_tokens:,}, which then caps every prompt: a longer one finishes at once with no "
                f"output ('Input prompt (N tokens) is too long and exceeds limit of {max_num_batched_tokens}'). "
                f"Set --max-model-len 32768 or less, or --max-num-batched-tokens {max_model_len}, to serve longer "
                "prompts")
        if scenario.enable_prefix_caching:
            warnings.append(f"vLLM {rules.version} turns prefix caching off for MLA models ('MLA is enabled; "
                            "forcing chunked prefill and prefix caching to be disabled.'): "
                            "--enable-prefix-caching has no effect")
    if max_num_batched_tokens > max_num_seqs * max_model_len:
        warnings.append(f"max_num_batched_tokens ({max_num_batched_tokens}) exceeds max_num_seqs * max_model_len "
                        f"({max_num_seqs * max_model_len}). This may lead to unexpected behavior.")
    return error, warnings


def oversized_kv_pool_error(scenario: Scenario, budgets: Sequence[MemoryBudget],
                            bytes_per_block_per_stage: Sequence[int]) -> str | None:
    """The CUDA out-of-memory a KV pool fixed by flag causes when it exceeds what the device has left."""
    if scenario.kv_cache_memory_bytes is None and scenario.num_gpu_blocks_override is None:
        return None
    for budget, per_block in zip(budgets, bytes_per_block_per_stage):
        if budget.total_bytes <= 0:
            return None  # the CPU backend: no device memory to exceed
        pool = (scenario.num_gpu_blocks_override * per_block if scenario.num_gpu_blocks_override
                else scenario.kv_cache_memory_bytes or 0)
        left = (budget.total_bytes - budget.other_processes_bytes - budget.context_bytes - budget.weights_bytes
                - budget.non_torch_bytes)
        if pool > left:
            flag = ("--num-gpu-blocks-override" if scenario.num_gpu_blocks_override else "--kv-cache-memory-bytes")
            return (f"{flag} asks for a {pool / GIB:,.2f} GiB KV cache, but only {max(left, 0) / GIB:,.2f} GiB of "
                    f"the {budget.total_bytes / GIB:,.2f} GiB GPU are left after the weights and runtime: vLLM "
                    "fails allocating it (CUDA out of memory)")
    return None


def mla_forces_chunked_prefill_off(rules: VersionRules) -> bool:
    """vLLM 0.7.1-0.7.3 ``VllmConfig.__post_init__`` (config.py): a model that runs MLA gets chunked prefill and prefix
    caching turned off after the scheduler sized its batch, on every platform; 0.8.0 keeps this for non-GPU platforms
    only ("MLA is enabled on a non-GPU platform")."""
    return rules.version.at_least(7, 1) and not rules.version.at_least(8)
