"""How long vLLM's MLA attention block takes at decode beyond streaming its bytes, from AIConfigurator's measured
vLLM kernel tables (calculator/speed/mla_kernels.py reads the result).

DeepSeek's multi-head latent attention runs about a dozen small kernels per layer at decode (the q_a and kv_a
projections and their norms, q_b, RoPE, the latent cache write, the W_UK and W_UV batched matmuls around the
FlashMLA / FlashInfer decode kernel, o_proj; with FP8 weights each linear layer also quantizes its input). At a
few requests the block reads ~40-200 MB of weights, which an H200 streams in 9-50 us, but it takes 90-170 us:
the rest is the kernels' latency, not their bytes.

AIConfigurator (PyPI ``aiconfigurator``) ships ``mla_generation_module_perf.parquet`` per GPU system: vLLM's own
``DeepseekV2MLAAttention`` module (DeepSeek-V3's shapes, 1-128 query heads per GPU) replayed in a CUDA graph at a
batch of decode requests and a context length. For each GPU family, linear-layer format (BF16, block FP8), heads per
GPU and batch of 1-64 requests, this takes the median over the family's cards and the contexts of 256-1,024 tokens
(a BF16 KV cache) of the measured latency minus the module's weight and KV bytes at the card's measured streaming
rate (the catalog's ``measured_bandwidth_gb_s``): the latency the speed model's bytes do not explain. Above 64
requests the block turns compute-bound, which the speed model prices from its FLOPs.

It is not a dependency of the planner: install ``aiconfigurator`` into a separate environment with pandas and run
``/path/to/venv/bin/python benchmarks/mla_decode_latency.py``; it writes ``benchmarks/data/mla_decode_latency.json``,
which a test keeps equal to the table in calculator/speed/mla_kernels.py.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.aiconfigurator_tables import latest_table, tables_from_command_line, write_reduction  # noqa: E402

OUT = ROOT / "benchmarks" / "data" / "mla_decode_latency.json"
# AIConfigurator system -> (the planner's GPU family, the catalog key whose measured streaming rate applies)
SYSTEMS = {"h100_sxm": ("hopper", "h100-sxm-80gb"), "h200_sxm": ("hopper", "h200-141gb"),
           "b200_sxm": ("blackwell", "b200-180gb")}
FORMATS = {"bfloat16": "bf16", "fp8_block": "fp8"}
BATCHES = (1, 4, 16, 64)
HEADS = (8, 16, 32, 64, 128)  # DeepSeek-V3's 128 query heads at TP 16 to 1
CONTEXTS = (256, 512, 1024)
# DeepSeek-V3's attention dimensions (the module the tables time): hidden size, q and kv LoRA ranks, the RoPE and
# no-RoPE parts of a query / key head, the value head.
HIDDEN, Q_LORA, KV_LORA, ROPE, NOPE, VALUE = 7168, 1536, 512, 64, 128, 128
BYTES = {"bfloat16": 2, "fp8_block": 1}
KV_BYTES = 2  # BF16 latent cache


def module_weight_params(heads: int) -> int:
    """Weights of one MLA block with ``heads`` query heads on the GPU (q_a and kv_a are replicated, not split)."""
    return (HIDDEN * Q_LORA + HIDDEN * (KV_LORA + ROPE) + Q_LORA * heads * (NOPE + ROPE)
            + KV_LORA * heads * (NOPE + VALUE) + heads * VALUE * HIDDEN)


def streaming_rates() -> dict[str, float]:
    """Catalog key -> bytes per second that vLLM's decode GEMMs stream at on the card."""
    by_key = {gpu["key"]: gpu for gpu in json.loads((ROOT / "calculator" / "data" / "gpus.json").read_text())["gpus"]}
    return {key: by_key[key]["measured_bandwidth_gb_s"] * 1e9 for _, key in SYSTEMS.values()}


def excess(data: Path) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """family -> format -> heads per GPU -> batch -> median microseconds beyond streaming the block's bytes."""
    import pandas as pd

    rates = streaming_rates()
    samples: dict[tuple[str, str, int, int], list[float]] = {}
    for system, (family, key) in SYSTEMS.items():
        path = latest_table(data, system, "mla", "mla_generation_module_perf.parquet")
        if path is None:
            continue
        table = pd.read_parquet(path)
        table = table[(table.kv_cache_dtype == "bfloat16") & table.gemm_type.isin(list(FORMATS))
                      & table.batch_size.isin(BATCHES) & table.step.isin(CONTEXTS)
                      & table.num_heads.isin(HEADS)]
        for row in table.itertuples():
            streamed = (module_weight_params(row.num_heads) * BYTES[row.gemm_type]
                        + row.batch_size * row.step * (KV_LORA + ROPE) * KV_BYTES)
            beyond_us = row.latency * 1e3 - streamed / rates[key] * 1e6
            samples.setdefault((family, FORMATS[row.gemm_type], row.num_heads, row.batch_size), []).append(beyond_us)
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for (family, form, heads, batch), values in sorted(samples.items()):
        out.setdefault(family, {}).setdefault(form, {}).setdefault(str(heads), {})[str(batch)] = round(
            statistics.median(values), 1)
    return out


def main(argv: list[str] | None = None) -> int:
    data, aiconfigurator = tables_from_command_line(argv, __doc__.splitlines()[0])
    table = write_reduction(OUT, aiconfigurator, "excess_us", excess(data))
    for family, formats in table["excess_us"].items():
        for form, by_heads in formats.items():
            for heads, by_batch in by_heads.items():
                print(f"{family:10} {form:5} {heads:>4} heads: " + " ".join(f"b{b} {us}" for b, us in by_batch.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
