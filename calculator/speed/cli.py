"""``python -m calculator speed`` and ``python -m calculator recommend`` (registered by ``calculator.cli``).

Contract (scripted): ``speed`` takes every ``estimate`` flag plus the traffic; with ``--json`` stdout is one object
(``calculator.speed.summary.speed_summary``). ``recommend`` prints the ranked deployments (``--json``: one object).
Bad input: exit 2 with one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from collections.abc import Callable
from typing import Annotated

from pydantic import BaseModel, TypeAdapter, ValidationError

from ..engine.estimate import estimate
from ..engine.vllm_versions import LATEST_VERSION
from ..errors import CalculatorError, InvalidInput
from ..model.model_source import load_model_spec
from ..serve_command import eplb_fields, speculative_fields
from . import bench_cli
from .bands import SpeedBands, speed_bands
from .inputs import FEATURE_FIELDS, RecommendRequest, SpeedInputs
from .plan import Slo
from .predict import SpeedEstimate, ceiling_note, speed_estimate
from .prices import GpuPrice, price_sets
from .bench_command import parse_bench_command
from .front_end import ENDPOINTS
from .recommend import MAX_BENCH_PROMPTS, Recommendations, recommend
from .speculation import speculation_gain, speculation_summary, speculation_text
from .summary import recommendations_summary, speed_summary
from .traffic import Traffic

COMMANDS = ("speed", "recommend", "bench")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from exc
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _within(model: type[BaseModel], field: str) -> Callable[[str], float]:
    """An argparse type for a number in the range ``model`` accepts for ``field``: a flag takes exactly what a share
    link and the dashboard take, and a value outside it is refused by argparse (exit 2, naming the flag)."""
    adapter = TypeAdapter(Annotated[(float, *model.model_fields[field].metadata)])

    def parse(text: str) -> float:
        value = _positive_float(text)
        try:
            return adapter.validate_python(value)
        except ValidationError as exc:
            raise argparse.ArgumentTypeError(f"{str(exc.errors()[0]['msg']).lower()}, got {text!r}") from exc

    return parse


def _traffic_flags(parser: argparse.ArgumentParser, users_flag: str) -> None:
    parser.add_argument("--input-tokens", type=_positive_int, required=True, help="mean prompt tokens")
    parser.add_argument("--output-tokens", type=_positive_int, required=True, help="mean output tokens")
    parser.add_argument("--input-tokens-p95", type=_positive_int, help="p95 prompt tokens (TTFT p95)")
    parser.add_argument("--output-tokens-p95", type=_positive_int)
    load = parser.add_mutually_exclusive_group(required=True)
    load.add_argument(users_flag, dest="concurrency", type=_positive_int,
                      help="requests in flight (closed loop, like vllm bench serve --max-concurrency)")
    load.add_argument("--request-rate", type=_within(SpeedInputs, "request_rate"),
                      help="Poisson arrivals per second (open loop)")
    parser.add_argument("--endpoint", choices=ENDPOINTS, default="completions",
                        help="where the requests go: chat (/v1/chat/completions) renders the chat template, which "
                             "vLLM 0.8.2-0.9.1 and 0.11.0 parse on every request")


def register(commands: argparse._SubParsersAction, estimate_parser: argparse.ArgumentParser) -> None:
    """Add ``speed`` (every ``estimate`` flag plus traffic) and ``recommend`` to the CLI's sub-commands."""
    speed = commands.add_parser("speed", parents=[estimate_parser], add_help=False,
                                help="TTFT, inter-token latency, throughput and cost of one deployment")
    _traffic_flags(speed, "--concurrency")
    speed.add_argument("--price-per-gpu-hour", type=_within(SpeedInputs, "usd_per_gpu_hour"),
                       help="your price (default: the price list)")
    bandwidth, tflops = _within(SpeedInputs, "gpu_memory_bandwidth_gb_s"), _within(SpeedInputs, "gpu_bf16_tflops")
    speed.add_argument("--gpu-memory-bandwidth-gb-s", type=bandwidth, help="HBM bandwidth (overrides the catalog's)")
    speed.add_argument("--gpu-bf16-tflops", type=tflops, help="dense BF16 TFLOPS (overrides the catalog's)")
    speed.add_argument("--gpu-fp8-tflops", type=tflops, help="dense FP8 TFLOPS (used by FP8 weights)")
    speed.add_argument("--gpu-interconnect-gb-s", type=bandwidth, help="link GB/s per direction (used by TP > 1)")
    bench_cli.register(commands, estimate_parser)
    rec = commands.add_parser("recommend", help="every GPU x TP x quantization x KV dtype that meets the SLOs, "
                                                "ranked by cost")
    rec.add_argument("--model", required=True, help="HF id (bundled presets work offline), config.json or folder")
    _traffic_flags(rec, "--concurrent-users")
    rec.add_argument("--ttft-p95-ms", type=_within(SpeedInputs, "ttft_p95_ms"))
    rec.add_argument("--tpot-ms", type=_within(SpeedInputs, "tpot_ms"), help="inter-token latency limit")
    rec.add_argument("--min-tok-s-per-user", type=_within(SpeedInputs, "min_tok_s_per_user"))
    rec.add_argument("--e2e-s", type=_within(SpeedInputs, "e2e_s"), help="end-to-end latency limit")
    rec.add_argument("--gpu", action="append", help="GPU to consider (repeat); default: the whole catalog")
    rec.add_argument("--max-gpus", type=_positive_int, help="most GPUs the whole deployment may use")
    rec.add_argument("--budget-per-hour", type=_within(RecommendRequest, "budget_per_hour"),
                     help="most dollars per hour")
    rec.add_argument("--max-model-len", type=_positive_int, help="default: the longest request, to a power of 2")
    rec.add_argument("--enable-expert-parallel", action=argparse.BooleanOptionalAction, default=None,
                     help="MoE models: try only the DP x EP layouts (--no-enable-expert-parallel: only TP); "
                          "default both")
    rec.add_argument("--data-parallel-size", type=_positive_int,
                     help="MoE models: the DP x EP layouts to try have this many engines (default 2, 4 and 8)")
    rec.add_argument("--vllm-version", default=LATEST_VERSION)
    rec.add_argument("--price-set", choices=list(price_sets()),
                     help="one provider's one tier for every GPU it rents, instead of the mixed default price list "
                          "(GPUs it does not list are not ranked)")
    rec.add_argument("--bench", metavar="'VLLM BENCH SERVE ARGS'",
                     help="judge and rank TTFT p95 on this `vllm bench serve` load (e.g. '--dataset-name random "
                          "--random-input-len 1024 --random-output-len 256 --max-concurrency 32 --num-prompts 320'), "
                          f"simulated on one replica of each deployment (its first {MAX_BENCH_PROMPTS} prompts)")
    rec.add_argument("--top", type=_positive_int, default=10, help="rows to print (text output)")
    rec.add_argument("--json", action="store_true", help="one JSON object on stdout")
    add_eplb_flags(rec)
    add_feature_flags(rec)
    add_hf_overrides_flag(rec)


def add_hf_overrides_flag(parser: argparse.ArgumentParser) -> None:
    """``--hf-overrides`` (estimate, speed and recommend): the Scenario reads it as vLLM does."""
    parser.add_argument("--hf-overrides", metavar="JSON",
                        help="a JSON object applied to the model's config.json, as vLLM does, e.g. "
                             "'{\"num_hidden_layers\": 16}'")


def add_eplb_flags(parser: argparse.ArgumentParser) -> None:
    """EPLB with vLLM's flag names (estimate, speed and recommend)."""
    parser.add_argument("--enable-eplb", action="store_true",
                        help="MoE under --enable-expert-parallel: vLLM's expert load balancer (its state, and the "
                             "redundant experts of --eplb-config / --num-redundant-experts)")
    parser.add_argument("--eplb-config", type=_eplb_config, metavar="JSON",
                        help='EPLB settings as vLLM takes them, e.g. \'{"num_redundant_experts": 32}\'')
    parser.add_argument("--num-redundant-experts", type=int,
                        help="vLLM 0.9-0.11's spelling of num_redundant_experts")


def _eplb_config(text: str) -> int:
    """The redundant experts of an ``--eplb-config`` JSON, read as the serve-command import reads it."""
    fields: dict[str, int] = {}
    try:
        problem = eplb_fields("--eplb-config", text, fields)
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if problem and problem.startswith("not "):
        raise argparse.ArgumentTypeError(f"{text[:80]}: {problem}")
    return fields.get("num_redundant_experts", 0)


def eplb_settings(args: argparse.Namespace) -> dict[str, object]:
    """The Scenario fields of the EPLB flags that were given."""
    fields: dict[str, object] = {"enable_eplb": True} if getattr(args, "enable_eplb", False) else {}
    redundant = getattr(args, "eplb_config", None)  # NOTE: --eplb-config over 0.9-0.11's --num-redundant-experts
    if redundant is None:
        redundant = getattr(args, "num_redundant_experts", None)
    return fields if redundant is None else {**fields, "num_redundant_experts": redundant}


def add_feature_flags(parser: argparse.ArgumentParser) -> None:
    """LoRA and speculative decoding, with vLLM's flag names (estimate, speed and recommend)."""
    group = parser.add_argument_group("LoRA adapters and speculative decoding")
    group.add_argument("--enable-lora", action="store_true", help="allocate LoRA adapter slots")
    group.add_argument("--max-loras", type=int, help="adapters on the GPU at once (vLLM's default 1)")
    group.add_argument("--max-lora-rank", type=int, help="largest adapter rank (vLLM's default 16)")
    group.add_argument("--max-cpu-loras", type=int, help="adapters cached in CPU memory (no GPU memory)")
    group.add_argument("--lora-dtype", choices=("auto", "float16", "bfloat16"))
    group.add_argument("--fully-sharded-loras", action="store_true", help="shard the adapters over TP too")
    group.add_argument("--speculative-config", type=_speculative_config,
                       help='JSON, e.g. \'{"method": "eagle3", "num_speculative_tokens": 3}\'')
    group.add_argument("--speculative-acceptance-rate", type=float,
                       help="the chance each draft token is accepted (the plan's assumption; default: the method's "
                            "typical value)")


def feature_fields(args: argparse.Namespace) -> dict[str, object]:
    """The Scenario fields of the LoRA, speculative-decoding and --hf-overrides flags that were given."""
    fields = {name: getattr(args, name) for name in FEATURE_FIELDS if getattr(args, name, None) not in (None, False)}
    return {**fields, **(getattr(args, "speculative_config", None) or {})}


def _speculative_config(text: str) -> dict[str, object]:
    try:
        return speculative_fields(text)
    except CalculatorError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _traffic(args: argparse.Namespace) -> Traffic:
    return Traffic(input_tokens=args.input_tokens, output_tokens=args.output_tokens,
                   input_tokens_p95=args.input_tokens_p95, output_tokens_p95=args.output_tokens_p95,
                   concurrency=args.concurrency, request_rate=args.request_rate, endpoint=args.endpoint)


def run(args: argparse.Namespace, scenario_from_args) -> str:
    """Run ``speed``, ``recommend`` or ``bench``; returns the text to print. Raises CalculatorError/ValidationError."""
    if args.command == "bench":
        return bench_cli.run(args, scenario_from_args)
    traffic = _traffic(args)
    if args.command == "recommend":
        slo = Slo(ttft_p95_ms=args.ttft_p95_ms, tpot_ms=args.tpot_ms, min_tok_s_per_user=args.min_tok_s_per_user,
                  e2e_s=args.e2e_s)
        result = recommend(load_model_spec(args.model), traffic, slo, gpus=args.gpu, max_gpus=args.max_gpus,
                           budget_per_hour=args.budget_per_hour, vllm_version=args.vllm_version,
                           max_model_len=args.max_model_len, price_set=args.price_set,
                           features={**feature_fields(args), **eplb_settings(args)},
                           expert_parallel=args.enable_expert_parallel, data_parallel_size=args.data_parallel_size,
                           bench=parse_bench_command(args.bench).load if args.bench else None)
        return json.dumps(recommendations_summary(result)) if args.json else render_recommendations(result, args.top)
    deployment = estimate(scenario_from_args(args))
    rates = {"memory_bandwidth_gb_s": args.gpu_memory_bandwidth_gb_s, "bf16_dense_tflops": args.gpu_bf16_tflops,
             "fp8_dense_tflops": args.gpu_fp8_tflops, "interconnect_gb_s": args.gpu_interconnect_gb_s}
    given = {k: v for k, v in rates.items() if v is not None}
    if given and deployment.gpu is not None:
        deployment = deployment.model_copy(update={"gpu": deployment.gpu.with_rates(**given)})
    prices = None
    if args.price_per_gpu_hour is not None and deployment.gpu is not None:
        prices = {deployment.gpu.key: GpuPrice(usd_per_gpu_hour=args.price_per_gpu_hour, source="--price-per-gpu-hour")}
    if deployment.gpu is not None and not deployment.gpu.memory_bandwidth_gb_s:
        raise InvalidInput("a custom GPU needs --gpu-memory-bandwidth-gb-s and --gpu-bf16-tflops for the speed model")
    speed = speed_estimate(deployment, traffic, prices=prices)
    for note in unused_rates(args, speed):
        print(f"warning: {note}", file=sys.stderr)
    bands = speed_bands(deployment, speed)
    gain = speculation_gain(deployment, traffic)
    if args.json:
        return json.dumps({**speed_summary(speed, bands), **speculation_summary(gain)})
    return render_speed(speed, bands) + speculation_text(gain)


def unused_rates(args: argparse.Namespace, speed: SpeedEstimate) -> list[str]:
    """The rates given that this deployment's prediction does not use, so nobody thinks they changed it."""
    notes = []
    if args.gpu_fp8_tflops is not None and speed.compute_path != "fp8":
        notes.append(f"--gpu-fp8-tflops is unused: this deployment's matmuls run on the {speed.compute_path} path "
                     "(FP8 weights, e.g. -q fp8, take the FP8 one)")
    if args.gpu_interconnect_gb_s is not None and args.tensor_parallel_size == 1:
        notes.append("--gpu-interconnect-gb-s is unused: with tensor parallel 1 no all-reduce crosses the link")
    return notes


def _ms(value: float) -> str:
    if not math.isfinite(value):
        return "unbounded (saturated)"
    return f"{value / 1e3:,.2f} s" if value >= 1e4 else f"{value:,.1f} ms"


def render_speed(speed: SpeedEstimate, bands: SpeedBands | None = None) -> str:
    c = speed.concurrency
    cost = (f"${speed.gpu_hour_cost:,.2f}/h for {speed.num_gpus} GPU(s), "
            f"${speed.cost_per_million_output_tokens:,.3f} per million output tokens ({speed.gpu_price.source})"
            if speed.gpu_hour_cost is not None and speed.cost_per_million_output_tokens is not None else "no price")
    rows = [
        ("deployment", f"{speed.gpu_name} x {speed.num_gpus}, {speed.compute_path} matmuls ({ceiling_note(speed)})"),
        ("served concurrency", f"{speed.running_requests:,.1f} (limit {c.binding}: max_num_seqs {c.max_num_seqs}, "
                               f"KV cache {c.kv_cache_limit})"),
        ("arrival", f"{speed.traffic.arrival} (every figure below; `bench` predicts a `vllm bench serve` run)"),
        ("TTFT mean / p95", f"{_ms(speed.ttft_ms)} / {_ms(speed.ttft_p95_ms)} (queue {_ms(speed.queue_wait_ms)})"),
        *((("front end", speed.front_end.reason),) if speed.front_end.seconds else ()),
        ("TPOT (ITL)", f"{_ms(speed.tpot_ms)} = {speed.per_user_tok_s:,.1f} tokens/s per user"),
        ("end-to-end", _ms(speed.e2e_ms)),
        ("throughput", f"{speed.output_throughput_tok_s:,.0f} output tok/s, {speed.total_throughput_tok_s:,.0f} "
                       f"total tok/s, {speed.request_throughput:,.2f} req/s per replica"),
        ("decode", f"{speed.decode_bound}-bound" + (f"; compute-bound from batch {speed.compute_bound_from_batch}"
                                                    if speed.compute_bound_from_batch else "")),
        ("cost", cost),
        ("band (80 %)", f"TTFT {_ms(speed.ttft_band_ms.low)}-{_ms(speed.ttft_band_ms.high)}, "
                        f"TPOT {_ms(speed.tpot_band_ms.low)}-{_ms(speed.tpot_band_ms.high)}"),
    ]
    if bands is not None:
        rows[-1] = (f"band (80 %, {bands.regime})",
                    f"TTFT {_ms(bands.ttft_ms.low)}-{_ms(bands.ttft_ms.high)}, TTFT p95 {_ms(bands.ttft_p95_ms.low)}-"
                    f"{_ms(bands.ttft_p95_ms.high)}, TPOT {_ms(bands.tpot_ms.low)}-{_ms(bands.tpot_ms.high)}")
        rows += [("outside the measured runs", sentence) for sentence in bands.outside]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def render_recommendations(result: Recommendations, top: int) -> str:
    prices = (f"prices: {price_sets()[result.price_set].name} (one provider, one tier)" if result.price_set else
              "prices: the mixed default list (sources differ by GPU; --price-set "
              f"{next(iter(price_sets()))} ranks on one provider's prices)")
    lines = [f"planned with max_model_len {result.max_model_len:,}; {prices}",
             f"TTFT p95 (judged against the SLO): {result.ttft_load}",
             f"{'#':>3}  {'GPU':24} {'TP':>2} {'PP':>2} {'DP':>5} {'weights':8} {'KV':5} {'replicas':>8} {'GPUs':>5} "
             f"{'$/hour':>9} {'$/M tok':>8} {'TTFT p95':>10} {'ITL':>9}  SLO"]
    for rank, option in enumerate(result.by_cost_per_hour[:top], start=1):
        d, p = option.deployment, option.plan
        dp = (f"{d.data_parallel_size}" + (" EP" if d.enable_expert_parallel else "")
              if d.data_parallel_size > 1 else "-")
        lines.append(f"{rank:>3}  {d.gpu_name:24} {d.tensor_parallel_size:>2} {d.pipeline_parallel_size:>2} {dp:>5} "
                     f"{d.quantization or 'as is':8} {d.kv_cache_dtype:5} {p.replicas:>8} {p.gpus:>5} "
                     f"{p.cost_per_hour:>9,.2f} {p.cost_per_million_output_tokens:>8,.3f} "
                     f"{_ms(option.ttft_p95_ms):>10} {_ms(p.per_replica.tpot_ms):>9}  {option.slo_status}")
    if not result.by_cost_per_hour:
        lines.append("  no deployment meets the SLOs within the limits")
    if any(o.deployment.data_parallel_size > 1 for o in result.by_cost_per_hour[:top]):
        backends = sorted({b for o in result.by_cost_per_hour[:top] if (b := o.deployment.all2all_backend)})
        lines.append("DP x EP rows: replicas count engines (whole servers of DP engines); each MoE layer's "
                     "dispatch and combine between the engines is in the step time"
                     + (f", all-to-all backend {', '.join(backends)} (its buffers counted)" if backends else ""))
    reasons = Counter(option.reason for option in result.rejected)
    lines.append(f"{len(result.by_cost_per_hour)} deployments qualify; {len(result.rejected)} do not:")
    lines += [f"  {count:>4} x {reason}" for reason, count in reasons.most_common(8)]
    return "\n".join(lines)
