"""Stand-in configs: records whose checkpoint's config.json is not bundled, run on a bundled one of the same shapes.

A stand-in is used only where the missing checkpoint has the architecture of a bundled config (a fine-tune, the base
model of an instruct sibling, a community conversion or quantization of it) and what differs is stated. Such records
are scored and their start-ups judged, but left out of the statistics: the stand-in adds an error of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from calculator.model.architecture import build_model_spec
from calculator.model.model_source import load_config
from calculator.model.spec import ModelSpec

# The checkpoints' quantization_config blocks, as those repositories publish them.
GPTQ_4BIT_G128 = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
GPTQ_4BIT_G128_ACT_ORDER = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True, "sym": True}
AWQ_4BIT_G128 = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": False, "version": "gemm"}
AWQ_4BIT_G128_ZP = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
FP8_BLOCK_128 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


@dataclass(frozen=True)
class StandIn:
    preset: str  # the bundled config of the same architecture
    differs: str  # what the real checkpoint has that the stand-in does not
    quantization_config: dict[str, Any] | None = None  # the real checkpoint's, added to the stand-in's config
    settings: dict[str, Any] = field(default_factory=dict)  # scenario fields the real checkpoint's config sets
    gpu: str | None = None  # the GPU to run on where the record does not name one (said in ``differs``)
    config: dict[str, Any] = field(default_factory=dict)  # config.json fields the real checkpoint sets otherwise

    def spec(self) -> ModelSpec:
        config, _ = load_config(self.preset)
        config = {**config, **self.config}
        if self.quantization_config:
            config = {**config, "quantization_config": self.quantization_config}
        return build_model_spec(config, model_id=self.preset)


STAND_INS: dict[str, StandIn] = {
    "vllm-pr4454-a6000-openhermes-2.5-mistral-7b": StandIn(
        "mistralai/Mistral-7B-v0.1", "a fine-tune of it with 2 added tokens (vocab 32,002: 64 KiB more weights)"),
    "vllm-pr4454-a6000-llama-2-7b-gptq": StandIn(
        "meta-llama/Llama-2-7b-chat-hf", "TheBloke's GPTQ of the base model: 4-bit, groups of 128, no act-order",
        GPTQ_4BIT_G128),
    "vllm-pr4454-a6000-phi-2-super-marlin": StandIn(
        "microsoft/phi-2", "a fine-tune in Marlin's 4-bit format (groups of 128, no zero points), counted as GPTQ "
        "4-bit: GPTQ's zero points add 1/32 of the scales", GPTQ_4BIT_G128),
    "vllm-2136-2x4090-codellama13b-v024": StandIn(
        "codellama/CodeLlama-13b-Instruct-hf", "TheBloke's fp16 conversion of the same weights"),
    "vllm-21348-4xh100-qwen3-235b-a22b-fp8": StandIn(
        "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "the July 2025 update of the same FP8 checkpoint, whose config "
        "raises max_position_embeddings from 40,960 to 262,144 (set back here)", settings={"max_model_len": 40960}),
    "vllm-16128-24gb-mistral-small-31-awq": StandIn(
        "mistralai/Mistral-Small-3.2-24B-Instruct-2506", "3.1 rather than 3.2 (the same Mistral3 shapes), quantized "
        "by AutoRound to symmetric 4-bit AWQ in groups of 128; the record names only a '24G GPU', so it runs on an "
        "L4 (22.03 GiB; every 24 GB card of the catalog gets the same verdict: tests/test_accuracy.py)", AWQ_4BIT_G128, gpu="NVIDIA L4"),
    "vllm-6156-2xl40-deepseek-coder-v2-lite-tp2": StandIn(
        "deepseek-ai/DeepSeek-V2-Lite", "the coder fine-tune of the same DeepSeek-V2-Lite shapes"),
    "file-a10g-phi35-vision-v061-30k-failed": StandIn(
        "microsoft/Phi-3-mini-4k-instruct", "the language model of the same Phi-3-mini shapes (32 layers, 32 KV heads "
        "x 96) with the 128K context (LongRoPE; the sliding window at the full length) but without the CLIP vision "
        "tower: 7.12 GiB of weights where vLLM printed 7.75", config={"max_position_embeddings": 131072,
                                                                      "sliding_window": 131072}),
    "file-a100-40g-phi4-mini-ft-v073": StandIn(
        "microsoft/Phi-4-mini-instruct", "a merged LoRA fine-tune of it"),
    "vllm-pr10511-h100-llama3-8b-tp1": StandIn(
        "meta-llama/Meta-Llama-3-8B-Instruct", "the base model of the same shapes"),
    "vllm-pr10511-h100-llama3-8b-tp2": StandIn(
        "meta-llama/Meta-Llama-3-8B-Instruct", "the base model of the same shapes"),
    "file-p4d-8xa100-40g-dscoder-v2-lite-tp8-v071": StandIn(
        "deepseek-ai/DeepSeek-V2-Lite", "the coder fine-tune of the same DeepSeek-V2-Lite shapes"),
    "file-g6e-4xl40s-qwen3-coder-30b-a3b-tp4-v0240": StandIn(
        "Qwen/Qwen3-30B-A3B", "the coder model of the same Qwen3-30B-A3B shapes (48 layers, 128 experts, 4 KV heads), "
        "whose config raises max_position_embeddings to 262,144; the record sets max_model_len 32,768"),
    "file-gb10-qwen3-30b-a3b-fp8-util030-v0130nv": StandIn(
        "Qwen/Qwen3-30B-A3B", "Qwen's FP8 checkpoint of it: e4m3 in 128 x 128 blocks", FP8_BLOCK_128),
    "file-gb10-qwen25-14b-fp8dyn-util015-failed-v0130nv": StandIn(
        "Qwen/Qwen2.5-14B-Instruct", "Neural Magic's FP8-dynamic checkpoint of it (compressed-tensors, one scale "
        "per output channel: the bytes of vLLM's per-channel FP8)", settings={"quantization": "fp8_per_channel"}),
    "file-gtx1080-llama32-1b-105k-v064post1": StandIn(
        "meta-llama/Llama-3.2-1B-Instruct", "the base model of the same shapes"),
    "file-44gb-llama32-1b-default-v0101dev": StandIn(
        "meta-llama/Llama-3.2-1B-Instruct", "the base model of the same shapes"),
    "file-2xl40s-qwen3-30b-a3b-2507-fp8-tp2-ep-v0102": StandIn(
        "Qwen/Qwen3-30B-A3B", "Qwen's FP8 checkpoint of its July 2025 update (the same shapes; e4m3 in 128 x 128 "
        "blocks), whose config raises max_position_embeddings to 262,144; the record sets max_model_len 32,768",
        FP8_BLOCK_128),
    "file-2xh200-qwen3-next-80b-a3b-tp2-defaults-v0102": StandIn(
        "Qwen/Qwen3-Coder-Next", "Qwen3-Next-80B-A3B-Instruct: the instruct model of the same Qwen3-Next-80B-A3B "
        "shapes (48 layers, 512 experts of 512, 2 KV heads x 256 every 4th layer) that the coder model is built on"),
    "file-rtx5090-qwen3-32b-awq-util070-8k-v0280": StandIn(
        "Qwen/Qwen3-32B", "Qwen's AWQ checkpoint of it: 4-bit with zero points in groups of 128 (GEMM)",
        AWQ_4BIT_G128_ZP),
    "file-rtx5090-qwen3-32b-awq-util085-8k-v0280": StandIn(
        "Qwen/Qwen3-32B", "Qwen's AWQ checkpoint of it: 4-bit with zero points in groups of 128 (GEMM)",
        AWQ_4BIT_G128_ZP),
    "file-gb10-mistral-7b-v02-gptq-32k-v0110nv": StandIn(
        "mistralai/Mistral-7B-Instruct-v0.3", "TheBloke's GPTQ of v0.2 (4-bit, groups of 128, act-order): the same "
        "shapes with v0.2's 32,000-token vocabulary (v0.3 adds 768 tokens)", GPTQ_4BIT_G128_ACT_ORDER,
        config={"vocab_size": 32000}),
    "cclbench-perlmutter-4xa100-40g-llama31-8b-tp2-dp2-eager-v0101rc2": StandIn(
        "meta-llama/Llama-3.1-8B-Instruct", "the base model of the same shapes"),
    "cclbench-perlmutter-4xa100-40g-llama31-8b-tp2-pp2-eager-v0101rc2": StandIn(
        "meta-llama/Llama-3.1-8B-Instruct", "the base model of the same shapes"),
    "cclbench-perlmutter-4xa100-40g-llama31-8b-pp2-dp2-eager-v0101rc2": StandIn(
        "meta-llama/Llama-3.1-8B-Instruct", "the base model of the same shapes"),
    "file-4x3090-qwen25-7b-tp2-pcie-nop2p-util080-4k-v084": StandIn(
        "Qwen/Qwen2.5-7B-Instruct", "the base model of the same shapes (ModelScope's copy of Qwen/Qwen2.5-7B), whose "
        "config sets 131,072 positions; the record sets max_model_len 4,096"),
    "file-4x3090-qwen25-7b-tp1-4k-v084": StandIn(
        "Qwen/Qwen2.5-7B-Instruct", "the base model of the same shapes (ModelScope's copy of Qwen/Qwen2.5-7B), whose "
        "config sets 131,072 positions; the record sets max_model_len 4,096"),
    "file-l40-qwen25-math-1.5b-util085-4k-v072": StandIn(
        "Qwen/Qwen2.5-1.5B-Instruct", "Qwen2.5-Math-1.5B: the same shapes with 4,096 positions and rope_theta 10,000",
        config={"max_position_embeddings": 4096, "rope_theta": 10000.0}),
    "rhaiis-h200-deepseek-r1-0528-tp8-8k-v0112": StandIn(
        "deepseek-ai/DeepSeek-V3", "DeepSeek-R1-0528: the reasoning model trained from DeepSeek-V3-Base, the same shapes "
        "(61 layers, MLA latent 512 + 64, 256 experts of 2,048, FP8 in 128 x 128 blocks) and the same config.json fields"),
    "blog-4x22g-turing-qwen3-30b-a3b-fp16-tp4-131k-yarn-v085": StandIn(
        "Qwen/Qwen3-30B-A3B", "the same checkpoint with the record's --rope-scaling (YaRN x4 from 32,768 positions: "
        "vLLM derives a 131,072-token limit)",
        config={"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}),
    "file-a10-qwen25-math-1.5b-util090-4k-v072": StandIn(
        "Qwen/Qwen2.5-1.5B-Instruct", "Qwen2.5-Math-1.5B: the same shapes with 4,096 positions and rope_theta 10,000",
        config={"max_position_embeddings": 4096, "rope_theta": 10000.0}),
    "dennislee22-a100-80g-qwen2-7b-util025-16k-v01011": StandIn(
        "Qwen/Qwen2.5-7B-Instruct", "Qwen2-7B-Instruct: the same shapes (28 layers, 3,584 hidden, 28 heads, 4 KV heads "
        "x 128, MLP 18,944, vocabulary 152,064, untied)"),
    "dennislee22-a100-80g-qwen2-7b-util050-16k-v01011": StandIn(
        "Qwen/Qwen2.5-7B-Instruct", "Qwen2-7B-Instruct: the same shapes (28 layers, 3,584 hidden, 28 heads, 4 KV heads "
        "x 128, MLP 18,944, vocabulary 152,064, untied)"),
    "dennislee22-2xa100-80g-pcie-qwen2-7b-tp2-util025-16k-v01011": StandIn(
        "Qwen/Qwen2.5-7B-Instruct", "Qwen2-7B-Instruct: the same shapes (28 layers, 3,584 hidden, 28 heads, 4 KV heads "
        "x 128, MLP 18,944, vocabulary 152,064, untied)"),
    "dennislee22-2xa100-80g-pcie-qwen2-7b-tp2-util050-16k-v01011": StandIn(
        "Qwen/Qwen2.5-7B-Instruct", "Qwen2-7B-Instruct: the same shapes (28 layers, 3,584 hidden, 28 heads, 4 KV heads "
        "x 128, MLP 18,944, vocabulary 152,064, untied)"),
    "file-colab-t4-llama32-3b-unsloth-sdk-util089-2k-v082": StandIn(
        "meta-llama/Llama-3.2-3B-Instruct", "unsloth's re-upload of the same checkpoint"),
}
