"""Reading config.json values the way transformers' config classes fill them in.

Multimodal ``text_config``/``vision_config`` blocks list only the values that differ from their class
defaults, so a missing key means "the class default", which ``CLASS_DEFAULTS`` spells out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import InvalidConfig

# NOTE: defaults of the transformers config classes, for the keys our inventories read (transformers 4.5x).
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "tie_word_embeddings": True, "max_position_embeddings": 131_072, "sliding_window_pattern": 6},
    "gemma2": {"head_dim": 256, "tie_word_embeddings": True},
    "gemma": {"head_dim": 256, "tie_word_embeddings": True},
    "mistral": {"vocab_size": 32_000, "hidden_size": 4096, "intermediate_size": 14_336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 4096 * 32},
    "llama": {"vocab_size": 32_000, "hidden_size": 4096, "intermediate_size": 11_008, "num_hidden_layers": 32,
              "num_attention_heads": 32},
    "opt": {"tie_word_embeddings": True, "do_layer_norm_before": True, "enable_bias": True},
    "lfm2": {"tie_word_embeddings": True},  # NOTE: vLLM ties LFM2's head whatever the config says
    "clip_vision_model": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                          "num_attention_heads": 12, "num_channels": 3, "image_size": 224, "patch_size": 32},
    "siglip_vision_model": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                            "num_attention_heads": 12, "num_channels": 3, "image_size": 224, "patch_size": 16,
                            "vision_use_head": True},
    "pixtral": {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
                "num_channels": 3, "image_size": 1024, "patch_size": 16},
}
# Multimodal wrappers whose text model lives under ``text_config``, with the text model_type to assume.
TEXT_CONFIG_TYPE_DEFAULTS = {"gemma3": "gemma3_text", "mistral3": "mistral", "llava": "llama",
                              "llava_next": "llama", "gemma4": "gemma4_text", "qwen3_vl": "qwen3_vl_text",
                              "qwen3_vl_moe": "qwen3_vl_moe_text", "qwen3_5": "qwen3_5_text",
                              "qwen3_5_moe": "qwen3_5_moe_text"}


class Cfg:
    """A read-only view of one config block, with class defaults and ``InvalidConfig`` for missing keys."""

    def __init__(self, values: Mapping[str, Any], origin: str) -> None:
        model_type = str(values.get("model_type") or "")
        self._values = {**CLASS_DEFAULTS.get(model_type, {}), **{k: v for k, v in values.items() if v is not None}}
        self.origin = origin
        self.model_type = model_type

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    def has(self, key: str) -> bool:
        return key in self._values

    def as_mapping(self) -> Mapping[str, Any]:
        """The block's values, class defaults filled in (for readers shared with ``architecture.py``)."""
        return dict(self._values)

    def int(self, key: str, *aliases: str, default: int | None = None) -> int:
        """A positive-or-zero integer; the first of ``key`` and ``aliases`` that is set, else ``default``."""
        for name in (key, *aliases):
            value = self._values.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
        if default is not None:
            return default
        raise InvalidConfig(f"{self.origin} lacks the integer {key!r} that its weight layout needs")

    def flag(self, key: str, default: bool = False) -> bool:
        return bool(self._values.get(key, default))


def text_cfg(config: Mapping[str, Any]) -> Cfg:
    """The language model's block: ``text_config`` (filled with its class defaults) or the top level."""
    text = config.get("text_config")
    if not isinstance(text, Mapping):
        return Cfg(config, "config.json")
    wrapper = str(config.get("model_type") or "")
    values = dict(text)
    values.setdefault("model_type", TEXT_CONFIG_TYPE_DEFAULTS.get(wrapper, ""))
    if "tie_word_embeddings" not in values and "tie_word_embeddings" in config:
        values["tie_word_embeddings"] = config["tie_word_embeddings"]
    return Cfg(values, "config.json text_config")


def vision_cfg(config: Mapping[str, Any], default_type: str) -> Cfg:
    vision = config.get("vision_config")
    values = dict(vision) if isinstance(vision, Mapping) else {}
    values.setdefault("model_type", default_type)
    return Cfg(values, "config.json vision_config")


def is_tied(text: Cfg) -> bool:
    return text.flag("tie_word_embeddings", default=False)
