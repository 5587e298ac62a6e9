"""The fused-MoE kernel's workspace in the profiled forward pass (calculator/engine/moe_workspace.py).

Hand figures from ``TritonExperts.workspace_shapes`` (vLLM 0.14.0-0.32: workspace13 [M, top_k, max(N / 2, K)] and
workspace2 [M, top_k, max(N, K)], N = 2 x the expert's width on the rank, K = hidden) and 0.10.2's
``fused_experts_impl`` (cache13 [M, top_k, max(N, K)] + cache2 [M x top_k, N / 2]).
"""

from __future__ import annotations

import pytest

from calculator.engine.estimate import estimate
from calculator.engine.moe_workspace import routed_workspace_elements_per_token, workspace_kept
from calculator.engine.vllm_versions import VllmVersion
from calculator.scenario import Scenario
from calculator.units import GIB, MIB

V = VllmVersion.parse


@pytest.mark.parametrize(("width", "version", "elements"), [
    # Qwen3-235B-A22B (hidden 4,096, experts 1,536 wide, 8 per token): the hidden size sets both workspaces, so TP 1
    # and TP 4 (384 per rank) need the same 8 x (4,096 + 4,096)
    (1536, "0.27.1", 65_536),
    (384, "0.27.1", 65_536),
    (384, "0.14.0", 65_536),
    # 0.10.2: 8 x (max(768, 4,096) + 384) at TP 4; 8 x (max(3,072, 4,096) + 1,536) at TP 1
    (384, "0.10.2", 35_840),
    (1536, "0.10.2", 45_056),
])
def test_the_triton_workspace_is_as_wide_as_the_hidden_size_whatever_the_tp_shard(width, version, elements):
    assert routed_workspace_elements_per_token(hidden_size=4096, expert_width_per_rank=width, experts_per_token=8,
                                               version=V(version)) == elements


def test_experts_wider_than_the_hidden_size_set_the_workspace():
    # Mixtral-8x7B at TP 1: 2 experts per token, 14,336 wide, hidden 4,096: 2 x (14,336 + 28,672)
    assert routed_workspace_elements_per_token(hidden_size=4096, expert_width_per_rank=14336,
                                               experts_per_token=2) == 86_016


def test_the_workspace_manager_keeps_it_from_0_14():
    assert workspace_kept(V("0.14.0")) and workspace_kept(V("0.32.0")) and workspace_kept(None)
    assert not workspace_kept(V("0.10.2"))


def _qwen3_235b_tp4(vllm_version: str, **fields):
    # blog-kubesimplify-4xrtxpro6000-qwen3-235b-fp8-tp4-32k-v0271's deployment
    return estimate(Scenario(model="Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", gpu="rtx-pro-6000-blackwell",
                             vllm_version=vllm_version, tensor_parallel_size=4, max_model_len=32768, max_num_seqs=32,
                             gpu_memory_utilization=0.9, **fields))


def test_from_0_27_the_kept_workspace_is_printed_as_consumed_memory_not_peak_activation():
    # 8,192 batched tokens x 65,536 values x 2 bytes = 1 GiB, kept by the WorkspaceManager after the forward pass;
    # 0.27's "consumed memory (weights + non-torch)" holds it. Halving the batch halves it.
    full, half = _qwen3_235b_tp4("0.27.1"), _qwen3_235b_tp4("0.27.1", max_num_batched_tokens=4096)
    assert full.settings.max_num_batched_tokens == 8192
    assert full.budget.non_torch_bytes - half.budget.non_torch_bytes == 512 * MIB
    # what is left of the peak: 4 hidden-size tensors per token (the sampler's 32 rows stay below it)
    assert full.budget.activation_bytes == 8192 * 4 * 4096 * 2
    assert full.budget.activation_bytes - half.budget.activation_bytes == 4096 * 4 * 4096 * 2


def test_before_0_27_the_workspace_is_part_of_the_peak():
    full, half = _qwen3_235b_tp4("0.26.0"), _qwen3_235b_tp4("0.26.0", max_num_batched_tokens=4096)
    assert full.budget.non_torch_bytes == half.budget.non_torch_bytes
    assert full.budget.activation_bytes - half.budget.activation_bytes == 4096 * (4 * 4096 + 65_536) * 2
    assert full.budget.activation_bytes == 8192 * (4 * 4096 + 65_536) * 2 == int(1.25 * GIB)


def test_the_cli_summary_names_the_workspace():
    from calculator.summary import estimate_summary

    # 8,192 tokens x 8 x (4,096 + 4,096) values x 2 bytes
    assert estimate_summary(_qwen3_235b_tp4("0.27.1"))["moe_workspace_bytes"] == 8192 * 65_536 * 2 == GIB
    dense = estimate(Scenario(model="Qwen/Qwen3-14B", gpu="l40s-48gb", vllm_version="0.28.0"))
    assert estimate_summary(dense)["moe_workspace_bytes"] == 0
