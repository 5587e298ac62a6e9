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
from .bench_command import BenchCommand, parse_bench_command
from .front_end import ENDPOINT_PATHS, front_end_work
from .predict import bench_prediction

BENCH_JSON_KEYS = ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
                   "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms",
                   "request_throughput", "output_throughput", "total_token_throughput", "duration_s")
MAX_MEASURED = 1e7  # ms or us: nothing an engine step takes
MAX_CHAT_TEMPLATE_TOKENS = 4096  # a system prompt's worth; a longer one is a prompt, not a template


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
    bench.add_argument("--chat-template-tokens", type=int, default=0,
                       help="with --backend openai-chat: tokens the chat template puts around one user message "
                            "(your server's POST /tokenize with that message says); not counted when not given")
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
    if not 0 <= args.chat_template_tokens <= MAX_CHAT_TEMPLATE_TOKENS:
        raise InvalidInput(f"--chat-template-tokens must be between 0 and {MAX_CHAT_TEMPLATE_TOKENS:,}")
    command = parse_bench_command(words, special_tokens=args.prompt_special_tokens,
                                  chat_template_tokens=args.chat_template_tokens)
    if args.model is None:
        if command.model is None:
            raise InvalidInput("name the model: --model before the --, or in the bench command")
        args.model = command.model
    result = estimate(scenario_from_args(args))
    figures = bench_prediction(result, command.load, measured=_measured(args))
    front_end = front_end_work(result.rules, result.model, command.load.endpoint)
    if args.json:
        return json.dumps({**bench_summary(figures), "endpoint": command.load.endpoint,
                           "chat_template_tokens": command.chat_template_tokens,
                           "front_end_ms": round(front_end.seconds * 1e3, 3), "front_end": front_end.reason or None})
    return "\n".join([figures.render(), *endpoint_notes(command, front_end.reason)])


def endpoint_notes(command: BenchCommand, front_end: str) -> list[str]:
    """What the endpoint adds to the requests' path, in words (nothing for the completions endpoint)."""
    if command.load.endpoint != "chat":
        return []
    template = (f"{command.chat_template_tokens} chat-template tokens counted around each prompt"
                if command.chat_template_tokens else
                "the chat template's own tokens around each prompt are not counted (give --chat-template-tokens N; "
                "POST /tokenize with one user message on your server tells N)")
    return [f"requests go to {ENDPOINT_PATHS['chat']}: {template}", *([f"front end: {front_end}"] if front_end else [])]
