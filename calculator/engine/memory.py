"""The memory budget of one GPU: the ONE place where "what is left for the KV cache" is computed (§1).

Pure: every term arrives in bytes; the version's rules decide which terms count and where CUDA graphs live.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, computed_field

from ..computed import computed
from ..units import GIB
from .vllm_versions import MemoryFormula, VllmVersion

# 0.34 extensible KV cache (vllm/v1/worker/extensible_kv_cache.py, §1.7)
EXTENSIBLE_MARGIN_FLOOR_BYTES = {"cuda": 1 << 30, "rocm": 3 << 30}
EXTENSIBLE_MARGIN_FRACTION = 0.75

FREE_MEMORY_ERROR = (
    "Free memory on device {device} ({free:.2f}/{total:.2f} GiB) on startup is less than desired GPU memory "
    "utilization ({util}, {requested:.2f} GiB). Decrease GPU memory utilization or reduce GPU memory used by "
    "other processes.")
NO_MEMORY_ERROR = ("No available memory for the cache blocks. {hint} See "
                   "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
# vllm/v1/core/kv_cache_utils.py ``check_enough_kv_cache_memory`` (V0: worker.py ``raise_if_cache_size_invalid``):
# the bare sentence up to 0.12, the docs link from 0.13, the hint about the CPU backend from 0.22.
_PLAIN_NO_MEMORY = ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                    "initializing the engine.")
_DOCS_LINK = " See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."


# Weights past the device's memory never reach the KV sizing: torch's caching allocator raises while the checkpoint
# loads (``torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...``; ROCm's torch says HIP).
LOAD_OOM_ERROR = ("{vendor} out of memory while loading the weights (torch.OutOfMemoryError): {weights:.2f} GiB per GPU "
                  "do not fit in the GPU's {total:.2f} GiB, so vLLM stops before it sizes the KV cache.")


def load_oom_error(budget: MemoryBudget, device: str) -> str | None:
    """The allocator's error where the weights alone exceed the GPU, else None."""
    if device == "cpu" or budget.weights_bytes <= budget.total_bytes:
        return None
    return LOAD_OOM_ERROR.format(vendor="HIP" if device == "rocm" else "CUDA", weights=budget.weights_bytes / GIB,
                                 total=budget.total_bytes / GIB)


def no_memory_error(version: VllmVersion, hint: str) -> str:
    """vLLM's "No available memory for the cache blocks" error as ``version`` words it."""
    if not version.at_least(13):
        return _PLAIN_NO_MEMORY
    if not version.at_least(22):
        return _PLAIN_NO_MEMORY + _DOCS_LINK
    return NO_MEMORY_ERROR.format(hint=hint)


class MemorySegment(BaseModel):
    """One slice of a GPU's memory in the stacked chart."""

    model_config = ConfigDict(frozen=True)
    key: str
    label: str
    bytes: int
    inside_budget: bool  # inside total x gpu_memory_utilization


class MemoryBudget(BaseModel):
    """Where one GPU's memory goes, and how much of it the KV cache gets."""

    model_config = ConfigDict(frozen=True)
    formula: MemoryFormula | str
    total_bytes: int
    requested_bytes: int  # ceil(total x gpu_memory_utilization)
    gpu_memory_utilization: float
    other_processes_bytes: int
    context_bytes: int
    weights_bytes: int
    lora_bytes: int = 0  # --enable-lora: adapter slots and punica buffers, allocated with the weights
    lora_in_budget: bool = True  # False where the version's profile misses them (V0 0.6.5-0.7.x)
    draft_weights_bytes: int = 0  # speculative decoding: the draft model's or heads' weights
    draft_in_budget: bool = True  # False under V0, which profiles the target alone (the draft is outside)
    activation_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    cudagraph_in_budget: bool  # subtracted from the KV budget (0.20+) or living in the headroom (older)
    cudagraph_note: str = ""  # why (``cudagraph_budget.py``): version, platform, model runner, eager
    extensible_reserve_bytes: int = 0  # 0.34: margin + transient headroom kept outside the KV cache
    adjustment_bytes: int = 0  # calibration: overhead the model missed on a real server (may be negative)
    kv_cache_bytes: int  # memory handed to the KV cache (may be negative: it does not fit)
    kv_cache_memory_bytes_given: bool = False
    startup_error: str | None = None
    free_pool_bytes: int | None = None  # where free memory is read from when it is the host's (None: total_bytes)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def free_at_start_bytes(self) -> int:
        """The free memory vLLM reads at its first snapshot, which must cover ``requested_bytes``."""
        return free_at_start(self.total_bytes, self.free_pool_bytes, self.other_processes_bytes, self.context_bytes)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def unused_bytes(self) -> int:
        """What nobody uses: the rest of the (1 - utilization) headroom after context, graphs and others."""
        return self.total_bytes - sum(s.bytes for s in self.segments() if s.key != "unused")

    def segments(self) -> tuple[MemorySegment, ...]:
        """The stack from the bottom: weights first, free headroom last; sums to ``total_bytes`` when it fits."""
        kv = max(self.kv_cache_bytes, 0)
        parts = [
            MemorySegment(key="weights", label="Weights", bytes=self.weights_bytes, inside_budget=True),
            MemorySegment(key="lora", label="LoRA adapter slots", bytes=self.lora_bytes,
                          inside_budget=self.lora_in_budget),
            MemorySegment(key="draft", label="Speculative proposer weights", bytes=self.draft_weights_bytes,
                          inside_budget=self.draft_in_budget),
            MemorySegment(key="activation", label="Activation peak", bytes=self.activation_bytes, inside_budget=True),
            MemorySegment(key="non_torch", label="Non-torch (NCCL, cuBLAS)", bytes=self.non_torch_bytes,
                          inside_budget=True),
            MemorySegment(key="cudagraph", label="CUDA graphs", bytes=self.cudagraph_bytes,
                          inside_budget=self.cudagraph_in_budget),
            MemorySegment(key="extensible_reserve", label="Extensible-cache margin", bytes=self.extensible_reserve_bytes,
                          inside_budget=True),
            MemorySegment(key="calibration", label="Calibrated extra overhead", bytes=max(self.adjustment_bytes, 0),
                          inside_budget=True),
            MemorySegment(key="kv_cache", label="KV cache", bytes=kv, inside_budget=True),
            MemorySegment(key="context", label="CUDA context", bytes=self.context_bytes, inside_budget=False),
            MemorySegment(key="other", label="Other processes", bytes=self.other_processes_bytes,
                          inside_budget=False),
        ]
        used = sum(p.bytes for p in parts)
        parts.append(MemorySegment(key="unused", label="Unused headroom (1 - util)",
                                   bytes=max(self.total_bytes - used, 0), inside_budget=False))
        return tuple(p for p in parts if p.bytes > 0 or p.key in ("weights", "kv_cache"))


def free_at_start(total_bytes: int, free_pool_bytes: int | None, other_processes_bytes: int,
                  context_bytes: int) -> int:
    """Free memory at vLLM's first snapshot: the pool it reads (the GPU's, or the host's) less what is in use."""
    return (free_pool_bytes or total_bytes) - other_processes_bytes - context_bytes


def requested_bytes(total_bytes: int, gpu_memory_utilization: float) -> int:
    """``math.ceil(total * util)`` as ``request_memory`` computes it."""
    return math.ceil(total_bytes * gpu_memory_utilization)


def memory_budget(*, formula: MemoryFormula, total_bytes: int, gpu_memory_utilization: float,
                  other_processes_bytes: int, context_bytes: int, weights_bytes: int, activation_bytes: int,
                  non_torch_bytes: int, cudagraph_bytes: int, subtracts_cudagraph: bool,
                  has_startup_check: bool, platform: str, kv_cache_memory_bytes: int | None = None,
                  adjustment_bytes: int = 0, device_label: str = "cuda:0", cudagraph_note: str = "",
                  free_pool_bytes: int | None = None, lora_bytes: int = 0,
                  draft_weights_bytes: int = 0, charges_other_processes: bool = False,
                  draft_profiled: bool = True, lora_profiled: bool = True) -> MemoryBudget:
    """The KV-cache budget of one GPU under the version's formula (§1.2-1.9).

    ``free_pool_bytes``: the host pool vLLM reads free memory from (``calculator.engine.free_memory``), else total.
    ``lora_bytes`` and ``draft_weights_bytes`` are allocated while the model loads, so they count as weights do;
    ``draft_profiled=False`` (V0): the profile's weights are the target's alone, so the draft's are not subtracted.
    ``lora_profiled=False`` (V0 0.6.5-0.7.x): the slots are allocated after the weights were measured, so they
    are not subtracted.
    ``charges_other_processes``: the version's non-torch figure includes other processes' memory (0.6.4.x).
    """
    loaded = weights_bytes + (lora_bytes if lora_profiled else 0) + (draft_weights_bytes if draft_profiled else 0)
    requested = requested_bytes(total_bytes, gpu_memory_utilization)
    free_at_start_bytes = free_at_start(total_bytes, free_pool_bytes, other_processes_bytes, context_bytes)
    startup_error = None
    extensible = formula == "v1_extensible"
    if has_startup_check and not extensible and kv_cache_memory_bytes is None and free_at_start_bytes < requested:
        startup_error = FREE_MEMORY_ERROR.format(device=device_label, free=free_at_start_bytes / GIB,
                                                 total=total_bytes / GIB, util=gpu_memory_utilization,
                                                 requested=requested / GIB)
    reserve = 0
    cudagraph_in_budget = subtracts_cudagraph
    if kv_cache_memory_bytes is not None:
        kv = kv_cache_memory_bytes
        cudagraph_in_budget = False
    elif extensible:
        # §1.7: sized after warm-up and graph capture from what is really free, minus a margin and the peak.
        cudagraph_in_budget = True
        non_kv_used = loaded + non_torch_bytes + cudagraph_bytes
        headroom = free_at_start_bytes - non_kv_used
        margin = max(EXTENSIBLE_MARGIN_FLOOR_BYTES.get(platform, 1 << 30),
                     int(activation_bytes * EXTENSIBLE_MARGIN_FRACTION))
        kv = min(requested - non_kv_used, headroom - margin) - activation_bytes - adjustment_bytes
        reserve = max(0, min(margin, headroom - max(kv, 0) - activation_bytes - max(adjustment_bytes, 0)))
    else:
        non_kv = loaded + activation_bytes + non_torch_bytes
        if formula == "v1_global":
            # NOTE: V1 0.7-0.9.0 charged every process's memory (and the context) against total x util.
            non_kv += other_processes_bytes + context_bytes
        elif charges_other_processes:
            # NOTE: 0.6.4 counts its own CUDA context there too; what it prints for all of it moves from run to run
            # (0.47 and 0.15 GiB on one GTX 1080 on one day: file-gtx1080-phi15-v064post1, -opt125m-v064post1), so
            # no constant stands for it beyond the era's non-torch term.
            non_kv += other_processes_bytes
        kv = requested - non_kv - (cudagraph_bytes if subtracts_cudagraph else 0) - adjustment_bytes
    return computed(MemoryBudget, {"formula": formula, "total_bytes": total_bytes, "requested_bytes": requested,
                                   "gpu_memory_utilization": gpu_memory_utilization,
                                   "other_processes_bytes": other_processes_bytes, "context_bytes": context_bytes,
                                   "weights_bytes": weights_bytes, "lora_bytes": lora_bytes,
                                   "lora_in_budget": lora_profiled, "draft_weights_bytes": draft_weights_bytes,
                                   "draft_in_budget": draft_profiled, "activation_bytes": activation_bytes,
                                   "non_torch_bytes": non_torch_bytes, "cudagraph_bytes": cudagraph_bytes,
                                   "cudagraph_in_budget": cudagraph_in_budget, "cudagraph_note": cudagraph_note,
                                   "extensible_reserve_bytes": reserve,
                                   "adjustment_bytes": adjustment_bytes if kv_cache_memory_bytes is None else 0,
                                   "kv_cache_bytes": kv,
                                   "kv_cache_memory_bytes_given": kv_cache_memory_bytes is not None,
                                   "startup_error": startup_error, "free_pool_bytes": free_pool_bytes})
