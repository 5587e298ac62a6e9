"""LoRA adapter slots (calculator/engine/lora.py): the shapes vLLM allocates, checked by hand.

The issue's hand check counts the decoder's linear layers only: Llama-3.1-8B has, per layer, q 4096->4096, k and v
4096->1024, o 4096->4096, gate and up 4096->14336, down 14336->4096, so sum(in + out) = 81,920 and 4 slots of rank 64
hold 81,920 x 64 x 4 x 2 B x 32 layers = 1,342,177,280 B = 1.25 GiB. vLLM 0.32 also wraps ``embed_tokens`` and the
LM head (LlamaForCausalLM.embedding_modules; vllm/lora/layers/vocab_parallel_embedding.py, logits_processor.py):
(vocab + hidden) x rank per slot each, (128,256 + 4,096) x 64 x 2 x 4 slots x 2 B = 135,528,448 B more.
"""

from __future__ import annotations

import json

import pytest

from calculator.engine import uncertainty
from calculator.cli import main
from calculator.engine.estimate import estimate
from calculator.engine.lora import lora_error, lora_slots
from calculator.engine.vllm_versions import VllmVersion
from calculator.model.model_source import load_model_spec
from calculator.scenario import Scenario
from calculator.serve_command import import_serve_command, serve_command
from calculator.speed.costs import forward_costs
from calculator.url_state import read_link, to_query_params

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
DECODER_LINEAR_BYTES = 81_920 * 64 * 4 * 2 * 32  # 1.25 GiB
VOCAB_BYTES = (128_256 + 4_096) * 64 * 2 * 4 * 2


def _slots(version: str = "0.32.0", tp: int = 1, fully_sharded: bool = False):
    return lora_slots(load_model_spec(LLAMA_8B), VllmVersion.parse(version), max_loras=4, max_lora_rank=64,
                      dtype_bytes=2, tensor_parallel_size=tp, pipeline_parallel_size=1, fully_sharded=fully_sharded,
                      max_num_batched_tokens=8192, max_num_seqs=256)


def test_four_slots_of_rank_64_on_llama_8b_take_one_and_a_quarter_gib_in_the_decoder():
    slots = _slots()
    assert slots.linear_bytes_per_stage == (DECODER_LINEAR_BYTES,) and DECODER_LINEAR_BYTES == 1.25 * 2**30
    assert slots.vocab_bytes_per_stage == (VOCAB_BYTES,)
    assert slots.shrink_buffer_bytes == 3 * 8192 * 64 * 4 == 6_291_456


def test_the_punica_wrappers_index_buffers():
    # vLLM 0.32 punica_base.py: 4 int64 of 8,192 tokens + 3 int64 of 256 sequences = 268,288 B; punica_gpu.py
    # makes two LoRAKernelMeta (lora_kernel_metadata.py), each 2 int32 of 8,192 tokens and int32 arrays of
    # max_loras + 1, + 1 and + 2 = 5 + 5 + 6 on the device (65,600 B): 131,200 B. In all 399,488 B.
    assert _slots().punica_bytes == 399_488


def test_tensor_parallel_ranks_hold_the_column_and_row_shares():
    # TP 2: column layers keep in and halve out, row layers halve in and keep out:
    # q 4096+2048, k and v 4096+512, o 2048+4096, gate and up 4096+7168, down 7168+4096 = 55,296.
    assert _slots(tp=2).linear_bytes_per_stage == (55_296 * 64 * 4 * 2 * 32,)
    # --fully-sharded-loras also halves A's rank on column layers and B's out on row layers:
    # q 32x4096 + 2048x64, k and v 32x4096 + 512x64, o 64x2048 + 2048x64, gate and up 32x4096 + 7168x64,
    # down 64x7168 + 2048x64 = 2,621,440 elements per slot and layer.
    assert _slots(tp=2, fully_sharded=True).linear_bytes_per_stage == (2_621_440 * 4 * 2 * 32,)


def test_before_0_12_every_adapter_could_add_256_tokens():
    # embed A (128,256 + 256) x 64, B 4,096 x 64, extra 256 x 4,096; LM head A 64 x 4,096, B 128,256 x 64
    # (already a multiple of 256), extra 256 x 4,096: 19,054,592 elements per slot.
    assert _slots("0.11.0").vocab_bytes_per_stage == (19_054_592 * 4 * 2,)


def test_the_slots_come_out_of_the_kv_cache_and_show_in_the_json(capsys):
    base = Scenario(model=LLAMA_8B, vllm_version="0.32.0")
    plain, with_lora = estimate(base), estimate(base.replace(enable_lora=True, max_loras=4, max_lora_rank=64))
    lora = with_lora.budget.lora_bytes
    assert lora - with_lora.lora.punica_bytes == DECODER_LINEAR_BYTES + VOCAB_BYTES
    # The profiling run's widest shrink buffer (merged QKV: 3 slices x tokens x rank 64 in fp32) joins the peak.
    shrink = 3 * with_lora.settings.max_num_batched_tokens * 64 * 4
    assert with_lora.budget.activation_bytes - plain.budget.activation_bytes == shrink
    assert plain.budget.kv_cache_bytes - with_lora.budget.kv_cache_bytes == lora + shrink
    assert main(["estimate", "--model", LLAMA_8B, "--vllm-version", "0.32.0", "--enable-lora", "--max-loras", "4",
                 "--max-lora-rank", "64", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["lora_bytes"] == lora


def test_lora_dtype_float32_models_keep_16_bit_slots_when_asked():
    base = Scenario(model=LLAMA_8B, enable_lora=True, max_loras=4, max_lora_rank=64, dtype="float32")
    assert estimate(base.replace(lora_dtype="bfloat16")).lora.linear_bytes_per_stage == (DECODER_LINEAR_BYTES,)
    assert estimate(base).lora.linear_bytes_per_stage == (2 * DECODER_LINEAR_BYTES,)


@pytest.mark.parametrize(("model", "rank", "cpu", "expected"), [
    (LLAMA_8B, 48, None, "--max-lora-rank 48: vLLM accepts 1, 8, 16, 32, 64, 128, 256, 320, 512"),
    (LLAMA_8B, 16, 2, "max_cpu_loras (2) must be >= max_loras (4)"),
    ("google/gemma-3-27b-it", 16, None, "When using LoRA, vocab size must be <= 258048"),
])
def test_what_vllm_refuses(model, rank, cpu, expected):
    problem = lora_error(load_model_spec(model), VllmVersion.parse("0.32.0"), max_lora_rank=rank, max_loras=4, max_cpu_loras=cpu,
                         tensor_parallel_size=1, fully_sharded=False)
    assert problem is not None and problem.startswith(expected)
    result = estimate(Scenario(model=model, enable_lora=True, max_loras=4, max_lora_rank=rank, max_cpu_loras=cpu))
    assert not result.fits and result.error == problem
    # refused before memory is sized: no band of memory makes it start (it read "borderline" where memory was ample)
    assert uncertainty.verdict(result) == "does not fit"


# vLLM's own words per release (config.py / config/lora.py possible_max_ranks; lora/layers.py /
# lora/layers/logits_processor.py create_lora_weights), read in each release's wheel.
_RANKS_0_8 = "(8, 16, 32, 64, 128, 256, 320, 512)"


@pytest.mark.parametrize(("version", "rank", "vocab", "expected"), [
    ("0.11.0", 1, 128_256, f"max_lora_rank (1) must be one of {_RANKS_0_8}."),  # config/lora.py 0.11.0:104
    ("0.12.0", 1, 128_256, None),  # MaxLoRARanks = Literal[1, 8, ...] (config/lora.py 0.12.0:25)
    ("0.7.3", 512, 128_256, "max_lora_rank (512) must be one of (8, 16, 32, 64, 128, 256)."),
    ("0.8.0", 512, 128_256, None),
    ("0.5.4", 128, 128_256, "max_lora_rank (128) must be one of (8, 16, 32, 64)."),
    ("0.5.5", 128, 128_256, None),
    ("0.4.0", 16, 128_256, "When using LoRA, vocab size must be 32000 >= vocab_size <= 33024"),
    ("0.5.4", 16, 151_936, "When using LoRA, vocab size must be 32000 >= vocab_size <= 128512"),
    ("0.5.5", 16, 151_936, None),
    ("0.16.0", 16, 257_536, "When using LoRA, vocab size must be 32000 >= vocab_size <= 257024"),
    ("0.17.0", 16, 257_536, None),
    ("0.32.0", 16, 258_049, "When using LoRA, vocab size must be <= 258048"),
])
def test_what_each_release_accepts(version, rank, vocab, expected):
    spec = load_model_spec(LLAMA_8B).model_copy(update={"vocab_size": vocab})
    assert lora_error(spec, VllmVersion.parse(version), max_lora_rank=rank, max_loras=4, max_cpu_loras=None,
                      tensor_parallel_size=1, fully_sharded=False) == expected


def test_the_estimate_refuses_rank_1_on_0_11_with_vllms_words():
    base = Scenario(model=LLAMA_8B, gpu="h100-sxm-80gb", enable_lora=True, max_loras=4, max_lora_rank=1)
    refused = estimate(base.replace(vllm_version="0.11.0"))
    assert not refused.fits and refused.error == f"max_lora_rank (1) must be one of {_RANKS_0_8}."
    assert estimate(base.replace(vllm_version="0.12.0")).fits


def test_experts_get_slots_from_0_12_only():
    # FusedMoE joined get_supported_lora_modules in 0.12.0 (lora/utils.py:231); before, LinearBase and the embedding
    # modules alone. Qwen3-30B-A3B, one slot of rank 16, bf16: 48 layers x 128 experts x (gate and up: A 16 x 2,048,
    # B 768 x 16; down: A 16 x 768, B 2,048 x 16) x 2 B.
    spec = load_model_spec("Qwen/Qwen3-30B-A3B")

    def linear(version: str) -> int:
        return lora_slots(spec, VllmVersion.parse(version), max_loras=1, max_lora_rank=16, dtype_bytes=2,
                          tensor_parallel_size=1, pipeline_parallel_size=1, fully_sharded=False,
                          max_num_batched_tokens=8192, max_num_seqs=256).linear_bytes_per_stage[0]

    experts = 48 * 128 * (2 * (16 * 2048 + 768 * 16) + 16 * 768 + 2048 * 16) * 2
    assert linear("0.12.0") - linear("0.11.0") == experts


def test_each_step_adds_the_shrink_and_expand_matmuls():
    base = Scenario(model=LLAMA_8B, vllm_version="0.32.0")
    costs = forward_costs(estimate(base.replace(enable_lora=True, max_loras=4, max_lora_rank=64)))
    assert costs.lora_flops_per_token == 2 * 64 * 81_920 * 32
    assert costs.lora_kernels == 2 * 4 * 32  # shrink and expand on qkv, o, gate_up and down of 32 layers
    assert costs.lora_slot_bytes == (DECODER_LINEAR_BYTES + VOCAB_BYTES) / 4


def test_import_link_and_export_round_trip():
    line = ("vllm serve meta-llama/Llama-3.1-8B-Instruct --enable-lora --max-loras 4 --max-lora-rank 64 "
            "--max-cpu-loras 8 --lora-dtype bfloat16 --fully-sharded-loras")
    scenario, report = import_serve_command(line, Scenario(vllm_version="0.32.0"))
    assert (scenario.enable_lora, scenario.max_loras, scenario.max_lora_rank, scenario.max_cpu_loras,
            scenario.lora_dtype, scenario.fully_sharded_loras) == (True, 4, 64, 8, "bfloat16", True)
    assert report.incomplete == () and "--max-lora-rank 64" in report.imported
    assert import_serve_command(serve_command(scenario), Scenario(vllm_version="0.32.0"))[0] == scenario
    params = to_query_params(scenario)
    assert {k: params[k] for k in ("lora", "loras", "lrank", "cpuloras", "ldt", "lshard")} == {
        "lora": "1", "loras": "4", "lrank": "64", "cpuloras": "8", "ldt": "bfloat16", "lshard": "1"}
    assert read_link(params).scenario == scenario
    assert read_link({"lrank": "100000"}).warnings == (
        "ignored link value lrank='100000': input should be less than or equal to 512; using the default",)


def test_the_cli_table_names_the_slots(capsys):
    assert main(["estimate", "--model", LLAMA_8B, "--vllm-version", "0.32.0", "--enable-lora", "--max-loras", "4",
                 "--max-lora-rank", "64"]) == 0
    lora = estimate(Scenario(model=LLAMA_8B, vllm_version="0.32.0", enable_lora=True, max_loras=4,
                             max_lora_rank=64)).budget.lora_bytes
    assert f"LoRA slots       {lora / 2**30:.2f} GiB (4 x rank 64)" in capsys.readouterr().out


@pytest.mark.parametrize(("parallel", "expert_slot_elements"), [
    # EP over 4 engines: 32 whole experts per rank; per expert gate and up (A 16 x 2,048, B 768 x 16) and down
    # (A 16 x 768, B 2,048 x 16)
    ({"data_parallel_size": 4, "enable_expert_parallel": True},
     32 * (2 * (16 * 2048 + 768 * 16) + 16 * 768 + 2048 * 16)),
    # DP 4 without EP: all 128 experts, a quarter of each one's width (192) on every rank
    ({"data_parallel_size": 4}, 128 * (2 * (16 * 2048 + 192 * 16) + 16 * 192 + 2048 * 16)),
])
def test_expert_slots_follow_the_expert_placement(parallel, expert_slot_elements):
    # Qwen3-30B-A3B (hidden 2,048, 48 layers, 128 experts of width 768): one slot of rank 16, bf16. Attention and
    # the vocabulary are the same on one engine and under DP, so the difference is the experts' slots alone.
    base = Scenario(model="Qwen/Qwen3-30B-A3B", gpu="h100-sxm-80gb", vllm_version="0.32.0", enable_lora=True,
                    max_loras=1, max_lora_rank=16)
    one_engine = 48 * 128 * (2 * (16 * 2048 + 768 * 16) + 16 * 768 + 2048 * 16) * 2
    single, placed = estimate(base).lora, estimate(base.replace(**parallel)).lora
    assert (single.linear_bytes_per_stage[0] - placed.linear_bytes_per_stage[0]
            == one_engine - 48 * expert_slot_elements * 2)


def test_what_vllm_refuses_for_lora_under_expert_parallelism():
    base = Scenario(model="Qwen/Qwen3-30B-A3B", gpu="h100-sxm-80gb", vllm_version="0.32.0", enable_lora=True,
                    data_parallel_size=2, enable_expert_parallel=True)
    assert estimate(base.replace(fully_sharded_loras=True)).error == (
        "Fused MoE LoRA does not support enable_expert_parallel=True together with fully_sharded_loras=True. "
        "Disable one of them.")
    assert estimate(base.replace(all2all_backend="deepep_high_throughput")).error == (
        "Fused MoE LoRA with EP currently only supports all2all_backend='allgather_reducescatter', "
        "got 'deepep_high_throughput'.")
    assert estimate(base).error is None
    # The asserts arrived in 0.21.0 (fully sharded, lora/layers/fused_moe.py:162) and 0.22.0 (the backend, :177).
    old = base.replace(vllm_version="0.20.0", fully_sharded_loras=True)
    assert estimate(old).error is None
    assert estimate(old.replace(vllm_version="0.21.0")).error.startswith("Fused MoE LoRA does not support")
    assert estimate(base.replace(vllm_version="0.21.0", all2all_backend="deepep_high_throughput")).error is None


def test_vllm_0_7_3_slots_with_the_extra_vocabulary_and_its_punica_buffers():
    # vLLM 0.7.3 lora/layers.py: the decoder's linear slots as in 0.32 (81,920 x 64 x 4 slots x 2 B x 32 layers =
    # 1,342,177,280 B); embed_tokens A (128,256 + 256) x 64 = 8,224,768, B 4,096 x 64 = 262,144, extra embeddings
    # 256 x 4,096 = 1,048,576; LM head A 64 x 4,096 = 262,144, B 128,256 x 64 = 8,208,384 (128,256 = 501 x 256),
    # extra 1,048,576: 19,054,592 elements per slot x 4 slots x 2 B = 152,436,736 B.
    # punica_base.py 0.7.3: six int64 arrays of 8,192 tokens (token_lora, sampler, sampler_padded, embeddings x 2,
    # long_lora) and three of 256 sequences, no kernel metadata: (6 x 8,192 + 3 x 256) x 8 = 399,360 B.
    slots = _slots("0.7.3")
    assert slots.linear_bytes_per_stage == (1_342_177_280,)
    assert slots.vocab_bytes_per_stage == (152_436_736,)
    assert slots.punica_bytes == 399_360
    assert slots.bytes_per_stage == (1_342_177_280 + 152_436_736 + 399_360,) == (1_495_013_376,)
    assert slots.shrink_buffer_bytes == 3 * 8192 * 64 * 4  # punica_gpu.py 0.7.3 add_lora_linear: fp32 buffer


@pytest.mark.parametrize(("version", "in_budget"), [("0.6.4", True), ("0.6.5", False), ("0.6.6", False),
                                                   ("0.7.3", False), ("0.8.0", True)])
def test_v0_0_6_5_to_0_7_leaves_the_slots_out_of_the_kv_budget(version, in_budget):
    # 0.6.5-0.7.x: memory_profiling(weights_memory=model_memory_usage) with the LoRA manager created after the
    # weights' DeviceMemoryProfiler (worker/model_runner.py load_model), and the profile's torch peak counted from
    # where it began: only the profiling run's shrink buffer (3 x tokens x 64 x 4 B) comes out of the KV cache.
    # 0.6.4 counted the absolute torch peak after the profile, slots included; V1 (0.8+) counts them with the weights.
    base = Scenario(model=LLAMA_8B, vllm_version=version, max_model_len=8192)
    plain, with_lora = estimate(base), estimate(base.replace(enable_lora=True, max_loras=4, max_lora_rank=64))
    shrink = (3 if version != "0.6.4" else 1) * with_lora.settings.max_num_batched_tokens * 64 * 4
    lora = with_lora.budget.lora_bytes
    assert plain.budget.kv_cache_bytes - with_lora.budget.kv_cache_bytes == shrink + (lora if in_budget else 0)
    segment = next(s for s in with_lora.budget.segments() if s.key == "lora")
    assert segment.inside_budget is in_budget
    outside = [w for w in with_lora.warnings if "LoRA slots" in w]
    assert outside == ([] if in_budget else [
        f"vLLM {version}'s V0 worker measures the weights before it creates the LoRA slots: their "
        f"{lora / 2**30:.2f} GiB are not taken out of the KV cache's budget and must fit in the "
        "(1 - gpu_memory_utilization) headroom"])


def test_up_to_0_6_4_the_shrink_runs_one_slice_at_a_time():
    # vLLM 0.6.3/0.6.4 lora/punica.py add_lora_packed_nslice: each slice's add_lora makes its own fp32 (tokens, rank)
    # buffer, so the peak holds one: 8,192 x 64 x 4 B = 2,097,152 B; its punica arrays are 0.7.3's (399,360 B).
    slots = _slots("0.6.4")
    assert slots.shrink_buffer_bytes == 8192 * 64 * 4 == 2_097_152 and slots.punica_bytes == 399_360


def test_up_to_0_5_3_the_lora_manager_held_the_index_arrays_alone():
    # vLLM 0.5.3 lora/models.py LoRAModelManager: six int64 arrays of max_num_batched_tokens rounded up to 8
    # (8,195 -> 8,200), no per-sequence arrays: 6 x 8,200 x 8 B = 393,600 B. 0.5.4's PunicaWrapper takes 8,195
    # as given and adds three of 256 sequences: (6 x 8,195 + 3 x 256) x 8 = 399,504 B.
    def punica(version: str) -> int:
        return lora_slots(load_model_spec(LLAMA_8B), VllmVersion.parse(version), max_loras=4, max_lora_rank=64,
                          dtype_bytes=2, tensor_parallel_size=1, pipeline_parallel_size=1, fully_sharded=False,
                          max_num_batched_tokens=8195, max_num_seqs=256).punica_bytes
    assert (punica("0.5.3"), punica("0.5.4")) == (393_600, 399_504)


@pytest.mark.parametrize(("version", "punica_bytes"), [("0.8.0", 530_560), ("0.9.0", 530_560), ("0.10.0", 465_024),
                                                       ("0.28.0", 465_024), ("0.29.0", 399_488)])
def test_the_punica_index_arrays_per_release(version, punica_bytes):
    # punica_base.py: int64 arrays of 8,192 tokens (six to 0.9 with long_lora; five from 0.10 when it went; four from
    # 0.29, whose embeddings indices are one row) and three of 256 sequences, plus 0.8+'s two LoRAKernelMeta
    # (131,200 B, see above): (6 x 8,192 + 768) x 8 = 399,360; (5 x 8,192 + 768) x 8 = 333,824;
    # (4 x 8,192 + 768) x 8 = 268,288; each + 131,200.
    assert _slots(version).punica_bytes == punica_bytes
