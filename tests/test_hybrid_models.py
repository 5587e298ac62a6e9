"""Hybrid recurrent models (issue 27): weights, per-request state, KV bytes and sequence slots against figures computed
by hand from each family's config.json and vLLM 0.32's code (``MambaStateShapeCalculator``, ``MambaSpec``,
``Platform._align_hybrid_block_size``, ``compilation.py``'s Mamba check), and against start-up logs of real servers.
"""

from __future__ import annotations

import hashlib
import json
import math
from importlib import resources

import pytest

from calculator.engine.estimate import estimate
from calculator.engine.kv_cache import capacity_figures, mamba_state_bytes, plan_kv_cache
from calculator.engine.recurrent_state import mamba_state_blocks_per_request
from calculator.engine.uncertainty import verdict
from calculator.engine.vllm_versions import rules_for
from calculator.errors import InvalidConfig
from calculator.model.architecture import build_model_spec
from calculator.model.config_json import parse_config_text
from calculator.scenario import Scenario
from calculator.summary import estimate_summary
from calculator.units import GIB

PRESETS = resources.files("calculator") / "data" / "presets"


def preset(file_stem: str) -> dict:
    return json.loads((PRESETS / f"{file_stem}.json").read_text(encoding="utf-8"))


class TestQwen3CoderNext:
    """Qwen/Qwen3-Coder-Next: 48 layers, every 4th gated attention (2 KV heads x 256), the rest gated delta nets
    (16 key heads, 32 value heads, 128 wide, kernel 4); 512 experts of 512 plus a shared one, in every layer."""

    def spec(self):
        return build_model_spec(preset("Qwen__Qwen3-Coder-Next"), "Qwen/Qwen3-Coder-Next")

    def test_weights_match_the_model_card(self):
        hidden, vocab = 2048, 151936
        gdn = ((2 * 2048 + 2 * 4096) * hidden  # in_proj_qkvz: q, k (16 x 128 each), v, z (32 x 128 each)
               + 2 * 32 * hidden  # in_proj_ba
               + (2 * 2048 + 4096) * 4  # depthwise conv over q, k, v
               + 32 + 32 + 128  # dt_bias, A_log, the gated norm over one value head
               + hidden * 4096)  # out_proj
        attention = 2 * 16 * 256 * hidden + 2 * (2 * 256 * hidden) + hidden * 16 * 256 + 2 * 256
        moe = 512 * hidden + 512 * 3 * 512 * hidden + 3 * 512 * hidden + hidden  # router, experts, shared + its gate
        total = 2 * vocab * hidden + hidden + 48 * (2 * hidden + moe) + 36 * gdn + 12 * attention
        # transformers' Qwen3NextForCausalLM built on the meta device from this config counts 79,674,391,296 too.
        assert self.spec().num_params == total == 79_674_391_296
        # Model card: "80B in total", "Number of Parameters (Non-Embedding): 79B".
        assert round((total - 2 * vocab * hidden) / 1e9) == 79

    def test_state_kv_and_block_at_tp4(self):
        spec = self.spec()
        assert [layer.kind for layer in spec.layers[:4]] == ["mamba", "mamba", "mamba", "full"]
        # conv (2 x 16 x 128 + 32 x 128) / 4 x 3 taps x 2 B = 12,288; temporal 32 / 4 x 128 x 128 x 2 B = 262,144.
        assert mamba_state_bytes(spec.layers[0], tensor_parallel_size=4, model_dtype_bytes=2) == 274_432
        layout = plan_kv_cache(spec, block_size=16, kv_cache_dtype="auto", model_dtype_bytes=2, tensor_parallel_size=4)
        assert layout.kv_bytes_per_token == 12 * 1 * 512 * 2  # 2 KV heads over 4 ranks: one each, K and V
        assert layout.block_size == 16 * math.ceil(274_432 / (16 * 1024)) == 272
        assert layout.bytes_per_block == 12 * 272 * 1024  # groups of 12 layers: 3 recurrent, 1 attention

    def test_prefix_caching_decides_the_state_blocks_per_request(self):
        # 0.28+ default prefix caching on for hybrids, so mamba_cache_mode "align" keeps 2 blocks; 0.27 kept it off.
        assert mamba_state_blocks_per_request(rules_for("0.32.0"), prefix_caching_given=None) == 2
        assert mamba_state_blocks_per_request(rules_for("0.27.0"), prefix_caching_given=None) == 1
        assert mamba_state_blocks_per_request(rules_for("0.32.0"), prefix_caching_given=False) == 1
        result = estimate(Scenario(model="Qwen/Qwen3-Coder-Next", gpu="H100", tensor_parallel_size=4,
                                   max_model_len=32768, kv_cache_memory_bytes=GIB, vllm_version="0.32.0"), self.spec())
        # 1 GiB / 3,342,336 B = 321 blocks; a request: cdiv(32768, 272) = 121 + 3 groups x 2 = 127 blocks.
        assert (result.capacity.num_gpu_blocks, result.capacity.blocks_per_request) == (321, 127)
        assert result.state_slots == 321 // 6


class TestMambaCacheBlocksRefusal:
    """vLLM 0.20+ refuses FULL decode CUDA graphs when max_num_seqs exceeds the pool's blocks (compilation.py)."""

    def scenario(self, **changes) -> Scenario:
        fields = {"model": "Qwen/Qwen3-Coder-Next", "gpu": "H100", "tensor_parallel_size": 4, "max_model_len": 32768,
                  "kv_cache_memory_bytes": GIB, "max_num_seqs": 1024, "vllm_version": "0.32.0", **changes}
        return Scenario(**fields)

    def test_the_refusal_is_the_verdict_with_vllms_text_and_the_fix(self):
        result = estimate(self.scenario())
        assert not result.fits and verdict(result) == "does not fit"
        assert result.error == (
            "vLLM 0.32.0 sizes the cache, then refuses to capture CUDA graphs: max_num_seqs (1024) exceeds available "
            "Mamba cache blocks (321). Each decode sequence requires one Mamba cache block, so CUDA graph capture "
            "cannot proceed. Please lower max_num_seqs to at most 321 or increase gpu_memory_utilization. "
            # (1024 - 321) x 3,342,336 B = 2,349,662,208 B = 2.19 GiB
            "Fix: --max-num-seqs 321, or 2.19 GiB more KV cache per GPU (703 blocks of 3,342,336 bytes) for "
            "max_num_seqs 1,024.")
        summary = estimate_summary(result)
        assert (summary["fits"], summary["verdict"], summary["recurrent_state_slots"]) == (False, "does not fit", 53)
        assert summary["verdict_reason"] == result.error

    def test_the_fix_starts(self):
        assert estimate(self.scenario(max_num_seqs=321)).fits

    @pytest.mark.parametrize("changes", [
        {"enforce_eager": True},  # no CUDA graphs to capture
        {"device": "cpu", "gpu": None, "gpu_memory_utilization": None},  # the CPU backend captures none either
        {"vllm_version": "0.19.0"},  # before PR #38270 vLLM capped the capture sizes silently and started
    ])
    def test_no_refusal_without_full_cuda_graphs_or_before_0_20(self, changes):
        result = estimate(self.scenario(**changes))
        assert result.error is None or "Mamba cache blocks" not in result.error

    def test_fewer_state_slots_than_max_num_seqs_is_a_warning_when_vllm_starts(self):
        # 512 < 1,024 blocks: vLLM starts, but only 1,024 // 6 = 170 sequences hold a recurrent state at once.
        result = estimate(self.scenario(max_num_seqs=512, kv_cache_memory_bytes=1024 * 3_342_336))
        assert result.fits
        assert "holds the recurrent state of 170 sequences, fewer than max_num_seqs (512)" in " ".join(result.warnings)


@pytest.mark.parametrize(("version", "tp", "kv_cache_dtype", "kv_gib", "max_model_len", "block", "tokens",
                          "concurrency"), [
    # Qwen/Qwen3-Next-80B-A3B-Instruct on 2 x H200, vLLM 0.10.2 (startup-log record
    # file-2xh200-qwen3-next-80b-a3b-tp2-defaults-v0102): "Setting attention block size to 544 tokens",
    # "Available KV cache memory: 44.59 GiB", "GPU KV cache size: 973,760 tokens", "Maximum concurrency for
    # 262,144 tokens per request: 14.77x".
    ("0.10.2", 2, "auto", 44.59, 262144, 544, 973_760, 14.77),
    # The same model as W4A16 on 2 x L40S, vLLM 0.13.0, --kv-cache-dtype fp8 (record
    # file-2xl40s-qwen3-next-80b-w4a16-tp2-v0130): block 1072, 17.58 GiB, 767,552 tokens, 84.29x at 32,768.
    ("0.13.0", 2, "fp8", 17.58, 32768, 1072, 767_552, 84.29),
])
def test_qwen3_next_matches_real_start_up_logs(version, tp, kv_cache_dtype, kv_gib, max_model_len, block, tokens,
                                               concurrency):
    # NOTE: Qwen3-Next-80B-A3B has Qwen3-Coder-Next's attention and gated-delta-net shapes (the KV side is equal).
    spec = build_model_spec(preset("Qwen__Qwen3-Coder-Next"), "Qwen/Qwen3-Next-80B-A3B-Instruct")
    rules = rules_for(version)
    # Hand: state per layer and rank 24,576 + 524,288 B (bf16); attention 1 head x 512 x 2 B (fp8: 1 B) per token.
    layout = plan_kv_cache(spec, block_size=16, kv_cache_dtype=kv_cache_dtype, model_dtype_bytes=2,
                           tensor_parallel_size=tp,
                           mamba_state_blocks=mamba_state_blocks_per_request(rules, prefix_caching_given=None))
    per_token = 512 * (2 if kv_cache_dtype == "auto" else 1)
    assert layout.block_size == block == 16 * math.ceil(548_864 / (16 * per_token))
    # NOTE: the log rounds the pool to 0.01 GiB, so the blocks are known to within that rounding.
    fewest, most = (int((kv_gib + half) * GIB) // layout.bytes_per_block for half in (-0.005, 0.005))
    logged = {(f.kv_cache_tokens, round(f.max_concurrency, 2))
              for f in (capacity_figures(layout, rules, num_gpu_blocks=n, max_model_len=max_model_len, in_flight=8192)
                        for n in range(fewest, most + 1))}
    assert (tokens, concurrency) in logged


def lfm2_dense_params(h: int, *, ff: int) -> int:
    """A dense LFM2 / LFM2.5 of 16 layers: 10 short convolutions, 6 GQA layers (8 KV heads x 64, QK norms), a SwiGLU of
    ff and two norms in every layer, the embedding (65,536 x h) tied to the head, a final norm."""
    conv = 3 * h * h + h * 3 + h * h  # in_proj to B, C, x; depthwise conv (kernel 3); out_proj
    attention = h * h + 2 * (8 * 64 * h) + h * h + 2 * 64  # q, k, v, out_proj, QK norms
    common = 3 * ff * h + 2 * h  # SwiGLU w1/w3/w2, operator_norm, ffn_norm
    return 65536 * h + h + 10 * (conv + common) + 6 * (attention + common)


class TestLfm2:
    """LiquidAI/LFM2-1.2B, its config.json verbatim (1,000 bytes, the size the Hub lists for it) from the Hub mirror
    fetchwiki/LiquidAI-LFM2-1.2B at commit 60dc8602e06e43aec0e5cd5bb54fe7a7fedcdc81 ("Initial commit from
    huggingface.co/LiquidAI/LFM2-1.2B"): 10 short-convolution layers (conv_L_cache 3) and 6 GQA layers (8 KV heads x
    64) at full_attn_idxs 2, 5, 8, 10, 12, 14; block_ff_dim 12,288 auto-adjusted; no tie key (LFM2 always ties)."""

    def spec(self):
        return build_model_spec(preset("LiquidAI__LFM2-1.2B"), "LiquidAI/LFM2-1.2B")

    def test_weights_match_the_model_card(self):
        total = lfm2_dense_params(2048, ff=8192)  # ff: 2/3 x 12,288 = 8,192, a multiple of 256 already
        spec = self.spec()
        assert spec.known_architecture and spec.num_params == total == 1_170_340_608
        # Model card table (LiquidAI/LFM2-350M's card, LFM2-350M | 700M | 1.2B | 2.6B): "Parameters ... 1,170,340,608";
        # the mirror's model_files.json counts the same in the checkpoint's 148 BF16 tensors.

    def test_a_conv_layer_keeps_two_taps_and_pages_are_padded_to_attention(self):
        spec = self.spec()
        assert [layer.kind for layer in spec.layers[:3]] == ["mamba", "mamba", "full"]
        # ShortConv state: (conv_L_cache - 1) x conv_dim x 2 B = 8,192 B per layer, no temporal state.
        assert mamba_state_bytes(spec.layers[0], tensor_parallel_size=1, model_dtype_bytes=2) == 8192
        layout = plan_kv_cache(spec, block_size=16, kv_cache_dtype="auto", model_dtype_bytes=2)
        assert layout.kv_bytes_per_token == 6 * 8 * 128 * 2
        # An attention page of 16 tokens (32,768 B) already holds a state: the block stays 16 and the state page is
        # padded to 32,768. Buckets of 10 and 6 layers: 10 >= 1.5 x 6, so groups of 6 -> 2 conv groups + 1 attention.
        assert layout.block_size == 16
        assert [g.kind for g in layout.groups] == ["mamba", "mamba", "full"]
        assert layout.bytes_per_block == 6 * 32768


class TestLfm2_350MPreset:
    """LiquidAI/LFM2-350M, its config.json verbatim as hf_hub_download saved it (AfyKirby1/Rain-IDE-V2 at commit
    2b15122221632b9321c899bf63b815f2a59e5f10, models/LFM2-350M/config.json; model_info.json there names the repo
    LiquidAI/LFM2-350M): LFM2-1.2B's layout at hidden 1,024 with 16 query heads, block_ff_dim 6,656."""

    def spec(self):
        return build_model_spec(preset("LiquidAI__LFM2-350M"), "LiquidAI/LFM2-350M")

    def test_weights_match_the_model_card(self):
        ff = 256 * math.ceil(int(2 * 6656 / 3) / 256)  # auto-adjust: 2/3 x 6,656 = 4,437, up to a multiple of 256
        assert ff == 4608
        total = lfm2_dense_params(1024, ff=ff)
        spec = self.spec()
        # Model card table: "Parameters | 354,483,968" (LFM2-350M).
        assert spec.known_architecture and spec.num_params == total == 354_483_968

    def test_kv_and_per_request_state(self):
        # The short-conv state: (3 - 1) taps x 1,024 channels x 2 B = 4,096 per conv layer, inside one 16-token
        # attention page (16 x 2 x 8 x 64 x 2 B = 32,768): the block stays at 16 tokens.
        assert_recurrent_layout(self.spec(), layers=10, state=4096, kv_bytes_per_token=6 * 2 * 8 * 64 * 2,
                                block_size=16)


class TestLfm2_5_1_2BBasePreset:
    """LiquidAI/LFM2.5-1.2B-Base, its config.json verbatim from a git clone of the Hub repo kept in plturrell/aArabic at
    commit 476075eec82d1f705325bd3a68349f9c8470430c (vendor/layerModels/huggingFace/LiquidAI-LFM2.5-1.2B-Base/, with the
    Hub's .gitattributes, LICENSE and chat template): LFM2-1.2B's shape in the newer spelling, layer_types instead of
    full_attn_idxs, intermediate_size 12,288 (auto-adjusted) instead of block_ff_dim, tie_embedding."""

    def spec(self):
        return build_model_spec(preset("LiquidAI__LFM2.5-1.2B-Base"), "LiquidAI/LFM2.5-1.2B-Base")

    def test_weights_match_the_model_card(self):
        total = lfm2_dense_params(2048, ff=256 * math.ceil(int(2 * 12288 / 3) / 256))  # ff 8,192
        spec = self.spec()
        assert spec.known_architecture and spec.num_params == total == 1_170_340_608
        assert round(total / 1e7) == 117  # model card (the README beside the config): "Number of parameters: 1.17B"
        assert [layer.kind for layer in spec.layers].count("full") == 6

    def test_kv_and_per_request_state(self):
        # (3 - 1) taps x 2,048 channels x 2 B = 8,192 per conv layer, within one 16-token attention page (32,768 B).
        assert_recurrent_layout(self.spec(), layers=10, state=8192, kv_bytes_per_token=6 * 2 * 8 * 64 * 2,
                                block_size=16)


def test_nemotron_h_pattern_float32_state_and_group_replication():
    """A Nemotron-H shaped config: 'M' Mamba2, '*' attention, '-' MLP (no cache); float32 SSM state by default
    (NemotronHForCausalLMConfig); 8 B/C groups over TP 16 are replicated to 16 (extra_groups_for_head_shards)."""
    config = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 4096,
              "num_hidden_layers": 6, "hybrid_override_pattern": "M-M*-E", "num_attention_heads": 32,
              "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072, "intermediate_size": 8192,
              "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
              "n_routed_experts": 8, "moe_intermediate_size": 1024, "num_experts_per_tok": 2,
              "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
    spec = build_model_spec(config, "nemotron-h-like")
    assert [(layer.kind, layer.stateless) for layer in spec.layers] == [
        ("mamba", False), ("full", True), ("mamba", False), ("full", False), ("full", True), ("full", True)]
    mamba = spec.layers[0]
    # TP 1: conv (128 x 64 + 2 x 8 x 128) x 3 x 2 B = 61,440; temporal 128 x 64 x 128 x 4 B = 4,194,304.
    assert mamba_state_bytes(mamba, tensor_parallel_size=1, model_dtype_bytes=2) == 61_440 + 4_194_304
    # TP 16: groups 8 -> 16: conv (8192 + 2 x 16 x 128) / 16 x 3 x 2 B = 4,608; temporal 8 x 64 x 128 x 4 = 262,144.
    assert mamba_state_bytes(mamba, tensor_parallel_size=16, model_dtype_bytes=2) == 4_608 + 262_144
    layout = plan_kv_cache(spec, block_size=16, kv_cache_dtype="auto", model_dtype_bytes=2)
    assert layout.kv_bytes_per_token == 1 * 8 * 256 * 2  # one attention layer; the MLP and MoE layers cache nothing


def test_granite_4_sizes_the_mixer_by_mamba_expand():
    """GraniteMoeHybrid (Granite 4.0-H): layer_types 'mamba' / 'attention'; conv channels mamba_expand x hidden_size
    + 2 x groups x state (granitemoehybrid.py get_mamba_state_shape_from_config), SSM state in the model dtype."""
    config = {"architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "hidden_size": 512,
              "num_hidden_layers": 4, "layer_types": ["mamba", "mamba", "mamba", "attention"],
              "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 49152, "intermediate_size": 1024,
              "mamba_d_conv": 4, "mamba_d_head": 128, "mamba_d_state": 128, "mamba_expand": 2, "mamba_n_groups": 1,
              "mamba_n_heads": 8, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
    spec = build_model_spec(config, "granite-4-like")
    assert [layer.kind for layer in spec.layers] == ["mamba", "mamba", "mamba", "full"]
    # conv (2 x 512 + 2 x 1 x 128) x 3 x 2 B = 7,680; temporal 8 x 128 x 128 x 2 B = 262,144. At TP 2 the single
    # group is replicated: conv (1024 + 2 x 2 x 128) / 2 x 3 x 2 B = 4,608; temporal 4 x 128 x 128 x 2 = 131,072.
    assert mamba_state_bytes(spec.layers[0], tensor_parallel_size=1, model_dtype_bytes=2) == 7_680 + 262_144
    assert mamba_state_bytes(spec.layers[0], tensor_parallel_size=2, model_dtype_bytes=2) == 4_608 + 131_072


def test_a_16_bit_hybrid_on_cpu_is_told_the_state_may_be_float32():
    spec = build_model_spec(preset("Qwen__Qwen3-Coder-Next"), "Qwen/Qwen3-Coder-Next")
    cpu = {"model": "Qwen/Qwen3-Coder-Next", "device": "cpu", "max_model_len": 4096, "kv_cache_memory_bytes": 8 * GIB,
           "vllm_version": "0.32.0"}
    said = " ".join(estimate(Scenario(**cpu, dtype="bfloat16"), spec).warnings)
    assert "on a CPU with AVX-512 BF16 keeps the recurrent (SSM) state in float32" in said
    assert "SSM" not in " ".join(estimate(Scenario(**cpu, dtype="float32"), spec).warnings)


# Qwen3.8-27B's config.json as a public test transcribes it (Qwen3_5ForConditionalGeneration, the Qwen3.5 / 3.6 layout):
# 64 layers, every 4th attention (4 KV heads x 256), gated delta nets with 48 value heads, mamba_ssm_dtype float32.
QWEN38_27B = {
    "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "tie_word_embeddings": False,
    "text_config": {
        "attention_bias": False, "attn_output_gate": True, "bos_token_id": 248044, "eos_token_id": 248044,
        "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu", "hidden_size": 5120,
        "intermediate_size": 17408, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
        "linear_num_key_heads": 16, "linear_num_value_heads": 48, "linear_value_head_dim": 128,
        "mamba_ssm_dtype": "float32", "max_position_embeddings": 262144, "model_type": "qwen3_5_text",
        "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False, "num_attention_heads": 24,
        "num_hidden_layers": 64, "num_key_value_heads": 4, "output_gate_type": "swish", "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-6, "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10],
                                                  "partial_rotary_factor": 0.25, "rope_theta": 10000000,
                                                  "rope_type": "default"},
        "tie_word_embeddings": False, "vocab_size": 248320}}


def test_qwen3_5_layout_keeps_a_float32_state_and_matches_a_real_start_up_log():
    """Qwen3.8-27B on a GB10 with vLLM 0.27.1, prefix caching off, max_model_len 786,432 (YaRN x 3): "Available KV
    cache memory: 50.29 GiB", "GPU KV cache size: 820,013 tokens", "Maximum concurrency ... 1.04x" (startup-log
    record file-gb10-qwen38-27b-786k-v0271)."""
    spec = build_model_spec(QWEN38_27B, "Qwen3.8-27B")
    gdn = spec.layers[0]
    assert gdn.mamba_ssm_dtype == "float32"  # Qwen3_5ForConditionalGenerationConfig: mamba_ssm_dtype wins over auto
    # conv (2 x 16 x 128 + 48 x 128) x 3 x 2 B = 61,440; temporal 48 x 128 x 128 x 4 B = 3,145,728.
    assert mamba_state_bytes(gdn, tensor_parallel_size=1, model_dtype_bytes=2) == 3_207_168
    rules = rules_for("0.27.1")
    layout = plan_kv_cache(spec, block_size=16, kv_cache_dtype="auto", model_dtype_bytes=2,
                           mamba_state_blocks=mamba_state_blocks_per_request(rules, prefix_caching_given=False))
    assert layout.kv_bytes_per_token == 16 * 4 * 512 * 2
    assert layout.block_size == 16 * math.ceil(3_207_168 / (16 * 4096)) == 784
    assert layout.bytes_per_block == 16 * 784 * 4096  # 3 recurrent groups and 1 attention group of 16 layers
    fewest, most = (int((50.29 + half) * GIB) // layout.bytes_per_block for half in (-0.005, 0.005))
    logged = {(f.kv_cache_tokens, round(f.max_concurrency, 2))
              for f in (capacity_figures(layout, rules, num_gpu_blocks=n, max_model_len=786432, in_flight=8192)
                        for n in range(fewest, most + 1))}
    # 1,050 blocks / (cdiv(786,432, 784) = 1,004 + 3 state blocks) = 1.0427x, x 786,432 = 820,013 tokens.
    assert (820_013, 1.04) in logged


def test_granite_4_hybrid_weights():
    """A Granite 4.0-H-shaped config (transformers' documentation example of GraniteMoeHybridForCausalLM): 6 Mamba2
    and 2 attention layers of 512, 8 experts of 1024 and a shared MLP of 512 in every layer, tied embeddings."""
    config = {"architectures": ["GraniteMoeHybridForCausalLM"], "attention_bias": False, "hidden_size": 512,
              "intermediate_size": 1024, "layer_types": ["mamba"] * 3 + ["attention"] + ["mamba"] * 3 + ["attention"],
              "mamba_conv_bias": True, "mamba_d_conv": 4, "mamba_d_head": 128, "mamba_d_state": 128,
              "mamba_expand": 2, "mamba_n_groups": 1, "mamba_n_heads": 8, "mamba_proj_bias": False,
              "max_position_embeddings": 4096, "model_type": "granitemoehybrid", "num_attention_heads": 8,
              "num_experts_per_tok": 2, "num_hidden_layers": 8, "num_key_value_heads": 8, "num_local_experts": 8,
              "shared_intermediate_size": 512, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
              "vocab_size": 49152}
    inner, conv = 2 * 512, 2 * 512 + 2 * 128
    mamba = (inner + conv + 8) * 512 + conv * 4 + conv + 3 * 8 + inner + 512 * inner  # in_proj .. out_proj
    attention = 4 * 512 * 512  # q, k, v (8 x 64 each) and o
    common = 2 * 512 + 8 * 512 + 8 * (2 * 1024 * 512 + 512 * 1024) + (2 * 512 * 512 + 512 * 512)
    total = 49152 * 512 + 512 + 6 * mamba + 2 * attention + 8 * common
    # transformers' GraniteMoeHybridForCausalLM on the meta device counts the same 144,552,080.
    assert build_model_spec(config, "granite-4-h-like").num_params == total == 144_552_080


def test_nemotron_h_weights_by_pattern():
    """Nemotron-H 'M-M*-E': 2 Mamba2 mixers (8 heads x 32, 2 groups, state 16), 2 squared-ReLU MLPs of 512, one
    attention layer (8 x 32, 2 KV heads), one MoE layer (4 experts of 128 + one shared of 64), one norm per layer."""
    config = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 256,
              "num_hidden_layers": 6, "hybrid_override_pattern": "M-M*-E", "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 1000, "intermediate_size": 512,
              "mamba_num_heads": 8, "mamba_head_dim": 32, "ssm_state_size": 16, "n_groups": 2, "conv_kernel": 4,
              "use_conv_bias": True, "use_bias": False, "mlp_bias": False, "n_routed_experts": 4,
              "moe_intermediate_size": 128, "moe_shared_expert_intermediate_size": 64, "n_shared_experts": 1,
              "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "tie_word_embeddings": False,
              "max_position_embeddings": 4096}
    inner, conv = 256, 256 + 2 * 2 * 16
    mamba = (inner + conv + 8) * 256 + conv * 4 + conv + 3 * 8 + inner + 256 * inner
    mlp = 2 * 512 * 256
    attention = 8 * 32 * 256 + 2 * (2 * 32 * 256) + 256 * 8 * 32
    moe = 4 * 256 + 4 + 4 * 2 * 128 * 256 + 2 * 64 * 256  # router, its float32 bias, experts, shared expert
    total = 2 * 1000 * 256 + 256 + 6 * 256 + 2 * mamba + 2 * mlp + attention + moe
    # transformers' NemotronHForCausalLM counts 1,931,696 parameters plus the 4-value bias buffer it also saves.
    assert build_model_spec(config, "nemotron-h-like").num_params == total == 1_931_700


def test_qwen3_5_weights_with_its_vision_tower():
    """Qwen3.5-27B's layout (the Qwen3.8-27B text config above) with transformers' default Qwen3.5 vision tower
    (27 blocks of 1152, merged into 5120): gated delta nets with 48 value heads, gated attention, a dense MLP."""
    config = {**QWEN38_27B, "vision_config": {
        "depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16, "in_channels": 3,
        "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 5120,
        "num_position_embeddings": 2304, "hidden_act": "gelu_pytorch_tanh", "model_type": "qwen3_5_vision"}}
    h = 5120
    gdn = gated_delta_net(h, key_heads=16, value_heads=48)
    attention = gated_attention(h, query_heads=24, kv_heads=4)
    text = 2 * 248320 * h + h + 64 * (2 * h + 3 * 17408 * h) + 48 * gdn + 16 * attention
    vision = qwen3_5_vision(h)
    spec = build_model_spec(config, "Qwen/Qwen3.5-27B-like")
    # transformers' Qwen3_5ForConditionalGeneration on the meta device: 27,356,728,560, of which 460,730,096 visual.
    assert spec.num_params == text + vision == 27_356_728_560
    assert vision == 460_730_096


def test_speculative_tokens_lengthen_the_conv_state_and_add_state_blocks():
    """vLLM 0.28+: MambaStateShapeCalculator adds num_spec to the conv state's length, and MambaSpec keeps one more
    state block per draft token (num_speculative_blocks)."""
    result = estimate(Scenario(model="Qwen/Qwen3-Coder-Next", gpu="H100", tensor_parallel_size=4, max_model_len=32768,
                               kv_cache_memory_bytes=GIB, vllm_version="0.32.0", speculative_method="ngram",
                               num_speculative_tokens=3))
    # conv 8192 / 4 x (3 + 3) x 2 B = 24,576 + temporal 262,144 = 286,720 -> block 16 x cdiv(286,720, 16,384) = 288.
    assert result.layout.block_size == 288
    # 1 GiB / (12 x 288 x 1,024 B) = 303 blocks; a request: cdiv(32768, 288) = 114 + 3 groups x (2 + 3) = 129.
    assert (result.capacity.num_gpu_blocks, result.capacity.blocks_per_request) == (303, 129)
    assert result.state_slots == 303 // 15


def test_a_short_request_still_holds_its_recurrent_state_blocks():
    from calculator.engine.workload import Workload, workload_capacity

    result = estimate(Scenario(model="Qwen/Qwen3-Coder-Next", gpu="H100", tensor_parallel_size=4, max_model_len=32768,
                               kv_cache_memory_bytes=GIB, vllm_version="0.32.0"))
    capacity = workload_capacity(result, Workload(prompt_tokens_mean=1000, output_tokens_mean=200))
    # attention cdiv(1200, 272) = 5 blocks + 3 recurrent groups x 2 ("align") = 11; (321 - 1 null block) // 11 = 29.
    assert capacity.mean.private_blocks == 11
    assert capacity.kv_concurrency_mean == 29


@pytest.mark.parametrize("recurrent_fields", [
    # Bamba: its Mamba2 layers are those not in attn_layer_indices, a field this planner does not read
    {"model_type": "bamba", "mamba_n_heads": 24, "mamba_d_head": 64, "mamba_d_state": 256, "mamba_n_groups": 1,
     "mamba_d_conv": 4, "attn_layer_indices": [3]},
])
def test_recurrent_layers_the_planner_cannot_place_are_said(recurrent_fields):
    config = {"architectures": ["SomeHybridForCausalLM"], "hidden_size": 1024, "num_hidden_layers": 4,
              "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 32000, "intermediate_size": 2048,
              "max_position_embeddings": 4096, **recurrent_fields}
    spec = build_model_spec(config, "hybrid-unknown")
    assert any("per-sequence state is missing from the KV-cache estimate" in w for w in spec.warnings)
    assert not any("per-sequence state" in w for w in build_model_spec(QWEN38_27B, "q").warnings)


@pytest.mark.parametrize("missing", ["linear_num_key_heads", "linear_key_head_dim", "linear_value_head_dim"])
def test_a_qwen3_5_config_without_a_gated_delta_net_shape_is_refused_by_name(missing):
    # Regression (the config fuzz on the Qwen3.5-27B preset): a missing field ended in "config.json fields are
    # inconsistent (KeyError: 'linear_value_head_dim')" instead of naming the field.
    config = preset("Qwen__Qwen3.5-27B")
    del config["text_config"][missing]
    with pytest.raises(InvalidConfig, match=f"lacks a positive integer '{missing}', which sizes their state"):
        build_model_spec(config, "Qwen3.5-27B-without-" + missing)


def test_a_kimi_linear_config_without_its_kda_shapes_is_refused_by_name():
    config = {"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "hidden_size": 1024,
              "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 32000,
              "intermediate_size": 2048, "max_position_embeddings": 4096,
              "linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [4]}}
    with pytest.raises(InvalidConfig, match="linear_attn_config with kda_layers, num_heads, head_dim, "
                                            "short_conv_kernel_size; missing: num_heads, head_dim, "
                                            "short_conv_kernel_size"):
        build_model_spec(config, "kimi-linear-without-kda-shapes")


def test_kimi_linear_kda_state_beside_mla_layers():
    """A Kimi-Linear-48B-A3B-shaped config: 27 layers, MLA (latent 512 + rope 64) at layers 4, 8, ..., 24 and 27
    (1-based, linear_attn_config["full_attn_layers"]), KDA elsewhere with 32 heads of 128 and a kernel of 4."""
    full = [4, 8, 12, 16, 20, 24, 27]
    config = {"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "hidden_size": 2304,
              "num_hidden_layers": 27, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 163840,
              "intermediate_size": 9216, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
              "v_head_dim": 128, "max_position_embeddings": 1048576, "torch_dtype": "bfloat16",
              "linear_attn_config": {"full_attn_layers": full, "kda_layers": [i for i in range(1, 28) if i not in full],
                                     "num_heads": 32, "head_dim": 128, "short_conv_kernel_size": 4}}
    spec = build_model_spec(config, "kimi-linear-like")
    assert [layer.kind for layer in spec.layers[:4]] == ["mamba", "mamba", "mamba", "mla"]
    assert not any("per-sequence state" in w for w in spec.warnings)
    # conv 3 x 32 x 128 x 3 taps x 2 B = 73,728; recurrent 32 x 128 x 128 x 4 B (float32, kda_state_dtype) = 2,097,152.
    assert mamba_state_bytes(spec.layers[0], tensor_parallel_size=1, model_dtype_bytes=2) == 2_170_880
    layout = plan_kv_cache(spec, block_size=16, kv_cache_dtype="auto", model_dtype_bytes=2)
    assert layout.kv_bytes_per_token == 7 * 576 * 2
    # MLA hybrids keep the block a multiple of 128: 128 x cdiv(2,170,880, 128 x 1,152) = 1,920 tokens. 20 KDA and 7 MLA
    # layers -> groups of 7 (20 >= 1.5 x 7): 3 KDA groups + 1 MLA group; a block id costs 7 pages.
    assert layout.block_size == 1920
    assert [g.kind for g in layout.groups] == ["mamba", "mamba", "mamba", "mla"]
    assert layout.bytes_per_block == 7 * 1920 * 1152


def test_falcon_h1_keeps_attention_and_a_mamba2_state_in_every_layer():
    """FalconH1ParallelHybrid: attention (2 KV heads x 64) and a Mamba2 mixer (mamba_d_ssm 512, 16 heads x 32,
    2 groups, state 64) side by side in each of 4 layers, then a SwiGLU MLP of 768; no gated norm (mamba_rms_norm)."""
    config = {"architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "hidden_size": 256,
              "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
              "vocab_size": 1000, "intermediate_size": 768, "mamba_d_ssm": 512, "mamba_n_heads": 16,
              "mamba_d_head": 32, "mamba_d_state": 64, "mamba_n_groups": 2, "mamba_d_conv": 4, "mamba_expand": 2,
              "mamba_conv_bias": True, "mamba_proj_bias": False, "mamba_rms_norm": False,
              "tie_word_embeddings": False, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
    spec = build_model_spec(config, "falcon-h1-like")
    conv = 512 + 2 * 2 * 64
    mamba = (512 + conv + 16) * 256 + conv * 4 + conv + 3 * 16 + 256 * 512  # no norm weight without mamba_rms_norm
    attention = 8 * 64 * 256 + 2 * (2 * 64 * 256) + 256 * 8 * 64
    layer = 2 * 256 + attention + mamba + 3 * 768 * 256
    # transformers' FalconH1ForCausalLM on the meta device counts the same 6,051,264.
    assert spec.num_params == 2 * 1000 * 256 + 256 + 4 * layer == 6_051_264
    # State: conv 768 x 3 x 2 B = 4,608 + temporal 16 x 32 x 64 x 2 B = 65,536; attention 2 x 128 x 2 B per token.
    layout = plan_kv_cache(spec, block_size=16, kv_cache_dtype="auto", model_dtype_bytes=2)
    assert layout.kv_bytes_per_token == 4 * 512
    assert layout.block_size == 16 * math.ceil(70_144 / (16 * 512)) == 144
    # vLLM registers both caches of every layer: a group of the 4 attention layers and one of the 4 Mamba2 states.
    assert [(g.kind, g.layer_indices) for g in layout.groups] == [("full", (0, 1, 2, 3)), ("mamba", (0, 1, 2, 3))]
    assert layout.bytes_per_block == 4 * 144 * 512


def gated_delta_net(h: int, *, key_heads: int, value_heads: int) -> int:
    """One Qwen3.5 gated delta net of 128-wide heads: in_proj_qkvz, in_proj_ba, the conv over q, k and v, dt_bias,
    A_log, the 128-wide gated norm, out_proj."""
    key, value = key_heads * 128, value_heads * 128
    return ((2 * key + 2 * value) * h + 2 * value_heads * h + (2 * key + value) * 4 + value_heads + value_heads + 128
            + h * value)


def gated_attention(h: int, *, query_heads: int, kv_heads: int) -> int:
    """One Qwen3.5 gated attention of 256-wide heads: q with its gate, k, v, o, and the q and k norms."""
    return 2 * query_heads * 256 * h + 2 * (kv_heads * 256 * h) + h * query_heads * 256 + 2 * 256


def qwen3_5_vision(h: int) -> int:
    """transformers' default Qwen3.5 vision tower (27 blocks of 1,152, MLP 4,304), merged 2 x 2 into width h."""
    v, inner, merged = 1152, 4304, 4 * 1152
    block = (3 * v * v + 3 * v) + (v * v + v) + (inner * v + inner) + (v * inner + v) + 4 * v
    return 27 * block + (v * 3 * 2 * 16 * 16 + v) + 2304 * v + 2 * v + (merged * merged + merged) + (h * merged + h)


def recurrent_states_at_tp1(spec) -> list[int]:
    """Each recurrent layer's per-request state in bytes, at TP 1 and a 16-bit model dtype."""
    return [mamba_state_bytes(layer, tensor_parallel_size=1, model_dtype_bytes=2)
            for layer in spec.layers if layer.kind == "mamba"]


def assert_recurrent_layout(spec, *, layers: int, state: int, kv_bytes_per_token: int, block_size: int,
                            bytes_per_block: int | None = None) -> None:
    """Per-request state (the same in each of ``layers`` recurrent layers) and the KV layout at block size 16."""
    states = recurrent_states_at_tp1(spec)
    assert len(states) == layers and set(states) == {state}
    layout = plan_kv_cache(spec, block_size=16, kv_cache_dtype="auto", model_dtype_bytes=2)
    assert (layout.kv_bytes_per_token, layout.block_size) == (kv_bytes_per_token, block_size)
    if bytes_per_block is not None:
        assert layout.bytes_per_block == bytes_per_block


class TestKimiLinear48BPreset:
    """moonshotai/Kimi-Linear-48B-A3B-Instruct, its config.json verbatim: 27 layers, KDA (32 heads x 128, kernel 4)
    at 20 of them, MLA (latent 512 + rope 64, q without LoRA) at 4, 8, ..., 24 and 27 (1-based); a dense MLP of
    9,216 in layer 0, then 256 experts of 1,024 (8 routed) and one shared expert."""

    def spec(self):
        return build_model_spec(preset("moonshotai__Kimi-Linear-48B-A3B-Instruct"),
                                 "moonshotai/Kimi-Linear-48B-A3B-Instruct")

    def test_weights_match_the_published_tensors_and_the_model_card(self):
        hidden, width, vocab = 2304, 32 * 128, 163840
        kda = (3 * width * hidden  # q, k, v
               + 3 * width * 4  # q_conv1d, k_conv1d, v_conv1d (float32 in vLLM)
               + 32 * hidden  # b_proj
               + 2 * (128 * hidden + width * 128)  # f_a / f_b and g_a / g_b
               + width + 32 + 128  # dt_bias, A_log, o_norm over one head
               + hidden * width)  # o_proj
        mla = 32 * 192 * hidden + 576 * hidden + 512 + 32 * 256 * 512 + hidden * 32 * 128  # q, kv_a, norm, kv_b, o
        moe = 256 * hidden + 256 + 256 * 3 * 1024 * hidden + 3 * 1024 * hidden  # router + bias, experts, shared
        total = 2 * vocab * hidden + hidden + 27 * 2 * hidden + 20 * kda + 7 * mla + 3 * 9216 * hidden + 26 * moe
        # The checkpoint's safetensors hold 49,122,681,728 parameters (a public model report listing its 20,493
        # tensors); vLLM 0.32's KimiLinearForCausalLM builds the same tensors.
        spec = self.spec()
        assert spec.known_architecture and spec.num_params == total == 49_122_681_728
        assert (spec.moe.experts_per_token, spec.moe.num_shared_experts) == (8, 1)
        # Model card (MoonshotAI/Kimi-Linear README): "48B" total, "3B" activated, both without the embeddings.
        embeddings = 2 * vocab * hidden
        assert round((total - embeddings) / 1e9) == 48
        assert round((total - embeddings - 26 * 248 * 3 * 1024 * hidden) / 1e9) == 3

    def test_kv_and_per_request_state(self):
        spec = self.spec()
        # KDA: conv 3 x 4,096 x 3 taps x 2 B = 73,728 + state 32 x 128 x 128 x 4 B = 2,097,152, per layer.
        states = recurrent_states_at_tp1(spec)
        assert len(states) == 20 and set(states) == {2_170_880}
        assert sum(states) == 43_417_600  # per request
        layout = plan_kv_cache(spec, block_size=16, kv_cache_dtype="auto", model_dtype_bytes=2)
        assert layout.kv_bytes_per_token == 7 * (512 + 64) * 2 == 8064
        assert layout.block_size == 128 * math.ceil(2_170_880 / (128 * 1152)) == 1920


class TestQwen35_397BPreset:
    """Qwen/Qwen3.5-397B-A17B, its config.json verbatim (as ai-dynamo/aiconfigurator vendors it,
    src/aiconfigurator/model_configs/Qwen--Qwen3.5-397B-A17B_config.json): 60 layers, every 4th gated attention
    (2 KV heads x 256), gated delta nets with 16 key and 64 value heads of 128; 512 experts of 1,024 (10 routed)
    and a shared expert of 1,024 in every layer; the Qwen3.5 vision tower (27 blocks of 1,152)."""

    def spec(self):
        return build_model_spec(preset("Qwen__Qwen3.5-397B-A17B"), "Qwen/Qwen3.5-397B-A17B")

    def test_weights_match_the_model_card(self):
        h, vocab = 4096, 248320
        gdn = gated_delta_net(h, key_heads=16, value_heads=64)
        attention = gated_attention(h, query_heads=32, kv_heads=2)
        moe = 512 * h + 512 * 3 * 1024 * h + 3 * 1024 * h + h  # router, experts, shared expert and its gate
        text = 2 * vocab * h + h + 60 * (2 * h + moe) + 45 * gdn + 15 * attention
        vision = qwen3_5_vision(h)
        assert self.spec().num_params == text + vision == 396_802_360_816
        # Model card: "Number of Parameters: 397B in total and 17B activated" (the MTP layer vLLM skips is not in
        # either); the activated figure is the language model's: 17.35B (17.81B with the vision tower).
        assert round((text + vision) / 1e9) == 397
        assert round((text - 60 * 502 * 3 * 1024 * h) / 1e9) == 17

    def test_kv_and_per_request_state(self):
        spec = self.spec()
        # No mamba_ssm_dtype in this config: the state follows the model dtype (bf16). Conv (2 x 2,048 + 8,192)
        # x 3 taps x 2 B = 73,728; temporal 64 x 128 x 128 x 2 B = 2,097,152.
        # 45 x 2,170,880 = 97,689,600 B per request; KV 15 x 2 x 256 x 2 x 2 B; block 16 x ceil(2,170,880 / (16 x
        # 2,048)) tokens; 3 recurrent groups and 1 attention group of 15 layers
        assert_recurrent_layout(spec, layers=45, state=2_170_880, kv_bytes_per_token=30720, block_size=1072,
                                bytes_per_block=15 * 1072 * 2048)


class TestQwen35_27BPreset:
    """Qwen/Qwen3.5-27B, its config.json verbatim as NVIDIA's aiconfigurator_core 0.12.0 wheel on PyPI vendors it
    (aiconfigurator_core/model_configs/Qwen--Qwen3.5-27B_config.json): 64 layers, every 4th gated attention (24 query
    and 4 KV heads x 256), gated delta nets with 16 key and 48 value heads of 128, a dense MLP of 17,408, a float32
    SSM state (mamba_ssm_dtype); the Qwen3.5 vision tower (27 blocks of 1,152)."""

    def spec(self):
        return build_model_spec(preset("Qwen__Qwen3.5-27B"), "Qwen/Qwen3.5-27B")

    def test_weights_match_the_model_card(self):
        h = 5120
        gdn = gated_delta_net(h, key_heads=16, value_heads=48)
        attention = gated_attention(h, query_heads=24, kv_heads=4)
        text = 2 * 248320 * h + h + 64 * (2 * h + 3 * 17408 * h) + 48 * gdn + 16 * attention
        vision = qwen3_5_vision(h)
        # The same figure as the Qwen3.5-27B-shaped config of test_qwen3_5_weights_with_its_vision_tower (transformers'
        # own model on the meta device): this exact config has that shape.
        assert self.spec().num_params == text + vision == 27_356_728_560
        # Model card: "Number of Parameters: 27B" (the MTP layer vLLM skips is not in it).
        assert round((text + vision) / 1e9) == 27

    def test_kv_and_per_request_state(self):
        spec = self.spec()
        # Conv (2 x 2,048 + 6,144) x 3 taps x 2 B = 61,440; temporal 48 x 128 x 128 x 4 B (float32) = 3,145,728.
        # 48 x 3,207,168 = 153,944,064 B per request; KV 16 x 2 x 4 x 256 x 2 B; 3,207,168 B over a 16 x 4,096 B
        # attention page: 49 pages, the 784-token block a real Qwen3.8-27B start logs; 3 recurrent groups and 1
        # attention group of 16 layers
        assert_recurrent_layout(spec, layers=48, state=3_207_168, kv_bytes_per_token=65536, block_size=784,
                                bytes_per_block=16 * 784 * 4096)


class TestQwen35_35BA3BPreset:
    """Qwen/Qwen3.5-35B-A3B, its config.json verbatim as NVIDIA's aiconfigurator_core 0.12.0 wheel on PyPI vendors it
    (aiconfigurator_core/model_configs/Qwen--Qwen3.5-35B-A3B_config.json): 40 layers, every 4th gated attention
    (16 query and 2 KV heads x 256), gated delta nets with 16 key and 32 value heads of 128, a float32 SSM state;
    256 experts of 512 (8 routed) and a shared expert of 512 in every layer; the Qwen3.5 vision tower."""

    def spec(self):
        return build_model_spec(preset("Qwen__Qwen3.5-35B-A3B"), "Qwen/Qwen3.5-35B-A3B")

    def test_weights_match_the_model_card(self):
        h, vocab = 2048, 248320
        gdn = gated_delta_net(h, key_heads=16, value_heads=32)
        attention = gated_attention(h, query_heads=16, kv_heads=2)
        moe = 256 * h + 256 * 3 * 512 * h + 3 * 512 * h + h  # router, experts, shared expert and its gate
        text = 2 * vocab * h + h + 40 * (2 * h + moe) + 30 * gdn + 10 * attention
        vision = qwen3_5_vision(h)
        assert self.spec().num_params == text + vision == 35_107_181_936
        # Model card: "Number of Parameters: 35B in total and 3B activated" (the activated figure the language
        # model's: 3.45B with 8 of 256 experts).
        assert round((text + vision) / 1e9) == 35
        assert round((text - 40 * 248 * 3 * 512 * h) / 1e9) == 3

    def test_kv_and_per_request_state(self):
        spec = self.spec()
        # Conv (2 x 2,048 + 4,096) x 3 taps x 2 B = 49,152; temporal 32 x 128 x 128 x 4 B (float32) = 2,097,152.
        # 30 x 2,146,304 = 64,389,120 B per request; KV 10 x 2 x 2 x 256 x 2 B; block 16 x ceil(2,146,304 / (16 x
        # 2,048)) tokens; 3 recurrent groups and 1 attention group of 10 layers
        assert_recurrent_layout(spec, layers=30, state=2_146_304, kv_bytes_per_token=20480, block_size=1056,
                                bytes_per_block=10 * 1056 * 2048)


class TestNemotronH56BPreset:
    """nvidia/Nemotron-H-56B-Base-8K, its config.json verbatim as NVIDIA's aiconfigurator_core 0.12.0 wheel on PyPI
    vendors it (aiconfigurator_core/model_configs/nvidia--Nemotron-H-56B-Base-8K_config.json), "time_step_limit":
    [0.0, Infinity] included: 118 layers by hybrid_override_pattern, 54 Mamba2 (256 heads x 64, 8 groups, state 256,
    kernel 4), 10 attention (64 query and 8 KV heads x 128), 54 squared-ReLU MLPs of 32,768; the LM head untied."""

    def spec(self):
        return build_model_spec(preset("nvidia__Nemotron-H-56B-Base-8K"), "nvidia/Nemotron-H-56B-Base-8K")

    def test_weights_match_the_model_card(self):
        h, inner, heads = 8192, 256 * 64, 256
        conv = inner + 2 * 8 * 256
        mamba = h * (inner + conv + heads) + conv * 4 + conv + 3 * heads + inner + inner * h  # in_proj .. out_proj
        attention = 64 * 128 * h + 2 * (8 * 128 * h) + h * 64 * 128
        mlp = 2 * h * 32768
        total = 2 * 131072 * h + h + 118 * h + 54 * mamba + 10 * attention + 54 * mlp
        assert self.spec().num_params == total == 56_324_350_464
        # NVIDIA's model card (nvidia/Nemotron-H-56B-Base-8K) gives 56B parameters.
        assert round(total / 1e9) == 56

    def test_kv_and_per_request_state(self):
        spec = self.spec()
        # Conv 20,480 x 3 taps x 2 B = 122,880; temporal 256 x 64 x 256 x 4 B = 16,777,216 (Nemotron-H keeps it
        # in float32).
        states = recurrent_states_at_tp1(spec)
        assert len(states) == 54 and set(states) == {16_900_096}
        assert sum(states) == 912_605_184  # per request
        layout = plan_kv_cache(spec, block_size=16, kv_cache_dtype="auto", model_dtype_bytes=2)
        assert layout.kv_bytes_per_token == 10 * 2 * 8 * 128 * 2 == 40960
        assert layout.block_size == 16 * math.ceil(16_900_096 / (16 * 4096)) == 4128
        # groups as large as the smaller layer kind (10 attention layers): 6 recurrent groups, 1 attention group
        assert layout.bytes_per_block == 10 * 4128 * 4096


class TestNemotron3Nano30BPreset:
    """nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16, its config.json verbatim as NVIDIA's aiconfigurator_core 0.12.0
    wheel on PyPI vendors it (aiconfigurator_core/model_configs/
    nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16_config.json):
    52 layers by hybrid_override_pattern, 23 Mamba2 (64 heads x 64, 8 groups, state 128, a float32
    mamba_ssm_cache_dtype), 6 attention (32 query and 2 KV heads x 128), 23 MoE layers of 128 squared-ReLU experts of
    1,856 (6 routed) behind a router with a float32 correction bias, and a shared expert of 3,712."""

    def spec(self):
        return build_model_spec(preset("nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"),
                                "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")

    def test_weights_match_the_model_card(self):
        h, inner, heads = 2688, 64 * 64, 64
        conv = inner + 2 * 8 * 128
        mamba = h * (inner + conv + heads) + conv * 4 + conv + 3 * heads + inner + inner * h
        attention = 32 * 128 * h + 2 * (2 * 128 * h) + h * 32 * 128
        moe = 128 * h + 128 + 128 * 2 * 1856 * h + 2 * 3712 * h  # router, its bias, experts, shared expert
        total = 2 * 131072 * h + h + 52 * h + 23 * mamba + 6 * attention + 23 * moe
        spec = self.spec()
        assert spec.num_params == total == 31_577_940_288
        # Model card: 31.6B parameters in total, about 3.6B active per token (embeddings included).
        assert round(total / 1e8) == 316
        assert round((total - 23 * (128 - 6) * 2 * 1856 * h) / 1e8) == 36
        moe_spec = spec.moe
        assert (moe_spec.num_moe_layers, moe_spec.experts_per_token, moe_spec.expert_intermediate_size) == (23, 6, 1856)
        assert (moe_spec.num_shared_experts, moe_spec.shared_expert_intermediate_size) == (1, 3712)

    def test_kv_and_per_request_state(self):
        spec = self.spec()
        # Conv 6,144 x 3 taps x 2 B = 36,864; temporal 64 x 64 x 128 x 4 B = 2,097,152.
        states = recurrent_states_at_tp1(spec)
        assert len(states) == 23 and set(states) == {2_134_016}
        assert sum(states) == 49_082_368  # per request
        layout = plan_kv_cache(spec, block_size=16, kv_cache_dtype="auto", model_dtype_bytes=2)
        assert layout.kv_bytes_per_token == 6 * 2 * 2 * 128 * 2 == 6144
        assert layout.block_size == 16 * math.ceil(2_134_016 / (16 * 1024)) == 2096
        assert layout.bytes_per_block == 6 * 2096 * 1024  # groups of 6 (the attention layers): 4 recurrent, 1 attention


def granite_moe_hybrid_total(h: int, *, mamba_heads: int, query_heads: int, kv_heads: int, experts: int,
                             expert_mlp: int, shared_mlp: int) -> int:
    """A Granite 4.0-H MoE hybrid's parameters by hand: 40 layers, 36 Mamba2 (heads x 64, 1 group, state 128, kernel
    4, conv bias) and 4 attention layers (heads x 128, no biases), every layer an MoE beside a shared MLP, vocabulary
    100,352, the LM head tied."""
    inner = mamba_heads * 64
    conv = inner + 2 * 1 * 128
    mamba = h * (inner + conv + mamba_heads) + conv * 4 + conv + 3 * mamba_heads + inner + inner * h  # in_proj .. out
    attention = query_heads * 128 * h + 2 * (kv_heads * 128 * h) + h * query_heads * 128  # q, k, v, o
    moe = experts * h + experts * 3 * expert_mlp * h + 3 * shared_mlp * h  # router, experts (input 2 x, output), shared
    return 100352 * h + h + 40 * (2 * h + moe) + 36 * mamba + 4 * attention


class TestGranite4HSmallPreset:
    """ibm-granite/granite-4.0-h-small, its config.json verbatim as a raw Hub snapshot (the config.json of
    huggingface.co/ibm-granite/granite-4.0-h-small, saved in hlky/dinoml_v2 at commit
    6b8c0acb3a19f77188401b57db6e403aa92534f3,
    agents/plans/transformers/granitemoehybrid/_sources/ibm-granite__granite-4.0-h-small.config.json): 40 layers by
    layer_types, 36 Mamba2 (128 heads x 64, 1 group, state 128, kernel 4, conv bias) and 4 NoPE attention layers
    (32 query and 8 KV heads x 128) at 5, 15, 25 and 35; in every layer 72 experts of 768 (10 routed) beside a shared
    MLP of 1,536; the LM head tied."""

    def spec(self):
        return build_model_spec(preset("ibm-granite__granite-4.0-h-small"), "ibm-granite/granite-4.0-h-small")

    def test_weights_match_the_model_card(self):
        h = 4096
        total = granite_moe_hybrid_total(h, mamba_heads=128, query_heads=32, kv_heads=8, experts=72, expert_mlp=768,
                                         shared_mlp=1536)
        spec = self.spec()
        assert spec.known_architecture and spec.num_params == total == 32_207_337_984
        # Model card: "Granite-4.0-H-Small is a 32B parameter long-context instruct model"; IBM's announcement:
        # 32B total and 9B active (10 of 72 experts, the shared MLP always).
        assert round(total / 1e9) == 32
        assert round((total - 40 * 62 * 3 * 768 * h) / 1e9) == 9

    def test_kv_and_per_request_state(self):
        spec = self.spec()
        # Conv (8,192 + 2 x 128) channels x 3 taps x 2 B = 50,688; temporal 128 x 64 x 128 x 2 B = 2,097,152 (no
        # mamba_ssm_dtype in this config: the model dtype, bf16).
        # Blocks: 16 x ceil(2,147,840 / (16 x 4,096 B of attention page)); groups as large as the smaller layer kind
        # (4 attention layers): 9 recurrent groups, 1 attention group.
        assert_recurrent_layout(spec, layers=36, state=2_147_840, kv_bytes_per_token=4 * 2 * 8 * 128 * 2,
                                block_size=16 * math.ceil(2_147_840 / (16 * 4096)), bytes_per_block=4 * 528 * 4096)


class TestGranite4HMicroBasePreset:
    """ibm-granite/granite-4.0-h-micro-base, its config.json verbatim as a raw Hub snapshot (hlky/dinoml_v2 at commit
    6b8c0acb3a19f77188401b57db6e403aa92534f3, agents/plans/transformers/granitemoehybrid/_sources/
    ibm-granite__granite-4.0-h-micro-base.config.json), the base of granite-4.0-h-micro: 40 layers, 36 Mamba2
    (64 heads x 64, 1 group, state 128) and 4 NoPE attention layers (32 query and 8 KV heads x 64) at 5, 15, 25 and
    35; no experts (num_local_experts 0, num_experts_per_tok 0), only the shared MLP of 8,192; the LM head tied."""

    def test_its_exact_text_is_accepted(self):
        # Regression: every dense Granite 4.0-H config (h-micro, h-1b, h-350m) writes num_local_experts 0 and
        # num_experts_per_tok 0, and was refused as "num_local_experts = 0 is out of range: an expert count is a
        # whole number from 1 to 65,536", so none of them could be planned.
        text = (PRESETS / "ibm-granite__granite-4.0-h-micro-base.json").read_text(encoding="utf-8")
        config = parse_config_text(text, "config.json")
        assert (config["num_local_experts"], config["num_experts_per_tok"]) == (0, 0)
        assert build_model_spec(config, "ibm-granite/granite-4.0-h-micro-base").moe is None

    def test_weights_match_the_model_card(self):
        h, inner, heads = 2048, 64 * 64, 64
        conv = inner + 2 * 1 * 128
        mamba = h * (inner + conv + heads) + conv * 4 + conv + 3 * heads + inner + inner * h
        attention = 32 * 64 * h + 2 * (8 * 64 * h) + h * 32 * 64
        total = 100352 * h + h + 40 * (2 * h + 3 * 8192 * h) + 36 * mamba + 4 * attention
        spec = build_model_spec(preset("ibm-granite__granite-4.0-h-micro-base"), "ibm-granite/granite-4.0-h-micro-base")
        assert spec.known_architecture and spec.num_params == total == 3_191_396_096
        assert round(total / 1e9) == 3  # model card: a 3B parameter model

    def test_kv_and_per_request_state(self):
        spec = build_model_spec(preset("ibm-granite__granite-4.0-h-micro-base"), "ibm-granite/granite-4.0-h-micro-base")
        # Conv (4,096 + 2 x 128) x 3 taps x 2 B = 26,112; temporal 64 x 64 x 128 x 2 B = 1,048,576.
        assert_recurrent_layout(spec, layers=36, state=1_074_688, kv_bytes_per_token=4 * 2 * 8 * 64 * 2,
                                block_size=16 * math.ceil(1_074_688 / (16 * 2048)), bytes_per_block=4 * 528 * 2048)


class TestGranite4HNanoPresets:
    """ibm-granite/granite-4.0-h-1b and -h-350m (the Granite 4.0 Nano hybrids), their config.json verbatim as raw Hub
    snapshots (hlky/dinoml_v2 at commit 6b8c0acb3a19f77188401b57db6e403aa92534f3, agents/plans/transformers/
    granitemoehybrid/_sources/ibm-granite__granite-4.0-h-1b.config.json and ...-h-350m.config.json; git blobs
    83f6f9f7 and 35e00a1a, the same as the presets'). Dense like h-micro (num_local_experts 0), NoPE, LM head tied.
    h-1b: 40 layers, 36 Mamba2 (48 heads x 64, 1 group, state 128), attention (12 query, 4 KV heads x 128) at 5, 15,
    25, 35, shared MLP 4,096. h-350m: 32 layers, 28 Mamba2 (48 heads x 32), attention (12 query, 4 KV heads x 64) at
    10, 13, 17, 27, shared MLP 2,048."""

    @staticmethod
    def total(h: int, head_dim: int, mlp: int, layers: int, mamba_layers: int, kv_head_dim: int) -> int:
        heads, inner = 48, 48 * head_dim
        conv = inner + 2 * 1 * 128
        mamba = h * (inner + conv + heads) + conv * 4 + conv + 3 * heads + inner + inner * h  # in_proj .. out_proj
        attention = 12 * kv_head_dim * h + 2 * (4 * kv_head_dim * h) + h * 12 * kv_head_dim  # q, k, v, o
        return (100352 * h + h + layers * (2 * h + 3 * mlp * h) + mamba_layers * mamba
                + (layers - mamba_layers) * attention)

    def test_weights_match_the_model_cards(self):
        total_1b = self.total(1536, 64, 4096, 40, 36, 128)
        spec = build_model_spec(preset("ibm-granite__granite-4.0-h-1b"), "ibm-granite/granite-4.0-h-1b")
        assert spec.known_architecture and spec.moe is None and spec.num_params == total_1b == 1_461_538_368
        total_350m = self.total(768, 32, 2048, 32, 28, 64)
        spec = build_model_spec(preset("ibm-granite__granite-4.0-h-350m"), "ibm-granite/granite-4.0-h-350m")
        assert spec.known_architecture and spec.moe is None and spec.num_params == total_350m == 340_332_224
        # The Granite 4.0 Nano model cards' architecture tables: H 1B "1.5B", H 350M "340M" parameters. The Hub's
        # file list of granite-4.0-h-1b-base (same shapes) gives model.safetensors as 2.92 GB: 2 B x 1.46 billion.
        assert (round(total_1b / 1e9, 1), round(total_350m / 1e6, -1)) == (1.5, 340)

    def test_kv_and_per_request_state(self):
        # h-1b: conv (3,072 + 2 x 128) x 3 taps x 2 B = 19,968; temporal 48 x 64 x 128 x 2 B = 786,432 (bf16, no
        # mamba_ssm_dtype): 806,400 B per Mamba layer; 4 x 2 x 4 x 128 x 2 = 8,192 B of KV per token.
        spec = build_model_spec(preset("ibm-granite__granite-4.0-h-1b"), "ibm-granite/granite-4.0-h-1b")
        assert_recurrent_layout(spec, layers=36, state=806_400, kv_bytes_per_token=4 * 2 * 4 * 128 * 2,
                                block_size=16 * math.ceil(806_400 / (16 * 2048)), bytes_per_block=4 * 400 * 2048)
        # h-350m: conv (1,536 + 2 x 128) x 3 x 2 B = 10,752; temporal 48 x 32 x 128 x 2 B = 393,216: 403,968 B per
        # Mamba layer; 4 x 2 x 4 x 64 x 2 = 4,096 B of KV per token.
        spec = build_model_spec(preset("ibm-granite__granite-4.0-h-350m"), "ibm-granite/granite-4.0-h-350m")
        assert_recurrent_layout(spec, layers=28, state=403_968, kv_bytes_per_token=4 * 2 * 4 * 64 * 2,
                                block_size=16 * math.ceil(403_968 / (16 * 1024)), bytes_per_block=4 * 400 * 1024)


class TestGranite4HTinyPreset:
    """ibm-granite/granite-4.0-h-tiny, its config.json verbatim as a raw Hub download (SujeethJinesh/LatentWire at
    commit 59e44bf8, experimental/hybridkernel/phase0/configs/ibm-granite-4.0-h-tiny.config.json, git blob 8c88003f,
    sha256 bda8fd57... as that repository's setup record lists for the file it fetched from the Hub; its h-small file
    beside it is byte for byte our h-small preset). 40 layers, 36 Mamba2 (48 heads x 64, 1 group, state 128) and 4 NoPE
    attention layers (12 query and 4 KV heads x 128) at 5, 15, 25 and 35; in every layer 64 experts of 512 (6 routed)
    beside a shared MLP of 1,024; the LM head tied."""

    def spec(self):
        return build_model_spec(preset("ibm-granite__granite-4.0-h-tiny"), "ibm-granite/granite-4.0-h-tiny")

    def test_weights_match_the_model_card(self):
        h = 1536
        total = granite_moe_hybrid_total(h, mamba_heads=48, query_heads=12, kv_heads=4, experts=64, expert_mlp=512,
                                         shared_mlp=1024)
        spec = self.spec()
        assert spec.known_architecture and spec.num_params == total == 6_939_037_248
        assert (spec.moe.num_experts, spec.moe.experts_per_token) == (64, 6)
        # Model card: "Granite-4.0-H-Tiny is a 7B parameter long-context instruct model"; IBM's announcement: 7B
        # total, 1B active (6 of 64 experts, the shared MLP always). A bf16 download of revision 791e0d3d lists three
        # shards of 4,924,822,608 + 4,879,018,632 + 4,074,301,016 B: 2 B x the total plus 67,760 B of headers.
        assert round(total / 1e9) == 7 and round((total - 40 * 58 * 3 * 512 * h) / 1e9) == 1
        assert 4_924_822_608 + 4_879_018_632 + 4_074_301_016 - 2 * total == 67_760

    def test_kv_and_per_request_state(self):
        # Conv (3,072 + 2 x 128) channels x 3 taps x 2 B = 19,968; temporal 48 x 64 x 128 x 2 B = 786,432 (bf16, no
        # mamba_ssm_dtype): 806,400 B per Mamba layer; 4 layers x 2 x 4 KV heads x 128 x 2 B = 8,192 B per token.
        assert_recurrent_layout(self.spec(), layers=36, state=806_400, kv_bytes_per_token=4 * 2 * 4 * 128 * 2,
                                block_size=16 * math.ceil(806_400 / (16 * 2048)), bytes_per_block=4 * 400 * 2048)


class TestFalconH1_05BInstructPreset:
    """tiiuae/Falcon-H1-0.5B-Instruct, its config.json byte for byte: 1,584 B whose sha256 (73d036cc...) and git blob
    (12d90a08...) are the ones SujeethJinesh/LatentWire @ 59e44bf8 records for the file of its Hub snapshot
    (experimental/outlier_migrate/phase7/results/om_phase7_falcon_h1_20260512T223600Z/model_provenance.json); the
    bytes were rebuilt from Megatron-Bridge's FALCON_H1_500M_CONFIG and the keys it leaves out (tests/data/configs/
    INDEX.md), and both hashes confirm them.
    36 layers, each with attention (8 query and 2 KV heads x 64, RoPE) and a Mamba2 mixer (mamba_d_ssm 1,536: 24 heads
    x 64, 1 group, state 128, no gated norm) side by side, then a SwiGLU MLP of 2,048; the LM head untied."""

    def spec(self):
        return build_model_spec(preset("tiiuae__Falcon-H1-0.5B-Instruct"), "tiiuae/Falcon-H1-0.5B-Instruct")

    def test_the_preset_is_the_hub_file(self):
        data = (PRESETS / "tiiuae__Falcon-H1-0.5B-Instruct.json").read_bytes()
        assert len(data) == 1584
        assert hashlib.sha256(data).hexdigest() == "73d036cc5e36429ba554c9e6d553571c0042af137e070380818980a7ef02b1ff"
        assert hashlib.sha1(b"blob 1584\0" + data).hexdigest() == "12d90a0816165a2d3af5bd1c4deaa2afddd0a095"

    def test_weights_match_the_checkpoint(self):
        h, inner, heads = 1024, 24 * 64, 24
        conv = inner + 2 * 1 * 128
        mamba = h * (inner + conv + heads) + conv * 4 + conv + 3 * heads + inner * h  # in_proj .. out_proj, no norm
        attention = 8 * 64 * h + 2 * (2 * 64 * h) + h * 8 * 64  # q, k, v, o: no biases
        mlp = 3 * 2048 * h
        total = 2 * 32784 * h + h + 36 * (2 * h + attention + mamba + mlp)
        spec = self.spec()
        assert spec.known_architecture and spec.num_params == total == 521_411_104
        # Model card: 0.5B. The same snapshot's bf16 model.safetensors is 1,042,886,408 B (LatentWire's record):
        # 2 B x the total plus 64,200 B of header for its 579 tensors (16 a layer, the embeddings, LM head, final norm).
        assert round(total / 1e8) == 5
        assert 1_042_886_408 - 2 * total == 64_200

    def test_kv_and_per_request_state(self):
        # Conv (1,536 + 2 x 128) channels x 3 taps x 2 B = 10,752; temporal 24 x 64 x 128 x 2 B = 393,216 (bf16, no
        # mamba_ssm_dtype): 403,968 B per layer's mixer; 36 layers x 2 x 2 KV heads x 64 x 2 B = 18,432 B per token.
        spec = self.spec()
        mixers = [layer.parallel_state for layer in spec.layers if layer.kind == "full"]
        assert len(mixers) == 36 and {mamba_state_bytes(m, tensor_parallel_size=1, model_dtype_bytes=2)
                                      for m in mixers} == {403_968}
        layout = plan_kv_cache(spec, block_size=16, kv_cache_dtype="auto", model_dtype_bytes=2)
        assert layout.kv_bytes_per_token == 36 * 2 * 2 * 64 * 2
        assert layout.block_size == 16 * math.ceil(403_968 / (16 * 512)) == 800
        # Every layer has both caches: one group of the 36 attention layers, one of the 36 Mamba2 states.
        assert [(g.kind, len(g.layer_indices)) for g in layout.groups] == [("full", 36), ("mamba", 36)]
        assert layout.bytes_per_block == 36 * 800 * 512


class TestLfm2_8BA1BPreset:
    """LiquidAI/LFM2-8B-A1B, its config.json verbatim as a raw Hub snapshot (the config.json of
    huggingface.co/LiquidAI/LFM2-8B-A1B, saved in hlky/dinoml_v2 at commit 6b8c0acb3a19f77188401b57db6e403aa92534f3,
    agents/plans/transformers/lfm2_moe/_sources/LiquidAI_LFM2-8B-A1B_config.json): 24 layers, attention (32 query and
    8 KV heads x 64) at 2, 6, 10, 14, 18 and 21, short convolutions (kernel 3) elsewhere; a SwiGLU of 7,168 in the
    first 2 layers, then 32 experts of 1,792 (4 routed) with a float32 expert bias; no tie_word_embeddings key, so
    Lfm2MoeConfig's default ties the LM head."""

    def spec(self):
        return build_model_spec(preset("LiquidAI__LFM2-8B-A1B"), "LiquidAI/LFM2-8B-A1B")

    def test_weights_match_the_model_card(self):
        h = 2048
        conv = 3 * h * h + h * 3 + h * h  # in_proj to B, C, x; depthwise conv; out_proj
        attention = h * h + 2 * (8 * 64 * h) + h * h + 2 * 64  # q, k, v, out_proj, QK norms
        dense = 3 * 7168 * h
        moe = 32 * h + 32 + 32 * 3 * 1792 * h  # router, expert bias, experts
        total = 65536 * h + h + 24 * 2 * h + 18 * conv + 6 * attention + 2 * dense + 22 * moe
        spec = self.spec()
        assert spec.known_architecture and spec.num_params == total == 8_339_930_560
        assert (spec.moe.num_moe_layers, spec.moe.experts_per_token) == (22, 4)
        # Model card table (as on lmstudio.ai/models/lfm2-24b-a2b): 8.3B total, 1.5B active (1,557,740,992 here).
        assert round(total / 1e8) == 83
        assert 1.5e9 < total - 22 * 28 * 3 * 1792 * h < 1.6e9

    def test_kv_and_per_request_state(self):
        spec = self.spec()
        # The short-conv state: (3 - 1) taps x 2,048 channels x 2 B = 8,192 per conv layer.
        # 8,192 B fit in one 16-token attention page (16 x 2,048 B): the block stays at 16 tokens.
        assert_recurrent_layout(spec, layers=18, state=8192, kv_bytes_per_token=6 * 2 * 8 * 64 * 2, block_size=16)


class TestLfm2_24BA2BPreset:
    """LiquidAI/LFM2-24B-A2B, its config.json verbatim as a raw Hub snapshot (hlky/dinoml_v2 at commit
    6b8c0acb3a19f77188401b57db6e403aa92534f3, agents/plans/transformers/lfm2_moe/_sources/
    LiquidAI_LFM2-24B-A2B_config.json): 40 layers, attention (32 query and 8 KV heads x 64) at every 4th from 2 to 38,
    short convolutions (kernel 3) elsewhere; a SwiGLU of 11,776 in the first 2 layers, then 64 experts of 1,536
    (4 routed) with a float32 expert bias; the LM head tied (Lfm2MoeConfig's default)."""

    def spec(self):
        return build_model_spec(preset("LiquidAI__LFM2-24B-A2B"), "LiquidAI/LFM2-24B-A2B")

    def test_weights_match_the_model_card(self):
        h = 2048
        conv = 3 * h * h + h * 3 + h * h
        attention = h * h + 2 * (8 * 64 * h) + h * h + 2 * 64
        moe = 64 * h + 64 + 64 * 3 * 1536 * h
        total = 65536 * h + h + 40 * 2 * h + 30 * conv + 10 * attention + 2 * 3 * 11776 * h + 38 * moe
        spec = self.spec()
        assert spec.known_architecture and spec.num_params == total == 23_843_661_440
        assert (spec.moe.num_moe_layers, spec.moe.experts_per_token) == (38, 4)
        # Model card table (LFM2-8B-A1B | LFM2-24B-A2B): total parameters 8.3B | 24B, active 1.5B | 2.3B.
        assert round(total / 1e9) == 24
        assert round((total - 38 * 60 * 3 * 1536 * h) / 1e8) == 23

    def test_kv_and_per_request_state(self):
        spec = self.spec()
        # (3 - 1) taps x 2,048 channels x 2 B per conv layer
        assert_recurrent_layout(spec, layers=30, state=2 * 2048 * 2, kv_bytes_per_token=10 * 2 * 8 * 64 * 2,
                                block_size=16)


def test_lfm2_moe_weights_dense_then_routed():
    """An LFM2-8B-A1B-shaped config (Lfm2MoeForCausalLM, vLLM 0.32's lfm2_moe.py): 3 short convolutions as wide as
    hidden_size and one GQA layer; a SwiGLU of intermediate_size (not re-sized) in the first num_dense_layers layers,
    then 4 experts of 128 (2 routed) behind a router with a float32 expert bias; the LM head tied."""
    config = {"architectures": ["Lfm2MoeForCausalLM"], "model_type": "lfm2_moe", "hidden_size": 256,
              "num_hidden_layers": 4, "layer_types": ["conv", "conv", "full_attention", "conv"],
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "intermediate_size": 512,
              "moe_intermediate_size": 128, "num_experts": 4, "num_experts_per_tok": 2, "num_dense_layers": 2,
              "conv_L_cache": 3, "conv_bias": False, "use_expert_bias": True, "norm_eps": 1e-5,
              "max_position_embeddings": 4096, "tie_word_embeddings": True, "dtype": "bfloat16"}
    conv = 3 * 256 * 256 + 256 * 3 + 256 * 256  # in_proj to B, C, x; depthwise conv; out_proj
    attention = 256 * 256 + 2 * (2 * 64 * 256) + 256 * 256 + 2 * 64  # q, k, v, out_proj, QK norms
    dense = 3 * 512 * 256
    moe = 4 * 256 + 4 + 4 * 3 * 128 * 256  # router, expert bias, experts
    total = 1000 * 256 + 256 + 4 * 2 * 256 + 3 * conv + attention + 2 * dense + 2 * moe
    spec = build_model_spec(config, "lfm2-moe-like")
    assert spec.known_architecture and spec.num_params == total == 2_818_696
    assert (spec.moe.num_moe_layers, spec.moe.experts_per_token) == (2, 2)  # num_dense_layers are not MoE layers
    # The conv state is hidden_size wide: (3 - 1) taps x 256 x 2 B.
    assert mamba_state_bytes(spec.layers[0], tensor_parallel_size=1, model_dtype_bytes=2) == 1024


@pytest.mark.parametrize(("model", "pool", "bytes_per_block", "blocks", "state_groups", "align_blocks"), [
    # align_blocks: state blocks a request holds in each recurrent group on 0.32 ("align" mode): the running state and
    # the block-aligned checkpoint, plus a Mamba2 mixer's prefill checkpoint block (mamba_mixer2.py,
    # num_prefill_checkpoint_blocks=1; the tiny Granite 4 / Nemotron-H / Falcon-H1 servers of test_against_vllm.py).
    # Hand figures from each config.json at TP 1, bf16, with a 4 GiB pool (64 MiB for LFM2, whose 21,845 blocks in 4 GiB exceed any max_num_seqs; groups of min(#attention, #recurrent)
    # layers; one attention page grown to the 16-aligned block that holds a recurrent state, times the group size).
    # Qwen3.5-27B: 16 attention + 48 gated delta nets -> groups of 16 (3 recurrent); state 3 x (2 x 16 x 128 +
    # 48 x 128) x 2 B + 48 x 128 x 128 x 4 B (mamba_ssm_dtype float32) = 3,207,168 B; 4,096 B per token -> 784 tokens.
    ("Qwen/Qwen3.5-27B", 4 * GIB, 16 * 784 * 4096, 83, 3, 2),
    # LFM2-1.2B: 6 attention + 10 short convolutions -> groups of 6 (2 conv); conv state 2 x 2048 x 2 B = 8,192 B fits
    # the 16-token attention page of 16 x 2,048 B.
    ("LiquidAI/LFM2-1.2B", 64 * 2**20, 6 * 16 * 2048, 341, 2, 2),
    # Nemotron-3-Nano: 6 attention + 23 Mamba2 (the 23 MoE layers cache nothing) -> groups of 6 (4 recurrent); state
    # 3 x (64 x 64 + 2 x 8 x 128) x 2 B + 64 x 64 x 128 x 4 B (mamba_ssm_cache_dtype float32) = 2,134,016 B; 1,024 B
    # per token -> 2,084 tokens, 2,096 aligned.
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 4 * GIB, 6 * 2096 * 1024, 333, 4, 3),
    # granite-4.0-h-small: 4 attention + 36 Mamba2 -> groups of 4 (9 recurrent); state 3 x (2 x 4096 + 2 x 128) x 2 B
    # + 128 x 64 x 128 x 2 B = 2,147,840 B; 4,096 B per token -> 525 tokens, 528 aligned.
    ("ibm-granite/granite-4.0-h-small", 4 * GIB, 4 * 528 * 4096, 496, 9, 3),
    # granite-4.0-h-1b: 4 attention + 36 Mamba2 -> groups of 4 (9 recurrent); state 3 x (3072 + 2 x 128) x 2 B
    # + 48 x 64 x 128 x 2 B = 806,400 B; 2,048 B per token -> 393.75 tokens, 400 aligned.
    ("ibm-granite/granite-4.0-h-1b", 4 * GIB, 4 * 400 * 2048, 1310, 9, 3),
    # granite-4.0-h-350m: 4 attention + 28 Mamba2 -> groups of 4 (7 recurrent); state 3 x (1536 + 2 x 128) x 2 B
    # + 48 x 32 x 128 x 2 B = 403,968 B; 1,024 B per token -> 394.5 tokens, 400 aligned.
    ("ibm-granite/granite-4.0-h-350m", 4 * GIB, 4 * 400 * 1024, 2621, 7, 3),
    # granite-4.0-h-tiny: the Mamba and attention shapes of h-1b (its 64 experts cache nothing): groups of 4
    # (9 recurrent); 806,400 B of state; 2,048 B per token -> 393.75 tokens, 400 aligned.
    ("ibm-granite/granite-4.0-h-tiny", 4 * GIB, 4 * 400 * 2048, 1310, 9, 3),
    # Falcon-H1-0.5B-Instruct: attention and Mamba2 in each of 36 layers -> one group of each (1 recurrent); state
    # 3 x (1536 + 2 x 128) x 2 B + 24 x 64 x 128 x 2 B = 403,968 B; 512 B per token and layer -> 789 tokens, 800 aligned.
    ("tiiuae/Falcon-H1-0.5B-Instruct", 4 * GIB, 36 * 800 * 512, 291, 1, 3),
])
def test_state_slots_of_each_hybrid_family_by_hand(model, pool, bytes_per_block, blocks, state_groups,
                                                   align_blocks):
    """Issue 27 item 2 audit: sequence slots = pool blocks // (recurrent groups x state blocks per request), and
    vLLM 0.20+'s refusal compares max_num_seqs with all the pool's blocks (compilation.py, same text 0.28-0.32)."""
    assert pool // bytes_per_block == blocks
    # align mode (prefix caching on by default) from 0.28; 0.30 has no Mamba2 prefill checkpoint block yet
    for version, per_group in (("0.32.0", align_blocks), ("0.30.0", 2), ("0.27.0", 1)):
        result = estimate(Scenario(model=model, gpu="H100", max_model_len=2048, kv_cache_memory_bytes=pool,
                                   max_num_seqs=blocks, vllm_version=version))
        assert (result.layout.bytes_per_block, result.capacity.num_gpu_blocks) == (bytes_per_block, blocks)
        assert result.state_slots == blocks // (state_groups * per_group)
        assert result.fits
    refused = estimate(Scenario(model=model, gpu="H100", max_model_len=2048, kv_cache_memory_bytes=pool,
                                max_num_seqs=blocks + 1, vllm_version="0.32.0"))
    assert not refused.fits
    assert f"max_num_seqs ({blocks + 1}) exceeds available Mamba cache blocks ({blocks})" in refused.error
