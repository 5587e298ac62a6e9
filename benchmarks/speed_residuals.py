"""Held-out residuals of one speed figure, record by record and grouped, to find the mechanism behind an error.

Run: ``python benchmarks/speed_residuals.py [--metric tpot_ms]`` (from the repository root), after
``python benchmarks/speed_accuracy.py`` has saved the leave-one-source-out predictions to
``benchmarks/data/speed_held_out.json``. Errors are (held-out prediction - measured) / measured in %: a negative
error is a prediction too fast for TTFT/TPOT, too slow for throughput. Groups: source, GPU family, MoE or dense,
the number of requests at once, and the vLLM version the record states or assumes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import speed_replay  # noqa: E402
from benchmarks.speed_accuracy import HELD_OUT  # noqa: E402


def residuals(metric: str) -> list[dict]:
    """One row per scored record that measures ``metric`` and has a held-out prediction of it."""
    held_out = json.loads(HELD_OUT.read_text())
    rows = []
    for record in speed_replay.scored_records():
        measured = speed_replay.measured(record).get(metric)
        predicted = held_out.get(record["id"], {}).get(metric)
        if measured is None or predicted is None:
            continue
        result = speed_replay.deployment(record["id"])
        concurrency = record.get("concurrency")
        rows.append({
            "id": record["id"], "source": speed_replay.source_of(record), "gpu": result.gpu.name,
            "family": result.gpu.family, "kind": "MoE" if result.model.moe is not None else "dense",
            "load": "rate" if concurrency is None else "c=1" if concurrency == 1 else "c=2-8" if concurrency <= 8
            else "c>8",
            "vllm": str(result.scenario.vllm_version), "measured": measured, "predicted": predicted,
            "error": 100 * (predicted - measured) / measured})
    return rows


def _grouped(rows: list[dict], key: Callable[[dict], str]) -> list[str]:
    groups: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        groups[key(row)].append(row["error"])
    return [f"  {name:28} n={len(errors):3}  median {statistics.median(errors):+6.1f} %  "
            f"median |error| {statistics.median(abs(e) for e in errors):5.1f} %" for name, errors in sorted(groups.items())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metric", default="tpot_ms", choices=speed_replay.METRICS)
    args = parser.parse_args(argv)
    rows = residuals(args.metric)
    for row in sorted(rows, key=lambda r: r["error"]):
        print(f"{row['error']:+7.1f} %  measured {row['measured']:9.4g}  held out {row['predicted']:9.4g}  "
              f"{row['kind']:5} {row['load']:5} {row['gpu']:22} vLLM {row['vllm']:8} {row['id']}")
    print(f"{len(rows)} records, median |error| {statistics.median(abs(r['error']) for r in rows):.1f} %")
    for title, key in (("source", "source"), ("GPU family", "family"), ("MoE or dense", "kind"),
                       ("requests at once", "load"), ("vLLM version", "vllm")):
        print(f"by {title}:")
        print("\n".join(_grouped(rows, lambda r, k=key: r[k])))
    print("by MoE or dense and requests at once:")
    print("\n".join(_grouped(rows, lambda r: f"{r['kind']} {r['load']}")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
