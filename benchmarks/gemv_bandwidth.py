"""The memory bandwidth vLLM's linear layers stream weights at in a decode step, from AIConfigurator's measured kernel
database (the catalog's ``measured_bandwidth_gb_s``, which the speed model divides a step's bytes by).

A decode step's GEMMs have one row per running request, so each reads its whole weight matrix for a few FLOPs: its
time is a fixed latency plus the matrix's bytes over the rate the card streams them at. That rate is not the
datasheet's: AIConfigurator's tables of vLLM's BF16 linear layer at M <= 4 rows, over every matrix of at least
64 MB (so the fixed latency is a small part), give it as the slope of latency against bytes (least squares:
latency = fixed + bytes / rate), 0.79-0.89 of the datasheet by card (B200 0.79, A100 0.82, H200 0.84, H100 0.89).
One efficiency over datasheets cannot hold a B200 and an H100 at once; over these rates it is one figure.

It is not a dependency of the planner: install ``aiconfigurator`` into a separate environment with pandas and run
``/path/to/venv/bin/python benchmarks/gemv_bandwidth.py``; it writes ``benchmarks/data/gemv_bandwidth.json``, which
a test keeps equal to the catalog's ``measured_bandwidth_gb_s``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.aiconfigurator_tables import latest_table, tables_from_command_line  # noqa: E402

OUT = ROOT / "benchmarks" / "data" / "gemv_bandwidth.json"
# AIConfigurator system -> the catalog's GPU key (calculator/data/gpus.json). The H200 NVL (a lower power limit) and
# the GB200 / GB300 (not in the catalog) are left out.
SYSTEMS = {"a100_sxm": "a100-sxm-80gb", "h100_sxm": "h100-sxm-80gb", "h200_sxm": "h200-141gb",
           "b200_sxm": "b200-180gb", "b300_sxm": "b300-288gb", "l40s": "l40s-48gb",
           "rtx_pro_6000_server": "rtx-pro-6000-blackwell"}
DECODE_ROWS = 4
MIN_MATRIX_BYTES = 64e6
BF16_BYTES = 2


def streaming_rates(data: Path) -> dict[str, dict]:
    """Catalog GPU key -> the streaming rate (GB/s), the fixed latency (us) and the rows it rests on."""
    import numpy as np
    import pandas as pd

    out = {}
    for system, key in SYSTEMS.items():
        gemm_file = latest_table(data, system, "gemm", "gemm_perf.parquet")
        if gemm_file is None:
            continue
        gemm = pd.read_parquet(gemm_file)
        gemm = gemm[(gemm.gemm_dtype == "bfloat16") & (gemm.m <= DECODE_ROWS)]
        gemm = gemm.assign(bytes=gemm.n * gemm.k * float(BF16_BYTES))
        gemm = gemm[gemm.bytes >= MIN_MATRIX_BYTES]
        if gemm.empty:
            continue
        design = np.c_[np.ones(len(gemm)), gemm.bytes.to_numpy()]
        (fixed_s, seconds_per_byte), *_ = np.linalg.lstsq(design, gemm.latency.to_numpy() * 1e-3, rcond=None)
        out[key] = {"measured_bandwidth_gb_s": round(1.0 / seconds_per_byte / 1e9), "fixed_us": round(fixed_s * 1e6, 1),
                    "rows": len(gemm), "table": f"{system} vLLM {gemm_file.parent.name}: "
                    + ", ".join(sorted(set(gemm.kernel_source)))}
    return out


def main(argv: list[str] | None = None) -> int:
    data, aiconfigurator = tables_from_command_line(argv, __doc__.splitlines()[0])
    table = {"aiconfigurator": aiconfigurator, "rates": streaming_rates(data)}
    OUT.write_text(json.dumps(table, indent=1) + "\n")
    for key, row in table["rates"].items():
        print(f"{key:24} {row['measured_bandwidth_gb_s']:6} GB/s  fixed {row['fixed_us']:5.1f} us  "
              f"({row['rows']} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
