"""The rates vLLM's linear layers reach on a card, from AIConfigurator's measured kernel database: the bandwidth its
decode GEMMs stream weights at, and how much faster its FP8 and FP4 GEMMs run than its BF16 ones at prefill shapes (the
catalog's ``measured_bandwidth_gb_s``, ``measured_fp8_speedup`` and ``measured_fp4_speedup``, which the speed
model divides by).

A decode step's GEMMs have one row per running request, so each reads its whole weight matrix for a few FLOPs: its
time is a fixed latency plus the matrix's bytes over the rate the card streams them at. That rate is not the
datasheet's: AIConfigurator's tables of vLLM's BF16 linear layer at M <= 4 rows, over every matrix of at least
64 MB (so the fixed latency is a small part), give it as the slope of latency against bytes (least squares:
latency = fixed + bytes / rate), 0.79-0.89 of the datasheet by card (B200 0.79, A100 0.82, H200 0.84, H100 0.89).

A prefill step's GEMMs run at the card's matmul ceiling (the best matmul measured on it, e.g. Stas Bekman's MAMF
finder) times an efficiency, and that holds for BF16: vLLM's BF16 linear layer at M, N and K of at least 2,048 has a
median rate within 3 % of the MAMF ceiling on an H100 and an A100. FP8 does not: the best FP8 matmul on an H100 runs
1.77x its BF16 one, vLLM's per-tensor FP8 linear layer (CUTLASS scaled_mm) at the same shapes 1.15x the BF16 layer.
Nor FP4: a B200's datasheet gives its FP4 tensor cores 4x its BF16 ones, vLLM's NVFP4 linear layer (FlashInfer) runs
2.17x the BF16 layer. The FP8 and FP4 ceilings are therefore the BF16 ceiling times those measured speedups, where
the card was timed (``measured_fp8_speedup``, ``measured_fp4_speedup``).

It is not a dependency of the planner: install ``aiconfigurator`` into a separate environment with pandas and run
``/path/to/venv/bin/python benchmarks/linear_layer_rates.py``; it writes ``benchmarks/data/linear_layer_rates.json``,
which a test keeps equal to the catalog.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.aiconfigurator_tables import latest_table, tables_from_command_line, write_reduction  # noqa: E402

OUT = ROOT / "benchmarks" / "data" / "linear_layer_rates.json"
# AIConfigurator system -> the catalog's GPU key (calculator/data/gpus.json). The H200 NVL (a lower power limit) and
# the GB200 / GB300 (not in the catalog) are left out.
SYSTEMS = {"a100_sxm": "a100-sxm-80gb", "h100_sxm": "h100-sxm-80gb", "h200_sxm": "h200-141gb",
           "b200_sxm": "b200-180gb", "b300_sxm": "b300-288gb", "l40s": "l40s-48gb",
           "rtx_pro_6000_server": "rtx-pro-6000-blackwell"}
DECODE_ROWS = 4
MIN_MATRIX_BYTES = 64e6
BF16_BYTES = 2
PREFILL_MIN_DIM = 2048
# The table's dtype -> the catalog's field: per-tensor FP8 (CUTLASS scaled_mm), the FP8 path of
# calculator/speed/hardware.py, and NVFP4 (FlashInfer's CUTLASS / CuTe DSL kernels), its FP4 path.
SPEEDUPS = {"fp8": "measured_fp8_speedup", "nvfp4": "measured_fp4_speedup"}


def _streaming(gemm) -> dict:
    """The BF16 decode GEMMs' streaming rate (GB/s), their fixed latency (us) and the rows they rest on."""
    import numpy as np

    decode = gemm[(gemm.gemm_dtype == "bfloat16") & (gemm.m <= DECODE_ROWS)]
    decode = decode.assign(bytes=decode.n * decode.k * float(BF16_BYTES))
    decode = decode[decode.bytes >= MIN_MATRIX_BYTES]
    design = np.c_[np.ones(len(decode)), decode.bytes.to_numpy()]
    (fixed_s, seconds_per_byte), *_ = np.linalg.lstsq(design, decode.latency.to_numpy() * 1e-3, rcond=None)
    return {"measured_bandwidth_gb_s": round(1.0 / seconds_per_byte / 1e9), "fixed_us": round(fixed_s * 1e6, 1),
            "decode_rows": len(decode)}


def _speedups(gemm) -> dict:
    """Each low-precision path's median linear-layer rate over the median BF16 one at prefill shapes (M, N, K >=
    2,048), for the paths the card was timed on."""
    prefill = gemm[(gemm.m >= PREFILL_MIN_DIM) & (gemm.n >= PREFILL_MIN_DIM) & (gemm.k >= PREFILL_MIN_DIM)]
    prefill = prefill.assign(tflops=2 * prefill.m * prefill.n * prefill.k / (prefill.latency * 1e-3) / 1e12)
    rates = prefill.groupby("gemm_dtype").tflops.median().to_dict()
    out = {}
    for dtype, field in SPEEDUPS.items():
        if dtype in rates:
            out.update({field: round(rates[dtype] / rates["bfloat16"], 2), "bf16_tflops": round(rates["bfloat16"]),
                        f"{dtype}_tflops": round(rates[dtype]),
                        f"{dtype}_prefill_rows": int((prefill.gemm_dtype == dtype).sum())})
    return out


def linear_layer_rates(data: Path) -> dict[str, dict]:
    """Catalog GPU key -> its streaming rate and FP8 and FP4 speedups, with what they rest on."""
    import pandas as pd

    out = {}
    for system, key in SYSTEMS.items():
        gemm_file = latest_table(data, system, "gemm", "gemm_perf.parquet")
        if gemm_file is None:
            continue
        gemm = pd.read_parquet(gemm_file)
        kernels = ", ".join(sorted(set(gemm[gemm.gemm_dtype.isin(["bfloat16", *SPEEDUPS])].kernel_source)))
        out[key] = {**_streaming(gemm), **_speedups(gemm),
                    "table": f"{system} vLLM {gemm_file.parent.name}: {kernels}"}
    return out


def main(argv: list[str] | None = None) -> int:
    data, aiconfigurator = tables_from_command_line(argv, __doc__.splitlines()[0])
    table = write_reduction(OUT, aiconfigurator, "rates", linear_layer_rates(data))
    for key, row in table["rates"].items():
        speedup = ", ".join(f"{dtype.upper()} {row[field]:.2f}x BF16" for dtype, field in SPEEDUPS.items()
                            if field in row) or "no FP8 or FP4 table"
        print(f"{key:24} {row['measured_bandwidth_gb_s']:6} GB/s  fixed {row['fixed_us']:5.1f} us  {speedup}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
