"""NVIDIA AIConfigurator's predictions for the measured runs it can express, cached for the accuracy report.

AIConfigurator (PyPI ``aiconfigurator``) interpolates a measured kernel database per GPU system and backend; it runs
offline on a CPU. It is not a dependency of the planner: install it into a separate environment and run
``python benchmarks/speed_aiconfigurator.py --aiconfigurator /path/to/venv/bin/aiconfigurator``. That writes
``benchmarks/data/speed_aiconfigurator.json`` (its version, the command per record and what it printed), which
``benchmarks/speed_accuracy.py`` reads as a fifth column. A record it cannot express (a GPU without a vLLM
database, an open-loop rate) is listed with the reason.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import speed_replay  # noqa: E402
from calculator.model.model_source import load_config  # noqa: E402

CACHE = speed_replay.DATA / "speed_aiconfigurator.json"
# Our catalog key -> AIConfigurator system with a vLLM database (A100 40GB differs in bandwidth: not mapped).
SYSTEMS = {"a100-sxm-80gb": "a100_sxm", "h100-sxm-80gb": "h100_sxm", "h200-141gb": "h200_sxm", "b200-180gb": "b200_sxm",
           "b300-288gb": "b300_sxm", "l40s-48gb": "l40s", "rtx-pro-6000-blackwell": "rtx_pro_6000_server"}
PRINTED = {"ttft_ms": r"TTFT:\s+([\d,.]+) ms", "tpot_ms": r"TPOT:\s+([\d,.]+) ms",
           "e2e_ms": r"Request Latency:\s+([\d,.]+) ms", "output_tok_s": r"tokens/s:\s+([\d,.]+)"}


def _why_not(record: dict) -> str | None:
    run = speed_replay.run_for(record)
    if run.gpu not in SYSTEMS:
        return f"no vLLM database for {run.gpu}"
    if run.mode == "rate":
        return "no open-loop request rate"
    return None


def predict(record: dict, binary: str) -> dict:
    reason = _why_not(record)
    if reason:
        return {"error": reason}
    run = speed_replay.run_for(record)
    prompt, output = speed_replay.lengths(record)
    batch = int(record["concurrency"] or min(record["num_prompts"], run.settings.get("max_num_seqs", 256)))
    config, _ = load_config(run.model)
    tp = run.settings.get("tensor_parallel_size", 1)
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(json.dumps(config))
        command = [binary, "cli", "estimate", "--model-path", folder, "--system", SYSTEMS[run.gpu], "--backend",
                   "vllm", "--isl", str(prompt), "--osl", str(output), "--batch-size", str(batch),
                   "--tp-size", str(tp)]
        if run.settings.get("quantization") == "fp8":  # --quantization fp8 on a BF16 checkpoint: dynamic FP8
            command += ["--gemm-quant-mode", "fp8", "--moe-quant-mode", "fp8"]
        if str(run.settings.get("kv_cache_dtype", "")).startswith("fp8"):
            command += ["--kvcache-quant-mode", "fp8"]
        if speed_replay.deployment(record["id"]).model.moe is not None:
            # NOTE: vLLM shards the experts like the dense layers (tensor parallel) unless expert parallelism is on
            ep = tp if run.settings.get("enable_expert_parallel") else 1
            command += ["--moe-tp-size", str(tp // ep), "--moe-ep-size", str(ep)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    text = done.stdout + done.stderr
    values = {metric: float(m.group(1).replace(",", "")) for metric, pattern in PRINTED.items()
              if (m := re.search(pattern, text))}
    shown = " ".join(command[1:]).replace(folder, f"<config of {run.model.replace(f'{ROOT}/', '')}>")
    if not values:
        # NOTE: the last "...Error: why" line, not a traceback's "raise RuntimeError(" line above it
        error = next((line.strip() for line in reversed(text.splitlines()) if "Error:" in line), text.strip()[-200:])
        return {"error": error.replace(folder, "<config>")[:300], "command": shown}
    return {**values, "command": shown}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiconfigurator", required=True, help="the aiconfigurator executable")
    args = parser.parse_args(argv)
    version = subprocess.run([args.aiconfigurator, "version"], capture_output=True, text=True).stdout.strip()
    out = {"aiconfigurator": version.splitlines()[-1] if version else "unknown", "predictions": {}}
    for record in speed_replay.load_records():
        out["predictions"][record["id"]] = predict(record, args.aiconfigurator)
        print(record["id"], out["predictions"][record["id"]])
    CACHE.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
