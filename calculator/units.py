"""Byte units. vLLM prints GiB (2**30) even where its log says "GB"; we do the same and say so."""

from __future__ import annotations

import re
from decimal import Decimal

GIB = 1 << 30
MIB = 1 << 20
KIB = 1 << 10


def round_up(value: int, multiple: int) -> int:
    """``value`` rounded up to a whole number of ``multiple`` (allocation granularities, kernel tiles)."""
    return -(-value // multiple) * multiple


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


def plural(count: int, word: str) -> str:
    """"1 replica", "3 replicas", "1,200 users": a count with its noun."""
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def format_ms(value_ms: float) -> str:
    """A latency as people read it: "12.3 ms", "1.25 s" from a second up, "unbounded" for a saturated queue."""
    if value_ms == float("inf"):
        return "unbounded"
    return f"{value_ms / 1e3:,.2f} s" if value_ms >= 1000 else f"{value_ms:,.1f} ms"

def parse_size(text: str | int) -> int:
    """Parse a size the way ``vllm serve`` does (``vllm.utils.argparse_utils.human_readable_int``).

    A plain integer (``8589934592``), a decimal number with a decimal suffix ``k/m/g/t`` (x1000**n, ``25.6k``), or a
    whole number with a binary suffix ``K/M/G/T`` (x1024**n, ``8G``). Like vLLM, no exponents (``1e30``), no
    ``inf``, no decimals with a binary suffix; unlike vLLM, a clear ``ValueError`` instead of int()'s.
    """
    if isinstance(text, bool) or not isinstance(text, int | str):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, int):
        value = text
    else:
        raw = text.strip()
        match = None
        if len(raw) <= _MAX_SIZE_CHARS:
            match = _PLAIN_RE.fullmatch(raw) or _SUFFIXED_RE.fullmatch(raw)
        if match is None:
            raise ValueError(f"not a size: {_shown(raw)} (an integer, optionally with k/m/g/t for x1000 or K/M/G/T "
                             "for x1024, e.g. 8G)")
        number, suffix = match.group(1), match.group(2) or ""
        if suffix in _BINARY:
            if "." in number:
                raise ValueError(f"decimals are not allowed with binary suffixes like {suffix} ({raw!r}); did you "
                                 f"mean {number}{suffix.lower()}?")
            value = int(number.replace("_", "")) * _BINARY[suffix]
        else:
            value = int(Decimal(number.replace("_", "")) * _DECIMAL[suffix])
    if value < 0:
        raise ValueError(f"size must not be negative: {text!r}")
    return value


_DECIMAL = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4}
_BINARY = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
# NOTE: vLLM falls back to int(), which also reads "+5", "-5" and "1_000"; a suffix takes digits and one point.
_PLAIN_RE = re.compile(r"([+-]?\d+(?:_\d+)*)()")
_SUFFIXED_RE = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_MAX_SIZE_CHARS = 40


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")
