"""``--hf-overrides``: a JSON object vLLM applies to the model's Hugging Face config before it builds the model.

vLLM's ``ModelConfig`` (vllm/config/model.py, 0.28 to 0.32): a value that is not a dict replaces the top-level
attribute (``config.update``); a dict value merges key by key into a nested config (``text_config``,
``vision_config``: ``_update_nested``), and replaces any other dict-valued attribute (``rope_scaling``)
whole. The planner holds the overrides as canonical JSON text, so a Scenario stays hashable and a link short.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from ..errors import InvalidConfig, InvalidInput
from .architecture import build_model_spec
from .spec import ModelSpec

MAX_HF_OVERRIDES_CHARS = 4096  # published uses override a handful of keys (num_hidden_layers, architectures, rope)
MAX_HF_OVERRIDES_NESTING = 8
FLAG = "--hf-overrides"


def parse_hf_overrides(text: str | Mapping[str, Any]) -> dict[str, Any]:
    """The overrides as a dict, from JSON text (a flag, a link, a text field) or a dict; ``InvalidInput`` says why
    anything else is refused."""
    if isinstance(text, Mapping):
        text = json.dumps(text)
    if not isinstance(text, str):
        raise InvalidInput(f"{FLAG} must be a JSON object such as '{{\"num_hidden_layers\": 16}}'")
    if len(text) > MAX_HF_OVERRIDES_CHARS:
        raise InvalidInput(f"{FLAG} is {len(text):,} characters; the planner reads at most "
                           f"{MAX_HF_OVERRIDES_CHARS:,}")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(f"{FLAG} is not JSON ({str(exc).splitlines()[0][:80]}); give an object such as "
                           "'{\"num_hidden_layers\": 16}'") from exc
    if not isinstance(value, dict):
        raise InvalidInput(f"{FLAG} must be a JSON object such as '{{\"num_hidden_layers\": 16}}', not "
                           f"{type(value).__name__ if value is not None else 'null'}")
    if _depth(value) > MAX_HF_OVERRIDES_NESTING:
        raise InvalidInput(f"{FLAG} nests deeper than {MAX_HF_OVERRIDES_NESTING} levels")
    return value


def hf_overrides_text(overrides: Mapping[str, Any]) -> str:
    """Canonical JSON (sorted keys, no spaces): equal overrides give equal text."""
    return json.dumps(overrides, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def apply_hf_overrides(config: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` (a config.json dict) with ``overrides`` applied as vLLM applies them."""
    result = dict(config)
    for key, value in overrides.items():
        current = result.get(key)
        if isinstance(value, dict) and isinstance(current, Mapping) and _is_sub_config(key):
            result[key] = _merged(current, value)
        else:
            result[key] = value
    return result


def with_hf_overrides(spec: ModelSpec, overrides: str | None) -> ModelSpec:
    """``spec`` rebuilt from its config.json with ``overrides`` (canonical JSON text) applied; ``spec`` itself
    when there are none. A value the config cannot take is refused like a bad config.json, naming the flag."""
    if not overrides:
        return spec
    return _overridden(spec, overrides)


@lru_cache(maxsize=128)
def _overridden(spec: ModelSpec, overrides: str) -> ModelSpec:
    if spec.hf_config is None:
        raise InvalidInput(f"{FLAG} needs the model's config.json, which {spec.model_id} was not built from")
    config = apply_hf_overrides(spec.hf_config, json.loads(overrides))
    try:
        rebuilt = build_model_spec(config, model_id=spec.model_id)
    except InvalidConfig as exc:
        raise InvalidInput(f"{FLAG} {overrides}: {exc}") from exc
    # NOTE: the Hub's stored parameter count describes the checkpoint, not the overridden model; a dtype read from
    # the safetensors headers still holds where the overrides set none.
    return rebuilt.model_copy(update={"checkpoint_num_params": None,
                                      "config_dtype": rebuilt.config_dtype or spec.config_dtype})


def _is_sub_config(key: str) -> bool:
    # NOTE: transformers builds text_config, vision_config, audio_config ... as nested configs (merged by vLLM);
    # quantization_config stays a plain dict attribute (replaced whole).
    return key.endswith("_config") and key != "quantization_config"


def _merged(target: Mapping[str, Any], updates: Mapping[str, Any]) -> dict[str, Any]:
    """vLLM's ``_update_nested``: dicts merge recursively into dicts, anything else replaces."""
    result = dict(target)
    for key, value in updates.items():
        current = result.get(key)
        result[key] = _merged(current, value) if isinstance(value, dict) and isinstance(current, Mapping) else value
    return result


def _depth(value: Any) -> int:
    """How deep dicts and lists nest in ``value`` (walked without recursion: the text may be 2,000 brackets)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest
