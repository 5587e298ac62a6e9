"""``vllm serve`` round trip: write the launch command for a Scenario, and read one back into a Scenario.

Pure text handling. ``launch_line`` finds the vLLM arguments in what was pasted; this module reads them as vLLM's
``FlexibleArgumentParser`` would (``--flag value``, ``--flag=value``, underscores for dashes, the short aliases)
and reports what it imported, what it assumed and what it ignored, by name, with a "did you mean" for flags vLLM
does not have (vLLM itself refuses to start with those).
"""

from __future__ import annotations

import difflib
import json
import shlex
from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from .engine.vllm_versions import VllmVersion, version_notice
from .errors import CalculatorError, InvalidInput
from .launch_line import find_launch_line
from .scenario import Scenario
from .units import parse_size

# Scenario field -> vllm serve flag, for the flags that take a value.
VALUE_FLAGS: dict[str, str] = {
    "tensor_parallel_size": "--tensor-parallel-size",
    "pipeline_parallel_size": "--pipeline-parallel-size",
    "data_parallel_size": "--data-parallel-size",
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
}
_FLAG_TO_FIELD = {flag: field for field, flag in VALUE_FLAGS.items()}
# Flags whose presence sets a field (the --no- forms come from the option table).
_BOOLEAN_FLAGS: dict[str, str] = {
    "--enforce-eager": "enforce_eager",
    "--enable-extensible-kv-cache": "enable_extensible_kv_cache",
    "--async-scheduling": "async_scheduling",
    "--enable-expert-parallel": "enable_expert_parallel",
    "--enable-prefix-caching": "enable_prefix_caching",
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


def _reason(flag: str, base: Scenario) -> str:
    """Why a known flag leaves the plan unchanged (or what it would need)."""
    v0 = base.vllm_version.startswith(("0.4.", "0.5.", "0.6.", "0.7."))
    reasons = {
        "--swap-space": "CPU memory for swapped-out KV blocks (V0; V1 recomputes instead): the GPU plan is unchanged",
        "--kv-offloading-size": "a CPU buffer for offloaded KV blocks: the GPU pool is unchanged",
        "--kv-offloading-backend": "how KV blocks are offloaded to the CPU: the GPU pool is unchanged",
        "--enable-chunked-prefill": ("changes V0's default max_num_batched_tokens; give --max-num-batched-tokens to "
                                     "plan with it") if v0 else "always on in the V1 engine: nothing changes",
        "--no-enable-chunked-prefill": ("V0 then batches whole prompts (the plan's default)") if v0 else
        "the V1 engine always chunks prefills: nothing changes",
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
    unknown: tuple[str, ...]  # flags vLLM does not have, with "did you mean"

    def notes(self) -> list[str]:
        """Everything a user should read, assumptions and problems first."""
        return [*self.unknown, *(f"assumed {a}" for a in self.assumed), *(f"ignored {i}" for i in self.ignored)]


@cache
def _option_table() -> tuple[dict[str, tuple[str, bool]], tuple[str, ...]]:
    """Every vLLM flag spelling -> (canonical flag, takes a value); and the canonical long flags."""
    text = (resources.files("calculator") / "data" / "vllm_serve_flags.json").read_text(encoding="utf-8")
    table: dict[str, tuple[str, bool]] = {}
    for names, takes_value in json.loads(text)["options"]:
        canonical = names[0]
        for name in names:
            negated = name.startswith("--no-")
            table[name] = (name if negated else canonical, takes_value)
    return table, tuple(sorted(name for name in table if name.startswith("--")))


def serve_command(scenario: Scenario, *, multiline: bool = True) -> str:
    """The ``vllm serve`` command for a scenario; only settings that differ from vLLM's defaults are written."""
    parts = ["vllm", "serve", shlex.quote(scenario.model)]
    for field, flag in VALUE_FLAGS.items():
        value = getattr(scenario, field)
        default = Scenario.model_fields[field].default
        if value is not None and value != default:
            parts.append(f"{flag} {shlex.quote(f'{value:g}' if isinstance(value, float) else str(value))}")
    for flag, field in _BOOLEAN_FLAGS.items():
        value = getattr(scenario, field)
        if value is not None and value != Scenario.model_fields[field].default:
            parts.append(flag if value else flag.replace("--", "--no-", 1))
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

    Settings the command does not give are vLLM's defaults; the GPU, its memory, the platform, other processes'
    memory and the vLLM version come from ``base`` (a launch line does not say them; a container tag names the
    version). Bad values raise ``InvalidInput`` naming the flag.
    """
    base = base or Scenario()
    line = find_launch_line(text)
    table, canonical_flags = _option_table()
    fields: dict[str, Any] = {}
    imported: list[str] = []
    ignored: list[str] = []
    unknown: list[str] = []
    tokens = list(line.arguments)
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if not token.startswith("-"):
            if "model" in fields:
                ignored.append(f"{token!r}: an extra word after the model")
            else:
                fields["model"] = token
            continue
        written, has_inline, inline = token.partition("=")
        flag = written if not written.startswith("--") else "--" + written[2:].replace("_", "-")
        known = table.get(flag)
        if known is None:
            index = _report_unknown(flag, token, has_inline, tokens, index, table, canonical_flags, unknown)
            continue
        canonical, takes_value = known
        value = inline if has_inline else None
        if takes_value and not has_inline:
            if index >= len(tokens):
                raise InvalidInput(f"{canonical} needs a value")
            value, index = tokens[index], index + 1
        shown = f"{canonical} {value}" if value is not None else canonical
        if canonical == "--model":
            fields["model"] = value
            imported.append(shown)
        elif canonical == "--max-model-len" and str(value).lower() in ("auto", "-1"):
            ignored.append(f"{shown}: the plan shows the config's length and the largest that fits")
        elif canonical in _FLAG_TO_FIELD:
            fields[_FLAG_TO_FIELD[canonical]] = _coerce(_FLAG_TO_FIELD[canonical], str(value))
            imported.append(shown)
        elif "--" + canonical.removeprefix("--no-").removeprefix("--") in _BOOLEAN_FLAGS:
            positive = "--" + canonical.removeprefix("--no-").removeprefix("--")
            fields[_BOOLEAN_FLAGS[positive]] = not canonical.startswith("--no-")
            imported.append(shown)
        else:
            ignored.append(f"{shown}: {_reason(canonical, base)}")
    if not fields.get("model"):
        raise InvalidInput("the command names no model (expected `vllm serve MODEL ...` or `--model MODEL`)")
    version = base.vllm_version
    assumed = [f"GPU {base.gpu or 'custom'}" + (f" ({base.gpu_memory_gib:g} GiB)" if base.gpu_memory_gib else "")
               + ": a launch line does not name it; pick yours under Hardware"]
    from_tag = False
    if line.image_version:
        try:
            version, from_tag = str(VllmVersion.parse(line.image_version)), True
            imported.append(f"vLLM {version} (the container tag)")
        except CalculatorError as exc:
            ignored.append(f"the container tag's version {line.image_version}: {exc}")
    if not from_tag:
        assumed.append(f"vLLM {version}: the command does not say which version; pick it under vLLM settings")
    note = version_notice(version)
    if note:
        assumed.append(note)
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
                                  ignored=tuple(ignored), unknown=tuple(unknown))


def _report_unknown(flag: str, token: str, has_inline: bool, tokens: list[str], index: int,
                    table: dict[str, tuple[str, bool]], canonical_flags: tuple[str, ...], unknown: list[str]) -> int:
    """Note a flag vLLM does not know (with the closest one it does); returns the index after its value."""
    close = difflib.get_close_matches(flag, canonical_flags, n=1, cutoff=0.75)
    takes_value = table[close[0]][1] if close else (index < len(tokens) and not tokens[index].startswith("-"))
    shown = token
    if takes_value and not has_inline and index < len(tokens):
        shown, index = f"{token} {tokens[index]}", index + 1
    hint = f"; did you mean {close[0]}?" if close else ""
    unknown.append(f"{shown!r} is not a vllm serve flag (vLLM would refuse to start){hint}")
    return index


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
        return int(value)
    except (ValueError, OverflowError) as exc:
        raise InvalidInput(f"{VALUE_FLAGS[field]}: not a valid value: {value!r}") from exc
