"""How long the outputs of a benchmark run are when they stop at EOS instead of at a fixed count.

With ``--ignore-eos`` (or a harness that forces the count) every request generates exactly its output length, and a
closed loop moves in lockstep waves: C requests start together and end together. Without it, each request stops at
its own EOS, so the lengths spread out, the clients' slots free at different steps and the waves de-synchronise:
a new prompt then shares its step with decodes, not with C - 1 other prompts. The records give only the mean length,
so the spread is an assumption: exponential lengths with that mean (ShareGPT replies and sampled chat completions
have a long tail; the same assumption as the ShareGPT replays), capped by what the run allows.
"""

from __future__ import annotations

import math


def eos_output_lengths(mean_tokens: float, count: int, *, cap_tokens: int | None = None) -> tuple[int, ...]:
    """``count`` output lengths of an exponential distribution with mean ``mean_tokens`` (its quantiles at
    (i + 0.5) / count, so the same load every time), rescaled so that after the cap their mean is ``mean_tokens``,
    in an order that spreads long and short ones over the run (stride through the sorted quantiles)."""
    if count < 1 or mean_tokens < 1:
        raise ValueError("need at least one request and a mean of at least one token")
    quantiles = [-math.log(1 - (i + 0.5) / count) for i in range(count)]
    cap = float(cap_tokens) if cap_tokens else math.inf
    if cap < mean_tokens:
        raise ValueError(f"a cap of {cap_tokens} tokens is below the mean of {mean_tokens:g}")
    scale = _scale_for_mean(quantiles, mean_tokens, cap)
    lengths = [max(1, round(min(q * scale, cap))) for q in quantiles]
    stride = _coprime_stride(count)
    return tuple(lengths[(i * stride) % count] for i in range(count))


def _coprime_stride(count: int) -> int:
    """A stride near 0.618 x count that visits every index once (coprime with count)."""
    stride = max(1, round(count * 0.618))
    while math.gcd(stride, count) != 1:
        stride += 1
    return stride


_BISECTION_ROUNDS = 100


def _scale_for_mean(quantiles: list[float], mean_tokens: float, cap: float) -> float:
    """The scale whose capped quantiles average ``mean_tokens`` (their capped mean never falls as the scale grows,
    so bisection finds it); a cap equal to the mean puts every output at the cap."""
    def capped_mean(scale: float) -> float:
        return sum(min(q * scale, cap) for q in quantiles) / len(quantiles)

    if cap <= mean_tokens:
        return cap / min(quantiles)
    low, high = 0.0, mean_tokens
    while capped_mean(high) < mean_tokens:
        low, high = high, high * 2
    for _ in range(_BISECTION_ROUNDS):
        middle = (low + high) / 2
        low, high = (middle, high) if capped_mean(middle) < mean_tokens else (low, middle)
    return high
