"""Accuracy of the speed model on measured vLLM runs, beside ridgepoint's and llm-optimizer's published methods.

Run: ``python benchmarks/speed_accuracy.py`` (from the repository root). It replays every record of
``benchmarks/data/speed_records.jsonl`` (a copy of ``shared/data/vllm-benchmarks/records.jsonl``) with the constants
in ``calculator/speed/calibration.py`` (in sample), refits the constants without each source and predicts that
source's records (held out: leave-one-source-out), runs the peers' methods, prints the summary and writes
``docs/speed-accuracy.md`` and ``docs/speed-accuracy.png``. ``--fit`` prints freshly fitted constants and bands to
paste into ``calibration.py``; ``--check`` exits 1 when a target fails. The held-out refits take ~15 minutes on
two cores; they are saved to ``benchmarks/data/speed_held_out.json`` and ``--reuse-held-out`` rebuilds the report
from that file. AIConfigurator's predictions come from ``benchmarks/data/speed_aiconfigurator.json`` (written by
``benchmarks/speed_aiconfigurator.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import speed_fit, speed_peers, speed_replay  # noqa: E402
from benchmarks.speed_report import render_chart, render_markdown  # noqa: E402
from calculator.speed.calibration import constants_for  # noqa: E402

METHODS = ("ours", "ours held out", "ridgepoint", "llm-optimizer", "AIConfigurator")
HELD_OUT = ROOT / "benchmarks" / "data" / "speed_held_out.json"
AICONFIGURATOR = ROOT / "benchmarks" / "data" / "speed_aiconfigurator.json"
HEADLINE = ("ttft_ms", "tpot_ms", "output_tok_s")
TARGETS_PCT = {"ttft_ms": 30.0, "tpot_ms": 15.0, "output_tok_s": 15.0}
BAND_QUANTILE = 0.8  # the band holds 80 % of the held-out errors


def predictions(records: list[dict], reuse_held_out: bool = False) -> dict[str, dict[str, dict[str, float]]]:
    """record id -> method -> metric -> predicted value (methods that cannot express a record's load skip it)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    cached = json.loads(AICONFIGURATOR.read_text())["predictions"] if AICONFIGURATOR.exists() else {}
    for record in records:
        platform = speed_replay.deployment(record["id"]).gpu.platform
        out[record["id"]] = {"ours": speed_replay.predict(record, constants_for(platform))}
        for name, method in (("ridgepoint", speed_peers.ridgepoint), ("llm-optimizer", speed_peers.llm_optimizer)):
            predicted = method(record)
            if predicted is not None:
                out[record["id"]][name] = predicted
        aic = cached.get(record["id"], {})
        if "error" not in aic and aic:
            out[record["id"]]["AIConfigurator"] = {k: v for k, v in aic.items() if k in speed_replay.METRICS}
    if reuse_held_out:
        for record_id, values in json.loads(HELD_OUT.read_text()).items():
            out[record_id]["ours held out"] = values
        return out
    for source in sorted({speed_replay.source_of(r) for r in records}):
        training = [r for r in records if speed_replay.source_of(r) != source]
        cuda, rocm = speed_fit.fit_all(training)
        for record in records:
            if speed_replay.source_of(record) == source:
                platform = speed_replay.deployment(record["id"]).gpu.platform
                out[record["id"]]["ours held out"] = speed_replay.predict(record, rocm if platform == "rocm" else cuda)
    HELD_OUT.write_text(json.dumps({r: v["ours held out"] for r, v in out.items()}, indent=1) + "\n")
    return out


def errors(records: list[dict], predicted: dict) -> dict[str, dict[str, dict[str, float]]]:
    """method -> metric -> record id -> (predicted - measured) / measured in %."""
    table: dict[str, dict[str, dict[str, float]]] = {m: {} for m in METHODS}
    for record in records:
        for metric, value in speed_replay.measured(record).items():
            for method, values in predicted[record["id"]].items():
                guess = values.get(metric)
                if guess is not None and math.isfinite(guess):
                    table[method].setdefault(metric, {})[record["id"]] = (guess / value - 1) * 100
    return table


def median_abs(values: list[float]) -> float:
    return statistics.median(abs(v) for v in values) if values else math.nan


def summary(table: dict) -> dict[str, dict[str, tuple[float, int]]]:
    """metric -> method -> (median |error| %, records)."""
    metrics = sorted({m for per in table.values() for m in per}, key=speed_replay.METRICS.index)
    return {metric: {method: (median_abs(list(table[method].get(metric, {}).values())),
                              len(table[method].get(metric, {}))) for method in METHODS} for metric in metrics}


def head_to_head(table: dict, metric: str, peer: str) -> tuple[float, float, int]:
    """Median |error| of ours (held out) and of ``peer`` on the records both predict."""
    ours, theirs = table["ours held out"].get(metric, {}), table[peer].get(metric, {})
    common = sorted(set(ours) & set(theirs))
    return median_abs([ours[r] for r in common]), median_abs([theirs[r] for r in common]), len(common)


def targets(table: dict) -> list[tuple[str, float, float, bool]]:
    rows = []
    for metric, limit in TARGETS_PCT.items():
        for method in ("ours", "ours held out"):
            value = median_abs(list(table[method].get(metric, {}).values()))
            rows.append((f"{metric} median abs. error %, {method}", value, limit, value <= limit))
        for peer in ("ridgepoint", "llm-optimizer", "AIConfigurator"):
            ours, theirs, n = head_to_head(table, metric, peer)
            if n == 0:
                continue
            rows.append((f"{metric}: ours held out vs {peer} (n={n})", ours, theirs, n == 0 or ours < theirs))
    return rows


def cuda_held_out(table: dict) -> dict[str, tuple[float, int]]:
    """Held-out median |error| without the one ROCm source (whose held-out terms can only be CUDA's)."""
    out = {}
    for metric in HEADLINE:
        values = [e for r, e in table["ours held out"].get(metric, {}).items()
                  if speed_replay.deployment(r).gpu.platform != "rocm"]
        out[metric] = (median_abs(values), len(values))
    return out


def bands(table: dict) -> dict[str, float]:
    """Band factors from the held-out errors: the BAND_QUANTILE of |log(predicted / measured)|."""
    out = {}
    for metric, name in (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("output_tok_s", "throughput")):
        logs = sorted(abs(math.log(1 + e / 100)) for e in table["ours held out"].get(metric, {}).values())
        out[name] = round(math.exp(logs[min(len(logs) - 1, int(BAND_QUANTILE * len(logs)))]), 2) if logs else 1.5
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="print freshly fitted constants for calibration.py")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target fails")
    parser.add_argument("--reuse-held-out", action="store_true",
                        help=f"read the held-out predictions from {HELD_OUT.name}")
    args = parser.parse_args(argv)
    records = speed_replay.load_records()
    if args.fit:
        cuda, rocm = speed_fit.fit_all(records)
        print("CUDA =", repr(cuda))
        print("ROCM =", repr(rocm))
    predicted = predictions(records, args.reuse_held_out)
    table = errors(records, predicted)
    rows = targets(table)
    for metric, per_method in summary(table).items():
        print(f"{metric:14}", "  ".join(f"{m}: {v:6.1f}% (n={n})" for m, (v, n) in per_method.items()))
    for name, value, limit, holds in rows:
        print(f"{'ok ' if holds else 'NO '} {name}: {value:.1f} vs {limit:.1f}")
    print("bands (held out, 80 %):", bands(table))
    docs = ROOT / "docs"
    render_chart(records, predicted, table, docs / "speed-accuracy.png")
    aic = json.loads(AICONFIGURATOR.read_text()) if AICONFIGURATOR.exists() else None
    (docs / "speed-accuracy.md").write_text(render_markdown(records, predicted, table, summary(table), rows,
                                                            bands(table), png_name="speed-accuracy.png",
                                                            aiconfigurator=aic, cuda_held_out=cuda_held_out(table)))
    return 1 if args.check and not all(holds for *_, holds in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
