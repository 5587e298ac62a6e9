"""What a GPU costs per hour: bundled on-demand defaults with their source and date, overridable by the user.

``VLLM_PLANNER_GPU_PRICES`` names a JSON file of ``{"catalog key or GPU name": dollars per GPU-hour}`` (or
``{"key": {"usd_per_gpu_hour": 2.1}}``); its prices replace the defaults. A malformed file is an error, not a
silent fallback.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ..errors import InvalidInput, UnknownGpu
from ..gpus import GpuSpec, find_gpu

PRICES_ENV = "VLLM_PLANNER_GPU_PRICES"
PRICES_FILE = "gpu_prices.json"
HOURS_PER_MONTH = 730  # 365 x 24 / 12


class GpuPrice(BaseModel):
    """On-demand dollars for one GPU for one hour, and where the figure comes from."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    usd_per_gpu_hour: float = Field(gt=0, lt=10_000)
    as_of: str = ""
    source: str = Field(min_length=1)


@cache
def default_prices() -> dict[str, GpuPrice]:
    """The bundled price list, by catalog key."""
    text = (resources.files("calculator") / "data" / PRICES_FILE).read_text(encoding="utf-8")
    return {key: GpuPrice(**entry) for key, entry in json.loads(text)["prices"].items()}


def parse_price_overrides(data: object, origin: str) -> dict[str, GpuPrice]:
    """``{"GPU name or key": price}`` -> prices by catalog key; ``InvalidInput`` names the first bad entry."""
    if not isinstance(data, Mapping):
        raise InvalidInput(f"{origin}: expected a JSON object of GPU name -> dollars per GPU-hour")
    prices: dict[str, GpuPrice] = {}
    for name, value in data.items():
        if isinstance(value, Mapping):
            value = value.get("usd_per_gpu_hour")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise InvalidInput(f"{origin}: price of {name!r} must be a positive number of dollars per GPU-hour")
        try:
            key = find_gpu(str(name)).key
        except UnknownGpu as exc:
            raise InvalidInput(f"{origin}: {exc}") from exc
        prices[key] = GpuPrice(usd_per_gpu_hour=float(value), source=f"user price ({origin})")
    return prices


def env_price_overrides() -> dict[str, GpuPrice]:
    """Prices from the file ``$VLLM_PLANNER_GPU_PRICES`` names (none when it is unset)."""
    path = os.environ.get(PRICES_ENV, "").strip()
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{PRICES_ENV}={path}: cannot read a JSON price file ({exc.__class__.__name__})") from exc
    return parse_price_overrides(data, f"{PRICES_ENV}={path}")


def price_table(overrides: Mapping[str, GpuPrice] | None = None) -> dict[str, GpuPrice]:
    """Defaults, then the environment's file, then ``overrides`` (e.g. prices edited in the dashboard)."""
    return {**default_prices(), **env_price_overrides(), **(overrides or {})}


def gpu_price(gpu: GpuSpec | None, prices: Mapping[str, GpuPrice] | None = None) -> GpuPrice | None:
    """The hourly price of one ``gpu`` (None for a custom GPU without a user price)."""
    if gpu is None:
        return None
    table = prices if prices is not None else price_table()
    return table.get(gpu.key) or (table.get(gpu.variant_of) if gpu.variant_of else None)
