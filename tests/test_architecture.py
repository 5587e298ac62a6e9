"""config.json -> ModelSpec: attention kinds, MLA, MoE, context length and bad configs."""

from __future__ import annotations

import json

import pytest

from calculator import InvalidConfig, UnsupportedArchitecture, load_model_spec, model_spec_from_text
from calculator.model.architecture import build_model_spec


def kinds(model: str) -> dict[str, int]:
    spec = load_model_spec(model)
    counts: dict[str, int] = {}
    for layer in spec.layers:
        counts[layer.kind] = counts.get(layer.kind, 0) + 1
    return counts


def test_gemma3_every_sixth_layer_is_global_and_rope_scaling_is_not_applied_twice():
    spec = load_model_spec("google/gemma-3-27b-it")
    assert kinds("google/gemma-3-27b-it") == {"sliding_window": 52, "full": 10}
    assert [i for i, layer in enumerate(spec.layers) if layer.kind == "full"][:2] == [5, 11]
    assert spec.layers[0].sliding_window == 1024
    assert spec.derived_max_model_len == 131_072  # Gemma3TextConfig default, not x8 (linear factor)
    assert spec.is_multimodal and spec.head_dim == 128 and spec.num_key_value_heads == 16


def test_gemma2_even_layers_slide():
    spec = load_model_spec("google/gemma-2-9b-it")
    assert [layer.kind for layer in spec.layers[:4]] == ["sliding_window", "full", "sliding_window", "full"]


def test_gpt_oss_alternates_and_yarn_scales_the_original_length():
    spec = load_model_spec("openai/gpt-oss-20b")
    assert kinds("openai/gpt-oss-20b") == {"sliding_window": 12, "full": 12}
    assert spec.derived_max_model_len == 4096 * 32
    assert spec.moe.num_experts == 32 and spec.moe.experts_per_token == 4


def test_deepseek_v3_mla_and_moe():
    spec = load_model_spec("deepseek-ai/DeepSeek-V3")
    assert spec.mla.latent_size == 576
    assert {layer.kind for layer in spec.layers} == {"mla"}
    assert spec.derived_max_model_len == 4096 * 40 == 163_840
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.num_moe_layers) == (256, 8, 61 - 3)
    assert spec.moe.num_shared_experts == 1


def test_linear_rope_scaling_multiplies_the_context():
    assert load_model_spec("deepseek-ai/deepseek-coder-6.7b-instruct").derived_max_model_len == 16_384 * 4


def test_llama3_rope_keeps_the_published_length():
    assert load_model_spec("meta-llama/Llama-3.1-8B-Instruct").derived_max_model_len == 131_072


def test_qwen2_window_is_ignored_unless_use_sliding_window():
    assert kinds("Qwen/Qwen2.5-7B-Instruct") == {"full": 28}


def test_mistral_v01_window_applies_to_every_layer():
    assert kinds("mistralai/Mistral-7B-v0.1") == {"sliding_window": 32}


def test_mha_when_the_config_has_no_kv_heads():
    spec = load_model_spec("microsoft/phi-1_5")
    assert spec.num_key_value_heads == 32 and spec.head_dim == 2048 // 32


def test_multimodal_text_config_is_completed_with_class_defaults():
    spec = load_model_spec("llava-hf/llava-v1.6-mistral-7b-hf")
    assert (spec.hidden_size, spec.num_hidden_layers, spec.num_key_value_heads) == (4096, 32, 8)
    assert spec.config_dtype == "float16"  # the top-level dtype wins, as in vLLM


def test_mixtral_and_qwen3_moe_layers():
    assert load_model_spec("mistralai/Mixtral-8x7B-Instruct-v0.1").moe.num_moe_layers == 32
    moe = load_model_spec("Qwen/Qwen3-30B-A3B").moe
    assert (moe.num_experts, moe.experts_per_token, moe.num_moe_layers) == (128, 8, 48)


def test_not_json_is_a_clear_error():
    with pytest.raises(InvalidConfig, match="not valid JSON"):
        model_spec_from_text("{not json")


def test_missing_fields_are_named():
    with pytest.raises(InvalidConfig, match="hidden_size"):
        model_spec_from_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))


def test_encoder_models_are_refused():
    with pytest.raises(UnsupportedArchitecture):
        build_model_spec({"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 768,
                          "num_hidden_layers": 12, "num_attention_heads": 12, "vocab_size": 30522}, "bert")


def test_unknown_architecture_is_estimated_with_every_assumption_listed():
    spec = build_model_spec({"architectures": ["FancyForCausalLM"], "model_type": "fancy", "hidden_size": 1024,
                             "num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 1000,
                             "intermediate_size": 4096}, "fancy")
    assert not spec.known_architecture
    assert len(spec.warnings) == 1 and "Unknown architecture FancyForCausalLM" in spec.warnings[0]
    assert spec.num_params > 0
