"""What a GPU costs per hour: bundled on-demand defaults with their source and date, overridable by the user.

The defaults come from several providers and tiers (each entry names its own), which is the best guess per GPU but
lets price sources decide a ranking. A price set is one provider's one tier for every GPU it rents
(``PRICE_SETS``); chosen instead of the defaults, GPUs it does not list have no price until the user gives one.

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


class PriceSet(BaseModel):
    """One provider's one tier: prices that differ only where the hardware does."""

    model_config = ConfigDict(frozen=True)
    name: str
    about: str
    prices: dict[str, GpuPrice]


@cache
def _bundled() -> dict:
    return json.loads((resources.files("calculator") / "data" / PRICES_FILE).read_text(encoding="utf-8"))


@cache
def default_prices() -> dict[str, GpuPrice]:
    """The bundled price list, by catalog key."""
    return {key: GpuPrice(**entry) for key, entry in _bundled()["prices"].items()}


@cache
def price_sets() -> dict[str, PriceSet]:
    """The bundled consistent price sets, by key (e.g. ``runpod-serverless-active``)."""
    return {key: PriceSet(name=entry["name"], about=entry["about"],
                          prices={gpu: GpuPrice(**price) for gpu, price in entry["prices"].items()})
            for key, entry in _bundled()["price_sets"].items()}


def price_set(key: str | None) -> PriceSet | None:
    """The price set named ``key`` (None for None: the mixed default list); ``InvalidInput`` for an unknown one."""
    if key is None:
        return None
    if key not in price_sets():
        raise InvalidInput(f"no price set {key!r}; choose one of {', '.join(price_sets())} (or none: the mixed "
                           "default list)")
    return price_sets()[key]


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


def price_table(overrides: Mapping[str, GpuPrice] | None = None, set_key: str | None = None) -> dict[str, GpuPrice]:
    """Defaults (or the price set ``set_key``), then the environment's file, then ``overrides`` (e.g. prices edited
    in the dashboard)."""
    chosen = price_set(set_key)
    base = default_prices() if chosen is None else chosen.prices
    return {**base, **env_price_overrides(), **(overrides or {})}


def gpu_price(gpu: GpuSpec | None, prices: Mapping[str, GpuPrice] | None = None) -> GpuPrice | None:
    """The hourly price of one ``gpu`` (None for a custom GPU without a user price)."""
    if gpu is None:
        return None
    table = prices if prices is not None else price_table()
    return table.get(gpu.key) or (table.get(gpu.variant_of) if gpu.variant_of else None)
