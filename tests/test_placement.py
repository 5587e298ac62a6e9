"""Data/expert parallelism and --cpu-offload-gb change the weights each GPU holds the way vLLM 0.32 places them.

Expected bytes are hand-computed from the configs: Qwen3-30B-A3B has 48 layers of 128 experts, each a gate, an
up (768 x 2048) and a down (2048 x 768) projection in bf16 = 3 x 768 x 2048 x 2 B = 9,437,184 B per expert.
"""

from __future__ import annotations

from calculator import Scenario, estimate, load_model_spec
from calculator.engine.placement import cpu_offloaded_bytes

EXPERT_BYTES = 3 * 768 * 2048 * 2
ALL_EXPERTS = 48 * 128 * EXPERT_BYTES  # 57,982,058,496 B = 54 GiB
MOE = Scenario(model="Qwen/Qwen3-30B-A3B", gpu="h100-sxm-80gb", tensor_parallel_size=2, vllm_version="0.32.0")


def expert_bytes(**changes) -> int:
    return estimate(MOE.replace(**changes)).weights_by_role["expert"]


def test_tp_alone_slices_every_expert():
    assert expert_bytes() == ALL_EXPERTS // 2


def test_data_parallel_flattens_the_expert_split_over_tp_times_dp():
    # FusedMoEParallelConfig.make: without EP, MoE layers are tensor-parallel over tp x dp = 4 devices.
    assert expert_bytes(data_parallel_size=2) == ALL_EXPERTS // 4


def test_expert_parallel_gives_each_rank_whole_experts():
    # ep_size = tp x dp = 6: 128 experts -> 22 on the busiest rank (the first 128 % 6 = 2 ranks hold 22).
    assert expert_bytes(data_parallel_size=3, enable_expert_parallel=True) == 48 * 22 * EXPERT_BYTES


def test_attention_is_not_split_by_data_parallelism():
    plain, dp = estimate(MOE), estimate(MOE.replace(data_parallel_size=2))
    assert dp.weights_by_role["attention"] == plain.weights_by_role["attention"]


def test_cpu_offload_moves_whole_parameters_from_the_first_layer():
    # Llama-3.1-8B bf16, per layer: qkv 50,331,648 B, o 33,554,432, gate_up 234,881,024, down 117,440,512,
    # norms 2 x 8,192 -> 436,224,000 B. 1 GiB = 1,073,741,824: layers 0-1 (872,448,000), then layer 2's qkv
    # (922,779,648) and o (956,334,080) stay below it, so its gate_up goes too: 1,191,215,104 B, and vLLM stops.
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    moved = cpu_offloaded_bytes(spec, dtype_bytes=2, tensor_parallel_size=1, pipeline_parallel_size=1,
                                quantization=None, cpu_offload_bytes=1 << 30)
    assert moved == (1_191_215_104,)
    plain = estimate(Scenario(model=spec.model_id, vllm_version="0.32.0"))
    offloaded = estimate(Scenario(model=spec.model_id, vllm_version="0.32.0", cpu_offload_gb=1))
    assert plain.budget.weights_bytes - offloaded.budget.weights_bytes == 1_191_215_104
    assert offloaded.kv_cache_bytes > plain.kv_cache_bytes
    assert any("--cpu-offload-gb 1" in warning for warning in offloaded.warnings)


def test_cpu_offload_is_per_gpu_on_every_pipeline_stage():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    assert cpu_offloaded_bytes(spec, dtype_bytes=2, tensor_parallel_size=1, pipeline_parallel_size=2,
                               quantization=None, cpu_offload_bytes=1 << 30) == (1_191_215_104, 1_191_215_104)
