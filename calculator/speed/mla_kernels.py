"""How long vLLM's MLA attention block takes at decode beyond streaming its bytes: a measured latency per layer.

DeepSeek's multi-head latent attention (DeepSeek-V2/V3/R1, Kimi K2, and with a sparse indexer beside it DeepSeek-V3.2
and GLM-5) runs about a dozen small kernels per layer at decode: the q_a and kv_a projections and their norms, q_b,
RoPE, the latent cache write, the W_UK and W_UV batched matmuls around the FlashMLA / FlashInfer decode kernel and
o_proj, and with FP8 weights an input quantization before each linear layer. At a few requests the block's weights
stream in ~10-50 us on a Hopper card, yet the block takes ~80-140 us: most of it is the kernels' latency.

The latency beyond the bytes is AIConfigurator's measurement of vLLM's own ``DeepseekV2MLAAttention`` module, replayed
in a CUDA graph (PyPI ``aiconfigurator`` 0.12.0: vLLM 0.24 on H100, H200 and B200), reduced by
``benchmarks/mla_decode_latency.py`` into ``benchmarks/data/mla_decode_latency.json``: per GPU family, linear-layer
format, query heads per GPU and batch of decode requests, the measured latency minus the block's weight and KV bytes
at the card's measured streaming rate. A test keeps this table equal to that file. The speed model adds what this
exceeds the full-graph kernel gaps it already counts for the block's kernels (step_time.py); above 64 requests the
block is compute-bound and its FLOPs price it. A family that was not timed (Ampere runs vLLM's Triton MLA kernel,
AMD its own) keeps the kernel-gap estimate alone; the sparse indexer of DeepSeek-V3.2 and GLM-5 is not in the figure.
"""

from __future__ import annotations

import bisect
import math
from typing import Literal

MlaFormat = Literal["bf16", "fp8"]

# family -> linear-layer format -> query heads per GPU -> microseconds beyond streaming, at 1, 4, 16 and 64 requests
MLA_BATCHES: tuple[int, ...] = (1, 4, 16, 64)
MLA_DECODE_EXCESS_US: dict[str, dict[MlaFormat, dict[int, tuple[float, ...]]]] = {
    "hopper": {
        "bf16": {8: (72.6, 78.4, 86.3, 96.4), 16: (72.8, 78.9, 88.2, 98.1), 32: (74.6, 81.8, 91.0, 103.5),
                 64: (78.5, 86.2, 98.2, 116.8), 128: (83.3, 91.8, 110.3, 120.8)},
        "fp8": {8: (77.9, 83.1, 94.2, 103.5), 16: (83.8, 89.4, 98.4, 105.6), 32: (85.4, 91.3, 102.6, 112.2),
                64: (88.6, 95.9, 108.4, 127.3), 128: (92.9, 102.1, 117.8, 135.4)},
    },
    "blackwell": {
        "bf16": {8: (27.0, 27.1, 28.1, 38.1), 16: (30.0, 31.9, 28.7, 44.6), 32: (35.1, 35.3, 38.1, 54.4),
                 64: (38.0, 39.1, 45.1, 61.5), 128: (37.6, 39.4, 53.1, 74.2)},
        "fp8": {8: (43.7, 43.1, 42.3, 45.9), 16: (45.2, 43.5, 43.5, 54.1), 32: (46.8, 46.6, 47.5, 66.7),
                64: (55.1, 53.8, 59.1, 78.4), 128: (59.8, 58.5, 76.2, 90.1)},
    },
}


def mla_decode_excess(gpu_family: str | None, linear_path: str, heads_per_gpu: int) -> tuple[float, ...] | None:
    """Seconds beyond streaming one MLA block takes at decode, at ``MLA_BATCHES`` requests, for ``heads_per_gpu``
    query heads (the timed count nearest in ratio) and the linear layers' compute path (FP8 takes the block-FP8
    figures, every other path the BF16 ones); None for a family nobody timed."""
    formats = MLA_DECODE_EXCESS_US.get(gpu_family or "")
    if formats is None:
        return None
    by_heads = formats["fp8" if linear_path == "fp8" else "bf16"]
    nearest = min(by_heads, key=lambda heads: abs(math.log(heads / max(1, heads_per_gpu))))
    return tuple(us * 1e-6 for us in by_heads[nearest])


def excess_at(excess: tuple[float, ...], requests: float) -> float:
    """The excess at ``requests`` decode rows: linear in log(requests) between the timed batches, held at the ends."""
    if requests <= MLA_BATCHES[0]:
        return excess[0]
    if requests >= MLA_BATCHES[-1]:
        return excess[-1]
    upper = bisect.bisect_right(MLA_BATCHES, requests)
    low, high = MLA_BATCHES[upper - 1], MLA_BATCHES[upper]
    weight = math.log(requests / low) / math.log(high / low)
    return excess[upper - 1] + weight * (excess[upper] - excess[upper - 1])
