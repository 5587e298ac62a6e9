"""How fast vLLM's decode attention kernel reads the KV cache, by the bytes it reads, from AIConfigurator's measured
vLLM kernel tables.

AIConfigurator (PyPI ``aiconfigurator``) ships ``generation_attention_perf.parquet`` per GPU system: vLLM's decode
attention (FlashAttention 2 / 3, FlashInfer's TRT-LLM kernel on Blackwell) timed on the card for a batch of requests
at a context length, with query and KV heads per GPU and a head size. A decode step reads every request's K and V
once, ``batch x (context + 1) x 2 x KV heads x head size x 2`` bytes (BF16 cache), and its time is close to
``fixed + bytes / (bandwidth x share)``: a kernel that reads 40 MB reaches ~0.3 of an H100's HBM bandwidth, one that
reads 1.5 GB ~0.9. Over BF16 caches of head size 128 without a sliding window, this gives per GPU the median share
of the HBM bandwidth by the bytes a call reads, and a straight-line fit (fixed latency, share) to the calls that read
128 MB or more (smaller ones come from the L2 cache in part).

It is not a dependency of the planner: install ``aiconfigurator`` into a separate environment with pandas and run
``/path/to/venv/bin/python benchmarks/decode_attention_rates.py``; it writes
``benchmarks/data/decode_attention_rates.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.aiconfigurator_tables import latest_table, tables_from_command_line, write_reduction  # noqa: E402

OUT = ROOT / "benchmarks" / "data" / "decode_attention_rates.json"
# AIConfigurator system -> (the planner's GPU family, the datasheet HBM bandwidth in GB/s, calculator/data/gpus.json)
SYSTEMS = {"a100_sxm": ("ampere", 2039), "l40s": ("ada", 864), "h100_sxm": ("hopper", 3350),
           "h200_sxm": ("hopper", 4800), "b200_sxm": ("blackwell", 8000)}
HEAD_SIZE = 128
MIN_READ_BYTES = 128e6  # above the largest L2 cache of the tables' GPUs (L40S 96 MB, B200 126 MB)
BINS = 13  # 1 MB to 8 GB
MIN_BIN_ROWS = 10


def measured(data: Path) -> dict[str, dict]:
    """family -> the median share of the HBM bandwidth that one decode-attention call reaches, by the bytes it reads
    (bins of a factor of 2 from 1 MB), and the fixed latency plus share of a straight-line fit to the calls that read
    ``MIN_READ_BYTES`` or more."""
    import numpy as np
    import pandas as pd

    out: dict[str, dict] = {}
    for system, (family, bandwidth_gb_s) in SYSTEMS.items():
        path = latest_table(data, system, "attention", "generation_attention_perf.parquet")
        if path is None:
            continue
        table = pd.read_parquet(path)
        table = table[table.kv_cache_dtype.isin(["bfloat16", "float16"]) & (table.head_dim == HEAD_SIZE)]
        if "window_size" in table:
            table = table[table.window_size == 0]
        kv_bytes = (table.batch_size * (table.step + 1) * 2 * table.num_key_value_heads * table.head_dim * 2).to_numpy()
        seconds = table.latency.to_numpy() * 1e-3
        share = kv_bytes / seconds / (bandwidth_gb_s * 1e9)
        curve = []
        for low in (2.0 ** k * 1e6 for k in range(BINS)):
            inside = (kv_bytes >= low) & (kv_bytes < 2 * low)
            if inside.sum() >= MIN_BIN_ROWS:
                curve.append([round(float(np.sqrt(2) * low)), round(float(np.median(share[inside])), 3)])
        # NOTE: reads that fit in the L2 cache (L40S: 96 MB) come back faster than HBM; above it they stream. Weighted
        # by 1 / time, the fit minimises the relative error.
        large = kv_bytes >= MIN_READ_BYTES
        design = np.vstack([np.ones(large.sum()), kv_bytes[large] / (bandwidth_gb_s * 1e9)]).T / seconds[large, None]
        (fixed_s, per_peak_s), *_ = np.linalg.lstsq(design, np.ones(large.sum()), rcond=None)
        out.setdefault(family, {"systems": []})["systems"].append({
            "system": system, "vllm": path.parent.name, "kernels": sorted(set(table.kernel_source)),
            "rows": int(len(seconds)), "share_by_read_bytes": curve,
            "large_reads_fixed_us": round(float(fixed_s) * 1e6, 1),
            "large_reads_bandwidth_share": round(float(1 / per_peak_s), 2)})
    return out


def main(argv: list[str] | None = None) -> int:
    data, aiconfigurator = tables_from_command_line(argv, __doc__.splitlines()[0])
    table = write_reduction(OUT, aiconfigurator, "families", measured(data))
    for family, row in table["families"].items():
        for system in row["systems"]:
            curve = " ".join(f"{b / 1e6:.0f}MB:{v:.2f}" for b, v in system["share_by_read_bytes"])
            print(f"{family:10} {system['system']:9} {curve}; from 128 MB {system['large_reads_fixed_us']} us + "
                  f"{system['large_reads_bandwidth_share']} of HBM")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
