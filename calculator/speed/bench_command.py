"""Read a ``vllm bench serve`` command line the way vLLM's own parser does, into the load it sends (pure).

The option table (every spelling, arity, kind and default of vLLM 0.32.0's ``vllm bench serve``) is package data
dumped from the real parser by ``scripts/vllm-bench-serve-flags.py``; an argparse parser is built from it, so
abbreviations, ``--flag=value`` and underscores (FlexibleArgumentParser reads ``--max_concurrency`` as
``--max-concurrency``) follow vLLM's rules. A flag vLLM does not know, and a flag that changes the load in a way the
planner does not model (another dataset, a shared prefix, a ramp-up), is refused with a sentence.

The lengths are the random dataset's (``vllm/benchmarks/datasets``): each prompt samples a whole number of tokens
uniformly in [floor(L x (1 - r)), ceil(L x (1 + r))] with L = --random-input-len less the tokenizer's special
tokens (which the server adds back), each output likewise around --random-output-len (at least 1), and the random
dataset sets ``ignore_eos``, so every request generates its whole output.

``--backend openai-chat`` posts each prompt as one user message to ``/v1/chat/completions``: the server renders the
chat template around it (its own tokens instead of the tokenizer's special ones, which chat requests do not add) and
some versions parse the template on every request (``front_end.py``). The template's tokens depend on the model's
template; the caller gives them (``chat_template_tokens``), else they are not counted.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import shlex
from functools import cache
from importlib import resources
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict

from ..errors import InvalidInput
from .bench import BenchLoad
from .front_end import Endpoint

# Flags that change nothing the engine sees (where the server is, what is saved or shown, sampling knobs that do
# not change lengths under ignore_eos).
_NO_EFFECT = frozenset({
    "model", "host", "port", "base_url", "endpoint", "backend", "tokenizer", "tokenizer_mode", "trust_remote_code",
    "served_model_name", "save_result", "save_detailed", "append_result", "result_dir", "result_filename", "label",
    "metadata", "disable_tqdm", "request_id_prefix", "header", "insecure", "ready_check_timeout_sec", "num_warmups",
    "temperature", "top_p", "top_k", "min_p", "seed", "percentile_metrics", "metric_percentiles", "plot_timeline",
    "timeline_itl_thresholds", "plot_dataset_stats", "disable_shuffle", "no_oversample", "ignore_eos", "logprobs",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "skip_tokenizer_init",
})
# Flags that set the load, read below.
_LOAD = frozenset({"dataset_name", "num_prompts", "max_concurrency", "request_rate", "burstiness", "random_input_len",
                   "random_output_len", "input_len", "output_len", "random_range_ratio", "random_prefix_len",
                   "random_batch_size"})
# backend -> (the endpoint it posts to, vLLM's name for that API, the suffix vLLM requires of --endpoint)
_BACKENDS: dict[str, tuple[Endpoint, str, str]] = {
    "openai": ("completions", "OpenAI Completions API", "completions"),
    "vllm": ("completions", "OpenAI Completions API", "completions"),
    "openai-chat": ("chat", "OpenAI Chat Completions API", "chat/completions"),
}
MAX_PROMPTS = 20_000  # a simulated run stays well under a second; a larger run repeats the same steady state
_PREFIX = re.compile(r"^(?:\S*python\S*\s+-m\s+vllm\.entrypoints\.cli\.main|\S*vllm)\s+bench\s+serve\b")


class BenchCommand(BaseModel):
    """What a ``vllm bench serve`` line asks for: its load, the model it names and the flags that did not matter."""

    model_config = ConfigDict(frozen=True)
    load: BenchLoad
    model: str | None
    input_len: int
    output_len: int
    range_ratio: tuple[float, float]
    percentiles: tuple[float, ...]
    chat_template_tokens: int = 0  # counted around each prompt (chat only)


class _Refused(ValueError):
    pass


class _Raising(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Refused(message)


@cache
def _table() -> dict[str, Any]:
    text = (resources.files("calculator") / "data" / "vllm_bench_serve_flags.json").read_text(encoding="utf-8")
    return json.loads(text)


@cache
def _parser() -> argparse.ArgumentParser:
    table = _table()
    parser = _Raising(prog="vllm bench serve", add_help=False, allow_abbrev=table["allow_abbrev"])
    for option in table["options"]:
        if option["kind"] == "help":
            continue
        spellings = list(option["spellings"])
        if option["kind"] in ("store_true", "store_false"):
            parser.add_argument(*spellings, dest=option["dest"], action=option["kind"])
        elif option["kind"] == "boolean_optional":
            parser.add_argument(*[s for s in spellings if not s.startswith("--no-")], dest=option["dest"],
                                action=argparse.BooleanOptionalAction)
        else:
            kwargs = {"nargs": option["nargs"]} if option["nargs"] is not None else {}
            parser.add_argument(*spellings, dest=option["dest"], default=None, **kwargs)
    return parser


def _defaults() -> dict[str, Any]:
    return {option["dest"]: option["default"] for option in _table()["options"]}


def split_bench_line(line: str | list[str]) -> list[str]:
    """The arguments of a ``vllm bench serve`` line (a string as a shell splits it, or its words), without the
    ``vllm bench serve`` in front."""
    if isinstance(line, str):
        text = line.strip()
        try:
            words = shlex.split(_PREFIX.sub("", text, count=1) if _PREFIX.match(text) else text)
        except ValueError as exc:
            raise InvalidInput(f"the bench command does not split into words ({exc})") from exc
    else:
        words = list(line)
        for index in range(min(len(words), 6)):
            if words[index] == "serve" and index >= 1 and words[index - 1] == "bench":
                words = words[index + 1:]
                break
    return words


def parse_bench_command(line: str | list[str], *, special_tokens: int = 1,
                        chat_template_tokens: int = 0) -> BenchCommand:
    """The load a ``vllm bench serve`` line sends; ``InvalidInput`` (one sentence) for what vLLM refuses or the
    planner does not model. ``special_tokens`` is what the tokenizer adds to a prompt (a BOS: 1);
    ``chat_template_tokens`` what the chat template puts around one user message (``--backend openai-chat``)."""
    words = [_dashes(word) for word in split_bench_line(line)]
    try:
        namespace = _parser().parse_args(words)
    except _Refused as exc:
        raise InvalidInput(f"vLLM's `vllm bench serve` refuses this line: {exc}") from exc
    given = {k: v for k, v in vars(namespace).items() if v is not None and v is not False}
    unmodelled = sorted(k for k in given if k not in _NO_EFFECT and k not in _LOAD)
    if unmodelled:
        flags = ", ".join("--" + k.replace("_", "-") for k in unmodelled)
        raise InvalidInput(f"the planner does not model {flags}: it predicts the random dataset's fixed or uniform "
                           "lengths under --max-concurrency, --request-rate and --burstiness")
    values = {**_defaults(), **given}
    if values["dataset_name"] != "random":
        raise InvalidInput(f"--dataset-name {values['dataset_name']} is not modelled: the planner predicts the "
                           "random dataset (--dataset-name random), whose lengths the command line fixes")
    if str(values["backend"]) not in _BACKENDS:
        raise InvalidInput(f"--backend {values['backend']} is not modelled: the planner predicts text generation "
                           f"({', '.join(_BACKENDS)})")
    endpoint, api_name, suffix = _BACKENDS[str(values["backend"])]
    if not str(values["endpoint"]).endswith(suffix):
        raise InvalidInput(f"vLLM's `vllm bench serve` refuses this line: {api_name} URL must end with one of: "
                           f"{{{suffix!r}}} (--endpoint {values['endpoint']})")
    if _int(values, "random_prefix_len", 0) != 0:
        raise InvalidInput("--random-prefix-len is not modelled (a shared prefix the prefix cache may hold)")
    if _int(values, "random_batch_size", 1) != 1:
        raise InvalidInput("--random-batch-size is for embedding benchmarks; the planner predicts generation")
    input_len = _int(values, "input_len", None) or _int(values, "random_input_len", 1024)
    output_len = _int(values, "output_len", None) or _int(values, "random_output_len", 128)
    num_prompts = _int(values, "num_prompts", 1000)
    concurrency = _int(values, "max_concurrency", None)
    rate = _float(values, "request_rate")
    burstiness = _float(values, "burstiness")
    seed = _int(values, "seed", 0, allow_negative=True)
    ratios = _range_ratio(values["random_range_ratio"])
    percentiles = tuple(_float_list(str(values["metric_percentiles"])))
    if input_len < 1 or output_len < 1 or num_prompts < 1:
        raise InvalidInput("--random-input-len, --random-output-len and --num-prompts must be at least 1")
    if num_prompts > MAX_PROMPTS:
        raise InvalidInput(f"--num-prompts {num_prompts:,}: the planner simulates at most {MAX_PROMPTS:,} requests "
                           "(a longer run only repeats its steady state)")
    if concurrency is not None and concurrency < 1:
        raise InvalidInput("--max-concurrency must be at least 1")
    if rate <= 0 or burstiness <= 0:
        raise InvalidInput("--request-rate and --burstiness must be positive (vLLM asserts it)")
    prompts, outputs = _lengths(num_prompts, input_len, output_len, ratios, seed, special_tokens)
    # NOTE: a chat request's prompt is tokenized without the special tokens; the template brings its own
    added = chat_template_tokens if endpoint == "chat" else special_tokens
    # NOTE: vllm/benchmarks/serve.py sends input_requests[0] once as its ready check when --ready-check-timeout-sec
    # is above 0 (0 by default since vllm#30975, Dec 2025; the old benchmark_serving.py always sent it), and again as
    # each of --num-warmups requests, all before the run.
    test_prompt = (_int(values, "ready_check_timeout_sec", 0, allow_negative=True) > 0
                   or _int(values, "num_warmups", 0, allow_negative=True) > 0)
    load = BenchLoad(input_tokens=tuple(p + added for p in prompts), output_tokens=tuple(outputs),
                     max_concurrency=concurrency, request_rate=None if math.isinf(rate) else rate,
                     burstiness=burstiness, seed=seed, special_tokens=added, test_prompt=test_prompt,
                     endpoint=endpoint)
    return BenchCommand(load=load, model=values.get("model"), input_len=input_len, output_len=output_len,
                        range_ratio=ratios, percentiles=percentiles,
                        chat_template_tokens=chat_template_tokens if endpoint == "chat" else 0)


def _dashes(word: str) -> str:
    """FlexibleArgumentParser's pre-pass: ``--max_concurrency=8`` reads as ``--max-concurrency=8``."""
    if not word.startswith("--"):
        return word
    key, has_value, value = word.partition("=")
    key = "--" + key[2:].replace("_", "-")
    return f"{key}={value}" if has_value else key


def _int(values: dict[str, Any], key: str, default: int | None, *, allow_negative: bool = False) -> int | None:
    raw = values.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"--{key.replace('_', '-')}: invalid int value: {raw!r} (vLLM refuses it)") from exc
    if value < 0 and not allow_negative:
        raise InvalidInput(f"--{key.replace('_', '-')} must not be negative, got {value}")
    return value


def _float(values: dict[str, Any], key: str) -> float:
    raw = values.get(key)
    try:
        value = float(raw)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"--{key.replace('_', '-')}: invalid float value: {raw!r} (vLLM refuses it)") from exc
    if math.isnan(value):
        raise InvalidInput(f"--{key.replace('_', '-')} is not a number")
    return value


def _float_list(text: str) -> list[float]:
    try:
        values = [float(p) for p in text.split(",")]
    except ValueError as exc:
        raise InvalidInput(f"--metric-percentiles: {text!r} is not a comma-separated list of numbers") from exc
    return values


def _range_ratio(raw: Any) -> tuple[float, float]:
    """``--random-range-ratio``: one number for both lengths, or ``{"input": r, "output": r}`` (vLLM 0.32)."""
    try:
        parsed = float(raw)
        ratios = (parsed, parsed)
    except (TypeError, ValueError):
        try:
            parsed = json.loads(raw)
            ratios = (float(parsed["input"]), float(parsed["output"]))
        except (json.JSONDecodeError, TypeError, KeyError, ValueError) as exc:
            raise InvalidInput(f"--random-range-ratio {raw!r}: a number, or JSON with input and output keys") from exc
    if not all(0 <= r < 1 for r in ratios):
        raise InvalidInput("--random-range-ratio must be in [0, 1) (vLLM refuses it)")
    return ratios


def _lengths(count: int, input_len: int, output_len: int, ratios: tuple[float, float], seed: int,
             special: int) -> tuple[list[int], list[int]]:
    """Each request's sampled prompt and output tokens, on vLLM's ranges.

    NOTE: vLLM draws them with numpy's default_rng(seed); this draws the same uniform ranges with Python's
    generator (seeded alike), so the mix of lengths, not each request's, matches the run.
    """
    real = max(0, input_len - special)
    input_low, input_high = math.floor(real * (1 - ratios[0])), math.ceil(real * (1 + ratios[0]))
    output_low = max(1, math.floor(output_len * (1 - ratios[1])))
    output_high = max(1, math.ceil(output_len * (1 + ratios[1])))
    if input_low + special < 1:
        raise InvalidInput("--random-input-len is too small: the shortest prompt would have no token")
    draw = random.Random(seed)
    prompts = [draw.randint(input_low, input_high) for _ in range(count)]
    outputs = [draw.randint(output_low, output_high) for _ in range(count)]
    return prompts, outputs
