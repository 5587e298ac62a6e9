"""The API server's own work on each request: what runs on its one asyncio event loop before the engine sees it.

vLLM's OpenAI server handles every request on one event loop. Its synchronous work (parsing the request, rendering
its chat template, building the engine request) runs one request at a time, so requests that arrive together queue
for it (``bench._FrontEnd``); the tokenizer runs in a thread beside it.

What is modelled is the work that differs by version: the chat template's parse, which two spans of releases run
on every chat request (``VersionRules.chat_template_parse``). It costs milliseconds, as much as a small model's
prefill: 1,000 chat requests sent at once to vLLM 0.11.0 wait ~11 s before the first reaches the engine.
``/v1/completions`` has no template, and gpt-oss's chat requests take the harmony encoder, not Jinja.

The times are measured, not fitted: ``benchmarks/chat_template_parse.py`` runs each version's own parse on each
model's template (``benchmarks/data/chat_templates``) on this repository's reference machine.
"""

from __future__ import annotations

from statistics import median
from typing import Literal

from pydantic import BaseModel, ConfigDict

from calculator.engine.vllm_versions import VersionRules
from calculator.model.spec import ModelSpec

Endpoint = Literal["completions", "chat"]
ENDPOINTS: tuple[Endpoint, ...] = ("completions", "chat")
ENDPOINT_PATHS: dict[Endpoint, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}

# Median ms of each parse, benchmarks/data/chat_template_parse.json (Intel Xeon, 2 vCPUs, jinja2 3.1.6):
# "template_kwargs" is 0.11.0's resolve_chat_template_kwargs, "content_format" 0.8.2-0.9.1's format detection.
PARSE_MS: dict[str, dict[str, float]] = {
    "Qwen__Qwen2.5-7B-Instruct": {"template_kwargs": 6.36, "content_format": 2.95},
    "Qwen__Qwen3-8B": {"template_kwargs": 12.22, "content_format": 5.5},
    "Qwen__Qwen3-Next-80B-A3B-Instruct": {"template_kwargs": 6.46, "content_format": 3.11},
    "meta-llama__Llama-3.1-8B-Instruct": {"template_kwargs": 10.53, "content_format": 5.22},
    "zai-org__GLM-4.6": {"template_kwargs": 11.06, "content_format": 5.26},
}
# Which measured template a model's chat requests render: the first family whose name is in the model id (its
# releases share one template; the Instruct-2507 releases and Qwen3-Next dropped the thinking parts of Qwen3's).
TEMPLATE_FAMILIES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("qwen3-next", "qwen3-coder-next", "-2507"), "Qwen__Qwen3-Next-80B-A3B-Instruct"),
    (("qwen3",), "Qwen__Qwen3-8B"),
    (("glm-4.5", "glm-4.6", "glm-4.7"), "zai-org__GLM-4.6"),
    (("llama-3.1", "llama-3.2", "llama-3.3"), "meta-llama__Llama-3.1-8B-Instruct"),
    (("qwen2.5",), "Qwen__Qwen2.5-7B-Instruct"),
)
HARMONY_MODEL_TYPES = frozenset({"gpt_oss"})  # serving_chat's use_harmony (0.10.1+): no Jinja template


class FrontEndWork(BaseModel):
    """The API server's per-request work on its event loop that the speed model counts, and why."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    seconds: float
    reason: str  # what it is, in words ("" when nothing is counted)


NONE = FrontEndWork(seconds=0.0, reason="")


def template_of(model: ModelSpec) -> str | None:
    """The measured template a model renders (None: no measured template of its family)."""
    name = model.model_id.replace("__", "/").lower()
    for markers, template in TEMPLATE_FAMILIES:
        if any(marker in name for marker in markers):
            return template
    return None


def front_end_work(rules: VersionRules, model: ModelSpec, endpoint: Endpoint) -> FrontEndWork:
    """The per-request work ``rules``' vLLM does on its event loop for ``endpoint`` requests to ``model``."""
    parse = rules.chat_template_parse
    if endpoint != "chat" or parse is None or model.model_type in HARMONY_MODEL_TYPES:
        return NONE
    template = template_of(model)
    where = ("0.11.0's resolve_chat_template_kwargs" if parse == "template_kwargs"
             else "0.8.2-0.9.1's content-format detection")
    if template is None:
        ms = median(times[parse] for times in PARSE_MS.values())
        whose = f"a typical template's (the median of {len(PARSE_MS)} measured; this model's is not on record)"
    else:
        ms = PARSE_MS[template][parse]
        whose = f"{template.replace('__', '/')}'s template"
    return FrontEndWork(seconds=ms / 1e3,
                        reason=f"vLLM {rules.version} parses the chat template on every chat request ({where}): "
                               f"{ms:.1f} ms for {whose}, one request at a time on the API server's event loop")
