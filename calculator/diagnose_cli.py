"""``python -m calculator diagnose LOG [--gpu G] [--model M] [--json]``: a vLLM start-up log (or a ``vllm bench
serve`` result) read, reproduced by the estimate and explained. ``-`` reads stdin.

Exit 0 when the log was read (whether vLLM started or not), 2 with one line on stderr when it cannot be.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from urllib.parse import urlencode

from .errors import InvalidInput
from .observe.bench_result import BENCH_MARKERS, diagnose_bench
from .observe.diagnose import Diagnosis, diagnose_text
from .observe.startup_log import MAX_LOG_BYTES
from .url_state import to_query_params

COMMANDS = frozenset({"diagnose"})


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("diagnose", help="explain a vLLM start-up log, error or `vllm bench serve` result")
    parser.add_argument("log", help="the log file (a start-up log, a bench result block or its JSON); - reads stdin")
    parser.add_argument("--gpu", help="the GPU it ran on (the log never names it)")
    parser.add_argument("--model", help="the model, when the log's path cannot be read here (HF id or preset)")
    parser.add_argument("--vllm-version", help="the vLLM version, when the log does not print it")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")


def run(args: argparse.Namespace) -> str:
    text = _read(args.log)
    if any(marker in text for marker in BENCH_MARKERS):
        bench = diagnose_bench(text, gpu=args.gpu, model=args.model, vllm_version=args.vllm_version)
        if args.json:
            return json.dumps(bench.as_json())
        link = urlencode(to_query_params(bench.scenario, speed=bench.measured))
        return f"{bench.render()}\nPlan link with the measured efficiencies: ?{link}"
    found = diagnose_text(text, gpu=args.gpu, model=args.model, vllm_version=args.vllm_version)
    return json.dumps(found.as_json()) if args.json else render(found)


def _read(path: str) -> str:
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_LOG_BYTES + 1)
        else:
            with Path(path).open("rb") as handle:
                data = handle.read(MAX_LOG_BYTES + 1)
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(data) > MAX_LOG_BYTES:
        raise InvalidInput(f"{path} is larger than {MAX_LOG_BYTES / 1e6:,.0f} MB: a start-up log is read up to that; "
                           "keep the lines from the launch to the first request (or to the error)")
    if b"\x00" in data[:65536]:
        raise InvalidInput(f"{path} is a binary file, not a vLLM log")
    return data.decode("utf-8", errors="replace")


def render(found: Diagnosis) -> str:
    log = found.log
    lines = [f"vLLM {found.scenario.vllm_version} ({found.result.rules.engine.upper()} engine), "
             f"{found.scenario.model}, {found.result.gpu.name if found.result.gpu else 'CPU'}",
             f"outcome: {log.outcome}"]
    if log.outcome.check:
        lines.append(f"raised by: {log.outcome.check}")
    if found.cause:
        lines.append(f"cause: {found.cause}")
    lines.append(f"{'term':28} {'printed':>14} {'predicted':>14}")
    for row in found.rows:
        printed = "-" if row.printed is None else _cell(row.printed)
        lines.append(f"{row.label:28} {printed:>14} {_cell(row.predicted):>14}")
    if found.largest:
        lines.append(found.largest)
    lines += [f"fix: {fix.description} -> {fix.kv_cache_tokens:,} KV tokens, {fix.max_concurrency:,.2f}x concurrency"
              for fix in found.fixes]
    if found.calibrated is not None:
        lines.append(f"calibration: {found.calibration_gib:+.3f} GiB overhead ({found.calibration_note}); Plan link: "
                     f"?{urlencode(to_query_params(found.calibrated))}")
    else:
        lines.append(f"calibration: none ({found.calibration_note})")
    lines += [f"note: {note}" for note in found.notes]
    return "\n".join(lines)


def _cell(value: float | int) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"
