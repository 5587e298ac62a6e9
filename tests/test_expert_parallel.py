"""Data and expert parallelism: experts placed per rank, the MoE layers' DP-gathered tokens, the all-to-all backend's
buffers (calculator/engine/expert_parallel.py, placement.py; read from vLLM 0.32's fused_moe and all2all.py).

Hand figures on Qwen3-30B-A3B (config.json: hidden 2,048, 48 layers, 128 experts of width 768, 8 per token, bf16).
"""

from __future__ import annotations

import json

import pytest
from test_speed_roofline import UNIT  # efficiencies 1, no overheads, 10 us per collective call

from calculator.engine import uncertainty
from calculator.cli import main
from calculator.engine.estimate import estimate
from calculator.engine.overheads import FREE_DROP_PERSISTENT_BYTES, forward_activation_bytes
from calculator.engine.vllm_versions import rules_for
from calculator.gpus import find_gpu
from calculator.model.model_source import load_model_spec
from calculator.scenario import Scenario
from calculator.serve_command import parse_serve_command, serve_command
from calculator.summary import estimate_summary
from calculator.units import MIB

MOE = "Qwen/Qwen3-30B-A3B"
EXPERT_BYTES = 3 * 2048 * 768 * 2  # gate, up and down of one expert in one layer, bf16


def _moe(**fields):
    return estimate(Scenario(model=MOE, gpu="h100-sxm-80gb", vllm_version="0.32.0", **fields))


@pytest.mark.parametrize(("fields", "experts_on_busiest_rank"), [
    ({"tensor_parallel_size": 4, "enable_expert_parallel": True}, 32),  # 128 / 4 whole experts
    # ceil(128 / 3): the first 128 % 3 ranks hold one more
    ({"data_parallel_size": 3, "enable_expert_parallel": True}, 43),
    ({"tensor_parallel_size": 2, "data_parallel_size": 4, "enable_expert_parallel": True}, 16),  # ep_size = tp x dp
])
def test_expert_parallel_places_whole_experts_over_tp_x_dp_ranks(fields, experts_on_busiest_rank):
    assert _moe(**fields).weights_by_role["expert"] == 48 * experts_on_busiest_rank * EXPERT_BYTES


def test_data_parallel_without_expert_parallel_splits_every_expert_over_tp_x_dp():
    # FusedMoEParallelConfig flattens TP across DP: each of 4 ranks holds a quarter of every expert's width
    assert _moe(data_parallel_size=4).weights_by_role["expert"] == 48 * 128 * EXPERT_BYTES // 4


def test_the_moe_layers_work_on_the_tokens_of_every_dp_rank():
    spec = load_model_spec(MOE)
    tokens = 8192

    def forward(version=None, **parallel):
        return forward_activation_bytes(spec, max_num_batched_tokens=tokens, activation_dtype_bytes=2,
                                        tensor_parallel_size=1, rules=rules_for(version) if version else None,
                                        **parallel)

    # one engine: 4 hidden-size tensors per token, and TritonExperts' workspaces (0.14+): top_k x (max(768, 2,048)
    # + max(2 x 768, 2,048)) values per routed token
    workspace = 8 * (2048 + 2048)
    assert forward() == tokens * (4 * 2048 + workspace) * 2
    # DP 4: 4 x the tokens reach each MoE layer (gathered input + 3 x a quarter of the routed width each; the DP
    # path's experts and their buffers are not read, so the estimate before the workspace was read stays)
    width = 8 * 768  # routed intermediate per token: top_k x expert width
    assert forward(data_parallel_size=4) == tokens * (4 * 2048 + 4 * (3 * width // 4 + 2048)) * 2
    # DP 4 with EP: whole experts, so the full routed width for each gathered token
    assert forward(data_parallel_size=4, enable_expert_parallel=True) == (
        tokens * (4 * 2048 + 4 * (3 * width + 2048)) * 2)
    # 0.10.2's fused_experts_impl, one engine: cache13 [M, 8, max(2 x 768, 2,048)] + cache2 [M x 8, 768]
    assert forward("0.10.2") == tokens * (4 * 2048 + 8 * (2048 + 768)) * 2


@pytest.mark.parametrize(("fields", "bytes_per_token_and_layer"), [
    # allgather_reducescatter (the default): all-gather the other 3 engines' hidden states, reduce-scatter them back
    ({"data_parallel_size": 4, "enable_expert_parallel": True}, 2 * 3 * 2048 * 2),
    # DP without EP gathers the same way (the experts are tensor-parallel over the 4 ranks)
    ({"data_parallel_size": 4}, 2 * 3 * 2048 * 2),
    # DeepEP: each token to its 8 experts' ranks, 3 of 4 ranks remote, there and back
    ({"data_parallel_size": 4, "enable_expert_parallel": True, "all2all_backend": "deepep_high_throughput"},
     2 * 8 * 3 / 4 * 2048 * 2),
    # ep = tp 2 x dp 4 = 8 ranks, 7 of 8 remote
    ({"tensor_parallel_size": 2, "data_parallel_size": 4, "enable_expert_parallel": True,
      "all2all_backend": "deepep_high_throughput"}, 2 * 8 * 7 / 8 * 2048 * 2),
    ({"data_parallel_size": 4, "enable_expert_parallel": True, "all2all_backend": "passthrough"}, 0),
    ({"tensor_parallel_size": 4, "enable_expert_parallel": True}, 0),  # one engine: no DP group to dispatch over
])
def test_each_moe_layer_dispatches_and_combines_over_the_link(fields, bytes_per_token_and_layer):
    from calculator.speed.costs import forward_costs
    from calculator.speed.hardware import gpu_rates
    from calculator.speed.step_time import all_reduce_s, step_time

    result = _moe(**fields)
    costs, rates = forward_costs(result), gpu_rates(result.gpu, result.quantization)
    step = step_time(costs, rates, UNIT, decode_tokens=64, decode_context_tokens=1000)
    # 48 MoE layers x (a dispatch and a combine call of 10 us each + 64 tokens' bytes over NVLink 4's 450 GB/s)
    dispatch = 48 * (2 * 10e-6 + 64 * bytes_per_token_and_layer / 450e9) if bytes_per_token_and_layer else 0.0
    assert step.communication_s - all_reduce_s(costs, rates, UNIT, 64) == pytest.approx(dispatch, rel=1e-12)


def test_the_moe_layers_stream_the_experts_every_engines_tokens_touch():
    from calculator.speed.costs import forward_costs
    from calculator.speed.hardware import gpu_rates
    from calculator.speed.step_time import step_time

    four = _moe(data_parallel_size=4, enable_expert_parallel=True)  # 32 experts per rank, 4 engines' tokens
    costs, rates = forward_costs(four), gpu_rates(four.gpu, four.quantization)
    alone = costs.model_copy(update={"moe_token_ranks": 1})  # the same rank as if its engine's tokens were all
    steps = [step_time(c, rates, UNIT, decode_tokens=16, decode_context_tokens=0) for c in (alone, costs)]
    # an expert is missed by all n routed tokens with probability (1 - 8/128)^n: n = 16 on one engine, 64 on four
    # streamed at the H100 SXM's 2,978 GB/s, the rate vLLM's decode GEMMs were timed at (linear_layer_rates.py)
    touched = 48 * 32 * EXPERT_BYTES * ((1 - (1 - 8 / 128) ** 64) - (1 - (1 - 8 / 128) ** 16)) / 2978e9
    assert steps[1].memory_s - steps[0].memory_s == pytest.approx(touched, rel=1e-9)


def test_deepep_keeps_a_1_gib_buffer_only_where_vllm_dispatches_with_it():
    base = _moe(data_parallel_size=4, enable_expert_parallel=True)
    deepep = _moe(data_parallel_size=4, enable_expert_parallel=True, all2all_backend="deepep_high_throughput")
    assert deepep.budget.non_torch_bytes - base.budget.non_torch_bytes == 1024 * MIB  # VLLM_DEEPEP_BUFFER_SIZE_MB
    # without DP, vLLM's use_all2all_kernels is false: the backend is never built, and the planner says so
    unused = _moe(tensor_parallel_size=4, enable_expert_parallel=True, all2all_backend="deepep_high_throughput")
    plain = _moe(tensor_parallel_size=4, enable_expert_parallel=True)
    assert unused.budget.non_torch_bytes == plain.budget.non_torch_bytes
    assert any(w.startswith("--all2all-backend deepep_high_throughput is unused here") for w in unused.warnings)
    # the CLI's JSON names the term inside non_torch_bytes (issue 23 item 4: each new memory term is shown)
    assert estimate_summary(deepep)["all2all_buffer_bytes"] == 1024 * MIB
    assert estimate_summary(base)["all2all_buffer_bytes"] == estimate_summary(unused)["all2all_buffer_bytes"] == 0


def test_deepep_v2_elastic_buffer_follows_deepeps_layouts_per_nvlink_domain():
    # DeepEP main dd758ca ElasticBuffer::calculate_buffer_size with vLLM 0.32's hybrid mode on, no multiple
    # reduction; a token slot rounds each part to 32 B; the buffer and the workspace round to 2 MiB.
    # Workspace: 16 + 3,072 x 8 + 1,024 x 16 + 2,048 x 16 + 1,024 x 4 + 1,024 x 8 + 2,048 x 8 + 1,024 x 1,024 x 12
    # + 32 + 33 x 1,024 x 4 = 12,820,528 B -> 14 MiB.
    # Qwen3-30B-A3B in bf16 (hidden 2,048, top-8), EP 4 on one node, 8,192 tokens: dispatch slot 4,096 + 8 x 8 +
    # 9 x 4 = 100 -> 128 = 4,224 B, x 4 ranks x 8,192 = 138,412,032; combine slot 4,096 + 64 = 4,160 B, x 8 top-k x
    # 8,192 = 272,629,760 = 130 x 2 MiB; so 260 + 14 MiB.
    qwen = _moe(data_parallel_size=4, enable_expert_parallel=True, all2all_backend="deepep_v2",
                max_num_batched_tokens=8192)
    assert estimate_summary(qwen)["all2all_buffer_bytes"] == 274 * MIB
    assert not any("all2all" in w for w in qwen.warnings)
    # DeepSeek-V3 (hidden 7,168, top-8, blockwise FP8: FP8 dispatch), EP 8 on one H200 node: dispatch slot 7,168 +
    # 224 float32 scale packs x 4 = 896 + 100 -> 128 = 8,192 B, x 8 x 8,192 = 536,870,912; combine slot 14,336 + 64
    # = 14,400 B, x 8 x 8,192 = 943,718,400 = 450 x 2 MiB; so 900 + 14 MiB.
    one_node = _deepseek_v3_ep8(all2all_backend="deepep_v2", max_num_batched_tokens=8192)
    assert estimate_summary(one_node)["all2all_buffer_bytes"] == 914 * MIB
    # EP 16 = two nodes of 8: hybrid layouts, with 1,280 channel slots per scale-out peer. Dispatch 8,192 x (8 x 2
    # x 8,192 + 8,192 + 2 x (8,192 + 1,280)) = 1,296,039,936; combine 14,400 x 8 x (2 x 8,192 + 8,192 + 2 x 9,472)
    # = 5,013,504,000 -> 2,391 x 2 MiB = 5,014,290,432; plus the 14 MiB workspace.
    two_nodes = _deepseek_v3_ep8(all2all_backend="deepep_v2", max_num_batched_tokens=8192, data_parallel_size=16)
    assert estimate_summary(two_nodes)["all2all_buffer_bytes"] == 5_014_290_432 + 14 * MIB
    # 12 ranks leave a node part-filled: NCCL's NVLink teams would differ, which DeepEP refuses; no number, a warning
    part = _deepseek_v3_ep8(all2all_backend="deepep_v2", max_num_batched_tokens=8192, data_parallel_size=12)
    assert estimate_summary(part)["all2all_buffer_bytes"] == 0
    assert any("12 EP ranks do not fill whole nodes of 8 GPUs" in w for w in part.warnings)


def test_moonep_holds_the_pool_buffer_of_the_profiling_runs_full_batch():
    # vLLM 0.32 MoonEPAll2AllManager._make_buffer_kwargs -> moonep.Buffer(S=8,192, H=2,048, K=8, E=128, R=8, B=4,
    # token_padding=128); MoonEP api.py _create_context, granularities 2 MiB:
    # hidden chunk: NvS = 8,192 x 8 + 127 x 2 x 128 / 8 = 65,536 + 4,064 = 69,600 rows of 2,048 bf16 = 285,081,600 B
    #   -> 136 x 2 MiB = 285,212,672 B (69,632 rows);
    # meta chunk: TPE_OFF 69,600, PLAN_OFF 69,600 + 8 x 128 = 70,624, planning outputs 3 x 128 x 8 + 3 x 8 x 132
    #   + 4 x 8 + 2 x 8 = 6,288 -> 76,912, three 65,536-slot scratches -> 273,520, 3 barrier slots, 69,600 src info
    #   = 343,123 int32 = 1,372,492 B -> 2,097,152 B;
    # local scratch (int32): 128 x 8 + 8 + 64 + 128 x 32 + 1 + 2 x 8 x 8,192 + 8 x 8,192 x 8 + 1 = 660,554 x 4
    #   = 2,642,216 B.
    fields = {"data_parallel_size": 8, "enable_expert_parallel": True, "max_num_batched_tokens": 8192}
    moonep, base = _moe(all2all_backend="moonep", **fields), _moe(**fields)
    assert estimate_summary(moonep)["all2all_buffer_bytes"] == 285_212_672 + 2_097_152 + 2_642_216
    # moonep runs eager (settings.py), so it also holds none of the compiled runs' persistent memory (overheads.py
    # free_drop_persistent_bytes; Qwen3-30B-A3B runs Model Runner V1, no penalty tensors)
    assert moonep.budget.non_torch_bytes - base.budget.non_torch_bytes == 289_952_040 - FREE_DROP_PERSISTENT_BYTES
    assert not any("is not modelled" in w for w in moonep.warnings)
    # vLLM 0.34.0's moonep.py and MoonEPAll2AllManager are 0.32's line for line
    newer = estimate(Scenario(model=MOE, gpu="h100-sxm-80gb", vllm_version="0.34.0", all2all_backend="moonep",
                              **fields))
    assert estimate_summary(newer)["all2all_buffer_bytes"] == 289_952_040
    # The buffers later steps make (S = 128 ... 4,096: NvS = 8 S + 4,064, hidden = (8 S + 4,064) x 4,096 B rounded
    # up to 2 MiB = 10, 12, 16, 24, 40 and 72 x 2 MiB; each meta chunk 2 MiB; local 4 x (1,098 + 128 x
    # ceil(S / 256) + 80 S) = 45,864 + 86,824 + 169,256 + 334,120 + 663,848 + 1,323,304 B) land after the KV cache:
    # 174 x 2 MiB + 6 x 2 MiB + 2,623,216 = 380,110,576 B = 0.35 GiB.
    assert ("--all2all-backend moonep: MoonEP makes one more buffer for each smaller power-of-two step size (128 to "
            "4096 tokens) the first time a step of that size runs, after vLLM has sized the KV cache: up to 0.35 GiB "
            "more per GPU, outside the gpu_memory_utilization budget") in moonep.warnings


def test_moonep_with_experts_that_do_not_divide_over_the_ranks_says_vllm_refuses():
    # 128 experts over 3 ranks: gather_moonep_weight_layout raises NotImplementedError; no buffer is made
    result = _moe(all2all_backend="moonep", data_parallel_size=3, enable_expert_parallel=True)
    assert estimate_summary(result)["all2all_buffer_bytes"] == 0
    assert ("MoonEP PoC requires num_experts to be evenly divisible across EP ranks: 128 experts, 3 ranks"
            in result.warnings)


def _deepseek_v3_ep8(vllm_version="0.32.0", **fields):
    fields = {"data_parallel_size": 8, **fields}
    return estimate(Scenario(model="deepseek-ai/DeepSeek-V3", gpu="h200", vllm_version=vllm_version,
                             enable_expert_parallel=True, **fields))


@pytest.mark.parametrize("backend", ["mori_high_throughput", "mori_low_latency"])
def test_mori_holds_its_2_gib_symmetric_heap_before_vllms_snapshot(backend):
    # MoRI's shmem init allocates DEFAULT_SYMMETRIC_HEAP_SIZE = 2 GiB (MORI_SHMEM_HEAP_SIZE unset), whatever the
    # model; vLLM 0.32 builds it in init_worker_distributed_environment, before the snapshot: outside the budget
    def deepseek(**fields):
        return estimate(Scenario(model="deepseek-ai/DeepSeek-V3", gpu="mi300x-192gb", vllm_version="0.32.0",
                                 data_parallel_size=8, enable_expert_parallel=True, **fields))
    base, mori = deepseek(), deepseek(all2all_backend=backend)
    assert mori.budget.context_bytes - base.budget.context_bytes == 2 * 1024 ** 3
    assert mori.budget.free_at_start_bytes == base.budget.free_at_start_bytes - 2 * 1024 ** 3
    assert mori.budget.non_torch_bytes == base.budget.non_torch_bytes  # so the KV pool vLLM sizes is unchanged
    assert mori.budget.kv_cache_bytes == base.budget.kv_cache_bytes
    assert not any("MoRI" in w for w in mori.warnings)
    # 191.69 GiB x (1 - 0.99) = 1.92 GiB holds the 0.5 GiB context but not the heap too: vLLM refuses to start
    assert deepseek(gpu_memory_utilization=0.99).budget.startup_error is None
    assert deepseek(gpu_memory_utilization=0.99, all2all_backend=backend).budget.startup_error
    # without DP, no all-to-all manager is built: no heap
    plain = estimate(Scenario(model="deepseek-ai/DeepSeek-V3", gpu="mi300x-192gb", vllm_version="0.32.0",
                              tensor_parallel_size=8, enable_expert_parallel=True, all2all_backend=backend))
    plain_default = estimate(Scenario(model="deepseek-ai/DeepSeek-V3", gpu="mi300x-192gb", vllm_version="0.32.0",
                                      tensor_parallel_size=8, enable_expert_parallel=True))
    assert plain.budget.context_bytes == plain_default.budget.context_bytes


def test_deepep_low_latency_adds_its_rdma_buffer_for_vllms_default_256_dispatch_tokens():
    # DeepSeek-V3: hidden 7,168 (56 scale groups of 128), 256 experts. vLLM 0.32's default batch budget under
    # deepep_low_latency with EP and DP is 256 tokens (DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP).
    # DeepEP LowLatencyLayout: dispatch message 16 + max(7,168 x 2, 7,168 + 56 x 4) = 14,352 B; combine message
    # 56 x 4 + 7,168 x 2 = 14,560 B; send = max(256 x 14,352, 256 x 256 x 14,560) = 954,204,160; receive =
    # 256 x 256 x 14,560 = 954,204,160; signaling 256 x 4 = 1,024; total 2 x (send + recv + signaling) =
    # 3,816,818,688, rounded past the next 128-byte boundary: 3,816,818,816; plus the 1 GiB NVL buffer.
    low_latency = _deepseek_v3_ep8(all2all_backend="deepep_low_latency")
    base = _deepseek_v3_ep8()
    assert low_latency.settings.max_num_batched_tokens == 256
    assert estimate_summary(low_latency)["all2all_buffer_bytes"] == 3_816_818_816 + 1024 * MIB
    assert low_latency.budget.non_torch_bytes - base.budget.non_torch_bytes == 3_816_818_816 + 1024 * MIB
    assert not any("all2all" in w for w in low_latency.warnings)
    # the buffer grows with the batch budget a user gives: 512 tokens double every term but the signaling
    wider = _deepseek_v3_ep8(all2all_backend="deepep_low_latency", max_num_batched_tokens=512)
    assert estimate_summary(wider)["all2all_buffer_bytes"] == 2 * (2 * 1_908_408_320 + 1_024) + 128 + 1024 * MIB

    # up to 0.19 fused_moe/layer.py sized it for VLLM_MOE_DP_CHUNK_SIZE (256), whatever the batch budget
    v019 = _deepseek_v3_ep8("0.19.0", all2all_backend="deepep_low_latency", max_num_batched_tokens=8192)
    assert estimate_summary(v019)["all2all_buffer_bytes"] == 3_816_818_816 + 1024 * MIB
    # the 256-token default batch budget (use_batched_dp_moe) came with 0.20's switch to the batch budget
    assert _deepseek_v3_ep8("0.20.0", all2all_backend="deepep_low_latency").settings.max_num_batched_tokens == 256
    assert _deepseek_v3_ep8("0.19.0", all2all_backend="deepep_low_latency").settings.max_num_batched_tokens > 256
    # NIXL-EP (vLLM's NixlEPAll2AllManager) sizes the same layout (NIXL's EPLayout) with no NVL buffer
    nixl = _deepseek_v3_ep8(all2all_backend="nixl_ep")
    assert nixl.settings.max_num_batched_tokens == 256
    assert estimate_summary(nixl)["all2all_buffer_bytes"] == 3_816_818_816
    assert not any("all2all" in w for w in nixl.warnings)


def test_flashinfer_one_sided_workspace_spans_the_ep_group_and_the_batch_budget():
    # vLLM 0.32 FlashInferNVLinkOneSidedManager.initialize -> FlashInfer moe_a2a_get_workspace_size_per_rank, one
    # MnnvlMemory rounded up to 2 MiB. DeepSeek-V3's blockwise FP8 dispatches 7,168 E4M3 bytes + 56 float32 scales
    # = 7,392 B a token, plus 8 top-k int32 ids and 8 float32 weights = 7,456 B: 8 ranks x 8,192 tokens x 7,456
    # = 488,636,416 B; the bf16 combine payload 8 x 8,192 x 7,168 x 2 = 939,524,096 B (both multiples of 128).
    # Auxiliary region (calculateOffsets): flag + counter + 2 x 8 counters = 72 -> 128; + 8 dispatch flags -> 256;
    # + 8 combine flags -> 384; + 8,192 x 22 x 4 target ranks = 721,280; + as many send indices = 1,442,176 B.
    # 1,442,176 + 488,636,416 + 939,524,096 = 1,429,602,688 B = 681.7 x 2 MiB -> 682 x 2,097,152 = 1,430,257,664 B.
    one_sided = _deepseek_v3_ep8(all2all_backend="flashinfer_nvlink_one_sided", max_num_batched_tokens=8192)
    assert estimate_summary(one_sided)["all2all_buffer_bytes"] == 1_430_257_664
    assert not any("all2all" in w for w in one_sided.warnings)
    # Qwen3-30B-A3B in bf16 at DP 4: 4 x 8,192 x (2,048 x 2 + 64) + 4 x 8,192 x 2,048 x 2 + the same 1,442,176 B
    # auxiliary region (4 ranks' counters also fit the first 384 B) = 271,974,784 B -> 130 x 2 MiB
    qwen = _moe(data_parallel_size=4, enable_expert_parallel=True, all2all_backend="flashinfer_nvlink_one_sided",
                max_num_batched_tokens=8192)
    assert estimate_summary(qwen)["all2all_buffer_bytes"] == 130 * 2 * MIB == 272_629_760
    # per-tensor FP8 activations are a format the planner does not map: sized as bf16, and it says so
    fp8 = _moe(data_parallel_size=4, enable_expert_parallel=True, all2all_backend="flashinfer_nvlink_one_sided",
               max_num_batched_tokens=8192, quantization="fp8")
    assert estimate_summary(fp8)["all2all_buffer_bytes"] == 272_629_760
    assert any("payload of fp8 activations is sized as bf16 (the largest)" in w for w in fp8.warnings)


def test_flashinfer_one_sided_workspace_per_vllm_version():
    # vLLM 0.33.0 all2all.py FlashInferNVLinkOneSidedManager.initialize builds flashinfer.moe_ep's
    # NVLinkOneSidedAlltoAll; the FlashInfer 0.33.0 pins (0.7.2.post1) sizes it with
    # moe_a2a_get_workspace_size_per_rank and MoeAlltoAll, 0.32's layout. DeepSeek-V3 EP 8 at 6,144 tokens:
    # auxiliary 384 + 6,144 x 22 x 4 = 540,672 (x 128) twice = 1,081,728; dispatch 8 x 6,144 x 7,456 = 366,477,312;
    # combine 8 x 6,144 x 7,168 x 2 = 704,643,072; sum 1,072,202,112 = 511.3 x 2 MiB -> 512 x 2 MiB = 1 GiB.
    v033 = _deepseek_v3_ep8("0.33.0", all2all_backend="flashinfer_nvlink_one_sided", max_num_batched_tokens=6144)
    assert estimate_summary(v033)["all2all_buffer_bytes"] == 1_073_741_824
    assert not any("all2all" in w for w in v033.warnings)
    # vLLM 0.34.0 all2all.py passes cft=False, lamport=False, so FlashInfer 0.7.4 (0.34 pins 0.7.3, not served)
    # NVLinkOneSidedAlltoAll.__init__ lays out the fence workspace alone (nvlink_one_sided_alltoall.cu
    # calculateWorkspaceLayout): flag 4 + token counter 4 + 8 send counters 32 + 2 x 8 receive counters 64 = 104;
    # 8 dispatch flags at 128 -> 160; top-k target ranks (the model's top-k 8, not kMaxTopK 22) at 256, 6,144 x 8 x 4
    # = 196,608 -> 196,864; target indices at 196,864 -> 393,472 (EPLB region empty there); dispatch payload at
    # 393,472 (a multiple of 256): 366,477,312 + kMaxPayloads 4 x 256 = 366,478,336 (x 256) -> 366,871,808;
    # 8 combine flags at 366,871,808 -> 366,871,840; combine input at 366,872,064, 704,643,072 -> 1,071,515,136
    # = 510.9 x 2 MiB -> 511 x 2,097,152 = 1,071,644,672 B: one 2 MiB page less than 0.32 and 0.33.
    v034 = _deepseek_v3_ep8("0.34.0", all2all_backend="flashinfer_nvlink_one_sided", max_num_batched_tokens=6144)
    assert estimate_summary(v034)["all2all_buffer_bytes"] == 1_071_644_672
    assert not any("all2all" in w for w in v034.warnings)
    # at 8,192 tokens the same steps give 104; 160; 256 + 262,144 = 262,400; 524,544; dispatch 488,636,416 + 1,024
    # = 488,637,440 -> 489,161,984; flags -> 489,162,016; combine at 489,162,240 + 939,524,096 = 1,428,686,336
    # = 681.25 x 2 MiB -> 682 pages, the same 1,430,257,664 B as 0.32's 1,429,602,688
    v034_8k = _deepseek_v3_ep8("0.34.0", all2all_backend="flashinfer_nvlink_one_sided", max_num_batched_tokens=8192)
    assert estimate_summary(v034_8k)["all2all_buffer_bytes"] == 1_430_257_664
    assert not any("all2all" in w for w in v034_8k.warnings)


@pytest.mark.parametrize("backend", ["flashinfer_nvlink_two_sided", "flashinfer_all2allv"])
def test_flashinfer_two_sided_workspace_is_sized_by_the_ep_group_and_the_gpus_sm_count(backend):
    # FlashInfer getMoeCommWorkspaceSize and getMoePrepareWorkspaceSize, each rounded up to the 2 MiB MNNVL
    # allocation granularity. DeepSeek-V3 EP 8 on an H200 (132 SMs): a channel takes 2 x ceil(8 / 8) = 2 blocks,
    # channels = 132 / 2 / 2 = 33; comm = (8 x 262,144 + 256) x 8 x 33 = 2,097,408 x 264 = 553,715,712 B, which is
    # 264.03 x 2 MiB -> 265 x 2,097,152 = 555,745,280 B; prepare = (1,048,576 + 256) x 8 = 8,390,656 B -> 5 x 2 MiB
    # = 10,485,760 B. The model does not enter it.
    two_sided = _deepseek_v3_ep8(all2all_backend=backend)
    assert estimate_summary(two_sided)["all2all_buffer_bytes"] == 555_745_280 + 10_485_760
    assert not any("all2all" in w for w in two_sided.warnings)
    # Qwen3-30B-A3B at TP 2 x DP 8 on an H100 SXM (132 SMs): EP 16, 2 x ceil(16 / 8) = 4 blocks a channel,
    # channels = 132 / 2 / 4 = 16 (16.5 rounded down); comm = 2,097,408 x 16 x 16 = 536,936,448 B -> 257 x 2 MiB
    # = 538,968,064 B; prepare = 1,048,832 x 16 = 16,781,312 B -> 9 x 2 MiB = 18,874,368 B
    ep16 = _moe(tensor_parallel_size=2, data_parallel_size=8, enable_expert_parallel=True, all2all_backend=backend)
    assert estimate_summary(ep16)["all2all_buffer_bytes"] == 538_968_064 + 18_874_368


@pytest.mark.parametrize("gpu", [{"gpu": None, "gpu_memory_gib": 80}, {"gpu": "b300-288gb"}])  # custom; B300 unknown
def test_flashinfer_two_sided_on_a_gpu_without_an_sm_count_keeps_the_warning(gpu):
    result = estimate(Scenario(model=MOE, vllm_version="0.32.0", data_parallel_size=4, enable_expert_parallel=True,
                               all2all_backend="flashinfer_nvlink_two_sided", **gpu))
    assert estimate_summary(result)["all2all_buffer_bytes"] == 0
    assert any("FlashInfer's MNNVL workspace (FIFOs per peer and per channel, the channels set by the GPU's SM "
               "count) is not modelled: this GPU has no SM count in the catalog" in w for w in result.warnings)


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


def test_the_recommender_also_searches_dp_x_ep_servers_for_moe_models():
    from calculator.speed.recommend import layouts

    moe, dense = load_model_spec(MOE), load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    tp_only = [(1, 1, False), (2, 1, False), (4, 1, False), (8, 1, False)]
    assert layouts(dense) == tp_only
    assert layouts(moe) == [*tp_only, (1, 2, True), (1, 4, True), (1, 8, True)]
    assert layouts(moe, expert_parallel=True, data_parallel_size=4) == [(1, 4, True)]
    assert layouts(moe, expert_parallel=False) == tp_only


def test_a_dp_server_is_planned_in_whole_servers(capsys):
    from calculator.speed.recommend import recommend
    from calculator.speed.traffic import Traffic

    result = recommend(load_model_spec(MOE), Traffic(input_tokens=1000, output_tokens=200, concurrency=300),
                       gpus=["h100-sxm-80gb"], vllm_version="0.32.0", expert_parallel=True, data_parallel_size=4,
                       quantizations=(None,), kv_cache_dtypes=("auto",))
    option = result.by_cost_per_hour[0]
    assert (option.deployment.layout, option.deployment.data_parallel_size) == (
        "DP 4 EP (allgather_reducescatter all-to-all)", 4)
    assert option.plan.replicas % 4 == 0 and option.plan.gpus == option.plan.replicas  # engines of one GPU each
    assert main(["recommend", "--model", MOE, "--input-tokens", "1000", "--output-tokens", "200",
                 "--concurrent-users", "64", "--gpu", "h100-sxm-80gb", "--enable-expert-parallel",
                 "--data-parallel-size", "2", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert " 2 EP " in out and "dispatch and combine between the engines is in the step time" in out
    assert "all-to-all backend allgather_reducescatter (its buffers counted)" in out


@pytest.mark.parametrize(("vllm_version", "backend"), [
    ("0.10.2", "naive"),  # envs.py VLLM_ALL2ALL_BACKEND defaults to "naive" in the 0.9.2-0.10.2 wheels
    ("0.11.0", "allgather_reducescatter"),  # and to "allgather_reducescatter" from 0.11.0's
    ("0.32.0", "allgather_reducescatter"),  # config/parallel.py ParallelConfig.all2all_backend
])
def test_the_recommenders_dp_x_ep_servers_dispatch_with_vllms_default_backend(vllm_version, backend):
    from calculator.speed.recommend import candidates

    deployments = [d for d, _ in candidates(load_model_spec(MOE), [find_gpu("h100-sxm-80gb")], (None,), ("auto",),
                                            True, 4, vllm_version)]
    assert [(d.layout, d.all2all_backend) for d in deployments] == [(f"DP 4 EP ({backend} all-to-all)", backend)]
    # vLLM's own default needs no --all2all-backend (0.10 has no such flag): the launch line names none
    assert deployments[0].scenario(MOE, vllm_version, None).all2all_backend is None


def test_the_recommender_charges_the_buffers_of_the_backend_it_is_given():
    from calculator.speed.recommend import candidates

    spec, h100 = load_model_spec(MOE), [find_gpu("h100-sxm-80gb")]
    (deepep, _), = candidates(spec, h100, (None,), ("auto",), True, 4, "0.32.0", "deepep_high_throughput")
    (default, _), = candidates(spec, h100, (None,), ("auto",), True, 4, "0.32.0")
    assert deepep.layout == "DP 4 EP (deepep_high_throughput all-to-all)"
    buffers = (estimate(deepep.scenario(MOE, "0.32.0", None)).budget.non_torch_bytes
               - estimate(default.scenario(MOE, "0.32.0", None)).budget.non_torch_bytes)
    assert buffers == 1024 * MIB  # DeepEP's VLLM_DEEPEP_BUFFER_SIZE_MB, as test_deepep_keeps_a_1_gib_buffer_...
    # a TP-only layout dispatches with no all-to-all at all
    (plain, _), = candidates(spec, h100, (None,), ("auto",), False, None, "0.32.0")[:1]
    assert (plain.layout, plain.all2all_backend) == ("TP 1", None)


def test_moonep_replicates_every_expert_plus_four_prefetch_slots_on_every_rank():
    # vLLM 0.32 gather_moonep_weight_layout: each of the 8 ranks ends with [128 + 4] experts per projection per layer,
    # against 128 / 8 = 16 under the default backend: 48 x (132 - 16) x 9,437,184 B = 52,546,240,512 B more per GPU.
    fields = {"data_parallel_size": 8, "enable_expert_parallel": True}
    default, moonep = _moe(**fields), _moe(all2all_backend="moonep", **fields)
    assert moonep.weights_by_role["expert"] == 48 * 132 * EXPERT_BYTES == 59_793_997_824
    assert moonep.budget.weights_bytes - default.budget.weights_bytes == 52_546_240_512
    # NOTE: eager-only: vLLM sets cudagraph_mode NONE where MoonEP dispatches, and says so.
    assert moonep.settings.enforce_eager and moonep.budget.cudagraph_bytes == 0
    assert "MoonEP: Disabling CUDA Graphs since the MoonEP integration is currently eager-only." in moonep.warnings
    assert not default.settings.enforce_eager and default.budget.cudagraph_bytes > 0
    # Without DP the all-to-all kernels do not run: experts placed as usual, graphs kept.
    single = _moe(all2all_backend="moonep", tensor_parallel_size=8, enable_expert_parallel=True)
    assert single.weights_by_role["expert"] == 48 * 16 * EXPERT_BYTES and not single.settings.enforce_eager


@pytest.mark.parametrize(("fields", "error"), [
    ({"quantization": "fp8"}, "The moonep all2all backend currently supports unquantized BF16 models only; got "
                              "quantization='fp8'. Use a different --all2all-backend for quantized models."),
    ({"dtype": "float16"}, "The moonep all2all backend currently supports BF16 models only; got dtype=torch.float16. "
                           "Use a different --all2all-backend or --dtype bfloat16."),
])
def test_moonep_refuses_what_vllm_refuses(fields, error):
    result = _moe(all2all_backend="moonep", data_parallel_size=8, enable_expert_parallel=True, **fields)
    assert not result.fits and error in result.error


# EPLB (--enable-eplb), calculator/engine/eplb.py. DeepSeek-V3 (config.json: 256 routed experts of width 2,048 on
# hidden 7,168, first_k_dense_replace 3 -> 58 MoE layers of 61; fp8 with 128 x 128 block scales in float32):
# one expert of one layer = 3 x (2,048 x 7,168 B + 16 x 56 scales x 4 B) = 3 x 14,683,648 = 44,050,944 B.
DSV3_EXPERT_BYTES = 3 * (2048 * 7168 + (2048 // 128) * (7168 // 128) * 4)
# EplbState.add_model (0.32 distributed/eplb/eplb_state.py) for L = 58, E = 256, P = 256 + 32 = 288, window 1,000:
# physical_to_logical_map 58 x 288 x 8 = 133,632; logical_to_physical_map 58 x 256 x 1,024 x 8 = 121,634,816;
# logical_replica_count 58 x 256 x 8 = 118,784; expert_load_pass 58 x 288 x 4 = 66,816; expert_load_window
# 1,000 x 58 x 288 x 4 = 66,816,000; last_expert_load 58 x 256 x 8 = 118,784: 188,888,832 B.
DSV3_EPLB_STATE_0_32 = 133_632 + 121_634_816 + 118_784 + 66_816 + 66_816_000 + 118_784


def test_eplb_spreads_the_redundant_experts_over_the_ep_ranks_of_deepseek_v3():
    # FusedMoE's global_num_experts = 256 + 32 (fused_moe/layer.py determine_expert_counts @0.32): each of the
    # 8 EP ranks holds (256 + 32) / 8 = 36 experts per MoE layer instead of 32.
    plain = _deepseek_v3_ep8()
    eplb = _deepseek_v3_ep8(enable_eplb=True, num_redundant_experts=32)
    assert DSV3_EXPERT_BYTES == 44_050_944
    assert plain.weights_by_role["expert"] == 58 * 32 * DSV3_EXPERT_BYTES == 81_758_552_064
    assert eplb.weights_by_role["expert"] == 58 * 36 * DSV3_EXPERT_BYTES == 91_978_371_072
    # vLLM's docs (serving/expert_parallel_deployment.md): "approximately 2.4 GB for one redundant expert per EP
    # rank" for DeepSeek-V3: 58 x 44,050,944 = 2,554,954,752 B = 2.38 GiB
    assert (eplb.weights_by_role["expert"] - plain.weights_by_role["expert"]) / 4 == 2_554_954_752
    # add_model keeps its state and a buffer of one layer's 36 local experts (36 x 44,050,944 = 1,585,833,984 B);
    # it runs inside load_model's DeviceMemoryProfiler (v1/worker/gpu_model_runner.py @0.32), so both are counted
    # with the weights, before the KV cache is sized: 188,888,832 + 1,585,833,984 = 1,774,722,816 B.
    assert eplb.weights_by_role["eplb"] == DSV3_EPLB_STATE_0_32 + 36 * DSV3_EXPERT_BYTES == 1_774_722_816
    assert eplb.budget.weights_bytes - plain.budget.weights_bytes == 4 * 58 * DSV3_EXPERT_BYTES + 1_774_722_816
    assert estimate_summary(eplb)["eplb_bytes"] == 1_774_722_816
    assert estimate_summary(plain)["eplb_bytes"] == 0
    # EPLB without redundant experts still builds its state and buffer (32 physical experts per rank)
    bare = _deepseek_v3_ep8(enable_eplb=True)
    assert bare.weights_by_role["expert"] == plain.weights_by_role["expert"]
    assert bare.weights_by_role["eplb"] == (58 * 256 * 8 + 58 * 256 * 1024 * 8 + 58 * 256 * 8 + 58 * 256 * 4
                                            + 1000 * 58 * 256 * 4 + 58 * 256 * 8 + 32 * DSV3_EXPERT_BYTES)


@pytest.mark.parametrize(("vllm_version", "state", "buffer_resident"), [
    # 0.9.2 EplbState.build: logical_to_physical_map has R + 1 = 33 slots, the load statistics one column per local
    # physical expert (36): 133,632 + 58 x 256 x 33 x 8 + 118,784 + 58 x 36 x 4 + 1,000 x 58 x 36 x 4
    ("0.9.2", 133_632 + 3_919_872 + 118_784 + 8_352 + 8_352_000, False),
    # 0.10.2-0.30: 1,024 slots (MAX_EXPERT_REDUNDANCY + 1), statistics over all 288 physical experts, no
    # last_expert_load; 0.11.2 still makes the buffer in rearrange_expert_weights_inplace, 0.12.0 in add_model
    ("0.11.2", DSV3_EPLB_STATE_0_32 - 118_784, False),
    ("0.12.0", DSV3_EPLB_STATE_0_32 - 118_784, True),
    ("0.30.0", DSV3_EPLB_STATE_0_32 - 118_784, True),
    ("0.31.0", DSV3_EPLB_STATE_0_32, True),  # last_expert_load (L, E) int64 appears
    # 0.34.0 add_model: R + 1 slots again unless elastic EP: 58 x 256 x 33 x 8 = 3,919,872 instead of 121,634,816
    ("0.34.0", DSV3_EPLB_STATE_0_32 - 121_634_816 + 3_919_872, True),
])
def test_eplb_state_per_vllm_version(vllm_version, state, buffer_resident):
    result = _deepseek_v3_ep8(vllm_version=vllm_version, enable_eplb=True, num_redundant_experts=32)
    buffer = 36 * DSV3_EXPERT_BYTES
    assert result.weights_by_role["eplb"] == state + (buffer if buffer_resident else 0)
    transient = [w for w in result.warnings if "allocates a buffer of one MoE layer's experts (1.48 GiB)" in w]
    assert bool(transient) is not buffer_resident


@pytest.mark.parametrize(("vllm_version", "fields", "error"), [
    ("0.32.0", {"data_parallel_size": 8, "enable_eplb": True}, "enable_expert_parallel must be True to use EPLB."),
    ("0.32.0", {"enable_expert_parallel": True, "enable_eplb": True},
     "EPLB requires tensor, prefill-context, or data parallelism, but got TP=1, PCP=1, DP=1."),
    ("0.25.1", {"enable_expert_parallel": True, "enable_eplb": True},
     "EPLB requires tensor_parallel_size or data_parallel_size to be greater than 1, but got TP=1,DP=1."),
    ("0.32.0", {"data_parallel_size": 8, "enable_expert_parallel": True, "num_redundant_experts": 32},
     "num_redundant_experts is set to 32 but EPLB is not enabled. Either enable EPLB or unset num_redundant_experts."),
    # (128 + 2) % 8 != 0: FusedMoE refuses (0.24+ name the counts; 0.23.0's assert does not)
    ("0.32.0", {"data_parallel_size": 8, "enable_expert_parallel": True, "enable_eplb": True,
                "num_redundant_experts": 2},
     "EPLB currently only supports even distribution of experts across ranks. Got 130 experts and 8 EP ranks."),
    ("0.23.0", {"data_parallel_size": 8, "enable_expert_parallel": True, "enable_eplb": True,
                "num_redundant_experts": 2},
     "EPLB currently only supports even distribution of experts across ranks."),
])
def test_eplb_refuses_what_vllm_refuses(vllm_version, fields, error):
    result = estimate(Scenario(model=MOE, gpu="h100-sxm-80gb", vllm_version=vllm_version, **fields))
    assert not result.fits and result.error == error
    # refused before memory is sized: no band of memory makes it start (it read "borderline" where memory was ample)
    assert uncertainty.verdict(result) == "does not fit"


def test_a_model_that_takes_no_part_in_eplb_keeps_its_memory_and_is_told_so():
    # gpt-oss: GptOssForCausalLM implements no MixtureOfExperts and passes num_redundant_experts=0 to its experts
    # (gpt_oss.py in the 0.28-0.34 wheels), so --enable-eplb passes vLLM's checks and changes nothing: even 2
    # redundant experts over 4 EP ranks (130 % 4 != 0, which FusedMoE refuses where EPLB runs) start.
    fields = {"model": "openai/gpt-oss-120b", "gpu": "h100-sxm-80gb", "vllm_version": "0.32.0",
              "data_parallel_size": 4, "enable_expert_parallel": True}
    plain = estimate(Scenario(**fields))
    asked = estimate(Scenario(**fields, enable_eplb=True, num_redundant_experts=2))
    assert asked.fits and asked.budget.weights_bytes == plain.budget.weights_bytes
    assert "eplb" not in asked.weights_by_role
    assert any("GptOssForCausalLM takes no part in vLLM's EPLB" in warning for warning in asked.warnings)


def test_gemma_4_builds_the_balancers_state_but_places_no_redundant_experts():
    # gemma4.py (0.28-0.34): Gemma4ForCausalLM implements MixtureOfExperts (EplbState.add_model runs) but sets
    # num_redundant_experts = 0 and builds its FusedMoE layers without EPLB: 2 redundant experts over 4 EP ranks
    # are neither placed nor refused; the state is that of 0 redundant experts.
    fields = {"model": "google/gemma-4-26B-A4B", "gpu": "h100-sxm-80gb", "vllm_version": "0.32.0",
              "data_parallel_size": 4, "enable_expert_parallel": True, "enable_eplb": True}
    none = estimate(Scenario(**fields))
    asked = estimate(Scenario(**fields, num_redundant_experts=2))
    assert asked.fits and asked.weights_by_role == none.weights_by_role and none.weights_by_role["eplb"] > 0
    assert any("places no redundant experts" in warning and "the 2 asked for" in warning
               for warning in asked.warnings)


def test_import_of_vllms_eplb_launch_line_models_it():
    # vLLM's docs (serving/expert_parallel_deployment.md, "Single node deployment with EPLB enabled"), for
    # DeepSeek-V3 (the docs name DeepSeek-V3-0324, same config), with the 32 redundant experts they recommend
    line = ("vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 1 --data-parallel-size 8 "
            "--enable-expert-parallel --enable-eplb "
            "--eplb-config '{\"window_size\":1000,\"step_interval\":3000,\"num_redundant_experts\":32,"
            "\"log_balancedness\":true}'")
    scenario, notes = parse_serve_command(line, Scenario(gpu="h200", vllm_version="0.32.0"))
    assert (scenario.enable_eplb, scenario.num_redundant_experts) == (True, 32)
    assert not [note for note in notes if "eplb" in note.lower() or "redundant" in note]
    assert estimate(scenario).weights_by_role["expert"] == 58 * 36 * DSV3_EXPERT_BYTES
    assert serve_command(scenario, multiline=False).endswith(
        "--enable-expert-parallel --enable-eplb --eplb-config '{\"num_redundant_experts\":32}'")
    # the docs' own value, 2, leaves 258 experts over 8 ranks, which vLLM refuses
    refused, _ = parse_serve_command(line.replace(":32,", ":2,"), Scenario(gpu="h200", vllm_version="0.32.0"))
    assert estimate(refused).error == ("EPLB currently only supports even distribution of experts across ranks. "
                                       "Got 258 experts and 8 EP ranks.")
    # 0.9-0.11 spell it --num-redundant-experts (0.10-0.11 also take --eplb-config); a window other than 1,000 is
    # not modelled, and the import says so
    old, old_notes = parse_serve_command("vllm serve deepseek-ai/DeepSeek-V3 --data-parallel-size 8 "
                                         "--enable-expert-parallel --enable-eplb --num-redundant-experts 32 "
                                         "--eplb-window-size 500", Scenario(gpu="h200", vllm_version="0.9.2"))
    assert old.num_redundant_experts == 32
    assert serve_command(old, multiline=False).endswith("--enable-eplb --num-redundant-experts 32")
    assert any(note.startswith("incomplete: --eplb-window-size 500: sizes EPLB's load window") for note in old_notes)


def test_cli_takes_vllms_eplb_flags(capsys):
    assert main(["estimate", "--model", "deepseek-ai/DeepSeek-V3", "--gpu", "h200", "--vllm-version", "0.32.0",
                 "--data-parallel-size", "8", "--enable-expert-parallel", "--enable-eplb", "--eplb-config",
                 '{"num_redundant_experts": 32}', "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["enable_eplb"], out["num_redundant_experts"], out["eplb_bytes"]) == (True, 32, 1_774_722_816)
