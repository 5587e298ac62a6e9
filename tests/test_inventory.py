"""Weight inventories from config.json: every preset's parameter count against its published figure.

The expected numbers come from shared/data/configs/INDEX.md (the Hub's ``safetensors.total`` or a tensor sum
of the checkpoint) and are listed here with their source; ``test_the_table_agrees_with_index_md`` keeps the
two in step. ``num_params`` = logical parameters (no duplicate tied head, no buffers, no quantization
scales; DeepSeek's MTP layer included); ``checkpoint_num_params`` = what the Hub counts.
"""

from __future__ import annotations

import copy
import json
import re
from importlib import resources
from pathlib import Path

import pytest

from calculator.errors import InvalidConfig, UnsupportedArchitecture
from calculator.model.inventory import (
    FAMILIES,
    checkpoint_facts,
    checkpoint_num_params,
    generic_decoder_tensors,
    is_known_architecture,
    weight_tensors,
)
from calculator.model.spec import WeightTensor

# NOTE: a verbatim copy of shared/data/configs/INDEX.md (tests/data/README.md), so a clone alone runs this test.
INDEX_MD = Path(__file__).resolve().parent / "data" / "configs" / "INDEX.md"


def preset(file_stem: str) -> dict:
    folder = resources.files("calculator") / "data" / "presets"
    return json.loads((folder / f"{file_stem}.json").read_text(encoding="utf-8"))


def logical(tensors: tuple[WeightTensor, ...], *, loaded_only: bool = False) -> int:
    return sum(t.numel * t.count * t.num_layers for t in tensors if t.loaded or not loaded_only)


def hub_count(file_stem: str) -> int:
    config = preset(file_stem)
    return checkpoint_num_params(config, weight_tensors(config), file_stem.replace("__", "/", 1))


# (file, figure the Hub publishes) — INDEX.md "Official total params", rows marked complete unless noted.
HUB_FIGURES = [
    ("meta-llama__Llama-3.1-8B-Instruct", 8_030_261_248),
    ("meta-llama__Llama-3.1-70B-Instruct", 70_553_706_496),
    ("meta-llama__Llama-3.1-405B-Instruct", 405_853_388_800),  # partial config, HFAPI-L
    ("meta-llama__Llama-3.2-1B-Instruct", 1_235_814_400),  # tied, lm_head not stored
    ("meta-llama__Llama-3.2-3B-Instruct", 3_212_749_824),
    ("meta-llama__Llama-3.3-70B-Instruct", 70_553_706_496),
    ("meta-llama__Meta-Llama-3-8B-Instruct", 8_030_261_248),
    ("meta-llama__Llama-2-70b-hf", 68_976_653_312),  # partial config; includes 80 x 64 rotary inv_freq
    ("Qwen__Qwen2.5-1.5B-Instruct", 1_543_714_304),  # tied, lm_head not stored
    ("Qwen__Qwen2.5-7B-Instruct", 7_615_616_512),
    ("Qwen__Qwen2.5-14B-Instruct", 14_770_033_664),  # partial config, llama.cpp n_params
    ("Qwen__Qwen2.5-32B-Instruct", 32_763_876_352),  # partial config
    ("Qwen__Qwen2.5-72B-Instruct", 72_706_203_648),
    ("Qwen__Qwen3-0.6B", 751_632_384),  # tied, but lm_head stored
    ("Qwen__Qwen3-8B", 8_190_735_360),
    ("Qwen__Qwen3-14B", 14_768_307_200),
    ("Qwen__Qwen3-32B", 32_762_123_264),
    ("Qwen__Qwen3-30B-A3B", 30_532_122_624),
    ("Qwen__Qwen3-235B-A22B", 235_093_634_560),
    ("Qwen__Qwen3-8B-FP8", 8_191_159_296),  # GG tensor sum incl. 128x128 weight_scale_inv
    ("Qwen__Qwen3-235B-A22B-Instruct-2507-FP8", 235_107_904_512),  # GG2 tensor sum incl. scale_inv
    ("mistralai__Mistral-7B-Instruct-v0.3", 7_248_023_552),
    ("mistralai__Mistral-7B-v0.1", 7_241_732_096),
    ("mistralai__Mistral-Nemo-Instruct-2407", 12_247_782_400),  # partial config
    ("mistralai__Mistral-Small-24B-Instruct-2501", 23_572_403_200),
    ("mistralai__Mistral-Small-3.2-24B-Instruct-2506", 24_011_361_280),  # text + Pixtral + projector
    ("mistralai__Mixtral-8x7B-Instruct-v0.1", 46_702_792_704),  # partial (identity)
    ("google__gemma-2-9b-it", 9_241_705_984),
    ("google__gemma-2-27b-it", 27_227_128_320),
    ("google__gemma-3-1b-it", 999_885_952),
    ("google__gemma-3-27b-it", 27_432_406_640),  # text + SigLIP + projector
    ("microsoft__Phi-3-mini-4k-instruct", 3_821_079_552),
    ("microsoft__Phi-4-mini-instruct", 3_836_021_760),  # tied, lm_head not stored
    ("microsoft__phi-4", 14_659_507_200),
    ("deepseek-ai__DeepSeek-V3", 684_531_386_000),  # + MTP layer + FP8 weight_scale_inv
    ("deepseek-ai__DeepSeek-R1-Distill-Qwen-7B", 7_615_616_512),
    ("deepseek-ai__DeepSeek-V2-Lite", 15_706_484_224),  # partial config
    ("openai__gpt-oss-20b", 20_914_757_184),  # logical elements, MXFP4 experts unpacked
    ("openai__gpt-oss-120b", 116_829_156_672),
    ("ByteDance-Seed__Seed-OSS-36B-Instruct", 36_151_104_512),  # partial config
]

# (file, logical parameters) — INDEX.md rows whose only figure is "computed" from the config.
COMPUTED_FIGURES = [
    ("microsoft__phi-1_5", 1_418_270_720),
    ("microsoft__phi-2", 2_779_683_840),
    ("meta-llama__Llama-2-7b-chat-hf", 6_738_415_616),
    ("facebook__opt-125m", 125_239_296),
    ("codellama__CodeLlama-13b-Instruct-hf", 13_016_028_160),
    ("deepseek-ai__deepseek-coder-6.7b-instruct", 6_740_512_768),
    ("deepseek-ai__DeepSeek-R1-Distill-Qwen-14B", 14_770_033_664),
    ("llava-hf__llava-v1.6-mistral-7b-hf", 7_566_747_648),
    ("realtreetune__rho-1b-sft-GSM8K", 1_100_048_384),
]


@pytest.mark.parametrize(("file_stem", "expected"), HUB_FIGURES, ids=[f for f, _ in HUB_FIGURES])
def test_checkpoint_count_equals_the_hub_figure(file_stem: str, expected: int) -> None:
    assert hub_count(file_stem) == expected


@pytest.mark.parametrize(("file_stem", "expected"), COMPUTED_FIGURES, ids=[f for f, _ in COMPUTED_FIGURES])
def test_logical_count_equals_the_computed_figure(file_stem: str, expected: int) -> None:
    assert logical(weight_tensors(preset(file_stem))) == expected


def test_the_table_agrees_with_index_md() -> None:
    listed = {**dict(HUB_FIGURES), **dict(COMPUTED_FIGURES)}
    seen = set()
    for line in INDEX_MD.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) < 7 or not cells[2].endswith(".json") or cells[2][:-5] not in listed:
            continue
        # the figure is the first bold number, or in the quantized table the first number in the notes
        figure = re.search(r"\*\*([\d,]+)\*\*", cells[5]) or re.search(r"(\d{1,3}(?:,\d{3}){3,})", cells[5])
        assert figure, line
        assert int(figure.group(1).replace(",", "")) == listed[cells[2][:-5]], cells[2]
        seen.add(cells[2][:-5])
    assert seen == set(listed)


class TestWhatTheTwoCountsTellApart:
    def test_qwen3_tied_checkpoint_stores_lm_head_but_the_model_has_one_matrix(self) -> None:
        config = preset("Qwen__Qwen3-0.6B")
        # INDEX.md: 751,632,384 = 596,049,920 parameters + 155,582,464 (151,936 x 1,024) stored lm_head copy
        assert logical(weight_tensors(config)) == 596_049_920
        assert hub_count("Qwen__Qwen3-0.6B") - 596_049_920 == 151_936 * 1_024

    def test_llama2_conversion_stored_rotary_inv_freq_buffers(self) -> None:
        assert logical(weight_tensors(preset("meta-llama__Llama-2-70b-hf"))) == 68_976_648_192
        assert checkpoint_facts({}, "meta-llama/Llama-2-70b-hf").stores_rotary_inv_freq
        # the chat config names its repo in _name_or_path; its sibling Llama-2-7b-hf counts 6,738,417,664 on
        # the Hub (INDEX.md): 32 layers x 64 inv_freq more than the parameters.
        assert hub_count("meta-llama__Llama-2-7b-chat-hf") == 6_738_415_616 + 32 * 64

    def test_deepseek_v3_main_model_is_what_vllm_loads(self) -> None:
        tensors = weight_tensors(preset("deepseek-ai__DeepSeek-V3"))
        # INDEX.md: "Main model from config = 671,026,419,200"; the MTP layer is in the checkpoint only.
        assert logical(tensors, loaded_only=True) == 671_026_419_200
        assert {t.role for t in tensors if not t.loaded} >= {"mtp", "expert", "attention"}

    def test_fp8_checkpoints_add_one_fp32_scale_per_128x128_block(self) -> None:
        # Qwen3-8B: per layer q 32x32, k 8x32, v 8x32, o 32x32, gate/up/down 96x32 blocks = 11,776; 36 layers
        assert hub_count("Qwen__Qwen3-8B-FP8") - 8_190_735_360 == 11_776 * 36

    def test_qwen2_5_vl_text_decoder_and_vision_tower(self) -> None:
        tensors = weight_tensors(preset("Qwen__Qwen2.5-VL-72B-Instruct"))
        text = tuple(t for t in tensors if t.role not in ("vision", "projector"))
        assert logical(text) == 72_706_203_648  # INDEX.md "text decoder computed"
        # ViT by hand: patch 1280x3x2x14x14; 32 blocks of 2 RMSNorms, qkv 3840x1280+b, proj 1280x1280+b,
        # gate/up 3456x1280+b, down 1280x3456+b; merger RMSNorm 1280, 5120x5120+b, 8192x5120+b. HF shows 73.4B.
        block = 2 * 1280 + (3840 * 1280 + 3840) + (1280 * 1280 + 1280) + 2 * (3456 * 1280 + 3456) + 1280 * 3456 + 1280
        merger = 1280 + 5120 * 5120 + 5120 + 8192 * 5120 + 8192
        assert logical(tensors) - logical(text) == 1280 * 3 * 2 * 14 * 14 + 32 * block + merger == 704_573_696

    def test_llava_next_parts_and_the_clip_layer_vllm_skips(self) -> None:
        tensors = weight_tensors(preset("llava-hf__llava-v1.6-mistral-7b-hf"))
        by_role = {role: logical(tuple(t for t in tensors if t.role == role)) for role in ("vision", "projector")}
        # INDEX.md: CLIP-L/336 303,507,456; projector 20,979,712 + image_newline 4,096
        assert by_role == {"vision": 303_507_456, "projector": 20_979_712 + 4_096}
        # vision_feature_layer -2: vLLM builds 23 of 24 CLIP layers and no post_layernorm
        clip_layer = 4 * (1024 * 1024 + 1024) + 4 * 1024 + 4096 * 1024 + 4096 + 1024 * 4096 + 1024
        assert logical(tensors) - logical(tensors, loaded_only=True) == clip_layer + 2 * 1024

    def test_multimodal_encoders_sit_on_every_pipeline_stage(self) -> None:
        tensors = weight_tensors(preset("google__gemma-3-27b-it"))
        assert {t.placement for t in tensors if t.role in ("vision", "projector")} == {"all"}


class TestShapesVllmShardsBy:
    def test_kv_projections_are_split_by_whole_heads(self) -> None:
        tensors = {t.name: t for t in weight_tensors(preset("meta-llama__Llama-3.1-8B-Instruct"))}
        assert tensors["self_attn.k_proj.weight"].shape == (8, 128, 4096)
        assert tensors["self_attn.o_proj.weight"].tp == "row"
        assert tensors["model.embed_tokens.weight"].tp == "vocab"

    def test_experts_are_one_entry_per_layer_run(self) -> None:
        tensors = weight_tensors(preset("deepseek-ai__DeepSeek-V3"))
        experts = [t for t in tensors if t.name == "mlp.experts.gate_proj.weight" and t.loaded]
        assert [(t.layers, t.count, t.shape) for t in experts] == [((3, 61), 256, (2048, 7168))]
        dense = [t.layers for t in tensors if t.name == "mlp.gate_proj.weight"]
        assert dense == [(0, 3)]

    def test_routers_and_norms_are_never_quantizable(self) -> None:
        tensors = weight_tensors(preset("openai__gpt-oss-20b"))
        assert not any(t.quantizable for t in tensors if t.role in ("router", "norm", "embedding", "lm_head"))

    def test_deepseek_routing_bias_is_float32(self) -> None:
        tensors = weight_tensors(preset("deepseek-ai__DeepSeek-V3"))
        bias = next(t for t in tensors if t.name == "mlp.gate.e_score_correction_bias" and t.loaded)
        assert bias.dtype_bytes == 4


class TestUnknownArchitectures:
    def test_every_preset_family_is_known(self) -> None:
        folder = resources.files("calculator") / "data" / "presets"
        for entry in folder.iterdir():
            if entry.name.endswith(".json"):
                assert is_known_architecture(json.loads(entry.read_text(encoding="utf-8"))), entry.name

    def test_weight_tensors_refuses_an_unknown_family(self) -> None:
        with pytest.raises(UnsupportedArchitecture, match="generic_decoder_tensors"):
            weight_tensors({"model_type": "mystery", "hidden_size": 8})

    def test_generic_decoder_reproduces_a_llama_and_lists_its_assumptions(self) -> None:
        config = copy.deepcopy(preset("meta-llama__Llama-3.1-8B-Instruct"))
        config["model_type"] = "mystery"
        for key in ("attention_bias", "tie_word_embeddings"):
            del config[key]
        tensors, assumptions = generic_decoder_tensors(config)
        assert logical(tensors) == 8_030_261_248
        assert any("Llama-style" in a for a in assumptions)
        assert any("lm_head" in a for a in assumptions)
        assert any("attention biases" in a for a in assumptions)

    def test_generic_decoder_says_when_it_guessed_kv_heads_and_mlp_width(self) -> None:
        config = {"model_type": "mystery", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100}
        tensors, assumptions = generic_decoder_tensors(config)
        assert any("4 KV heads" in a for a in assumptions)
        assert any("4 x hidden_size = 256" in a for a in assumptions)
        # embed + lm_head 2 x 100 x 64; per layer q/k/v/o 4 x 64 x 64, MLP 3 x 256 x 64, 2 norms; final norm
        assert logical(tensors) == 2 * 100 * 64 + 2 * (4 * 64 * 64 + 3 * 256 * 64 + 2 * 64) + 64

    def test_generic_decoder_needs_the_basic_shapes(self) -> None:
        with pytest.raises(InvalidConfig, match="num_hidden_layers"):
            generic_decoder_tensors({"model_type": "mystery", "hidden_size": 64, "vocab_size": 10})


def test_families_cover_every_family_the_brief_names() -> None:
    assert set(FAMILIES) >= {
        "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_5_vl", "gemma", "gemma2",
        "gemma3", "gemma3_text", "phi", "phi3", "deepseek_v2", "deepseek_v3", "gpt_oss", "opt", "mistral3",
        "llava", "llava_next", "seed_oss",
    }


def test_a_text_config_naming_no_known_text_model_is_refused_by_name() -> None:
    # Regression: the fuzzed Mistral-Small-3.2 with text_config.model_type "4096" raised KeyError('4096').
    config = copy.deepcopy(preset("mistralai__Mistral-Small-3.2-24B-Instruct-2506"))
    config["text_config"]["model_type"] = "4096"
    with pytest.raises(InvalidConfig, match=r"config.json text_config model_type '4096' is not a text model"):
        weight_tensors(config)
