"""The MLA attention block's decode latency beyond its bytes, as AIConfigurator times vLLM's module on the card.

Expected figures are read from the reduction of AIConfigurator 0.12.0's ``mla_generation_module_perf`` tables
(benchmarks/mla_decode_latency.py -> benchmarks/data/mla_decode_latency.json), not from the speed model's output, and
the block's weights are counted by hand from DeepSeek-V3's config.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calculator import Scenario, estimate
from calculator.speed.calibration import SpeedConstants
from calculator.speed.costs import forward_costs
from calculator.speed.hardware import gpu_rates
from calculator.speed.mla_kernels import MLA_BATCHES, MLA_DECODE_EXCESS_US, excess_at, mla_decode_excess
from calculator.speed.step_time import step_time

REPO = Path(__file__).resolve().parents[1]
NO_OVERHEADS = SpeedConstants(bandwidth_efficiency=1, compute_efficiency=1, overlap_penalty=0, step_overhead_s=0,
                              sequence_overhead_s=0, kernel_overhead_s=0, eager_kernel_overhead_s=0,
                              piecewise_layer_overhead_s=0, full_graph_kernel_overhead_s=0, moe_layer_overhead_s=0,
                              all_reduce_latency_s=0, all_reduce_efficiency=1, request_overhead_s=0,
                              fallback_interconnect_bytes_s=32e9)
DEEPSEEK_V3_LAYERS = 61  # num_hidden_layers, every one MLA
MLA_KERNELS = 13  # with a q LoRA: norm, q_a, kv_a, two norms, q_b, RoPE, cache write, W_UK, decode, reduce, W_UV, o


def _costs(model: str, gpu: str, tp: int):
    result = estimate(Scenario(model=model, gpu=gpu, tensor_parallel_size=tp))
    return forward_costs(result), gpu_rates(result.gpu, result.quantization)


def test_the_table_is_the_reduction_of_the_kernel_database() -> None:
    reduced = json.loads((REPO / "benchmarks/data/mla_decode_latency.json").read_text())
    assert reduced["aiconfigurator"] == "0.12.0"
    assert {family: {form: {int(heads): tuple(by_batch[str(batch)] for batch in MLA_BATCHES)
                            for heads, by_batch in by_heads.items()}
                     for form, by_heads in formats.items()}
            for family, formats in reduced["excess_us"].items()} == MLA_DECODE_EXCESS_US


def test_the_block_weights_the_reduction_subtracts_are_deepseek_v3s() -> None:
    from benchmarks.mla_decode_latency import module_weight_params

    config = json.loads((REPO / "calculator/data/presets/deepseek-ai__DeepSeek-V3.json").read_text())
    hidden, q_lora, kv_lora = config["hidden_size"], config["q_lora_rank"], config["kv_lora_rank"]
    nope, rope, value = config["qk_nope_head_dim"], config["qk_rope_head_dim"], config["v_head_dim"]
    heads = config["num_attention_heads"] // 8  # TP 8
    by_hand = (hidden * q_lora + hidden * (kv_lora + rope)  # q_a and kv_a, replicated on every GPU
               + q_lora * heads * (nope + rope) + kv_lora * heads * (nope + value) + heads * value * hidden)
    assert module_weight_params(16) == by_hand == 36_634_624


def test_deepseek_v3_decode_pays_the_measured_block_latency_on_each_layer() -> None:
    costs, rates = _costs("deepseek-ai/DeepSeek-V3", "h200-141gb", 8)
    # block FP8 linear layers, 128 query heads / TP 8 = 16 a GPU: 83.8 us beyond the bytes at one request
    assert (costs.mla_layers, costs.mla_kernels_per_layer) == (DEEPSEEK_V3_LAYERS, MLA_KERNELS)
    assert costs.mla_decode_excess == pytest.approx((83.8e-6, 89.4e-6, 98.4e-6, 105.6e-6), rel=1e-12)
    without = costs.model_copy(update={"mla_decode_excess": None})

    def extra(constants: SpeedConstants, requests: float) -> float:
        return (step_time(costs, rates, constants, decode_tokens=requests, decode_context_tokens=500).overhead_s
                - step_time(without, rates, constants, decode_tokens=requests, decode_context_tokens=500).overhead_s)

    assert extra(NO_OVERHEADS, 1) == pytest.approx(61 * 83.8e-6, rel=1e-9)  # 5.11 ms a step
    # 8 requests: halfway in log between the 4- and 16-request figures, 89.4 + (98.4 - 89.4) / 2 = 93.9 us
    assert extra(NO_OVERHEADS, 8) == pytest.approx(61 * 93.9e-6, rel=1e-9)
    assert extra(NO_OVERHEADS, 512) == pytest.approx(61 * 105.6e-6, rel=1e-9)  # held at 64: FLOPs price the rest
    # the measurement is a full CUDA graph: the gaps already counted for the block's 13 kernels come off it
    gaps = NO_OVERHEADS.model_copy(update={"full_graph_kernel_overhead_s": 3.5e-6})
    assert extra(gaps, 1) == pytest.approx(61 * (83.8e-6 - 13 * 3.5e-6), rel=1e-9)  # 38.3 us a layer
    # a step of prompt tokens alone runs MLA's prefill path, not the decode block
    assert step_time(costs, rates, NO_OVERHEADS, decode_tokens=0, decode_context_tokens=0,
                     prefill_tokens=2048).overhead_s == step_time(without, rates, NO_OVERHEADS, decode_tokens=0,
                                                                  decode_context_tokens=0,
                                                                  prefill_tokens=2048).overhead_s


@pytest.mark.parametrize(("gpu", "tp", "expected_us"), [
    ("h200-141gb", 4, (85.4, 91.3, 102.6, 112.2)),  # 32 heads a GPU
    ("b200-180gb", 8, (45.2, 43.5, 43.5, 54.1)),  # Blackwell (FlashInfer MLA): about half Hopper's
])
def test_the_figure_follows_the_family_and_the_heads_each_gpu_holds(gpu: str, tp: int,
                                                                  expected_us: tuple[float, ...]) -> None:
    costs, _ = _costs("deepseek-ai/DeepSeek-V3", gpu, tp)
    assert costs.mla_decode_excess == pytest.approx(tuple(us * 1e-6 for us in expected_us), rel=1e-12)


def test_untimed_families_and_other_attention_keep_the_kernel_gap_estimate() -> None:
    assert _costs("deepseek-ai/DeepSeek-V3", "mi300x-192gb", 8)[0].mla_decode_excess is None  # AMD: not timed
    assert mla_decode_excess("ampere", "bf16", 16) is None  # vLLM's Triton MLA kernel: not timed
    llama, _ = _costs("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm-80gb", 1)
    assert (llama.mla_layers, llama.mla_decode_excess) == (0, None)


def test_heads_between_the_timed_counts_take_the_nearest_in_ratio_and_batches_interpolate_in_log() -> None:
    assert mla_decode_excess("hopper", "fp8", 12) == mla_decode_excess("hopper", "fp8", 16)  # 12/8 > 16/12
    assert mla_decode_excess("hopper", "int8", 16) == mla_decode_excess("hopper", "bf16", 16)  # not FP8: BF16
    excess = (1.0, 2.0, 3.0, 4.0)
    assert [excess_at(excess, n) for n in (0.5, 1, 2, 4, 32, 64, 1000)] == pytest.approx([1, 1, 1.5, 2, 3.5, 4, 4])


def test_the_speed_note_names_the_measured_block_and_the_padded_sparse_heads() -> None:
    from calculator.speed.predict import ceiling_note, speed_estimate
    from calculator.speed.summary import speed_summary
    from calculator.speed.traffic import Traffic

    result = estimate(Scenario(model="deepseek-ai/DeepSeek-V3.2", gpu="h200-141gb", tensor_parallel_size=8))
    speed = speed_estimate(result, Traffic(input_tokens=2000, output_tokens=200, concurrency=4))
    # four running requests: 89.4 us a layer (the 4-request figure); 128 heads / TP 8 = 16, padded to 64 on Hopper
    assert speed.running_requests == 4 and speed.mla_block_us == pytest.approx(89.4, rel=1e-9)
    assert speed.sparse_mla_heads == (16, 64)
    note = ceiling_note(speed)
    assert "MLA attention 89 us a layer beyond its bytes at 4 running requests" in note
    assert "at 64 query heads a GPU, FlashMLA's sparse kernels padding its 16" in note
    assert {key: speed_summary(speed)[key] for key in ("mla_block_us", "sparse_mla_heads")} == {
        "mla_block_us": 89.4, "sparse_mla_heads": [16, 64]}  # the JSON the CLI prints
    one = speed_estimate(result, Traffic(input_tokens=2000, output_tokens=200, concurrency=1))
    assert "MLA attention 84 us a layer beyond its bytes at 1 running request," in ceiling_note(one)  # 83.8 us
    dense = speed_estimate(estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb")),
                           Traffic(input_tokens=2000, output_tokens=200, concurrency=4))
    assert (dense.mla_block_us, dense.sparse_mla_heads) == (None, None) and "MLA" not in ceiling_note(dense)
