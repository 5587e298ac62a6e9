"""Data and expert parallelism: experts placed per rank, the MoE layers' DP-gathered tokens, the all-to-all backend's
buffers (calculator/engine/expert_parallel.py, placement.py; read from vLLM 0.32's fused_moe and all2all.py).

Hand figures on Qwen3-30B-A3B (config.json: hidden 2,048, 48 layers, 128 experts of width 768, 8 per token, bf16).
"""

from __future__ import annotations

import json

import pytest

from calculator.cli import main
from calculator.engine.estimate import estimate
from calculator.engine.overheads import forward_activation_bytes
from calculator.model.model_source import load_model_spec
from calculator.scenario import Scenario
from calculator.serve_command import parse_serve_command, serve_command
from calculator.units import MIB

MOE = "Qwen/Qwen3-30B-A3B"
EXPERT_BYTES = 3 * 2048 * 768 * 2  # gate, up and down of one expert in one layer, bf16


def _moe(**fields):
    return estimate(Scenario(model=MOE, gpu="h100-sxm-80gb", vllm_version="0.32.0", **fields))


@pytest.mark.parametrize(("fields", "experts_on_busiest_rank"), [
    ({"tensor_parallel_size": 4, "enable_expert_parallel": True}, 32),  # 128 / 4 whole experts
    ({"data_parallel_size": 3, "enable_expert_parallel": True}, 43),  # ceil(128 / 3): the first 128 % 3 ranks hold one more
    ({"tensor_parallel_size": 2, "data_parallel_size": 4, "enable_expert_parallel": True}, 16),  # ep_size = tp x dp
])
def test_expert_parallel_places_whole_experts_over_tp_x_dp_ranks(fields, experts_on_busiest_rank):
    assert _moe(**fields).weights_by_role["expert"] == 48 * experts_on_busiest_rank * EXPERT_BYTES


def test_data_parallel_without_expert_parallel_splits_every_expert_over_tp_x_dp():
    # FusedMoEParallelConfig flattens TP across DP: each of 4 ranks holds a quarter of every expert's width
    assert _moe(data_parallel_size=4).weights_by_role["expert"] == 48 * 128 * EXPERT_BYTES // 4


def test_the_moe_layers_work_on_the_tokens_of_every_dp_rank():
    spec = load_model_spec(MOE)
    tokens, width = 8192, 8 * 768  # routed intermediate per token: top_k x expert width

    def forward(**parallel):
        return forward_activation_bytes(spec, max_num_batched_tokens=tokens, activation_dtype_bytes=2,
                                        tensor_parallel_size=1, **parallel)

    # one engine: 4 hidden-size tensors and 3 routed-intermediate ones per token
    assert forward() == tokens * (4 * 2048 + 3 * width) * 2
    # DP 4: 4 x the tokens reach each MoE layer (gathered input + 3 x a quarter of the routed width each)
    assert forward(data_parallel_size=4) == tokens * (4 * 2048 + 4 * (3 * width // 4 + 2048)) * 2
    # DP 4 with EP: whole experts, so the full routed width for each gathered token
    assert forward(data_parallel_size=4, enable_expert_parallel=True) == tokens * (4 * 2048 + 4 * (3 * width + 2048)) * 2


def test_deepep_keeps_a_1_gib_buffer_only_where_vllm_dispatches_with_it():
    base = _moe(data_parallel_size=4, enable_expert_parallel=True)
    deepep = _moe(data_parallel_size=4, enable_expert_parallel=True, all2all_backend="deepep_high_throughput")
    assert deepep.budget.non_torch_bytes - base.budget.non_torch_bytes == 1024 * MIB  # VLLM_DEEPEP_BUFFER_SIZE_MB
    # without DP, vLLM's use_all2all_kernels is false: the backend is never built, and the planner says so
    unused = _moe(tensor_parallel_size=4, enable_expert_parallel=True, all2all_backend="deepep_high_throughput")
    assert unused.budget.non_torch_bytes == _moe(tensor_parallel_size=4, enable_expert_parallel=True).budget.non_torch_bytes
    assert any(w.startswith("--all2all-backend deepep_high_throughput is unused here") for w in unused.warnings)
    low_latency = _moe(data_parallel_size=2, enable_expert_parallel=True, all2all_backend="deepep_low_latency")
    assert any("is not modelled" in w for w in low_latency.warnings)


def test_dense_models_ignore_expert_parallel():
    dense = Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb", vllm_version="0.32.0")
    assert estimate(dense.replace(data_parallel_size=2, enable_expert_parallel=True)).budget == estimate(dense).budget


def test_import_and_export_of_the_dp_ep_flags():
    line = ("vllm serve Qwen/Qwen3-30B-A3B --data-parallel-size 4 --enable-expert-parallel "
            "--all2all-backend deepep_high_throughput")
    scenario, _ = parse_serve_command(line)
    assert (scenario.data_parallel_size, scenario.enable_expert_parallel, scenario.all2all_backend) == (
        4, True, "deepep_high_throughput")
    assert "--all2all-backend deepep_high_throughput" in serve_command(scenario)
    with pytest.raises(Exception, match="--all2all-backend: not a valid value: 'ring'"):
        parse_serve_command("vllm serve Qwen/Qwen3-30B-A3B --all2all-backend ring")


def test_cli_takes_vllms_flags_and_counts_the_gpus(capsys):
    assert main(["estimate", "--model", MOE, "--gpu", "h100-sxm-80gb", "--vllm-version", "0.32.0", "-tp", "2",
                 "--data-parallel-size", "4", "--enable-expert-parallel", "--all2all-backend",
                 "deepep_high_throughput", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["data_parallel_size"], out["enable_expert_parallel"], out["num_gpus_total"]) == (4, True, 8)
