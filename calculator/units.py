"""Byte units. vLLM prints GiB (2**30) even where its log says "GB"; we do the same and say so."""

from __future__ import annotations

GIB = 1 << 30
MIB = 1 << 20
KIB = 1 << 10


def gib(num_bytes: float) -> float:
    """Bytes as GiB, e.g. ``gib(85_899_345_920) == 80.0``."""
    return num_bytes / GIB


def gib_to_bytes(value_gib: float) -> int:
    """GiB as whole bytes, rounded down like a driver's integer byte counts."""
    return int(value_gib * GIB)


def format_bytes(num_bytes: float) -> str:
    """Human form with binary units: ``format_bytes(131072) == '128.0 KiB'``."""
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def parse_size(text: str | int) -> int:
    """Parse vLLM's size strings (``--kv-cache-memory-bytes 8G``): plain bytes or K/M/G/T, binary or decimal.

    vLLM (``vllm.utils.argparse_utils.human_readable_int``) reads a lower-case ``k/m/g/t`` as 1000**n and
    an upper-case ``K/M/G/T`` as 1024**n; ``Ki/Mi/Gi`` are also binary.
    """
    if isinstance(text, int):
        return text
    raw = str(text).strip()
    if not raw:
        raise ValueError("empty size")
    suffixes = {"k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4,
                "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
    body = raw
    for binary in ("Ki", "Mi", "Gi", "Ti"):
        if raw.endswith(binary) or raw.endswith(binary.lower()):
            body, factor = raw[:-2], suffixes[binary[0].upper()]
            break
    else:
        if raw[-1] in suffixes:
            body, factor = raw[:-1], suffixes[raw[-1]]
        else:
            factor = 1
    try:
        value = float(body.replace("_", ""))
    except ValueError as exc:
        raise ValueError(f"not a size: {text!r} (use bytes or a K/M/G/T suffix, e.g. 8G)") from exc
    if value < 0:
        raise ValueError(f"size must not be negative: {text!r}")
    return int(value * factor)
