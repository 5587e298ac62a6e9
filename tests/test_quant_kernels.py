"""MXFP4 experts as vLLM's MoE kernels hold them: the kernel per version and GPU, and the resident bytes.

The expected bytes are worked out from gpt-oss's shapes (hidden 2880, expert intermediate 2880, 24 layers x 32
experts for the 20b, 36 x 128 for the 120b) and the padding/scale rules quoted in ``calculator/engine/quant_kernels.py``
from vLLM's source; the two start-ups are what vLLM printed ("Model loading took ... GiB").
"""

from __future__ import annotations

import json
from importlib import resources

import pytest

from calculator import Scenario, estimate
from calculator.engine.quant_kernels import (
    MARLIN,
    TRITON_HOPPER,
    TRITON_HOPPER_BOTH_SCALES,
    TRITON_ROCM,
    TRTLLM_0_11,
    TRTLLM_0_27,
    expert_storage,
)
from calculator.engine.vllm_versions import rules_for
from calculator.gpus import find_gpu
from calculator.model.inventory import weight_tensors
from calculator.model.model_source import load_model_spec, preset_ids
from calculator.model.quantization import quantization_from_config
from calculator.model.spec import ModelSpec
from calculator.model.weights import weight_bytes_per_rank
from calculator.units import GIB

BF16, FP32 = 2, 4
H = I = 2880
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


def gpt_oss(file_stem: str) -> ModelSpec:
    config = json.loads((resources.files("calculator") / "data" / "presets" / f"{file_stem}.json")
                        .read_text(encoding="utf-8"))
    return ModelSpec(model_id=file_stem, architecture="test", model_type="gpt_oss", vocab_size=1, hidden_size=1,
                     intermediate_size=0, num_hidden_layers=config["num_hidden_layers"], num_attention_heads=1,
                     num_key_value_heads=1, head_dim=1, layers=(), derived_max_model_len=1,
                     quantization=quantization_from_config(config), weights=weight_tensors(config))


def non_expert_bf16_bytes_20b() -> int:
    """Everything of gpt-oss-20b but the experts and their biases, in bf16 (embedding, lm_head, attention ...)."""
    attention = (4096 * H + 4096) + 2 * (512 * H + 512) + (H * 4096 + H) + 64  # q, k, v, o with biases + sinks
    per_layer = attention + 2 * H + (32 * H + 32)  # two norms, router with bias
    return BF16 * (2 * 201_088 * H + 24 * per_layer + H)


class TestWhichKernel:
    @pytest.mark.parametrize(("version", "gpu", "expected"), [
        ("0.10.1", "h100", MARLIN),  # torch 2.7.1: the Triton path needs torch >= 2.8
        ("0.11.0", "h100", MARLIN),  # triton_kernels is not vendored before 0.12
        ("0.12.0", "h100", TRITON_HOPPER_BOTH_SCALES),
        ("0.14.1", "h200", TRITON_HOPPER_BOTH_SCALES),
        ("0.24.0", "gh200", TRITON_HOPPER_BOTH_SCALES),
        ("0.25.0", "h100", TRITON_HOPPER),  # the checkpoint scales are freed after the swizzle
        ("0.34.0", "h100", TRITON_HOPPER),
        ("0.14.1", "b200", TRTLLM_0_11),
        ("0.27.1", "b300", TRTLLM_0_27),
        ("0.20.0", "a100", MARLIN),  # the Triton window is (9, 0) <= capability < (11, 0)
        ("0.20.0", "l40s", MARLIN),
        ("0.20.0", "rtx 5090", MARLIN),
        ("0.20.0", "mi300x", TRITON_ROCM),
    ])
    def test_per_version_and_gpu(self, version: str, gpu: str, expected) -> None:
        spec = gpt_oss("openai__gpt-oss-20b")
        found = find_gpu(gpu)
        assert expert_storage(spec.quantization, rules_for(version), found, found.platform) == expected

    def test_nothing_to_lay_out_without_mxfp4(self) -> None:
        assert expert_storage(None, rules_for("0.14.1"), find_gpu("h100"), "cuda") is None


class TestResidentBytes20b:
    def test_triton_on_hopper_keeps_checkpoint_scales_beside_the_swizzled_copy(self) -> None:
        values = 32 * 3 * I * H // 2
        checkpoint_scales = 32 * 3 * I * (H // 32)
        swizzled = 32 * (5888 + 3072) * 90  # w13 rows 5760 -> 5888 and w2 rows 2880 -> 3072 (multiples of 256)
        biases = 32 * (2 * I + H) * FP32
        expected = non_expert_bf16_bytes_20b() + 24 * (values + checkpoint_scales + swizzled + biases)
        got = weight_bytes_per_rank(gpt_oss("openai__gpt-oss-20b"), dtype_bytes=BF16,
                                    expert_storage=TRITON_HOPPER_BOTH_SCALES)
        assert got.per_stage_bytes == (expected,) == (14_393_851_008,)

    def test_marlin_pads_intermediate_to_128_and_hidden_to_256(self) -> None:
        inner, hidden = 2944, 3072
        w13 = 32 * 2 * inner * hidden // 2 + 32 * 2 * inner * (hidden // 32)
        w2 = 32 * hidden * inner // 2 + 32 * hidden * (inner // 32)
        biases = 32 * (2 * inner + hidden) * BF16
        expected = non_expert_bf16_bytes_20b() + 24 * (w13 + w2 + biases)
        got = weight_bytes_per_rank(gpt_oss("openai__gpt-oss-20b"), dtype_bytes=BF16, expert_storage=MARLIN)
        assert got.per_stage_bytes == (expected,)

    def test_tp2_rounds_each_rank_to_64_before_the_swizzle(self) -> None:
        inner = 1472  # 2880 / 2 = 1440 per rank, rounded up to a multiple of 64; 1472 / 32 = 46 scale columns
        values = 32 * 3 * inner * H // 2
        checkpoint_scales = 32 * (2 * inner * 90 + H * 46)
        swizzled = 32 * (3072 * 90 + 3072 * 46)  # w13 rows 2 x 1472 = 2944 -> 3072; w2 rows 2880 -> 3072
        biases = 32 * (2 * inner + H) * FP32
        attention = (2048 * H + 2048) + 2 * (256 * H + 256) + (H * 2048 + H) + 32
        rest = BF16 * (2 * 100_544 * H + 24 * (attention + 2 * H + 32 * H + 32) + H)
        got = weight_bytes_per_rank(gpt_oss("openai__gpt-oss-20b"), dtype_bytes=BF16, tensor_parallel_size=2,
                                    expert_storage=TRITON_HOPPER_BOTH_SCALES)
        assert got.per_stage_bytes == (rest + 24 * (values + checkpoint_scales + swizzled + biases),)


class TestPrintedStartups:
    """What vLLM printed for gpt-oss on an H100, within 1 %."""

    def test_gpt_oss_120b_on_one_h100_with_vllm_0_14_1_loads_64_38_gib(self) -> None:
        # vllm-project/vllm#33155: "Model loading took 64.38 GiB memory" (the logical MXFP4 bytes are 60.77 GiB)
        result = estimate(Scenario(model="openai/gpt-oss-120b", gpu="h100", vllm_version="0.14.1",
                                   gpu_memory_utilization=0.97, max_model_len=5120, max_num_seqs=1))
        assert result.budget.weights_bytes / GIB == pytest.approx(64.38, rel=0.01)

    def test_gpt_oss_20b_on_an_h100_with_vllm_0_13_loads_13_47_gib(self) -> None:
        # llm-d's table (vllm/vllm-openai:latest, Jan 2026): "Model loading took: 13.47 GiB memory"
        result = estimate(Scenario(model="openai/gpt-oss-20b", gpu="h100", vllm_version="0.13.0",
                                   gpu_memory_utilization=0.9, max_model_len=16000, block_size=128))
        assert result.budget.weights_bytes / GIB == pytest.approx(13.47, rel=0.01)


class TestFp8ThroughMarlin:
    """Below compute capability 8.9 FP8 runs weight-only through Marlin, with scales in the model dtype."""

    QWEN3_8B_FP8_ON_HOPPER = 9_437_399_040  # tests/test_weights.py: fp8 values + fp32 scales per 128 x 128 block

    def test_block_scales_become_one_per_output_and_128_inputs_in_bf16(self) -> None:
        # Qwen3-8B per layer: q 4096, k 1024, v 1024, o 4096, gate 12288, up 12288 outputs over 4096 inputs
        # (32 groups of 128), down 4096 outputs over 12288 inputs (96 groups).
        marlin = (4096 + 1024 + 1024 + 4096 + 12288 + 12288) * 32 + 4096 * 96
        blocks = 32 * 32 + 2 * 8 * 32 + 32 * 32 + 3 * 96 * 32
        expected = self.QWEN3_8B_FP8_ON_HOPPER + 36 * (marlin * BF16 - blocks * FP32)
        a100 = estimate(Scenario(model="Qwen/Qwen3-8B-FP8", gpu="a100", vllm_version="0.20.0"))
        assert a100.budget.weights_bytes == expected
        for native in ("h100", "l40s"):  # compute capability 9.0 and 8.9: FP8 kernels, block scales kept
            kept = estimate(Scenario(model="Qwen/Qwen3-8B-FP8", gpu=native, vllm_version="0.20.0"))
            assert kept.budget.weights_bytes == self.QWEN3_8B_FP8_ON_HOPPER

    def test_a_per_tensor_scale_becomes_one_per_output_channel(self) -> None:
        outputs = 4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096  # Llama-3.1-8B per layer
        hopper = estimate(Scenario(model=LLAMA_8B, gpu="h100", vllm_version="0.20.0", quantization="fp8"))
        ampere = estimate(Scenario(model=LLAMA_8B, gpu="a100", vllm_version="0.20.0", quantization="fp8"))
        assert ampere.budget.weights_bytes - hopper.budget.weights_bytes == 32 * (outputs * BF16 - 7 * FP32)

    def test_gpt_oss_120b_on_one_h100_with_the_defaults_of_0_14_does_not_fit(self) -> None:
        # The case users report (vllm-project/vllm#27508, #33155): 64.3 GiB of weights leave no room for the
        # sampler's warm-up at 1,024 sequences within 0.9 x 79.19 GiB.
        result = estimate(Scenario(model="openai/gpt-oss-120b", gpu="h100", vllm_version="0.14.1"))
        assert not result.fits and result.error.startswith("No available memory for the cache blocks.")


def _nvfp4_swizzle_padding(model: str) -> float:
    """Share of NVFP4 weight bytes that swizzle_blockscale's padding adds: scale rows to 128, scale columns to 4."""
    extra = weights = 0.0
    for tensor in load_model_spec(model).weights:
        if len(tensor.shape) != 2 or not tensor.quantizable or tensor.shape[1] % 16 or tensor.name.endswith(
                "up_proj.weight"):
            continue
        out, inputs = tensor.shape
        # NOTE: vLLM swizzles the fused gate_up (w13) matrix: gemma-4-26B-A4B's 704-row experts fuse to 1,408 rows
        out *= 2 if tensor.name.endswith("gate_proj.weight") else 1
        copies = tensor.numel // (out * inputs) * tensor.count * tensor.num_layers
        scales = inputs // 16  # one fp8 scale per 16 inputs
        extra += (-(-out // 128) * 128 * -(-scales // 4) * 4 - out * scales) * copies
        weights += out * inputs * (1 / 2 + 1 / 16) * copies
    return extra / weights


def test_nvfp4_scale_swizzle_padding_is_too_small_to_model() -> None:
    # gpt-oss's 2,880-wide matrices: 2,880 scale rows pad to 2,944, 64 x 180 bytes on 2,880 x 2,880 x 9/16
    assert _nvfp4_swizzle_padding("openai/gpt-oss-20b") == pytest.approx(64 * 180 / (2880 * 2880 * 9 / 16), rel=0.01)
    others = [m for m in preset_ids() if not m.startswith("openai/gpt-oss")]
    # NOTE: below 0.2 % of the weights for every other bundled shape (the largest, 0.16 %, is Falcon-H1-0.5B's Mamba2
    # in_proj, whose 3,352 rows pad to 3,456: 104 x 64 scale bytes x 36 layers, ~0.23 MiB; next granite-4.0-h-350m's
    # narrow matrices, 0.07 %), under a third of the weights' 0.5 % accuracy target
    assert max(_nvfp4_swizzle_padding(m) for m in others) < 0.002
