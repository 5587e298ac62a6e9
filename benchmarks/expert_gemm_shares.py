"""The rate of vLLM's fused-MoE expert kernels as a share of the dense GEMM rate, from AIConfigurator's measured
kernel database (calculator/speed/expert_kernels.py reads the result).

AIConfigurator (PyPI ``aiconfigurator``) ships per-GPU tables of vLLM kernels timed on the card: ``moe_perf.parquet``
(the fused MoE op at a token count, hidden and intermediate size, top-k and expert count, by kernel and weight
format) and ``gemm_perf.parquet`` (vLLM's dense linear layer at M x N x K, by format). For each GPU family and expert
weight format this takes the median rate of the MoE op over prefill-sized steps (2,048-16,384 tokens, tokens spread
evenly over the experts, no TP or EP split; a table timed only with skewed routing, the A100's, is scaled by the
median ratio of skewed to even latency on the same shapes on the cards timed both ways, ``skew_ratios``), counted as
2 x tokens x top-k x 3 x hidden x intermediate FLOPs, over
the median rate of dense GEMMs of the speed model's compute path for that format (hardware.py) with M, N and K of
at least 2,048. The speed model already divides dense FLOPs by the card's best measured matmul; the expert FLOPs are
divided by that times this share.

It is not a dependency of the planner: install ``aiconfigurator`` into a separate environment with pandas and run
``/path/to/venv/bin/python benchmarks/expert_gemm_shares.py``; it writes ``benchmarks/data/expert_gemm_shares.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.aiconfigurator_tables import latest_table, tables_from_command_line, write_reduction  # noqa: E402

OUT = ROOT / "benchmarks" / "data" / "expert_gemm_shares.json"
# AIConfigurator system -> the planner's GPU family (catalog ``family``); H100 and H200 are one family (same chip).
SYSTEMS = {"a100_sxm": "ampere", "l40s": "ada", "h100_sxm": "hopper", "h200_sxm": "hopper", "b200_sxm": "blackwell",
           "gb200": "blackwell", "rtx_pro_6000_server": "blackwell-rtx"}
FP8_CORES = frozenset({"ada", "hopper", "blackwell", "blackwell-rtx"})
FP4_CORES = frozenset({"blackwell", "blackwell-rtx"})
# The database's MoE weight format -> the planner's expert format, and which kernels vLLM runs for that format's
# usual checkpoints: gpt-oss's MXFP4 (not compressed-tensors' MXFP4, a rarer checkpoint kind on Marlin), block FP8
# (DeepSeek, Qwen3 FP8, GLM FP8; per-tensor ModelOpt FP8 takes other kernels), AWQ/GPTQ int4 (Marlin), NVFP4.
FORMATS = {"bfloat16": "bf16", "fp8_block": "fp8", "int4_wo": "int4", "w4a16_mxfp4": "mxfp4", "nvfp4": "nvfp4"}
SKIPPED_KERNELS = ("compressedtensorsw4a4mxfp4",)
PREFILL_TOKENS = (2048, 16384)
SKEWED = "power_law_1.01"
DENSE_MIN_DIM = 2048


def dense_format(family: str, expert_format: str) -> str:
    """The dense GEMM format whose rate the speed model divides the expert FLOPs by (hardware.compute_path): its
    FP8 ceiling is a per-tensor FP8 matmul's."""
    if expert_format == "fp8":
        return "fp8" if family in FP8_CORES else "bfloat16"
    if expert_format in ("mxfp4", "nvfp4"):
        return "nvfp4" if family in FP4_CORES else "bfloat16"
    return "bfloat16"


def _prefill_moe(moe_file: Path):
    import pandas as pd

    moe = pd.read_parquet(moe_file)
    moe = moe[(moe.moe_tp_size == 1) & (moe.moe_ep_size == 1) & moe.num_tokens.between(*PREFILL_TOKENS)]
    return moe.assign(tflops=2 * moe.num_tokens * moe.topk * 3 * moe.hidden_size * moe.inter_size
                      / (moe.latency * 1e-3) / 1e12)


def skew_ratios(data: Path) -> dict[str, float]:
    """MoE weight format -> the median, over the cards timed both ways, of the median ratio of a step's latency
    with the least skewed routing (power_law_1.01) to that with tokens spread evenly, on the same shapes and kernel."""
    import statistics

    shapes = ["num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "kernel_source"]
    per_format: dict[str, list[float]] = {}
    for system in SYSTEMS:
        moe_file = latest_table(data, system, "moe", "moe_perf.parquet")
        if moe_file is None:
            continue
        moe = _prefill_moe(moe_file)
        for moe_dtype in FORMATS:
            rows = moe[moe.moe_dtype == moe_dtype]
            even = rows[rows.distribution == "balanced"].set_index(shapes).latency
            skewed = rows[rows.distribution == SKEWED].set_index(shapes).latency
            paired = (skewed / even).dropna()
            if len(paired):
                per_format.setdefault(moe_dtype, []).append(float(paired.median()))
    return {moe_dtype: statistics.median(ratios) for moe_dtype, ratios in per_format.items()}


def shares(data: Path) -> dict[str, dict[str, dict[str, float]]]:
    import pandas as pd

    skew = skew_ratios(data)
    rates: dict[str, dict[str, list[tuple[float, float, int, str]]]] = {}
    for system, family in SYSTEMS.items():
        moe_file = latest_table(data, system, "moe", "moe_perf.parquet")
        gemm_file = latest_table(data, system, "gemm", "gemm_perf.parquet")
        if moe_file is None or gemm_file is None:
            continue
        moe, gemm = _prefill_moe(moe_file), pd.read_parquet(gemm_file)
        version = moe_file.parent.name
        # NOTE: the A100 table (vLLM 0.14) has only skewed routing; power_law_1.01 is the least skewed it has, and
        # its rates are scaled to even routing by what the other cards measured both ways.
        timed_even = "balanced" in set(moe.distribution)
        moe = moe[moe.distribution == ("balanced" if timed_even else SKEWED)]
        if not timed_even:
            moe = moe.assign(tflops=moe.tflops * moe.moe_dtype.map(skew).fillna(1.0))
        gemm = gemm[(gemm.m >= DENSE_MIN_DIM) & (gemm.n >= DENSE_MIN_DIM) & (gemm.k >= DENSE_MIN_DIM)]
        gemm = gemm.assign(tflops=2 * gemm.m * gemm.n * gemm.k / (gemm.latency * 1e-3) / 1e12)
        dense = gemm.groupby("gemm_dtype").tflops.median().to_dict()
        for moe_dtype, expert_format in FORMATS.items():
            rows = moe[(moe.moe_dtype == moe_dtype) & ~moe.kernel_source.str.contains("|".join(SKIPPED_KERNELS))]
            if rows.empty or dense_format(family, expert_format) not in dense:
                continue
            # NOTE: where the table times several kernels for a format, vLLM's default is the one it reaches first;
            # the median over all of them keeps the figure from resting on one backend choice.
            rates.setdefault(family, {}).setdefault(expert_format, []).append(
                (float(rows.tflops.median()), float(dense[dense_format(family, expert_format)]), len(rows),
                 f"{system} vLLM {version}" + ("" if timed_even else f" ({SKEWED} x {skew.get(moe_dtype, 1.0):.3f})")
                 + ": " + ", ".join(sorted(set(rows.kernel_source)))))
    out: dict[str, dict[str, dict[str, float]]] = {}
    for family, formats in rates.items():
        for expert_format, measured in formats.items():
            moe_rate = sum(m for m, *_ in measured) / len(measured)
            dense_rate = sum(d for _, d, *_ in measured) / len(measured)
            out.setdefault(family, {})[expert_format] = {
                "share": round(moe_rate / dense_rate, 2), "moe_tflops": round(moe_rate),
                "dense_tflops": round(dense_rate), "rows": sum(n for *_, n, _ in measured),
                "kernels": "; ".join(k for *_, k in measured)}
    return out


def main(argv: list[str] | None = None) -> int:
    data, aiconfigurator = tables_from_command_line(argv, __doc__.splitlines()[0])
    table = write_reduction(OUT, aiconfigurator, "shares", shares(data))
    for family, formats in table["shares"].items():
        for expert_format, row in formats.items():
            print(f"{family:10} {expert_format:6} share {row['share']:.2f} ({row['moe_tflops']} / {row['dense_tflops']} "
                  f"TFLOPS, {row['rows']} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
