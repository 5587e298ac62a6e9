"""KV bytes per token, grouping, blocks, tokens and concurrency, against hand calculations and vLLM's logs."""

from __future__ import annotations

import random

import pytest

from calculator import Scenario, estimate, load_model_spec
from calculator.engine.kv_cache import (
    KvCacheLayout,
    KvGroup,
    capacity_figures,
    group_blocks_per_request,
    in_flight_tokens,
    kv_bytes_needed_for_one_request,
    largest_fitting_model_len,
    plan_kv_cache,
    pp_layer_ranges,
)
from calculator.engine.vllm_versions import rules_for
from calculator.units import GIB, KIB, MIB


def layout(model: str, *, tp: int = 1, pp: int = 1, block: int = 16, kv: str = "auto", dtype_bytes: int = 2,
           hybrid: bool = True):
    return plan_kv_cache(load_model_spec(model), block_size=block, kv_cache_dtype=kv, model_dtype_bytes=dtype_bytes,
                         tensor_parallel_size=tp, pipeline_parallel_size=pp, hybrid_kv_cache_manager=hybrid)


class TestSeedArticleExample:
    """The seed article: a 7B with 32 layers x 32 heads x 128 in fp16 -> 512 KiB per token."""

    def test_mha_7b_is_512_kib_per_token_and_16_requests_in_8_gib(self):
        result = estimate(Scenario(model="meta-llama/Llama-2-7b-chat-hf", gpu="h100-sxm-80gb", vllm_version="0.32.0",
                                   kv_cache_memory_bytes=8 * GIB, max_model_len=1024, block_size=16))
        assert result.layout.kv_bytes_per_token == 32 * 32 * 128 * 2 * 2 == 512 * KIB
        assert result.capacity.num_gpu_blocks == 8 * GIB // (16 * 512 * KIB) == 1024
        assert result.capacity.kv_cache_tokens == 16_384
        assert result.capacity.max_concurrency == 16.0

    def test_the_same_budget_with_real_gqa_holds_four_times_more(self):
        # Llama-3.1-8B: the same 32 layers x 128 head_dim, but 8 KV heads (GQA) -> 128 KiB per token.
        result = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb",
                                   vllm_version="0.32.0", kv_cache_memory_bytes=8 * GIB, max_model_len=1024,
                                   block_size=16))
        assert result.layout.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2 == 128 * KIB
        assert result.capacity.kv_cache_tokens == 65_536
        assert result.capacity.max_concurrency == 64.0


class TestBytesPerToken:
    def test_gqa_70b(self):
        assert layout("meta-llama/Llama-3.1-70B-Instruct").kv_bytes_per_token == 80 * 8 * 256 * 2 == 327_680

    def test_gqa_kv_heads_split_by_tp_and_replicated_past_the_head_count(self):
        assert layout("meta-llama/Llama-3.1-8B-Instruct", tp=2).kv_bytes_per_token == 32 * 4 * 256 * 2
        # 8 KV heads on 16 ranks: max(1, 8 // 16) = 1 head per rank (Llama-3.1-405B has 128 query heads).
        assert layout("meta-llama/Llama-3.1-405B-Instruct", tp=16).kv_bytes_per_token == 126 * 1 * 256 * 2

    def test_explicit_head_dim_is_used_not_hidden_over_heads(self):
        # Qwen3-0.6B: hidden 1024 / 16 heads would be 64, but the config says head_dim 128.
        assert layout("Qwen/Qwen3-0.6B").kv_bytes_per_token == 28 * 8 * (128 + 128) * 2 == 114_688

    def test_mla_latent_is_replicated_on_every_tp_rank(self):
        # DeepSeek-V3: 61 layers x (kv_lora_rank 512 + rope 64) x 2 bytes, no separate V, not divided by TP.
        for tp in (1, 8):
            assert layout("deepseek-ai/DeepSeek-V3", tp=tp).kv_bytes_per_token == 61 * 576 * 2 == 70_272

    def test_mla_fp8_ds_mla_packs_656_bytes_per_layer(self):
        assert layout("deepseek-ai/DeepSeek-V3", kv="fp8_ds_mla").kv_bytes_per_token == 61 * 656

    def test_fp8_kv_halves_a_16_bit_cache(self):
        assert layout("meta-llama/Llama-3.1-8B-Instruct", kv="fp8").kv_bytes_per_token == 32 * 8 * 256 * 1

    def test_sliding_window_layers_still_store_full_pages(self):
        # Mistral-7B-v0.1 (window 4096) stores 128 KiB per token like full attention; the window caps blocks.
        mistral = layout("mistralai/Mistral-7B-v0.1")
        assert mistral.kv_bytes_per_token == 32 * 8 * 256 * 2
        assert [g.kind for g in mistral.groups] == ["sliding_window"]


class TestHybridGrouping:
    def test_gemma3_27b_groups_ten_full_and_six_padded_sliding_groups(self):
        # 62 layers, every 6th global: 10 full + 52 sliding (window 1024); group size = min(10, 52) = 10,
        # 52 sliding layers -> cdiv(52, 10) = 6 groups (8 padding slots); 16 KV heads x 256 x 2 B per token-layer.
        gemma = layout("google/gemma-3-27b-it")
        kinds = [g.kind for g in gemma.groups]
        assert kinds.count("full") == 1 and kinds.count("sliding_window") == 6
        assert gemma.group_size == 10 and gemma.padding_layers == 8
        assert gemma.bytes_per_block == 10 * 16 * (16 * 256 * 2)
        assert gemma.kv_bytes_per_token == 62 * 16 * 256 * 2

    def test_gpt_oss_20b_worked_example_from_the_internals_notes(self):
        # 12 full + 12 sliding (window 128), 8 KV heads x 64: 2 groups x 12 layers; 384 KiB per 16-token block.
        gpt = layout("openai/gpt-oss-20b")
        assert len(gpt.groups) == 2 and gpt.bytes_per_block == 384 * KIB
        rules = rules_for("0.26.0")
        in_flight = in_flight_tokens(rules, max_num_batched_tokens=8192, pipeline_parallel_size=1,
                                     async_scheduling=True)
        per_group = sorted(group_blocks_per_request(g, 131_072, in_flight) for g in gpt.groups)
        assert per_group == [1033, 8192]  # cdiv(127 + 16384, 16) + 1 and 131072 / 16

    def test_without_the_hybrid_manager_windows_become_full_attention(self):
        gpt = layout("openai/gpt-oss-20b", hybrid=False)
        assert [g.kind for g in gpt.groups] == ["full"]
        assert gpt.bytes_per_block == 24 * 16 * 2048


class TestCapacityLogSemantics:
    """§2.5: B=64, L=8001, 7680 blocks -> 7680/126 = 60.95x and int(60.952... x 8001) = 487,680 tokens on 0.21+
    (the notes' 487,676 multiplies the rounded 60.95x), 491,520 before."""

    def test_tokens_are_concurrency_times_length_since_0_21(self):
        llama = layout("meta-llama/Llama-3.1-8B-Instruct", block=64)
        cap = capacity_figures(llama, rules_for("0.34.0"), num_gpu_blocks=7680, max_model_len=8001, in_flight=0)
        assert cap.blocks_per_request == 126
        assert cap.max_concurrency == pytest.approx(7680 / 126)
        assert cap.kv_cache_tokens == 7680 * 8001 // 126 == 487_680

    def test_tokens_are_blocks_per_group_times_block_size_before(self):
        llama = layout("meta-llama/Llama-3.1-8B-Instruct", block=64)
        cap = capacity_figures(llama, rules_for("0.20.0"), num_gpu_blocks=7680, max_model_len=8001, in_flight=0)
        assert cap.kv_cache_tokens == 7680 * 64 == 491_520

    def test_llama_8b_60_gib_worked_example(self):
        # §2.10: 60 GiB at block 64 -> 7,680 blocks; L=131,072 -> 3.75x and 491,520 tokens.
        result = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", kv_cache_memory_bytes=60 * GIB,
                                   vllm_version="0.34.0"))
        assert result.layout.bytes_per_block == 8 * MIB
        assert (result.capacity.num_gpu_blocks, result.capacity.kv_cache_tokens) == (7680, 491_520)
        assert result.capacity.max_concurrency == 3.75


def test_pp_layer_split_gives_the_remainder_to_stages_before_the_last():
    assert pp_layer_ranges(80, 3) == ((0, 27), (27, 54), (54, 80))
    assert pp_layer_ranges(32, 4) == ((0, 8), (8, 16), (16, 24), (24, 32))
    assert pp_layer_ranges(61, 4) == ((0, 15), (15, 30), (30, 46), (46, 61))
    # vllm/distributed/utils.py get_pp_indices (0.28): 94 // 4 = 23, remainder 2 -> partitions[-2] and [-3] gain one.
    assert pp_layer_ranges(94, 4) == ((0, 23), (23, 47), (47, 71), (71, 94))


def test_pipeline_pool_is_the_fullest_stage_blocks():
    # blog-kubesimplify-4xrtxpro6000-qwen3-235b-fp8-pp4-32k-v0271 printed 555,680 tokens, 16.96x at 32k. Qwen3-235B's
    # 94 layers split 23/24/24/23; a block of a 24-layer stage is 24 x 16 x 4 KV heads x 128 x 2 x 2 B = 786,432 B, of
    # a 23-layer one 753,664 B. kv_cache_utils.get_kv_cache_configs (0.28) takes the smallest num_blocks over the
    # workers: with 34,730 x 786,432 B per GPU the middle stages hold 34,730 blocks (the end ones 36,240), so
    # 34,730 x 16 = 555,680 tokens and 555,680 / 32,768 = 16.958x.
    result = estimate(Scenario(model="Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", pipeline_parallel_size=4,
                               max_model_len=32768, max_num_seqs=32, vllm_version="0.27.1",
                               kv_cache_memory_bytes=34_730 * 786_432))
    assert result.layout.bytes_per_block_per_stage == (753_664, 786_432, 786_432, 753_664)
    assert (result.capacity.num_gpu_blocks, result.capacity.kv_cache_tokens) == (34_730, 555_680)
    assert round(result.capacity.max_concurrency, 2) == 16.96


def test_pipeline_stages_each_price_their_own_layers():
    # Llama-3.1-70B PP=3: the first two stages hold 27 layers, so their blocks cost the most.
    seventy = layout("meta-llama/Llama-3.1-70B-Instruct", pp=3)
    assert seventy.bytes_per_block_per_stage == tuple(n * 16 * 8 * 256 * 2 for n in (27, 27, 26))


class TestRecurrentLayers:
    """Gated-delta-net linear attention (Qwen3-Next shape): a fixed state per request, aligned to attention pages."""

    CONFIG = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
              "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
              "vocab_size": 151936, "intermediate_size": 5120, "max_position_embeddings": 262144,
              "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
              "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "torch_dtype": "bfloat16",
              "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 12}

    def spec(self):
        from calculator.model.architecture import build_model_spec

        return build_model_spec(self.CONFIG, "qwen3-next-like")

    def test_attention_block_grows_until_a_page_holds_a_state(self):
        # State per layer: conv (16*128*2 + 32*128) x 3 x 2 B = 49,152 + temporal 32 x 128 x 128 x 2 B = 1,048,576.
        # Attention: 2 KV heads x 512 x 2 B = 2,048 B per token; 16 x cdiv(1,097,728, 16 x 2,048) = 544 tokens.
        layout = plan_kv_cache(self.spec(), block_size=16, kv_cache_dtype="auto", model_dtype_bytes=2)
        assert layout.block_size == 544
        assert [g.kind for g in layout.groups] == ["mamba", "mamba", "mamba", "full"]  # 36 + 12 -> groups of 12
        assert layout.bytes_per_block == 12 * 544 * 2048
        assert layout.kv_bytes_per_token == 12 * 2048  # only attention layers grow with the context

    def test_tp4_halves_the_state_and_the_block(self):
        # TP 4: conv 8192/4 x 3 x 2 = 12,288 + 8 x 128 x 128 x 2 = 262,144; 1 KV head -> 1,024 B per token
        # -> 16 x cdiv(274,432, 16,384) = 272 tokens.
        layout = plan_kv_cache(self.spec(), block_size=16, kv_cache_dtype="auto", model_dtype_bytes=2,
                               tensor_parallel_size=4)
        assert layout.block_size == 272

    def test_a_request_needs_one_state_block_per_recurrent_group_without_prefix_caching(self):
        result = estimate(Scenario(model="qwen3-next-like", kv_cache_memory_bytes=10 * GIB, vllm_version="0.32.0",
                                   max_model_len=32768, enable_prefix_caching=False), self.spec())
        # 10 GiB / 13,369,344 B = 803 blocks; per request cdiv(32768, 544) = 61 + 3 state blocks = 64.
        assert (result.capacity.num_gpu_blocks, result.capacity.blocks_per_request) == (803, 64)
        assert result.capacity.max_concurrency == 803 / 64

    def test_prefix_caching_keeps_two_state_blocks_per_recurrent_group(self):
        # 0.28+ turn prefix caching on for hybrids, so MambaModelConfig sets mamba_cache_mode "align":
        # MambaSpec.max_memory_usage_bytes = 2 pages -> 61 + 3 x 2 = 67 blocks per request.
        result = estimate(Scenario(model="qwen3-next-like", kv_cache_memory_bytes=10 * GIB, vllm_version="0.32.0",
                                   max_model_len=32768), self.spec())
        assert (result.capacity.num_gpu_blocks, result.capacity.blocks_per_request) == (803, 67)
        assert result.state_slots == 803 // 6


@pytest.mark.parametrize(("version", "per_token"), [
    # deepseek_v2.py 0.5.1-0.6.6: Attention(num_local_heads, 256, num_kv_heads=num_local_heads): K and V padded to 256
    ("0.6.6", 8 * 256 * 2 * 2 * 27),  # 221,184 B: 16 heads / TP 2, fp16, 27 layers
    ("0.7.0", 8 * 192 * 2 * 2 * 27),  # qk_head_dim = 128 nope + 64 rope, V padded to it
    ("0.7.1", (512 + 64) * 2 * 27),  # DeepseekV2MLAAttention: one latent per token on every rank
])
def test_deepseek_v2_was_cached_per_head_before_vllm_0_7_1(version: str, per_token: int) -> None:
    result = estimate(Scenario(model="deepseek-ai/DeepSeek-V2-Lite", gpu="L40", tensor_parallel_size=2,
                               dtype="float16", vllm_version=version))
    assert result.layout.kv_bytes_per_token == per_token
    said = any("0.7.1+ cache the compressed latent" in warning for warning in result.warnings)
    assert said == (version != "0.7.1")


def test_largest_fitting_length_is_the_last_length_whose_need_fits_every_stage() -> None:
    # NOTE: the search runs on plain numbers (issue 21: speed); it must find what a scan of every length finds, for
    # full, sliding-window, chunked-local and recurrent groups, several stages and budgets that fit nothing.
    rng = random.Random(21)
    for _ in range(300):
        stages = rng.choice([1, 2, 3])
        groups = tuple(
            KvGroup(kind=kind, layer_indices=(0,), page_size_bytes=rng.choice([512, 4096, 12_345]),
                    block_size=rng.choice([1, 16, 64, 400]),
                    sliding_window=rng.choice([64, 700]) if kind == "sliding_window" else None,
                    attention_chunk_size=256 if kind == "chunked_local" else None,
                    layers_per_stage=tuple(rng.randint(0, 6) for _ in range(stages)))
            for kind in rng.sample(["full", "sliding_window", "chunked_local", "mla", "mamba"], rng.randint(1, 3)))
        layout = KvCacheLayout(groups=groups, block_size=16, group_size=1, padding_layers=0,
                               bytes_per_block_per_stage=(1,) * stages, kv_bytes_per_token_per_stage=(1.0,) * stages)
        available = tuple(rng.randint(-1, 3_000_000) for _ in range(stages))
        in_flight, upper = rng.choice([0, 50]), rng.randint(1, 1500)
        scanned = max((length for length in range(1, upper + 1)
                       if all(kv_bytes_needed_for_one_request(layout, length, in_flight, s) <= free
                              for s, free in enumerate(available))), default=0)
        assert largest_fitting_model_len(layout, available_bytes_per_stage=available, upper=upper,
                                         in_flight=in_flight) == scanned
