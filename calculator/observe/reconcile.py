"""What a server's own pool says about the settings it runs (pure): the dtype that reconciles the estimate with it.

A vLLM server reports ``kv_cache_memory_bytes`` and ``num_gpu_blocks`` (``vllm:cache_config_info``); unless
``--num-gpu-blocks-override`` fixed the count, ``num_gpu_blocks = kv_cache_memory_bytes // bytes_per_block``, so the
server's bytes per block lie in ``(memory / (blocks + 1), memory / blocks]``. An estimate whose bytes per block fall
outside assumed another layout; re-estimating with each ``--dtype`` finds the one the server runs. ``/server_info``
(VLLM_SERVER_DEV_MODE) may say the dtype outright. A whole factor between predicted and actual blocks is a setting
(dtype, KV dtype, tensor parallel), never overhead: it is named even when no dtype reconciles it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..engine.estimate import Estimate, estimate
from ..engine.settings import DTYPE_BYTES
from ..errors import CalculatorError
from ..model.spec import ModelSpec
from .metrics import EngineMetrics

CANDIDATE_DTYPES = ("float32", "bfloat16", "float16")
WHOLE_FACTOR_TOLERANCE = 0.02  # 16,384 vs 8,192 is 2; 8,200 vs 8,192 is overhead, not a factor


class Reconciliation(BaseModel):
    """Why the estimate and the server disagree by a setting, and the ``--dtype`` that reconciles them (if any)."""

    model_config = ConfigDict(frozen=True)
    proposed_dtype: str | None
    factor: int | None  # predicted / actual blocks (or its inverse) when that is a whole number >= 2
    message: str


def server_bytes_per_block(engine: EngineMetrics) -> tuple[float, float] | None:
    """(above, at most): the bytes per block the server's pool implies; None when an override fixed the count."""
    memory, blocks = engine.config_int("kv_cache_memory_bytes"), engine.config_int("num_gpu_blocks")
    if not memory or not blocks or engine.config_int("num_gpu_blocks_override") is not None:
        return None
    return memory / (blocks + 1), memory / blocks


def stated_dtype(server_info: dict[str, Any] | None) -> str | None:
    """The dtype ``/server_info`` gives for the model (``"torch.float32"`` or ``"float32"``), if any."""
    config = (server_info or {}).get("vllm_config") if isinstance(server_info, dict) else None
    model = config.get("model_config") if isinstance(config, dict) else None
    value = model.get("dtype") if isinstance(model, dict) else None
    name = str(value).removeprefix("torch.") if value else None
    return name if name in DTYPE_BYTES else None


def whole_factor(predicted: float, actual: float) -> int | None:
    if predicted <= 0 or actual <= 0:
        return None
    ratio = max(predicted, actual) / min(predicted, actual)
    nearest = round(ratio)
    return nearest if nearest >= 2 and abs(ratio - nearest) <= WHOLE_FACTOR_TOLERANCE * nearest else None


def reconcile(result: Estimate, spec: ModelSpec, engine: EngineMetrics,
              server_info: dict[str, Any] | None = None) -> Reconciliation | None:
    """None when the estimate's layout fits what the server reveals; else what differs and the knob."""
    blocks = engine.config_int("num_gpu_blocks")
    if not blocks:
        return None
    current, predicted = result.settings.dtype, result.layout.bytes_per_block
    assumed = f"--dtype {current}" + (" (auto, from the model config)" if result.scenario.dtype == "auto" else "")
    span = server_bytes_per_block(engine)
    factor = whole_factor(result.capacity.num_gpu_blocks, blocks)
    proposal, evidence = None, ""
    if (said := stated_dtype(server_info)) is not None and said != current:
        proposal, evidence = said, f"/server_info says the model runs in {said}"
    elif span is not None and not span[0] < predicted <= span[1]:
        memory = engine.config_int("kv_cache_memory_bytes") or 0
        evidence = (f"the server's kv_cache_memory_bytes {memory:,} over its num_gpu_blocks {blocks:,} is "
                    f"{span[1]:,.0f} bytes per block, where {assumed} gives {predicted:,}")
        proposal = next((dtype for dtype in CANDIDATE_DTYPES if dtype != current
                         and _fits(result, spec, dtype, lambda e: span[0] < e.layout.bytes_per_block <= span[1])),
                        None)
    elif factor is not None:
        evidence = (f"the estimate for {assumed} predicts {result.capacity.num_gpu_blocks:,} blocks, the server "
                    f"has {blocks:,}")
        proposal = next((dtype for dtype in CANDIDATE_DTYPES if dtype != current
                         and _fits(result, spec, dtype, lambda e: e.capacity.num_gpu_blocks == blocks)), None)
    if proposal is not None:
        return Reconciliation(proposed_dtype=proposal, factor=factor, message=(
            f"The estimate assumes {assumed}; {evidence}. --dtype {proposal} reconciles them: the server runs "
            f"{proposal} (the sidebar's \"dtype the server runs\")."))
    if factor is None and not evidence:
        return _under_override(result, spec, engine)
    kv = result.scenario.kv_cache_dtype
    why = (f"predicted and actual blocks differ by a factor of {factor} ({result.capacity.num_gpu_blocks:,} vs "
           f"{blocks:,})" if factor else evidence)
    return Reconciliation(proposed_dtype=None, factor=factor, message=(
        f"{why[0].upper()}{why[1:]}: a setting, not overhead. No --dtype reconciles it; check --kv-cache-dtype "
        f"({kv} assumed), --tensor-parallel-size ({result.scenario.tensor_parallel_size} assumed) and the model "
        "config the estimate uses."))


def _fits(result: Estimate, spec: ModelSpec, dtype: str, agrees: Callable[[Estimate], bool]) -> bool:
    """Whether the estimate re-run with ``--dtype dtype`` agrees with the server."""
    try:
        return agrees(estimate(result.scenario.replace(dtype=dtype), spec))
    except CalculatorError:
        return False


def _under_override(result: Estimate, spec: ModelSpec, engine: EngineMetrics) -> Reconciliation | None:
    """With ``--num-gpu-blocks-override`` the pool's blocks match whatever dtype is assumed, so they cannot reveal it;
    what the server still reveals is its model's config.json (a local folder it names in /v1/models, or the config
    chosen). Where ``--dtype auto`` narrows the config's dtype, the knob is named with both pool sizes: a server
    started with ``--dtype <config's>`` (as the planner's CPU recipe starts one) holds that many more bytes."""
    override = engine.config_int("num_gpu_blocks_override")
    stored = spec.config_dtype
    if override is None or result.scenario.dtype != "auto" or stored not in CANDIDATE_DTYPES \
            or stored == result.settings.dtype:
        return None
    try:
        other = estimate(result.scenario.replace(dtype=stored), spec)
    except CalculatorError:
        return None
    if other.layout.bytes_per_block == result.layout.bytes_per_block:
        return None  # the KV cache dtype is set apart from the model's: the dtype changes no block
    blocks = engine.config_int("num_gpu_blocks") or override
    return Reconciliation(proposed_dtype=stored, factor=None, message=(
        f"--num-gpu-blocks-override {override:,} fixes this server's pool at {blocks:,} blocks whatever the dtype, "
        f"so its blocks cannot say which it runs. Its model's config.json stores {stored}, which --dtype auto runs "
        f"in {result.settings.dtype} here ({result.layout.bytes_per_block:,} bytes a block). A server started with "
        f"--dtype {stored} holds {other.layout.bytes_per_block:,} bytes a block, "
        f"{blocks * other.layout.bytes_per_block:,} in all: if it was (the planner's CPU recipe starts it so), choose "
        f"{stored} as the dtype the server runs."))
