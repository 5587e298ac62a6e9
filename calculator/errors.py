"""One error tree: every failure the calculator reports to a person derives from ``CalculatorError``.

Each message says what happened and what to do; pages and the CLI show ``str(exc)`` as it is.
"""

from __future__ import annotations

import re


class CalculatorError(Exception):
    """Base of every error the calculator raises on purpose."""


class InvalidInput(CalculatorError, ValueError):
    """A setting is out of range or inconsistent (e.g. TP does not divide the attention heads)."""


class ModelNotFound(CalculatorError):
    """No preset, file or Hub repository by that name."""


class GatedModel(CalculatorError):
    """The Hub repository exists but needs an accepted licence and a token."""


class HubUnreachable(CalculatorError):
    """The Hugging Face Hub could not be reached (offline, firewall, timeout)."""


class InvalidConfig(CalculatorError):
    """A config.json that is not JSON, or lacks the fields a decoder needs."""


class UnsupportedArchitecture(CalculatorError):
    """An architecture the calculator cannot even estimate (e.g. encoder-only)."""


class UnknownGpu(CalculatorError):
    """A GPU name that is neither in the catalog nor one of its aliases."""


class UnsupportedVllmVersion(CalculatorError):
    """A vLLM version string that cannot be parsed or predates the V0 engine we model."""


class NvmlUnavailable(CalculatorError):
    """NVML cannot read the GPUs: nvidia-ml-py missing, no NVIDIA driver, or an NVML error."""


def one_line_validation_error(exc: object, *, as_flags: bool = False) -> str:
    """The first problem of a pydantic ``ValidationError`` as one line naming the field, e.g.
    ``max_model_len: Input should be less than or equal to 100000000 (got 1000000000)``; ``as_flags`` names it as
    the ``vllm serve`` flag (``--max-model-len``)."""
    errors = exc.errors() if hasattr(exc, "errors") else []
    if not errors:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    first = errors[0]
    message = str(first.get("msg", "invalid value")).splitlines()[0]
    if not first.get("loc"):  # a rule across fields: its message names them
        message = message.removeprefix("Value error, ")
        # NOTE: the rule's field names as the flags a user typed (output_tokens_p95 -> --output-tokens-p95).
        return re.sub(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b", lambda m: "--" + m[0].replace("_", "-"),
                      message) if as_flags else message
    field = ".".join(str(part) for part in first["loc"])
    if as_flags:
        field = "--" + field.replace("_", "-")
    if message.startswith(f"Value error, {field} "):  # a validator's own sentence that names the flag already
        return message.removeprefix("Value error, ")
    shown = repr(first.get("input"))
    got = f" (got {shown if len(shown) <= 40 else shown[:37] + '...'})" if "input" in first and not isinstance(
        first["input"], dict) else ""
    return f"{field}: {message}{got}"
