"""Command line: ``python -m calculator estimate --model M --gpu H100 ...`` (flags named as ``vllm serve`` names them).

Contract (other tools script it): with ``--json`` stdout is one JSON object (``calculator.summary.estimate_summary``); exit 0
whether or not the model fits; exit 2 with a one-line message on stderr for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import get_args

from pydantic import ValidationError

from . import diagnose_cli
from .engine.advice import weights_exceed
from .engine.estimate import Estimate, estimate
from .engine.expert_parallel import All2AllBackend
from .engine.uncertainty import coverage_notes, verdict, verdict_reason
from .engine.vllm_versions import LATEST_VERSION, Install
from .errors import CalculatorError, one_line_validation_error
from .explain import lead_sentence
from .gpus import Interconnect, gpu_catalog
from .model.model_source import preset_ids
from .scenario import Scenario
from .speed import cli as speed_cli
from .speed.cli import add_eplb_flags, add_feature_flags, add_hf_overrides_flag, eplb_settings, feature_fields
from .summary import estimate_summary
from .units import gib, parse_size

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, as the contract says
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="vllm-capacity-planner", description="Predict what vLLM will do with your GPUs.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    est = commands.add_parser("estimate", help="memory, KV-cache blocks, tokens and concurrency for one deployment")
    est.add_argument("--model", required=True, help="HF id (bundled presets work offline), config.json or folder")
    gpu = est.add_mutually_exclusive_group()
    gpu.add_argument("--gpu", help="GPU name or nvidia-smi alias (see `gpus`); default H100 SXM 80GB")
    gpu.add_argument("--gpu-memory-gib", type=float, help="custom GPU memory as the driver reports it, in GiB")
    est.add_argument("--device", choices=("cuda", "rocm", "cpu"), help="platform; default: the GPU's")
    est.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    est.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    est.add_argument("--data-parallel-size", "-dp", type=int, default=1,
                     help="engines (replicas) of TP x PP GPUs in one server; MoE experts split over TP x DP GPUs")
    est.add_argument("--enable-expert-parallel", "-ep", action="store_true",
                     help="MoE: whole experts per GPU over TP x DP ranks instead of a slice of every expert")
    est.add_argument("--all2all-backend", choices=get_args(All2AllBackend),
                     help="MoE token dispatch under --enable-expert-parallel with DP > 1 "
                          "(default allgather_reducescatter)")
    add_eplb_flags(est)
    est.add_argument("--interconnect", choices=get_args(Interconnect),
                     help="how the GPUs talk (NCCL and all-reduce memory at TP > 1); default: the card's usual link")
    est.add_argument("--install", choices=get_args(Install),
                     help="how vLLM was installed: the Docker image ships FlashInfer, whose top-k/top-p sampler "
                          "0.10-0.11.0 take (a smaller profiling peak); default pip")
    est.add_argument("--gpu-memory-utilization", type=float)
    est.add_argument("--max-model-len", type=_max_model_len, help="tokens, e.g. 32k; auto or -1: the model's own")
    est.add_argument("--max-num-seqs", type=int)
    est.add_argument("--max-num-batched-tokens", type=_int_or_size)
    est.add_argument("--block-size", type=int)
    est.add_argument("--dtype", default="auto")
    est.add_argument("--kv-cache-dtype", default="auto")
    est.add_argument("--quantization", "-q")
    est.add_argument("--kv-cache-memory-bytes", type=_int_or_size, help="e.g. 8G; ignores gpu_memory_utilization")
    est.add_argument("--num-gpu-blocks-override", type=int)
    est.add_argument("--enforce-eager", action="store_true")
    add_hf_overrides_flag(est)
    est.add_argument("--enable-extensible-kv-cache", action=argparse.BooleanOptionalAction, default=None)
    est.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None)
    est.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None,
                     help="default: vLLM's (on in V1, off in V0)")
    est.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=None,
                     help="default: vLLM's (V0: on past 32K tokens; V1: on, and from 0.12 it may be turned off, "
                          "which batches whole prompts)")
    est.add_argument("--vllm-version", default=LATEST_VERSION)
    est.add_argument("--other-processes-memory-gib", type=float, default=0.0,
                     help="memory other processes already hold on each GPU")
    est.add_argument("--json", action="store_true", help="one JSON object on stdout")
    add_feature_flags(est)
    speed_cli.register(commands, est)
    diagnose_cli.register(commands)
    commands.add_parser("presets", help="list the bundled model presets")
    commands.add_parser("gpus", help="list the GPU catalog")
    return parser


def _int_or_size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _max_model_len(text: str) -> int | None:
    """vLLM's ``human_readable_int_or_auto``: ``auto`` or ``-1`` mean "derive it from the model"."""
    if text.strip() == "-1" or text.strip().lower() == "auto":
        return None
    return _int_or_size(text)


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    fields = {name: getattr(args, name) for name in Scenario.model_fields if getattr(args, name, None) is not None}
    fields.update(eplb_settings(args))
    fields.update(feature_fields(args))
    if args.gpu_memory_gib is not None:
        fields.pop("gpu", None)
        fields["gpu"] = None
    return Scenario(**fields)


def render_table(result: Estimate) -> str:
    """A readable summary for people (the JSON is for programs), led by the verdict the dashboard leads with: an
    unknown architecture says so before any figure, and a fit its widened band straddles reads "Borderline"."""
    s, b, c = result.settings, result.budget, result.capacity
    rows = [
        ("verdict", lead_sentence(result, verdict(result), None if result.fits else weights_exceed(result))),
        *([("why borderline", reason)] if verdict(result) == "borderline" and result.fits
          and (reason := verdict_reason(result)) else []),
        ("model", f"{result.model.model_id} ({result.model.num_params:,} params)"),
        ("GPU", f"{result.gpu.name if result.gpu else s.device} x {result.num_gpus} (TP {s.tensor_parallel_size}, "
                f"PP {s.pipeline_parallel_size}), {gib(b.total_bytes):.2f} GiB each"
                + (f", linked by {s.interconnect}" if result.num_gpus > 1 else "")),
        ("vLLM", f"{result.rules.version} — {result.rules.era}"
                 + (", Docker image" if result.scenario.install == "docker" else "")),
        ("settings", f"dtype {s.dtype}, kv {s.kv_cache_dtype}, block {s.block_size}, util {s.gpu_memory_utilization}, "
                     f"max_num_seqs {s.max_num_seqs}, max_num_batched_tokens {s.max_num_batched_tokens}"),
        ("weights", f"{gib(b.weights_bytes):.2f} GiB"),
        *([("LoRA slots", f"{gib(b.lora_bytes):.2f} GiB ({result.lora.max_loras} x rank {result.lora.max_lora_rank})")]
          if result.lora else []),
        *([("proposer", f"{gib(b.draft_weights_bytes):.2f} GiB ({result.proposer.method}, "
                        f"{result.proposer.num_speculative_tokens} tokens per step)")] if result.proposer else []),
        ("activation peak", f"{gib(b.activation_bytes):.2f} GiB"),
        ("non-torch", f"{gib(b.non_torch_bytes):.2f} GiB"),
        ("CUDA graphs", f"{gib(b.cudagraph_bytes):.2f} GiB ({'in budget' if b.cudagraph_in_budget else 'in headroom'})"),
        ("KV cache", f"{gib(result.kv_cache_bytes):.2f} GiB"),
        ("KV per token", f"{result.layout.kv_bytes_per_token:,.0f} B per GPU"),
        ("blocks", f"{c.num_gpu_blocks:,} x {result.layout.block_size} tokens "
                   f"({len(result.layout.groups)} group(s))"),
        *([("state slots", f"{result.state_slots:,} sequences' recurrent state (max_num_seqs {s.max_num_seqs:,})")]
          if result.state_slots is not None else []),
        ("vLLM would log", " | ".join(result.log_lines())),
        ("max_model_len", f"{s.max_model_len:,} (largest that fits: {result.max_fitting_model_len:,})"),
        ("fits", "yes" if result.fits else f"NO — {result.error}"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    lines += [f"warning: {w}" for w in result.warnings]
    lines += [f"band widened: {note}" for note in coverage_notes(result)]
    return "\n".join(lines)


def _refuse(message: str) -> int:
    first_line = message.strip().splitlines()[0] if message.strip() else "invalid input"
    print(f"error: {first_line}", file=sys.stderr)
    return EXIT_BAD_INPUT


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "presets":
        print("\n".join(preset_ids()))
        return 0
    if args.command == "gpus":
        for g in gpu_catalog():
            print(f"{g.key:24} {g.memory_gib:8.2f} GiB  {g.name}")
        return 0
    try:
        if args.command in speed_cli.COMMANDS:
            text = speed_cli.run(args, scenario_from_args)
        elif args.command in diagnose_cli.COMMANDS:
            text = diagnose_cli.run(args)
        else:
            result = estimate(scenario_from_args(args))
            text = json.dumps(estimate_summary(result)) if args.json else render_table(result)
    except CalculatorError as exc:
        return _refuse(str(exc))
    except ValidationError as exc:
        return _refuse(one_line_validation_error(exc, as_flags=True))
    except (ArithmeticError, ValueError, TypeError, KeyError, IndexError, OSError, RecursionError) as exc:
        # NOTE: a bug, not the user's input; still one line (the contract), naming what broke so it can be reported.
        return _refuse(f"unexpected {type(exc).__name__} ({exc}); please report this command line")
    print(text)
    return 0
