"""``python -m calculator bench [the planner's settings] -- vllm bench serve ...`` (registered by ``speed.cli``).

Prints the block ``vllm bench serve`` would print for that run on the deployment the settings describe (``--json``:
one object with the block's keys). The model comes from ``--model`` before the ``--``, else from the bench line's.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from ..engine.estimate import estimate
from ..errors import InvalidInput
from .bench import BenchFigures, LinearStepCost
from .bench_command import parse_bench_command
from .predict import bench_prediction

BENCH_JSON_KEYS = ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
                   "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms",
                   "request_throughput", "output_throughput", "total_token_throughput", "duration_s")
MAX_MEASURED = 1e7  # ms or us: nothing an engine step takes


def register(commands: argparse._SubParsersAction, estimate_parser: argparse.ArgumentParser) -> None:
    bench = commands.add_parser("bench", parents=[estimate_parser], add_help=False,
                                help="what `vllm bench serve` prints for a run on this deployment: give the "
                                     "planner's settings, then -- and the bench command line")
    for action in bench._actions:
        if action.dest == "model":
            action.required = False  # NOTE: the bench line's --model names it too
    bench.add_argument("--prompt-special-tokens", type=int, default=1,
                       help="tokens the tokenizer adds to a prompt (a BOS: 1, Qwen: 0); the random dataset "
                            "samples --random-input-len less these")
    measured = bench.add_argument_group("a server's measured step times (instead of the roofline; any engine, the "
                                        "CPU included)")
    measured.add_argument("--measured-step-ms", type=float, help="fixed time of one engine step")
    measured.add_argument("--measured-step-us-per-token", type=float, default=0.0,
                          help="time each token of a step adds")
    measured.add_argument("--measured-request-overhead-ms", type=float, default=0.0,
                          help="per request, from the server's receipt to its waiting queue (tokenizer, IPC)")
    bench.add_argument("bench_command", nargs=argparse.REMAINDER,
                       help="-- vllm bench serve --model M --dataset-name random ...")


def bench_summary(figures: BenchFigures) -> dict[str, Any]:
    return {**{key: round(getattr(figures, key), 3) for key in BENCH_JSON_KEYS},
            "completed": figures.completed, "total_input_tokens": figures.total_input_tokens,
            "total_output_tokens": figures.total_output_tokens, "arrival": figures.arrival,
            "preemptions": figures.preemptions}


def _measured(args: argparse.Namespace) -> tuple[LinearStepCost, float] | None:
    if args.measured_step_ms is None:
        return None
    values = (args.measured_step_ms, args.measured_step_us_per_token, args.measured_request_overhead_ms)
    if not all(math.isfinite(v) and 0 <= v <= MAX_MEASURED for v in values) or args.measured_step_ms <= 0:
        raise InvalidInput("--measured-step-ms must be positive and the measured times finite and not negative")
    cost = LinearStepCost(fixed_s=args.measured_step_ms / 1e3, per_token_s=args.measured_step_us_per_token / 1e6)
    return cost, args.measured_request_overhead_ms / 1e3


def run(args: argparse.Namespace, scenario_from_args) -> str:
    words = list(args.bench_command)
    if words[:1] == ["--"]:
        words = words[1:]
    if not words:
        raise InvalidInput("give the bench command after --: bench --gpu h100 -- vllm bench serve --model M ...")
    if not 0 <= args.prompt_special_tokens <= 16:
        raise InvalidInput("--prompt-special-tokens must be between 0 and 16")
    command = parse_bench_command(words, special_tokens=args.prompt_special_tokens)
    if args.model is None:
        if command.model is None:
            raise InvalidInput("name the model: --model before the --, or in the bench command")
        args.model = command.model
    figures = bench_prediction(estimate(scenario_from_args(args)), command.load, measured=_measured(args))
    return json.dumps(bench_summary(figures)) if args.json else figures.render()
