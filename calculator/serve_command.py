"""``vllm serve`` round trip: write the launch command for a Scenario, and read one back into a Scenario.

Pure text handling. Accepts ``vllm serve MODEL ...`` and ``python -m vllm.entrypoints.openai.api_server
--model MODEL ...``, flags as ``--flag value`` or ``--flag=value``, shell line continuations and quotes.
"""

from __future__ import annotations

import shlex
from typing import Any

from pydantic import ValidationError

from .errors import InvalidInput
from .scenario import Scenario
from .units import parse_size

# Scenario field -> vllm serve flag, for the flags that take a value.
VALUE_FLAGS: dict[str, str] = {
    "tensor_parallel_size": "--tensor-parallel-size",
    "pipeline_parallel_size": "--pipeline-parallel-size",
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
}
_SHORT_FLAGS = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size", "-q": "--quantization"}
_FLAG_TO_FIELD = {flag: field for field, flag in VALUE_FLAGS.items()}
_BOOLEAN_FLAGS = {
    "--enforce-eager": ("enforce_eager", True),
    "--enable-extensible-kv-cache": ("enable_extensible_kv_cache", True),
    "--no-enable-extensible-kv-cache": ("enable_extensible_kv_cache", False),
    "--async-scheduling": ("async_scheduling", True),
    "--no-async-scheduling": ("async_scheduling", False),
}
# Flags that do not change the memory plan: accepted silently (with their value, where they take one).
_IGNORED_VALUE_FLAGS = frozenset({
    "--host", "--port", "--served-model-name", "--api-key", "--chat-template", "--tokenizer", "--revision",
    "--download-dir", "--seed", "--uvicorn-log-level", "--tool-call-parser", "--reasoning-parser",
    "--generation-config", "--swap-space", "--data-parallel-size", "--hf-token",
})
_IGNORED_BARE_FLAGS = frozenset({"--trust-remote-code", "--disable-log-requests", "--disable-log-stats",
                                 "--enable-prefix-caching", "--no-enable-prefix-caching", "--enable-auto-tool-choice",
                                 "--enable-chunked-prefill", "--no-enable-chunked-prefill"})
_ENTRYPOINTS = (("vllm", "serve"), ("python", "-m", "vllm.entrypoints.openai.api_server"),
                ("python3", "-m", "vllm.entrypoints.openai.api_server"))


def serve_command(scenario: Scenario, *, multiline: bool = True) -> str:
    """The ``vllm serve`` command for a scenario; only settings that differ from vLLM's defaults are written."""
    parts = ["vllm", "serve", shlex.quote(scenario.model)]
    for field, flag in VALUE_FLAGS.items():
        value = getattr(scenario, field)
        default = Scenario.model_fields[field].default
        if value is not None and value != default:
            parts.append(f"{flag} {shlex.quote(str(value))}")
    for flag, (field, value) in _BOOLEAN_FLAGS.items():
        if getattr(scenario, field) is value and value != Scenario.model_fields[field].default:
            parts.append(flag)
    if not multiline:
        return " ".join(parts)
    head = " ".join(parts[:3])
    return " \\\n  ".join([head, *parts[3:]])


def parse_serve_command(text: str, base: Scenario | None = None) -> tuple[Scenario, list[str]]:
    """A Scenario from a pasted launch command (GPU and version kept from ``base``), plus warnings."""
    base = base or Scenario()
    try:
        tokens = shlex.split(text.replace("\\\n", " "), comments=False)
    except ValueError as exc:
        raise InvalidInput(f"could not read the command: {exc}") from exc
    tokens = _strip_environment_and_entrypoint(tokens)
    fields: dict[str, Any] = {}
    warnings: list[str] = []
    index = 0
    if tokens and not tokens[0].startswith("-"):
        fields["model"] = tokens[0]
        index = 1
    while index < len(tokens):
        token = tokens[index]
        flag, _, inline = token.partition("=")
        flag = _SHORT_FLAGS.get(flag, flag)
        takes_value = flag in _FLAG_TO_FIELD or flag in _IGNORED_VALUE_FLAGS or flag == "--model"
        value = inline if inline else (tokens[index + 1] if takes_value and index + 1 < len(tokens) else None)
        index += 1 if inline or not takes_value else 2
        if flag == "--model" and value:
            fields["model"] = value
        elif flag == "--max-model-len" and value in ("auto", "-1"):
            warnings.append("--max-model-len auto: the plan shows the config's length and the largest that fits")
        elif flag in _FLAG_TO_FIELD and value is not None:
            fields[_FLAG_TO_FIELD[flag]] = _coerce(_FLAG_TO_FIELD[flag], value)
        elif flag in _BOOLEAN_FLAGS:
            field, setting = _BOOLEAN_FLAGS[flag]
            fields[field] = setting
        elif flag in _IGNORED_VALUE_FLAGS or flag in _IGNORED_BARE_FLAGS:
            continue
        else:
            if not inline and index < len(tokens) and not tokens[index].startswith("-"):
                token = f"{token} {tokens[index]}"  # an unknown flag's value goes with it
                index += 1
            warnings.append(f"ignored {token!r}: it does not change the memory plan or is not modelled")
    if "model" not in fields:
        raise InvalidInput("the command names no model (expected `vllm serve MODEL ...` or `--model MODEL`)")
    try:
        return base.replace(**fields), warnings
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidInput(f"{first['loc'][0] if first['loc'] else 'command'}: {first['msg']}") from exc


def _strip_environment_and_entrypoint(tokens: list[str]) -> list[str]:
    while tokens and "=" in tokens[0] and not tokens[0].startswith("-"):
        tokens = tokens[1:]  # VAR=value prefixes
    for entrypoint in _ENTRYPOINTS:
        if tuple(tokens[: len(entrypoint)]) == entrypoint:
            return tokens[len(entrypoint):]
    if tokens and tokens[0].endswith("vllm") and len(tokens) > 1 and tokens[1] == "serve":
        return tokens[2:]
    raise InvalidInput("not a vLLM launch command: expected `vllm serve MODEL ...` or "
                       "`python -m vllm.entrypoints.openai.api_server --model MODEL ...`")


def _coerce(field: str, value: str) -> Any:
    try:
        if field in ("kv_cache_memory_bytes", "max_model_len", "max_num_batched_tokens"):
            return parse_size(value)
        if field == "gpu_memory_utilization":
            return float(value)
        if field in ("dtype", "kv_cache_dtype", "quantization"):
            return value
        return int(value)
    except ValueError as exc:
        raise InvalidInput(f"{VALUE_FLAGS[field]}: not a valid value: {value!r}") from exc
