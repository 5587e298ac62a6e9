"""The roofline step time against numbers worked out by hand from the models' published shapes.

Unit constants (efficiencies 1, no overheads) make every expected number a plain quotient: bytes / the card's
streaming rate, FLOPs / the card's measured matmul ceiling (Stas Bekman's MAMF table, ml-engineering at 744d01e: H100
SXM BF16 794.5, A100 SXM 271.2 TFLOPS; calculator/data/gpus.json), on the FP8 path the BF16 one times the FP8 speedup
vLLM's linear layers were timed at (AIConfigurator 0.12.0: 1.15 on an H100 SXM, benchmarks/linear_layer_rates.py).
"""

from __future__ import annotations

import pytest

from calculator import Scenario, estimate
from calculator.model.spec import QuantizationSpec
from calculator.speed.calibration import SpeedConstants
from calculator.speed.costs import forward_costs
from calculator.speed.expert_kernels import expert_format
from calculator.speed.hardware import gpu_rates
from calculator.speed.step_time import all_reduce_s, step_time

UNIT = SpeedConstants(bandwidth_efficiency=1, compute_efficiency=1, overlap_penalty=0, step_overhead_s=0,
                      sequence_overhead_s=0, kernel_overhead_s=0, eager_kernel_overhead_s=0,
                      piecewise_layer_overhead_s=0, full_graph_kernel_overhead_s=0, moe_layer_overhead_s=0,
                      all_reduce_latency_s=10e-6, all_reduce_efficiency=1, request_overhead_s=0,
                      fallback_interconnect_bytes_s=32e9)
H100_BYTES_S, H100_BF16, H100_FP8, A100_BF16 = 3.35e12, 989.5e12, 1979e12, 312e12  # NVIDIA datasheets
H100_CEILING, A100_CEILING = 794.5e12, 271.2e12  # measured: MAMF (see above)
# 913.7 TFLOPS: vLLM's FP8 linear layer at 899 TFLOPS against its BF16 one's 784, 1.15x
H100_FP8_CEILING = 794.5e12 * 1.15
# measured: the slope of latency against bytes of vLLM's BF16 linear layer at M <= 4 in AIConfigurator 0.12.0's H100
# SXM table (benchmarks/linear_layer_rates.py), 0.89 of the datasheet's 3.35 TB/s
H100_STREAMING_BYTES_S = 2978e9

# Llama-3.1-8B (hidden 4096, 32 layers, 32 heads, 8 KV heads of 128, intermediate 14336, vocab 128256, untied):
LLAMA8_LINEAR_PARAMS = 32 * (4096 * 4096 * 2 + 1024 * 4096 * 2 + 3 * 14336 * 4096) + 128256 * 4096  # 7,504,658,432
LLAMA8_NORM_BYTES = (2 * 32 + 1) * 4096 * 2
LLAMA8_KV_BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2  # layers x KV heads x head_dim x (K, V) x bf16 = 131,072
LLAMA8_ATTENTION_FLOPS_PER_CONTEXT_TOKEN = 32 * 2 * 32 * (128 + 128)  # QK^T and PV, 32 query heads
LLAMA8_ACTIVATION_BYTES_PER_TOKEN = 32 * 2 * 2 * (4 * 4096 + 3 * 14336)  # written and read, 4 hidden + 3 inter.


def _deployment(model: str, **settings):
    result = estimate(Scenario(model=model, **settings))
    return forward_costs(result), gpu_rates(result.gpu, result.quantization)


def test_dense_model_costs_match_the_published_shapes() -> None:
    costs, rates = _deployment("meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb")
    assert LLAMA8_LINEAR_PARAMS == 7_504_658_432
    assert costs.linear_flops_per_token == 2 * LLAMA8_LINEAR_PARAMS
    assert costs.dense_weight_bytes == 2 * LLAMA8_LINEAR_PARAMS + LLAMA8_NORM_BYTES  # embedding is a lookup
    assert costs.kv_read_bytes(1000) == 1000 * LLAMA8_KV_BYTES_PER_TOKEN
    assert costs.decode_attention_flops(1000) == 1000 * LLAMA8_ATTENTION_FLOPS_PER_CONTEXT_TOKEN
    assert costs.activation_bytes_per_token == LLAMA8_ACTIVATION_BYTES_PER_TOKEN
    assert (rates.memory_bandwidth_bytes_s, rates.peak_flops, rates.compute_path) == (H100_BYTES_S, H100_BF16, "bf16")
    assert (rates.achievable_flops, rates.ceiling_measured) == (H100_CEILING, True)
    assert (rates.streaming_bandwidth_bytes_s, rates.bandwidth_measured) == (H100_STREAMING_BYTES_S, True)


def test_dense_decode_step_is_bytes_over_bandwidth() -> None:
    costs, rates = _deployment("meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb")
    step = step_time(costs, rates, UNIT, decode_tokens=1, decode_context_tokens=1000)
    streamed = (2 * LLAMA8_LINEAR_PARAMS + LLAMA8_NORM_BYTES + 1000 * LLAMA8_KV_BYTES_PER_TOKEN
                + LLAMA8_ACTIVATION_BYTES_PER_TOKEN)
    flops = 2 * LLAMA8_LINEAR_PARAMS + 1000 * LLAMA8_ATTENTION_FLOPS_PER_CONTEXT_TOKEN
    assert step.memory_s == pytest.approx(streamed / H100_STREAMING_BYTES_S, rel=1e-12)  # 5.09 ms
    assert step.compute_s == pytest.approx(flops / H100_CEILING, rel=1e-12)
    assert step.bound == "memory" and step.total_s == pytest.approx(streamed / H100_STREAMING_BYTES_S, rel=1e-12)


def test_prefill_counts_the_quadratic_attention_and_is_compute_bound() -> None:
    costs, rates = _deployment("meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb")
    step = step_time(costs, rates, UNIT, decode_tokens=0, decode_context_tokens=0, prefill_tokens=1000)
    # each of the 1000 tokens attends over the ones before it: 1000 x 500 context tokens on average; the LM head
    # (128,256 x 4,096) runs on the chunk's last token only (vLLM computes logits for the sampled rows)
    lm_head = 128256 * 4096
    flops = (1000 * 2 * (LLAMA8_LINEAR_PARAMS - lm_head) + 2 * lm_head
             + 1000 * 500 * LLAMA8_ATTENTION_FLOPS_PER_CONTEXT_TOKEN)
    assert costs.lm_head_flops_per_token == 2 * lm_head
    assert step.compute_s == pytest.approx(flops / H100_CEILING, rel=1e-12)  # 17.9 ms
    assert step.bound == "compute"


def test_moe_streams_only_the_experts_a_batch_touches() -> None:
    costs, _ = _deployment("mistralai/Mixtral-8x7B-Instruct-v0.1", gpu="h100-sxm-80gb", tensor_parallel_size=2)
    # 8 experts, top-2: an expert is missed by one token with probability 6/8
    assert costs.touched_expert_fraction(1) == 0.25
    assert costs.touched_expert_fraction(4) == pytest.approx(1 - 0.75 ** 4)
    assert costs.touched_expert_fraction(1000) == pytest.approx(1.0)
    # 32 layers x 8 experts x 3 matrices of 14336 x 4096 in bf16, half of each on each of 2 ranks
    assert costs.expert_weight_bytes == 32 * 8 * 3 * 14336 * 4096 * 2 // 2
    assert costs.moe_layers == 32


def test_moe_flops_count_the_routed_experts_per_token() -> None:
    costs, _ = _deployment("mistralai/Mixtral-8x7B-Instruct-v0.1", gpu="h100-sxm-80gb")
    attention = 32 * (4096 * 4096 * 2 + 1024 * 4096 * 2)
    router, experts, lm_head = 32 * 8 * 4096, 32 * 2 * 3 * 14336 * 4096, 32000 * 4096
    assert costs.linear_flops_per_token == 2 * (attention + router + experts + lm_head)  # 2 x 12.7 B active


def test_mla_reads_one_latent_per_token_and_scores_it_with_every_head() -> None:
    costs, _ = _deployment("deepseek-ai/DeepSeek-V3", gpu="h200", tensor_parallel_size=8)
    # 61 layers x (512 latent + 64 rope) x bf16, replicated on every rank (not split by TP)
    assert costs.kv_read_bytes(1) == 61 * 576 * 2
    # decode absorbs the up-projections: 16 heads per rank score the 576-wide latent and mix the 512-wide one
    assert costs.decode_attention_flops(1) == 61 * 2 * 16 * (576 + 512)
    # prefill expands K and V per head: 128 nope + 64 rope for scores, 128 for values
    assert costs.prefill_attention_flops(1, 0.5) == pytest.approx(61 * 2 * 16 * (128 + 64 + 128) * 1.0)
    assert costs.touched_expert_fraction(1) == 8 / 256 and costs.moe_layers == 58


def test_tensor_parallel_all_reduces_two_per_layer_over_the_link() -> None:
    for tp, ring_share in ((2, 1.0), (8, 2 * 7 / 8)):
        costs, rates = _deployment("meta-llama/Llama-3.1-70B-Instruct", gpu="h100-sxm-80gb",
                                   tensor_parallel_size=tp, max_model_len=8192)
        # 80 layers x 2 all-reduces x (latency + ring share x tokens x hidden 8192 x bf16 / 450 GB/s NVLink 4)
        for tokens in (1, 64):
            expected = 2 * 80 * (10e-6 + ring_share * tokens * 8192 * 2 / 450e9)
            assert all_reduce_s(costs, rates, UNIT, tokens) == pytest.approx(expected, rel=1e-12)
    costs, rates = _deployment("meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb")
    assert all_reduce_s(costs, rates, UNIT, 64) == 0.0


def test_tensor_parallel_splits_weights_and_kv_heads() -> None:
    one, _ = _deployment("meta-llama/Llama-3.1-70B-Instruct", gpu="h100-sxm-80gb", max_model_len=8192,
                         tensor_parallel_size=2)
    eight, _ = _deployment("meta-llama/Llama-3.1-70B-Instruct", gpu="h100-sxm-80gb", max_model_len=8192,
                           tensor_parallel_size=8)
    # 8 KV heads of 128 over 80 layers, K and V in bf16: 4 heads per rank at TP 2, 1 at TP 8
    assert one.kv_read_bytes(1) == 80 * 4 * 128 * 2 * 2
    assert eight.kv_read_bytes(1) == 80 * 1 * 128 * 2 * 2
    assert eight.linear_flops_per_token == pytest.approx(one.linear_flops_per_token / 4, rel=1e-3)


def test_fp8_weights_halve_the_stream_and_use_fp8_tensor_cores_where_there_are_some() -> None:
    costs, rates = _deployment("meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb", quantization="fp8")
    lm_head = 128256 * 4096
    fp8_linears = LLAMA8_LINEAR_PARAMS - lm_head  # one byte each; vLLM keeps the LM head in bf16
    expected = fp8_linears + 2 * lm_head + LLAMA8_NORM_BYTES
    assert expected <= costs.dense_weight_bytes <= expected + 4096  # + per-tensor fp32 scales
    assert (rates.compute_path, rates.peak_flops) == ("fp8", H100_FP8)
    assert rates.achievable_flops == pytest.approx(H100_FP8_CEILING, rel=1e-12)
    _, ampere = _deployment("meta-llama/Llama-3.1-8B-Instruct", gpu="a100-sxm-80gb", quantization="fp8")
    assert (ampere.compute_path, ampere.peak_flops, ampere.achievable_flops) == ("bf16", A100_BF16, A100_CEILING)
    # the LM head stays BF16, so its FLOPs run at the BF16 ceiling; nothing else does
    assert (costs.bf16_linear_flops_per_token, costs.bf16_lm_head_flops_per_token) == (2 * lm_head, 2 * lm_head)
    assert rates.bf16_achievable_flops == H100_CEILING


def test_the_layers_an_mxfp4_checkpoint_leaves_16_bit_run_at_the_bf16_ceiling() -> None:
    # gpt-oss-20b's config quantizes only the experts (MXFP4); per layer its attention is q 2,880 x 4,096, k and v
    # 2,880 x 512 each, o 4,096 x 2,880, with biases (4,096 + 512 + 512 + 2,880) and 64 sink logits, and a router
    # 2,880 x 32 + 32; the LM head is 201,088 x 2,880. 24 layers.
    attention = 2880 * (4096 + 2 * 512) + 4096 * 2880 + (4096 + 2 * 512 + 2880) + 64
    router = 2880 * 32 + 32
    lm_head = 201_088 * 2880
    costs, rates = _deployment("openai/gpt-oss-20b", gpu="b200", max_model_len=8192)
    assert costs.bf16_lm_head_flops_per_token == 2 * lm_head
    assert costs.bf16_linear_flops_per_token == 2 * (24 * (attention + router) + lm_head)
    # B200: the FP4 ceiling 1,745 x 2.17 (vLLM's NVFP4 GEMMs), the BF16 one 1,745 (MAMF)
    assert (rates.achievable_flops, rates.bf16_achievable_flops) == (pytest.approx(1745e12 * 2.17, rel=1e-12), 1745e12)
    step = step_time(costs, rates, UNIT, decode_tokens=0, decode_context_tokens=0, prefill_tokens=1000,
                     prefill_start_tokens=0)
    # a 1,000-token prompt chunk: every token through every layer, one logits row (the chunk's last token)
    every_flop = (1000 * (costs.linear_flops_per_token - costs.lm_head_flops_per_token
                          + costs.expert_flops_per_token * (1 / costs.expert_gemm_share - 1))
                  + costs.lm_head_flops_per_token + costs.prefill_attention_flops(1000, 0))
    bf16_flops = 1000 * 2 * 24 * (attention + router) + 2 * lm_head
    assert step.compute_s == pytest.approx((every_flop - bf16_flops) / (1745e12 * 2.17) + bf16_flops / 1745e12,
                                           rel=1e-12)


def test_awq_runs_16_bit_math_on_4_bit_weights() -> None:
    costs, rates = _deployment("Qwen/Qwen2.5-7B-Instruct-AWQ", gpu="h100-sxm-80gb")
    assert rates.compute_path == "bf16"
    full, _ = _deployment("Qwen/Qwen2.5-7B-Instruct", gpu="h100-sxm-80gb")
    assert costs.dense_weight_bytes < 0.4 * full.dense_weight_bytes


def test_kernels_per_step_follow_the_layer_types() -> None:
    # attention block 6 kernels (norm, QKV, RoPE, cache write, attention, o_proj), dense MLP 4 (norm, gate_up,
    # SiLU-and-mul, down): Llama-3.1-8B has 32 such layers
    llama, _ = _deployment("meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb")
    assert llama.kernels_per_step == 32 * (6 + 4)
    # Mixtral: 32 layers, all MoE without shared experts (norm, router, top-k, align, 2 grouped GEMMs, act, sum)
    mixtral, _ = _deployment("mistralai/Mixtral-8x7B-Instruct-v0.1", gpu="h100-sxm-80gb", tensor_parallel_size=2)
    assert mixtral.kernels_per_step == 32 * (6 + 8)
    # DeepSeek-V3: 61 MLA layers with a q LoRA (13 kernels), 58 MoE blocks with a shared expert (8 + 4), 3 dense MLPs
    deepseek, _ = _deployment("deepseek-ai/DeepSeek-V3", gpu="h200", tensor_parallel_size=8)
    assert deepseek.kernels_per_step == 61 * 13 + 58 * (8 + 4) + 3 * 4  # 1,501


def test_step_overheads_are_per_kernel_on_the_gpu_and_per_step_and_request_on_the_cpu() -> None:
    constants = UNIT.model_copy(update={"step_overhead_s": 1e-3, "sequence_overhead_s": 20e-6,
                                        "kernel_overhead_s": 4e-6, "eager_kernel_overhead_s": 10e-6})
    costs, rates = _deployment("meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb", vllm_version="0.9.0")
    step = step_time(costs, rates, constants, decode_tokens=8, decode_context_tokens=100)
    assert step.overhead_s == pytest.approx(320 * 4e-6, rel=1e-12)  # 1.28 ms of kernel latency on the GPU
    assert step.host_s == pytest.approx(1e-3 + 8 * 20e-6, rel=1e-12)  # 1.16 ms of scheduling on the CPU
    # 0.9 schedules synchronously: the GPU waits for the CPU every step
    device = step.memory_s + step.overhead_s  # memory-bound at batch 8, overlap penalty 0, TP 1
    assert step.total_s == pytest.approx(device + step.host_s, rel=1e-12)
    eager, _ = _deployment("meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb", vllm_version="0.9.0",
                           enforce_eager=True)
    step = step_time(eager, rates, constants, decode_tokens=8, decode_context_tokens=100)
    assert step.overhead_s == pytest.approx(320 * (4e-6 + 10e-6), rel=1e-12)  # 4.48 ms
    # 0.14+ schedules asynchronously: the CPU prepares the next step while the GPU runs this one (a decode-only step
    # replays one full graph there, at the full graph's gap per kernel)
    constants = constants.model_copy(update={"full_graph_kernel_overhead_s": 5e-6})
    overlapped, _ = _deployment("meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb", vllm_version="0.32.0")
    step = step_time(overlapped, rates, constants, decode_tokens=8, decode_context_tokens=100)
    assert step.total_s == pytest.approx(step.memory_s + 320 * 5e-6, rel=1e-12)  # 4.5 ms + 1.6 ms > 1.16 ms
    slow_cpu = constants.model_copy(update={"step_overhead_s": 10e-3})
    assert step_time(overlapped, rates, slow_cpu, decode_tokens=8, decode_context_tokens=100).total_s == \
        pytest.approx(10e-3 + 8 * 20e-6, rel=1e-12)  # the CPU is the longer of the two


def test_piecewise_cuda_graphs_cost_a_break_per_layer_where_vllm_runs_them() -> None:
    # V1 before 0.11 captures PIECEWISE graphs only: the graph breaks at each of Llama-3.1-8B's 32 attention ops in
    # every step; 0.11 (vLLM PR #25444, FULL_AND_PIECEWISE) replays one full graph for a decode-only step and pieces
    # for a step with prompt tokens; V0 captured full decode graphs. A full graph's kernels run back to back at their
    # own gap (1 us here), the pieces' at the piecewise gap (4 us) plus the break
    constants = UNIT.model_copy(update={"kernel_overhead_s": 4e-6, "piecewise_layer_overhead_s": 20e-6,
                                        "full_graph_kernel_overhead_s": 1e-6})
    kernels, breaks, full_graph = 320 * 4e-6, 32 * 20e-6, 320 * 1e-6
    for version, decode in (("0.10.1", kernels + breaks), ("0.11.0", full_graph), ("0.32.0", full_graph),
                            ("0.6.2", full_graph)):
        costs, rates = _deployment("meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb", vllm_version=version)
        decode_step = step_time(costs, rates, constants, decode_tokens=8, decode_context_tokens=100)
        mixed = step_time(costs, rates, constants, decode_tokens=8, decode_context_tokens=100, prefill_tokens=512)
        assert decode_step.overhead_s == pytest.approx(decode, rel=1e-12), version
        assert mixed.overhead_s == pytest.approx(kernels + breaks, rel=1e-12), version
    eager, rates = _deployment("meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb", vllm_version="0.10.1",
                               enforce_eager=True)
    assert step_time(eager, rates, constants, decode_tokens=8, decode_context_tokens=100).overhead_s == \
        pytest.approx(kernels, rel=1e-12)  # no graphs, no breaks (UNIT's eager cost per kernel is 0)


def test_every_moe_layer_pays_its_routing_and_grouped_gemm_latency_in_every_step() -> None:
    # Mixtral-8x7B: 32 MoE layers, each 14 kernels (6 attention + 8 MoE); on 0.32.0 a decode-only step is one full
    # graph and a step with prompt tokens runs in pieces; the MoE layers cost their fixed latency in both
    constants = UNIT.model_copy(update={"kernel_overhead_s": 4e-6, "full_graph_kernel_overhead_s": 1e-6,
                                        "moe_layer_overhead_s": 30e-6})
    costs, rates = _deployment("mistralai/Mixtral-8x7B-Instruct-v0.1", gpu="h100-sxm-80gb", tensor_parallel_size=2,
                               vllm_version="0.32.0")
    assert costs.moe_layers == 32
    decode = step_time(costs, rates, constants, decode_tokens=4, decode_context_tokens=100)
    assert decode.overhead_s == pytest.approx(32 * 14 * 1e-6 + 32 * 30e-6, rel=1e-12)  # 0.448 + 0.96 ms
    mixed = step_time(costs, rates, constants, decode_tokens=4, decode_context_tokens=100, prefill_tokens=256)
    assert mixed.overhead_s == pytest.approx(32 * 14 * 4e-6 + 32 * 30e-6, rel=1e-12)  # 1.792 + 0.96 ms
    dense, _ = _deployment("meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb", vllm_version="0.32.0")
    assert step_time(dense, rates, constants, decode_tokens=4, decode_context_tokens=100).overhead_s == \
        pytest.approx(320 * 1e-6, rel=1e-12)  # no MoE layer, no MoE latency


def test_the_batch_where_decode_turns_compute_bound_solves_the_roofline_by_hand() -> None:
    """Per request a decode step adds 2P + C·attention FLOPs and C·KV + activation bytes; the weights are read once.
    compute(B) > memory(B) from B* = (W / BW) / ((2P + C·a) / F - (C·kv + act) / BW): 100 tokens of context give
    B* = 419.90 on an H100 at unit efficiency over its measured matmul ceiling and streaming rate, so the first
    compute-bound batch is 420."""
    from types import SimpleNamespace

    from calculator.speed.predict import _compute_bound_from

    costs, rates = _deployment("meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb")
    replica = SimpleNamespace(costs=costs, rates=rates, constants=UNIT)
    context = 100
    weights_s = (2 * LLAMA8_LINEAR_PARAMS + LLAMA8_NORM_BYTES) / H100_STREAMING_BYTES_S
    per_request_s = ((2 * LLAMA8_LINEAR_PARAMS + context * LLAMA8_ATTENTION_FLOPS_PER_CONTEXT_TOKEN) / H100_CEILING
                     - (context * LLAMA8_KV_BYTES_PER_TOKEN + LLAMA8_ACTIVATION_BYTES_PER_TOKEN)
                     / H100_STREAMING_BYTES_S)
    assert weights_s / per_request_s == pytest.approx(419.90, abs=0.01)
    assert _compute_bound_from(replica, context) == 420
    # At 1,000 tokens each request adds more KV bytes than FLOPs at these rates: no batch turns compute-bound.
    assert _compute_bound_from(replica, 1000) is None


# gpt-oss-20b (hidden 2880, expert intermediate 2880, 24 MoE layers, 4 of 32 experts per token). On MI300X (gfx942, no
# FP4 matrix cores) vLLM runs its MXFP4 experts through triton_kernels' matmul_ogs, which dequantizes each 128-deep
# K step in registers; ROCm/triton issue #970 times one call at M = 1 with K 3072 (2880 padded to 256) at 79 us.
GPT_OSS_K_STEPS = 3072 // 128  # 24 steps of block_k 128 in both the gate_up (K = hidden) and down (K = intermediate)
GPT_OSS_FLOOR_PER_LAYER_S = 2 * 79e-6  # two calls of 24 K steps each, 79 us / 24 per step


def test_mxfp4_experts_on_cdna3_take_the_measured_triton_floor_per_call() -> None:
    costs, rates = _deployment("openai/gpt-oss-20b", gpu="mi300x-192gb")
    assert costs.moe_layers == 24
    assert costs.expert_gemm_floor_s == pytest.approx(GPT_OSS_FLOOR_PER_LAYER_S, rel=1e-12)  # 158 us
    floored = step_time(costs, rates, UNIT, decode_tokens=1, decode_context_tokens=1000)
    streamed = step_time(costs.model_copy(update={"expert_gemm_floor_s": 0.0}), rates, UNIT, decode_tokens=1,
                         decode_context_tokens=1000)
    # one token touches exactly 4 of 32 experts: 1/8 of the expert bytes at 0.82 x 5.3 TB/s (no streaming rate timed
    # on an MI300X), far under the 3.792 ms floor
    expert_stream_s = costs.expert_weight_bytes / 8 / (0.82 * 5.3e12)
    assert 24 * GPT_OSS_FLOOR_PER_LAYER_S == pytest.approx(3.792e-3, rel=1e-12)
    assert floored.memory_s - streamed.memory_s == pytest.approx(3.792e-3 - expert_stream_s, rel=1e-9)
    # tensor parallelism splits the down GEMM's K: 2880 / 2 = 1440, padded to 1536 = 12 steps (24 + 12 = 36)
    costs_tp2, _ = _deployment("openai/gpt-oss-20b", gpu="mi300x-192gb", tensor_parallel_size=2)
    assert costs_tp2.expert_gemm_floor_s == pytest.approx(36 * 79e-6 / GPT_OSS_K_STEPS, rel=1e-12)  # 118.5 us


def test_the_mxfp4_floor_is_only_where_vllm_dequantizes_in_the_triton_kernel() -> None:
    assert _deployment("openai/gpt-oss-20b", gpu="h100-sxm-80gb")[0].expert_gemm_floor_s == 0.0  # CUDA kernels
    assert _deployment("Qwen/Qwen3-30B-A3B", gpu="mi300x-192gb")[0].expert_gemm_floor_s == 0.0  # BF16 experts


# The fused-MoE op as AIConfigurator 0.12.0 times vLLM's kernels on the card (benchmarks/expert_gemm_shares.py):
# H100/H200 BF16 experts (Triton fused_moe) 437 TFLOPS against 781 for dense BF16 GEMMs, a share of 0.56.
HOPPER_BF16_EXPERT_SHARE = round(437 / 781, 2)


def test_the_routed_experts_flops_run_at_the_measured_share_of_the_dense_rate() -> None:
    costs, rates = _deployment("mistralai/Mixtral-8x7B-Instruct-v0.1", gpu="h100-sxm-80gb")
    experts, lm_head = 32 * 2 * 3 * 14336 * 4096, 32000 * 4096  # top-2 of 8 experts in each of 32 layers
    assert costs.expert_flops_per_token == 2 * experts
    assert costs.expert_gemm_share == HOPPER_BF16_EXPERT_SHARE == 0.56
    prefill = step_time(costs, rates, UNIT, decode_tokens=0, decode_context_tokens=0, prefill_tokens=1000)
    at_dense_rate = step_time(costs.model_copy(update={"expert_gemm_share": 1.0}), rates, UNIT, decode_tokens=0,
                              decode_context_tokens=0, prefill_tokens=1000)
    # the other FLOPs (attention projections, router, one LM head row, attention) keep the dense rate
    assert prefill.compute_s - at_dense_rate.compute_s == pytest.approx(
        1000 * 2 * experts * (1 / 0.56 - 1) / H100_CEILING, rel=1e-12)  # 2.07 ms more than at the dense rate
    assert at_dense_rate.compute_s == pytest.approx(
        (1000 * 2 * (costs.linear_flops_per_token / 2 - lm_head) + 2 * lm_head
         + 1000 * 500 * 32 * 2 * 32 * (128 + 128)) / H100_CEILING, rel=1e-12)
    # a decode step of one token streams the same bytes either way
    decode = step_time(costs, rates, UNIT, decode_tokens=1, decode_context_tokens=100)
    assert decode.memory_s == step_time(costs.model_copy(update={"expert_gemm_share": 1.0}), rates, UNIT,
                                        decode_tokens=1, decode_context_tokens=100).memory_s


@pytest.mark.parametrize(("model", "gpu", "share"), [
    ("openai/gpt-oss-20b", "h100-sxm-80gb", 0.71),  # MXFP4 experts: OpenAI's Triton matmul_ogs, 551 / 781
    ("openai/gpt-oss-20b", "a100-sxm-80gb", 0.74),  # Marlin on Ampere runs as on Ada (L40S: 166 / 226)
    # BF16 Triton fused_moe on the A100 (vLLM 0.14, timed with skewed routing only): 87 / 265 TFLOPS, x 1.089 for even
    # routing (the median over six other cards of the same shapes' skewed / even latency), 95 / 265
    ("Qwen/Qwen3-30B-A3B", "a100-sxm-80gb", 0.36),
    ("Qwen/Qwen3-30B-A3B", "b200", 0.44),  # BF16 on B200 and GB200 (FlashInfer CUTLASS / TRT-LLM): 713 / 1,612
    ("Qwen/Qwen3-30B-A3B", "mi300x-192gb", 0.44),  # no AMD table: the median of the five families' BF16 shares
])
def test_each_expert_format_and_gpu_family_takes_its_timed_share(model: str, gpu: str, share: float) -> None:
    assert _deployment(model, gpu=gpu)[0].expert_gemm_share == share


@pytest.mark.parametrize(("quantization", "form"), [
    # GPTQ and AWQ are weight-only: vLLM runs their experts through Marlin's W4A16 / W8A16 MoE kernels
    # (GPTQMarlinMoEMethod's uint4b8 / uint8b128 types), not through the FP8 kernels an 8-bit weight would suggest
    (QuantizationSpec(method="gptq", weight_bits=8, group_size=128), "int4"),
    (QuantizationSpec(method="gptq", weight_bits=4, group_size=128), "int4"),
    (QuantizationSpec(method="awq", weight_bits=4, group_size=128, has_zeros=True), "int4"),
    (QuantizationSpec(method="fp8", weight_bits=8, scale_granularity="block", weight_block_size=(128, 128)), "fp8"),
    (QuantizationSpec(method="mxfp4", weight_bits=4, group_size=32, scale_bytes=1), "mxfp4"),
    (None, "bf16"),
])
def test_the_expert_weight_format_picks_vllms_moe_kernel_family(quantization: QuantizationSpec | None,
                                                                form: str) -> None:
    assert expert_format(quantization) == form


def test_dense_models_have_no_expert_flops() -> None:
    costs, _ = _deployment("meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb")
    assert (costs.expert_flops_per_token, costs.expert_gemm_share) == (0.0, 1.0)


def test_the_streaming_rates_are_the_ones_the_kernel_database_gives() -> None:
    import json
    import statistics
    from pathlib import Path

    from calculator.gpus import gpu_catalog
    from calculator.speed.hardware import UNMEASURED_STREAMING_RATIO

    measured = json.loads((Path(__file__).parents[1] / "benchmarks/data/linear_layer_rates.json").read_text())
    assert measured["aiconfigurator"] == "0.12.0"
    catalog = {gpu.key: gpu for gpu in gpu_catalog()}
    timed = {key: gpu.measured_bandwidth_gb_s for key, gpu in catalog.items() if gpu.measured_bandwidth_gb_s}
    assert timed == {key: row["measured_bandwidth_gb_s"] for key, row in measured["rates"].items()}
    # 1,679 / 2,039 (A100), 2,978 / 3,350 (H100), 4,042 / 4,800 (H200), 6,322 / 8,000 (B200), 6,405 / 8,000 (B300),
    # 709 / 864 (L40S), 1,505 / 1,792 (RTX PRO 6000): median 0.823
    ratios = [timed[key] / catalog[key].memory_bandwidth_gb_s for key in timed]
    assert round(statistics.median(ratios), 2) == UNMEASURED_STREAMING_RATIO == 0.82
    # per-tensor FP8 over BF16 at M, N, K >= 2,048: H100 899 / 784, H200 985 / 778, B200 1,841 / 1,547, B300, L40S
    # 333 / 226, RTX PRO 6000 680 / 391 (the A100's table has no FP8)
    speedups = {key: gpu.measured_fp8_speedup for key, gpu in catalog.items() if gpu.measured_fp8_speedup}
    assert speedups == {key: row["measured_fp8_speedup"] for key, row in measured["rates"].items()
                        if "measured_fp8_speedup" in row}
    assert {key: speedups[key] for key in ("h100-sxm-80gb", "h200-141gb", "b200-180gb", "l40s-48gb",
                                           "rtx-pro-6000-blackwell")} == pytest.approx({
        "h100-sxm-80gb": 899 / 784, "h200-141gb": 985 / 778, "b200-180gb": 1841 / 1547, "l40s-48gb": 333 / 226,
        "rtx-pro-6000-blackwell": 680 / 391}, abs=0.011)  # the rates above are rounded to the TFLOPS
    # NVFP4 over BF16 at the same shapes: B200 3,355 / 1,547, B300 3,595 / 1,690, RTX PRO 6000 1,119 / 391 (the other
    # cards' tables have no NVFP4)
    fp4 = {key: gpu.measured_fp4_speedup for key, gpu in catalog.items() if gpu.measured_fp4_speedup}
    assert fp4 == {key: row["measured_fp4_speedup"] for key, row in measured["rates"].items()
                   if "measured_fp4_speedup" in row}
    assert fp4 == pytest.approx({"b200-180gb": 3355 / 1547, "b300-288gb": 3595 / 1690,
                                 "rtx-pro-6000-blackwell": 1119 / 391}, abs=0.011)


def test_an_untimed_card_streams_at_the_median_share_and_a_given_bandwidth_drops_the_timed_rate() -> None:
    _, rates = _deployment("meta-llama/Llama-3.1-8B-Instruct", gpu="a10g-24gb", max_model_len=8192)
    assert (rates.streaming_bandwidth_bytes_s, rates.bandwidth_measured) == (pytest.approx(600e9 * 0.82), False)
    result = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb"))
    given = gpu_rates(result.gpu.with_rates(memory_bandwidth_gb_s=4000), result.quantization)
    assert (given.streaming_bandwidth_bytes_s, given.bandwidth_measured) == (pytest.approx(4000e9 * 0.82), False)


def test_the_share_table_is_the_one_the_kernel_database_gives() -> None:
    import json
    from pathlib import Path

    from calculator.speed.expert_kernels import EXPERT_GEMM_SHARE

    measured = json.loads((Path(__file__).parents[1] / "benchmarks/data/expert_gemm_shares.json").read_text())
    assert measured["aiconfigurator"] == "0.12.0"
    assert {family: {form: row["share"] for form, row in forms.items()}
            for family, forms in measured["shares"].items()} == EXPERT_GEMM_SHARE
    assert all(round(row["moe_tflops"] / row["dense_tflops"], 2) == pytest.approx(row["share"], abs=0.011)
               for forms in measured["shares"].values() for row in forms.values())


# DeepSeek-V3.2 (config.json): 61 layers, 128 query heads, kv_lora_rank 512 + qk_rope_head_dim 64 = a 576-wide
# latent, an indexer of 64 heads of 128 that keeps the top 2,048 tokens, its keys cached as 128 fp8 bytes plus one
# fp32 scale.
DSV32_LAYERS, DSV32_ABSORBED = 61, 576 + 512  # scores over the 576-wide latent, mixes the 512-wide one
DSV32_INDEXER_FLOPS = 61 * 2 * 64 * 128


def test_deepseek_sparse_attention_scores_the_top_k_latents_at_the_heads_flashmla_pads_to() -> None:
    costs, _ = _deployment("deepseek-ai/DeepSeek-V3.2", gpu="h200-141gb", tensor_parallel_size=8)
    sparse, indexer = sorted(costs.attention, key=lambda group: group.window_tokens is None)
    # 16 heads a rank, padded to 64 on Hopper; prompts take the same absorbed form as decode (sparse MQA)
    assert (sparse.window_tokens, sparse.sparse_mla_heads) == (2048, 16)
    assert sparse.decode_flops_per_context_token == sparse.prefill_flops_per_context_token == (
        DSV32_LAYERS * 2 * 64 * DSV32_ABSORBED)
    assert sparse.kv_bytes_per_context_token == DSV32_LAYERS * 576 * 2  # the BF16 latent, read for 2,048 tokens
    assert (indexer.window_tokens, indexer.kv_bytes_per_context_token) == (None, DSV32_LAYERS * (128 + 4))
    assert indexer.decode_flops_per_context_token == indexer.prefill_flops_per_context_token == DSV32_INDEXER_FLOPS
    # at 10,000 tokens of context a decode scores all of them with the indexer and attends to 2,048
    assert costs.decode_attention_flops(10_000) == 2048 * DSV32_LAYERS * 2 * 64 * DSV32_ABSORBED + (
        10_000 * DSV32_INDEXER_FLOPS)
    assert costs.kv_read_bytes(10_000) == 2048 * DSV32_LAYERS * 576 * 2 + 10_000 * DSV32_LAYERS * 132


@pytest.mark.parametrize(("gpu", "kv_cache_dtype", "decode_heads", "prompt_heads"), [
    ("b200-180gb", "auto", 128, 128),  # Blackwell's BF16 kernel takes 128 heads
    ("b200-180gb", "fp8_ds_mla", 64, 128),  # the FP8 decode kernel 64 (up to 64 heads); prompts the BF16 one
])
def test_blackwell_pads_sparse_mla_to_its_own_kernels_head_count(gpu: str, kv_cache_dtype: str, decode_heads: int,
                                                                 prompt_heads: int) -> None:
    costs, _ = _deployment("deepseek-ai/DeepSeek-V3.2", gpu=gpu, tensor_parallel_size=8,
                           kv_cache_dtype=kv_cache_dtype)
    sparse = next(group for group in costs.attention if group.sparse_mla_heads)
    assert sparse.decode_flops_per_context_token == DSV32_LAYERS * 2 * decode_heads * DSV32_ABSORBED
    assert sparse.prefill_flops_per_context_token == DSV32_LAYERS * 2 * prompt_heads * DSV32_ABSORBED
