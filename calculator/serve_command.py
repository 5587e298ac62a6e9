"""``vllm serve`` round trip: write the launch command for a Scenario, and read one back into a Scenario.

Pure text handling. ``launch_line`` finds the vLLM arguments in what was pasted; ``serve_parser`` reads them as that
version's own parser does; this module turns what was read into a Scenario and reports, by name, what it imported,
assumed and ignored, what vLLM would refuse (with a "did you mean"), and which flags leave the plan incomplete and
which way it is then off.
"""

from __future__ import annotations

import json
import shlex
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, ValidationError

from .engine.expert_parallel import All2AllBackend
from .engine.vllm_versions import VllmVersion, version_notice
from .errors import CalculatorError, InvalidInput
from .gpus import find_gpu
from .launch_line import LaunchLine, find_launch_line
from .model.hf_overrides import hf_overrides_text, parse_hf_overrides
from .scenario import MAX_CAPTURE_SIZES, Scenario
from .serve_parser import Refused, parse_arguments, table_for
from .units import parse_size

# Scenario field -> vllm serve flag, for the flags that take a value.
VALUE_FLAGS: dict[str, str] = {
    "tensor_parallel_size": "--tensor-parallel-size",
    "pipeline_parallel_size": "--pipeline-parallel-size",
    "data_parallel_size": "--data-parallel-size",
    "all2all_backend": "--all2all-backend",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "max_model_len": "--max-model-len",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "block_size": "--block-size",
    "dtype": "--dtype",
    "kv_cache_dtype": "--kv-cache-dtype",
    "quantization": "--quantization",
    "kv_cache_memory_bytes": "--kv-cache-memory-bytes",
    "num_gpu_blocks_override": "--num-gpu-blocks-override",
    "cpu_offload_gb": "--cpu-offload-gb",
    "max_loras": "--max-loras",
    "max_lora_rank": "--max-lora-rank",
    "max_cpu_loras": "--max-cpu-loras",
    "lora_dtype": "--lora-dtype",
}
_FLAG_TO_FIELD = {flag: field for field, flag in VALUE_FLAGS.items()}
# A launch line is a few hundred characters; a longer paste is not one, and reading it costs time (issue 28).
MAX_LINE_CHARS = 16_384
SECRET_FLAGS = frozenset({"--api-key", "--hf-token"})
# Flags whose presence sets a field (the --no- forms come from the option table).
_BOOLEAN_FLAGS: dict[str, str] = {
    "--enforce-eager": "enforce_eager",
    "--enable-extensible-kv-cache": "enable_extensible_kv_cache",
    "--async-scheduling": "async_scheduling",
    "--enable-expert-parallel": "enable_expert_parallel",
    "--enable-eplb": "enable_eplb",
    "--enable-prefix-caching": "enable_prefix_caching",
    "--enable-chunked-prefill": "enable_chunked_prefill",
    "--enable-lora": "enable_lora",
    "--fully-sharded-loras": "fully_sharded_loras",
}
# vLLM's --dtype choices and the spellings people use for them (vllm/config/model.py _STR_DTYPE_TO_TORCH_DTYPE).
DTYPE_NAMES = {"auto": "auto", "half": "float16", "float16": "float16", "fp16": "float16", "bfloat16": "bfloat16",
               "bf16": "bfloat16", "float": "float32", "float32": "float32", "fp32": "float32"}
# Known flags that change nothing the plan computes (server, API, logging, tokenizer, tool calling ...).
_NO_MEMORY_EFFECT = frozenset({
    "--host", "--port", "--uds", "--served-model-name", "--api-key", "--chat-template", "--tokenizer", "--revision",
    "--tokenizer-revision", "--code-revision", "--download-dir", "--seed", "--uvicorn-log-level", "--tool-call-parser",
    "--reasoning-parser", "--generation-config", "--hf-token", "--trust-remote-code", "--disable-log-requests",
    "--disable-log-stats", "--enable-auto-tool-choice", "--enable-log-requests", "--allowed-origins",
    "--allowed-methods", "--allowed-headers", "--root-path", "--response-role", "--ssl-keyfile", "--ssl-certfile",
    "--ssl-ca-certs", "--middleware", "--load-format", "--config-format", "--tokenizer-mode", "--max-log-len",
    "--disable-fastapi-docs", "--enable-request-id-headers", "--chat-template-content-format", "--config",
    "--headless", "--api-server-count", "--disable-uvicorn-access-log", "--enable-prompt-tokens-details",
    "--enable-server-load-tracking", "--enable-force-include-usage", "--return-tokens-as-token-ids",
    "--disable-frontend-multiprocessing", "--model-loader-extra-config", "--otlp-traces-endpoint",
    "--collect-detailed-traces", "--use-v2-block-manager", "--distributed-executor-backend", "--worker-use-ray",
    "--data-parallel-size-local", "--data-parallel-address", "--data-parallel-rpc-port", "--data-parallel-backend",
    "--data-parallel-start-rank", "--data-parallel-rank", "--data-parallel-hybrid-lb", "--data-parallel-external-lb",
    "--nnodes", "--node-rank", "--master-addr", "--master-port", "--tokenizer-pool-size", "--guided-decoding-backend",
    "--structured-outputs-config", "--enable-log-outputs", "--log-error-stack", "--lora-modules",
    "--prompt-adapters", "--preemption-mode", "--scheduling-policy",
})


# Flags that change the memory a deployment uses in ways the plan does not model: the import says so and which way
# the plan is off, instead of "no effect" (issue 25 item 4). Keys are canonical spellings.
_SPECULATIVE = ("this speculative method is not modelled (the plan models draft_model, eagle, eagle3, mtp and "
                "ngram): its proposer's weights and KV cache are missing from the plan")
_MULTIMODAL = ("the multimodal encoder's cache and profiling take memory the plan does not count: the deployment "
               "uses more memory than the plan shows")
PLAN_IS_OFF: dict[str, str] = {
    "--lora-extra-vocab-size": ("sets the tokens each adapter may add (before 0.12): the plan assumes vLLM's "
                                "default of 256, so the LoRA slots may be more or less than it shows"),
    "--max-seq-len-to-capture": ("sets the longest sequence V0 runs in CUDA graphs: the plan assumes vLLM's "
                                 "default, so the graph memory may be more or less than it shows"),
    "--compilation-config": ("sets CUDA-graph sizes and modes and the compiler's options: the plan assumes vLLM's "
                             "default graphs, so the graph memory may be more or less than it shows"),
    "--optimization-level": ("changes the compilation and CUDA-graph defaults: the graph memory may be more or less "
                             "than the plan shows"),
    "--rope-scaling": ("stretches the context the model accepts: the plan's length limits and KV sizes follow the "
                       "config's own rope settings, so a longer --max-model-len may be allowed than it says"),
    "--rope-theta": "changes the model's rope settings: the plan reads the config's own",
    "--kv-transfer-config": ("a KV-transfer connector allocates its own buffers (and may offload KV): the "
                             "deployment uses more GPU memory than the plan shows"),
    "--limit-mm-per-prompt": _MULTIMODAL, "--mm-processor-cache-gb": _MULTIMODAL,
    "--disable-mm-preprocessor-cache": _MULTIMODAL, "--mm-encoder-tp-mode": _MULTIMODAL,
    "--mamba-ssm-cache-dtype": "changes the Mamba state's bytes: the plan uses the model's dtype for it",
    "--decode-context-parallel-size": ("shards the KV cache across the decode ranks: the deployment holds more "
                                       "tokens than the plan shows"),
    "--config": ("a config file can set any flag, and the plan has not read it: open it and paste its settings as "
                 "flags"),
}


def _reason(flag: str) -> str:
    """Why a known flag leaves the plan unchanged (or what it would need)."""
    reasons = {
        "--swap-space": "CPU memory for swapped-out KV blocks (V0; V1 recomputes instead): the GPU plan is unchanged",
        "--kv-offloading-size": "a CPU buffer for offloaded KV blocks: the GPU pool is unchanged",
        "--kv-offloading-backend": "how KV blocks are offloaded to the CPU: the GPU pool is unchanged",
    }
    if flag in reasons:
        return reasons[flag]
    if flag in _NO_MEMORY_EFFECT:
        return "no effect on GPU memory or capacity"
    return "not modelled: the plan assumes vLLM's default for it"


class ImportReport(BaseModel):
    """What an import did, in words a person checks line by line."""

    model_config = ConfigDict(frozen=True)
    entrypoint: str
    imported: tuple[str, ...]  # "--tensor-parallel-size 2"
    assumed: tuple[str, ...]  # what the command cannot say (the GPU, the vLLM version)
    ignored: tuple[str, ...]  # known flags that change nothing here, each with the reason
    unknown: tuple[str, ...]  # what vLLM refuses flag by flag: unknown flags ("did you mean"), `--flag=false`
    incomplete: tuple[str, ...] = ()  # flags that change memory the plan does not model, and which way it is off

    def notes(self) -> list[str]:
        """Everything a user should read, assumptions and problems first."""
        return [*self.unknown, *(f"incomplete: {i}" for i in self.incomplete), *(f"assumed {a}" for a in self.assumed),
                *(f"ignored {i}" for i in self.ignored)]


def serve_command(scenario: Scenario, *, multiline: bool = True) -> str:
    """The ``vllm serve`` command for a scenario; only settings that differ from vLLM's defaults are written."""
    parts = ["vllm", "serve", shlex.quote(scenario.model)]
    # NOTE: a flag the version does not have is left out: vLLM would refuse it, and the setting is its behaviour.
    table = table_for(scenario.vllm_version).by_spelling
    for field, flag in VALUE_FLAGS.items():
        value = getattr(scenario, field)
        default = Scenario.model_fields[field].default
        if value is not None and value != default and flag in table:
            parts.append(f"{flag} {shlex.quote(f'{value:g}' if isinstance(value, float) else str(value))}")
    for flag, field in _BOOLEAN_FLAGS.items():
        value = getattr(scenario, field)
        written = flag if value else flag.replace("--", "--no-", 1)
        if value is not None and value != Scenario.model_fields[field].default and written in table:
            parts.append(written)
    if scenario.num_redundant_experts and (eplb := _redundant_experts_flag(scenario.num_redundant_experts, table)):
        parts.append(eplb)
    config = speculative_config(scenario)
    if config and "--speculative-config" in table:
        parts.append(f"--speculative-config {shlex.quote(json.dumps(config, separators=(',', ':')))}")
    if scenario.hf_overrides and "--hf-overrides" in table:
        parts.append(f"--hf-overrides {shlex.quote(scenario.hf_overrides)}")
    if scenario.cudagraph_capture_sizes:
        flag = "--cudagraph-capture-sizes" if "--cudagraph-capture-sizes" in table else "--cuda-graph-sizes"
        parts.append(f"{flag} {' '.join(map(str, scenario.cudagraph_capture_sizes))}")
    if not multiline:
        return " ".join(parts)
    head = " ".join(parts[:3])
    return " \\\n  ".join([head, *parts[3:]])


def parse_serve_command(text: str, base: Scenario | None = None) -> tuple[Scenario, list[str]]:
    """A Scenario from a pasted launch command (the GPU and version kept from ``base``), plus notes to show."""
    scenario, report = import_serve_command(text, base)
    return scenario, [note for note in report.notes() if not note.startswith("assumed ")]


def import_serve_command(text: str, base: Scenario | None = None) -> tuple[Scenario, ImportReport]:
    """A Scenario from a pasted launch command, and the report of what was imported, assumed and ignored.

    The arguments are read as the parser of the vLLM version does (the container tag's, else ``base``'s): its
    flags, their arity, its boolean forms and abbreviations (``serve_parser``). Settings the command does not give
    are vLLM's defaults; the GPU, its memory, the platform, other processes' memory and the vLLM version come from
    ``base``. Bad values, and lines vLLM refuses as a whole, raise ``InvalidInput`` with a sentence.
    """
    base = base or Scenario()
    if len(text) > MAX_LINE_CHARS:
        raise InvalidInput(f"the pasted text is {len(text):,} characters long; a launch command is read up to "
                           f"{MAX_LINE_CHARS:,}: paste the command alone")
    line = find_launch_line(text)
    version, imported, assumed, ignored = _version(line, base)
    serve = not (line.entrypoint.startswith("python -m ") and not line.entrypoint.endswith(" serve"))
    if line.entrypoint.startswith("docker image"):
        # NOTE: vllm/vllm-openai started `python3 -m vllm.entrypoints.openai.api_server` (the issue tracker shows it
        # in May 2025) and starts `vllm serve` now; a release whose `vllm serve` takes `--model` (moving it to the
        # front, 0.11+) reads the same arguments either way, an older one is read as the module.
        serve = table_for(version).model_option == "moved"
        runs = "`vllm serve`" if serve else "`python3 -m vllm.entrypoints.openai.api_server`"
        assumed.append(f"the image runs {runs} with the arguments after it")
    elif " in docker image " in line.entrypoint:
        assumed.append("the command after the image runs as written: an image whose entrypoint is `vllm serve` (as "
                       "vllm/vllm-openai's is) would run `vllm serve vllm serve ...` and refuse it unless "
                       "--entrypoint is set")
    try:
        parsed = parse_arguments(list(line.arguments), version, serve=serve)
    except Refused as exc:
        raise InvalidInput(f"vLLM {version} refuses this command: {' '.join(str(exc).split())[:300]}") from exc
    if parsed.release.split(".")[:2] != version.split(".")[:2]:
        assumed.append(f"flags read as vLLM {parsed.release}'s parser reads them (the nearest release whose flags "
                       "are stored)")
    fields: dict[str, Any] = {"model": parsed.model} if parsed.model else {}
    incomplete: list[str] = []
    for option in parsed.options:
        canonical = option.spec.canonical
        value = " ".join(option.value) if isinstance(option.value, tuple) else option.value
        shown = f"{canonical} {value}" if option.spec.takes_value and value is not None else option.written
        if canonical in SECRET_FLAGS:
            shown = f"{canonical} (value hidden)"  # NOTE: the report is shown, shared and screenshotted
        if canonical == "--model":
            imported.append(shown)
        elif canonical in _CAPTURE_FLAGS or (canonical == "--compilation-config" and _graph_keys(str(value))):
            fields["cudagraph_capture_sizes"] = _capture_sizes(canonical, option.value, version)
            imported.append(shown)
            rest = _graph_keys(str(value))[1] if canonical == "--compilation-config" else ()
            if rest:
                incomplete.append(f"--compilation-config {', '.join(rest)}: {PLAN_IS_OFF[canonical]}")
        elif canonical in SPECULATIVE_FLAGS:
            problem = _speculative_fields(canonical, str(value), fields)
            (incomplete.append(f"{shown}: {problem}") if problem else imported.append(shown))
        elif canonical in EPLB_FLAGS:
            problem = eplb_fields(canonical, str(value), fields)
            (incomplete.append(f"{shown}: {problem}") if problem else imported.append(shown))
        elif canonical == "--hf-overrides":
            problem = _hf_overrides_field(str(value), fields)
            (incomplete.append(f"{shown}: {problem}") if problem else imported.append(shown))
        elif canonical in PLAN_IS_OFF:
            incomplete.append(f"{shown}: {PLAN_IS_OFF[canonical]}")
        elif canonical == "--max-model-len" and str(value).lower() in ("auto", "-1"):
            ignored.append(f"{shown}: the plan shows the config's length and the largest that fits")
        elif canonical in _FLAG_TO_FIELD:
            fields[_FLAG_TO_FIELD[canonical]] = _coerce(_FLAG_TO_FIELD[canonical], str(value))
            imported.append(shown)
        elif canonical in _BOOLEAN_FLAGS and isinstance(option.value, bool):
            fields[_BOOLEAN_FLAGS[canonical]] = option.value
            imported.append(shown)
        else:
            negative = option.value is False and not canonical.startswith("--no-")
            ignored.append(f"{shown}: {_reason('--no-' + canonical[2:] if negative else canonical)}")
    if not fields.get("model"):
        raise InvalidInput("the command names no model (expected `vllm serve MODEL ...` or `--model MODEL`)")
    ignored += [f"environment variable {name}: not modelled" for name in line.environment
                if name.startswith(("VLLM_", "CUDA_", "PYTORCH_"))]
    kept = {"gpu": base.gpu, "gpu_memory_gib": base.gpu_memory_gib, "device": base.device,
            "other_processes_memory_gib": base.other_processes_memory_gib, "vllm_version": version}
    try:
        scenario = Scenario(**{**kept, **fields})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "command"
        raise InvalidInput(f"{VALUE_FLAGS.get(field, field)}: {first['msg']}") from exc
    return scenario, ImportReport(entrypoint=line.entrypoint, imported=tuple(imported), assumed=tuple(assumed),
                                  ignored=tuple(ignored), unknown=parsed.refused, incomplete=tuple(incomplete))


# EPLB's redundant experts: --num-redundant-experts (0.9-0.11), --eplb-config's num_redundant_experts (0.10+), and
# the statistics window the state is sized by (--eplb-window-size 0.9-0.11, --eplb-config's window_size).
EPLB_FLAGS = frozenset({"--num-redundant-experts", "--eplb-config", "--eplb-window-size"})
_EPLB_WINDOW = ("sizes EPLB's load window: the plan counts vLLM's default of {default} steps (window x MoE layers x "
                "physical experts x 4 B), so the state may be more or less than it shows")


def _json_object(value: str) -> dict[str, Any] | str:
    """A flag's JSON object, or why vLLM refuses the value."""
    try:
        config = json.loads(value)
    except ValueError:
        return "not JSON: vLLM refuses it"
    return config if isinstance(config, dict) else "not a JSON object: vLLM refuses it"


def eplb_fields(flag: str, value: str, fields: dict[str, Any]) -> str | None:
    """Read an EPLB flag into ``fields``; why the plan is off where it cannot model it."""
    from .engine.eplb import DEFAULT_WINDOW_SIZE

    if flag == "--num-redundant-experts":
        fields["num_redundant_experts"] = _whole(flag, "num_redundant_experts", value)
        return None
    if flag == "--eplb-window-size":
        return None if _whole(flag, "window_size", value) == DEFAULT_WINDOW_SIZE else _EPLB_WINDOW.format(
            default=DEFAULT_WINDOW_SIZE)
    config = _json_object(value)
    if isinstance(config, str):
        return config
    if config.get("num_redundant_experts") is not None:
        fields["num_redundant_experts"] = _whole(flag, "num_redundant_experts", config["num_redundant_experts"])
    # NOTE: the other keys (step_interval, use_async, policy, communicator, log_balancedness ...) allocate no GPU
    # memory: NIXL registers the buffer that exists, gloo stages in CPU memory (0.32 eplb_communicator.py).
    window = config.get("window_size", DEFAULT_WINDOW_SIZE)
    if window != DEFAULT_WINDOW_SIZE:
        return _EPLB_WINDOW.format(default=DEFAULT_WINDOW_SIZE)
    return None


def _redundant_experts_flag(count: int, table: Any) -> str | None:
    """``--eplb-config '{"num_redundant_experts":R}'`` where the version has it (0.10+), else 0.9's flag (None
    before 0.9: no EPLB)."""
    if "--eplb-config" in table:
        return f"--eplb-config {shlex.quote(json.dumps({'num_redundant_experts': count}, separators=(',', ':')))}"
    return f"--num-redundant-experts {count}" if "--num-redundant-experts" in table else None


def _hf_overrides_field(text: str, fields: dict[str, Any]) -> str | None:
    """Read --hf-overrides into ``fields``; why the plan leaves it out when it cannot. vLLM's parser keeps text
    that is not a JSON object as text, which its ModelConfig (a dict or a callable) refuses when the engine starts."""
    try:
        fields["hf_overrides"] = hf_overrides_text(parse_hf_overrides(text))
    except InvalidInput as exc:
        try:
            vllm_takes_it = isinstance(json.loads(text), dict)
        except (ValueError, RecursionError):
            vllm_takes_it = False
        return (f"{exc}: the plan leaves it out, so its memory may be off either way" if vllm_takes_it else
                f"{exc}: vLLM's parser keeps it as text, and the engine refuses it when it starts")
    return None


def _version(line: LaunchLine, base: Scenario) -> tuple[str, list[str], list[str], list[str]]:
    """The vLLM version to read the line with (a container tag names it), and what the report says about it:
    (version, imported, assumed, ignored)."""
    imported: list[str] = []
    ignored: list[str] = []
    gpu = find_gpu(base.gpu).name if base.gpu else "custom"  # its name, as the Hardware picker shows it
    assumed = [f"GPU {gpu}" + (f" ({base.gpu_memory_gib:g} GiB)" if base.gpu_memory_gib else "")
               + ": a launch line does not name it; pick yours under Hardware"]
    version = base.vllm_version
    tag = line.image_version
    if tag:
        try:
            version = str(VllmVersion.parse(tag))
        except CalculatorError as exc:
            ignored.append(f"the container tag's version {tag}: {exc}")
            tag = None
    if tag and tag.lower().lstrip("v") != version:
        imported.append(f"vLLM {version} (the container tag {tag}, a pre-release, build or hotfix of {version}: planned "
                        f"with {version}'s rules)")
    elif tag:
        imported.append(f"vLLM {version} (the container tag)")
    else:
        assumed.append(f"vLLM {version}: the command does not say which version; pick it under vLLM settings")
    note = version_notice(version)
    if note:
        assumed.append(note)
    return version, imported, assumed, ignored


_CAPTURE_FLAGS = frozenset({"--cudagraph-capture-sizes", "--cuda-graph-sizes", "--max-cudagraph-capture-size"})


def _graph_keys(text: str) -> tuple[dict[str, Any], tuple[str, ...]] | None:
    """The CUDA-graph sizes a --compilation-config JSON sets, and its other keys; None when it sets none."""
    try:
        config = json.loads(text)
    except ValueError:
        return None
    if not isinstance(config, dict):
        return None
    graphs = {k: config[k] for k in ("cudagraph_capture_sizes", "max_cudagraph_capture_size") if k in config}
    return (graphs, tuple(k for k in config if k not in graphs)) if graphs else None


def _capture_sizes(flag: str, value: Any, version: str) -> tuple[int, ...]:
    """The batch sizes vLLM captures for a capture-size flag (vllm/config/vllm.py _set_cudagraph_sizes)."""
    if flag == "--compilation-config":
        graphs = _graph_keys(str(value))[0]  # type: ignore[index]
        sizes = graphs.get("cudagraph_capture_sizes")
        flag, value = (("--cudagraph-capture-sizes", sizes) if sizes is not None else
                       ("--max-cudagraph-capture-size", graphs["max_cudagraph_capture_size"]))
    words = value if isinstance(value, (tuple, list)) else (value,)
    try:
        numbers = [int(str(word)) for word in words]
    except ValueError as exc:
        raise InvalidInput(f"{flag}: not a list of batch sizes: {' '.join(map(str, words))!r}") from exc
    if not numbers or min(numbers) < 1:
        raise InvalidInput(f"{flag}: capture sizes are positive batch sizes")
    largest = numbers[0]
    steps: tuple[range, ...] = ()
    if flag == "--max-cudagraph-capture-size":
        # NOTE: vLLM's default list, up to the given size: [1, 2, 4], steps of 8 below 256, of 16 from 256.
        steps = (range(1, min(largest, 4) + 1), range(8, min(largest + 1, 256), 8), range(256, largest + 1, 16))
    elif flag == "--cuda-graph-sizes" and len(numbers) == 1 and not VllmVersion.parse(version).at_least(11):
        steps = (range(1, 5), range(8, largest + 1, 8))  # 0.10: one value is the largest of [1, 2, 4] + steps of 8
    if sum(len(step) for step in steps) > MAX_CAPTURE_SIZES:
        raise InvalidInput(f"{flag} {largest}: more than {MAX_CAPTURE_SIZES:,} capture sizes; the plan takes at most "
                           "that many")
    if steps:
        return tuple(size for step in steps for size in step if size != 3)
    return tuple(sorted(set(numbers)))


def _coerce(field: str, value: str) -> Any:
    try:
        if field in ("kv_cache_memory_bytes", "max_model_len", "max_num_batched_tokens"):
            return parse_size(value)
        if field in ("gpu_memory_utilization", "cpu_offload_gb"):
            number = float(value)
            if number != number or number in (float("inf"), float("-inf")):
                raise ValueError(value)
            return number
        if field == "dtype":
            if value.lower() not in DTYPE_NAMES:
                raise ValueError(value)
            return DTYPE_NAMES[value.lower()]
        if field in ("kv_cache_dtype", "quantization"):
            return value
        if field == "all2all_backend":
            if value not in get_args(All2AllBackend):
                raise ValueError(value)
            return value
        if field == "lora_dtype":
            if value not in ("auto", "float16", "bfloat16"):
                raise ValueError(value)
            return value
        return int(value)
    except (ValueError, OverflowError) as exc:
        raise InvalidInput(f"{VALUE_FLAGS[field]}: not a valid value: {value!r}") from exc


# The speculative-decoding flags: --speculative-config (JSON, 0.7+), and the separate flags of older releases.
SPECULATIVE_FLAGS = frozenset({"--speculative-config", "--speculative-model", "--num-speculative-tokens",
                               "--speculative-draft-tensor-parallel-size", "--ngram-prompt-lookup-max"})
_SPECULATIVE_KEYS = {"method": "speculative_method", "model": "speculative_model",
                     "num_speculative_tokens": "num_speculative_tokens",
                     "draft_tensor_parallel_size": "draft_tensor_parallel_size"}
_SPECULATIVE_METHODS = ("ngram", "draft_model", "eagle", "eagle3", "mtp")
_NOTHING_TO_SPECULATE = ("names no method, model or num_speculative_tokens: vLLM has nothing to propose tokens "
                         "with, and the plan leaves speculative decoding out")


def speculative_method(method: str | None, model: str | None) -> str | None:
    """vLLM's method for a --speculative-config (vllm/config/speculative.py ``__post_init__``, 0.32): every
    per-model MTP name (deepseek_mtp, qwen3_next_mtp ...) is MTP; without a method, an "ngram" or "[ngram]" model is
    n-gram and any other is a draft model; None when the plan does not model the method."""
    if method:
        name = method.lower()
        if name.endswith("mtp"):
            return "mtp"
        return name if name in _SPECULATIVE_METHODS else None
    return "ngram" if (model or "").lower() in ("ngram", "[ngram]") else "draft_model"


def _speculative_fields(flag: str, value: str, fields: dict[str, Any]) -> str | None:
    """Read a speculative-decoding flag into ``fields``; the reason the plan is off when it cannot model it."""
    if flag != "--speculative-config":
        key = {"--speculative-model": "model", "--num-speculative-tokens": "num_speculative_tokens",
               "--speculative-draft-tensor-parallel-size": "draft_tensor_parallel_size"}.get(flag)
        if key is None:  # --ngram-prompt-lookup-max: the n-gram window, which the plan does not need
            return None
        config: dict[str, Any] = {k: fields[f] for k, f in _SPECULATIVE_KEYS.items() if fields.get(f) is not None}
        config[key] = value
        config.pop("method", None)
    else:
        parsed = _json_object(value)
        if isinstance(parsed, str):
            return parsed
        config = parsed
    if not any(config.get(key) for key in ("method", "model", "num_speculative_tokens")):
        return _NOTHING_TO_SPECULATE
    method = speculative_method(config.get("method"), config.get("model"))
    if method is None:
        return _SPECULATIVE
    fields["speculative_method"] = method
    for key, field in _SPECULATIVE_KEYS.items():
        if key != "method" and config.get(key) is not None:
            fields[field] = str(config[key]) if key == "model" else _whole(flag, key, config[key])
    if method == "draft_model" and not fields.get("speculative_model"):
        return "a draft model needs its \"model\""
    return None


def speculative_fields(text: str) -> dict[str, Any]:
    """Scenario fields from a --speculative-config JSON, as the import reads it; ``InvalidInput`` when the plan
    cannot use it (not JSON, a method it does not model, a draft model without its model)."""
    fields: dict[str, Any] = {}
    problem = _speculative_fields("--speculative-config", text, fields)
    if problem:
        raise InvalidInput(f"--speculative-config {text[:120]}: {problem}")
    return fields


def _whole(flag: str, key: str, value: Any) -> int:
    try:
        return int(str(value))
    except ValueError as exc:
        raise InvalidInput(f"{flag}: {key} is not a whole number: {str(value)[:40]!r}") from exc


def speculative_config(scenario: Scenario) -> dict[str, Any] | None:
    """The --speculative-config JSON for a scenario (None without speculative decoding)."""
    if scenario.speculative_method is None:
        return None
    config: dict[str, Any] = {"method": scenario.speculative_method}
    if scenario.speculative_model:
        config["model"] = scenario.speculative_model
    if scenario.num_speculative_tokens:
        config["num_speculative_tokens"] = scenario.num_speculative_tokens
    if scenario.draft_tensor_parallel_size:
        config["draft_tensor_parallel_size"] = scenario.draft_tensor_parallel_size
    return config
