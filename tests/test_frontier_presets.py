"""The 2026 families' bundled presets (issue 27 item 4): each is the checkpoint's own config.json, and its counts are
worked out by hand from that config and checked against the parameter counts its makers publish.

Where the presets come from: google/gemma-4-26B-A4B and deepseek-ai/DeepSeek-V3.2 are the Hub config.json files as
vendored by ai-dynamo/aiconfigurator (aic-core/src/aiconfigurator_core/model_configs/, keys sorted as transformers
writes them).
"""

from __future__ import annotations

import json
from importlib import resources

from calculator.engine.kv_cache import plan_kv_cache
from calculator.model.architecture import build_model_spec
from calculator.model.inventory import checkpoint_num_params, weight_tensors
from calculator.model.model_source import load_config

PRESETS = resources.files("calculator") / "data" / "presets"


def preset(file_stem: str) -> dict:
    return json.loads((PRESETS / f"{file_stem}.json").read_text(encoding="utf-8"))


def kv_bytes_per_token(spec, kv_cache_dtype: str = "auto", block_size: int = 16) -> float:
    return plan_kv_cache(spec, block_size=block_size, kv_cache_dtype=kv_cache_dtype,
                         model_dtype_bytes=2).kv_bytes_per_token


# The Gemma 4 vision tower of the 26B-A4B and 31B checkpoints: 27 layers (q/k/v/o, gated MLP 4304 wide, 4 norms,
# q/k norms at 72), the 16 x 16 x 3 patch projection, the 2 x 10,240 position table, the standardisation vectors.
GEMMA4_VISION_TOWER = (27 * (4 * 1152 ** 2 + 3 * 1152 * 4304 + 4 * 1152 + 2 * 72)
                       + 1152 * 3 * 16 * 16 + 2 * 10_240 * 1152 + 2 * 1152)


class TestGemma4MoePreset:
    """google/gemma-4-26B-A4B: 30 layers (25 sliding, 5 full), each a dense MLP and a 128-expert MoE side by side."""

    H, VOCAB, EXPERT = 2816, 262_144, 3 * 704 * 2816

    def text_by_hand(self) -> int:
        h = self.H
        per_layer = (4 * h + 1 + 3 * 2112 * h  # 4 norms, the layer scalar, the dense MLP
                     + 128 * h + h + 128 + 128 * self.EXPERT + 3 * h)  # router proj/scale, per-expert scale, 3 norms
        sliding = 2 * 16 * 256 * h + 2 * 8 * 256 * h + 2 * 256  # q/o at 16 heads, k/v at 8, q/k norms
        full = 2 * 16 * 512 * h + 2 * 512 * h + 2 * 512  # k = v: no v_proj, 2 global KV heads at 512
        return self.VOCAB * h + 30 * per_layer + 25 * sliding + 5 * full + h  # tied embeddings, the final norm

    def test_the_text_model_is_the_model_cards_25_2b_total_and_3_8b_active(self) -> None:
        # google/gemma-4-26B-A4B-it's model card: "25.2B total parameters" with "3.8B active" (8 of 128 experts).
        text = self.text_by_hand()
        assert text == 25_233_141_790
        assert round(text / 1e8) == 252
        assert round((text - 30 * 120 * self.EXPERT) / 1e8) == 38

    def test_the_preset_counts_the_text_model_the_vision_tower_and_its_projection(self) -> None:
        spec = build_model_spec(preset("google__gemma-4-26B-A4B"), "google/gemma-4-26B-A4B")
        assert spec.known_architecture and not spec.warnings
        assert spec.num_params == self.text_by_hand() + GEMMA4_VISION_TOWER + 1152 * self.H  # + embed_vision
        assert spec.moe is not None and (spec.moe.num_experts, spec.moe.experts_per_token) == (128, 8)

    def test_its_cache_holds_each_layer_at_its_own_width(self) -> None:
        spec = build_model_spec(preset("google__gemma-4-26B-A4B"), "google/gemma-4-26B-A4B")
        # 25 sliding layers x 8 KV heads x 256 x (K + V) x 2 B + 5 full layers x 2 heads x 512 x 2 x 2 B
        assert kv_bytes_per_token(spec) == 25 * 8 * 256 * 2 * 2 + 5 * 2 * 512 * 2 * 2 == 225_280
        assert {layer.sliding_window for layer in spec.layers if layer.kind == "sliding_window"} == {1024}

    def test_it_resolves_offline_by_its_hub_id(self) -> None:
        assert load_config("google/gemma-4-26B-A4B")[1] == "preset"


class TestDeepSeekV32Preset:
    def test_it_is_deepseek_v3_with_the_indexer_fields(self) -> None:
        v3, v32 = preset("deepseek-ai__DeepSeek-V3"), preset("deepseek-ai__DeepSeek-V3.2")
        changed = {key for key in v3.keys() | v32.keys() if v3.get(key) != v32.get(key)}
        assert changed == {"architectures", "model_type", "auto_map", "transformers_version", "quantization_config",
                           "index_head_dim", "index_n_heads", "index_topk"}
        assert (v32["index_head_dim"], v32["index_n_heads"], v32["index_topk"]) == (128, 64, 2048)

    def test_weights_are_the_model_cards_685b_and_the_cache_adds_the_indexer_key(self) -> None:
        v3 = build_model_spec(preset("deepseek-ai__DeepSeek-V3"), "deepseek-ai/DeepSeek-V3")
        spec = build_model_spec(preset("deepseek-ai__DeepSeek-V3.2"), "deepseek-ai/DeepSeek-V3.2")
        assert spec.known_architecture and not spec.warnings
        # The indexer in each of the 61 layers and the MTP layer: wq_b 64 heads x 128 x q_lora 1536, wk 128 x 7168,
        # k_norm weight and bias, weights_proj 64 x 7168.
        assert spec.num_params - v3.num_params == 62 * (64 * 128 * 1536 + 128 * 7168 + 2 * 128 + 64 * 7168)
        assert round(spec.num_params / 1e9) == 685  # deepseek-ai/DeepSeek-V3.2's model card: 685B
        # The Hub's safetensors total (FP8 weights and their float32 128 x 128 block scales) is listed as 685.4B
        # for deepseek-ai/DeepSeek-V3.2-Speciale, the same shape (free2aitools.com and drose.io, from the Hub's
        # metadata): V3's 684,531,386,000 plus the indexers and wq_b's 64 x 12 scales.
        config = preset("deepseek-ai__DeepSeek-V3.2")
        assert round(checkpoint_num_params(config, weight_tensors(config)) / 1e8) == 6854
        # 61 layers x (the MLA latent 576 x 2 B + the indexer's 128 fp8 values and one fp32 scale)
        assert kv_bytes_per_token(spec) == 61 * (576 * 2 + 132) == 78_324
