"""Our prediction vs what real vLLM 0.32.0 CPU servers reported in ``vllm:cache_config_info``.

The expected numbers were printed by real servers (``shared/research/vllm-on-cpu.md``, appendix table:
tiny random models, ``VLLM_CPU_KVCACHE_SPACE=1``). ``test_against_vllm.py`` repeats this live.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from calculator import Scenario, estimate
from calculator.engine.uncertainty import verdict
from calculator.units import GIB

TINY = Path(__file__).parent / "data" / "tiny-configs"

# (config, max_model_len, extra settings) -> (num_gpu_blocks, kv_cache_size_tokens, kv_cache_max_concurrency)
SERVER_RECORDS = [
    ("tiny-llama", 1000, {}, (8192, 1_024_000, 1024.0)),
    ("tiny-llama", 2048, {}, (8192, 1_048_576, 512.0)),
    ("tiny-llama", 1000, {"block_size": 96}, (10922, 992_909, 992.9090909090909)),
    ("tiny-llama", 1000, {"block_size": 16}, (65536, 1_040_253, 1040.2539682539682)),  # planner line, then died
    ("tiny-llama", 1000, {"kv_cache_dtype": "fp8"}, (32768, 4_096_000, 4096.0)),
    ("tiny-qwen3", 1000, {}, (4096, 512_000, 512.0)),
    ("tiny-mistral", 1000, {}, (8192, 910_222, 910.2222222222222)),
    ("tiny-mistral", 2048, {}, (8192, 986_895, 481.88235294117646)),
    ("tiny-mistral", 4096, {}, (8192, 1_766_022, 431.1578947368421)),
    ("tiny-mistral", 2048, {"max_num_batched_tokens": 512}, (8192, 2_396_745, 1170.2857142857142)),
    ("tiny-gemma2", 1000, {}, (8192, 481_882, 481.88235294117646)),
    ("tiny-gemma3", 1000, {}, (16384, 309_132, 309.1320754716981)),
    ("tiny-gemma3", 2048, {}, (16384, 332_222, 162.21782178217822)),
    ("tiny-gptoss", 1000, {}, (4096, 240_941, 240.94117647058823)),
    ("tiny-gptoss", 2048, {}, (4096, 254_200, 124.12121212121212)),
    ("tiny-deepseekv2", 1000, {"dtype": "bfloat16"}, (6553, 819_125, 819.125)),
    ("tiny-mixtral", 1000, {}, (8192, 1_024_000, 1024.0)),
    ("tiny-qwen2moe", 1000, {}, (8192, 1_024_000, 1024.0)),
    ("tiny-phi3", 1000, {}, (4096, 512_000, 512.0)),
    ("tiny-opt", 1000, {}, (4096, 512_000, 512.0)),
]


@pytest.mark.parametrize(("config", "max_model_len", "extra", "expected"), SERVER_RECORDS,
                         ids=[f"{c}-{n}-{'-'.join(f'{k}={v}' for k, v in e.items())}" for c, n, e, _ in SERVER_RECORDS])
def test_prediction_equals_what_the_server_reported(config, max_model_len, extra, expected):
    scenario = Scenario(model=str(TINY / f"{config}.config.json"), gpu=None, device="cpu", vllm_version="0.32.0",
                        kv_cache_memory_bytes=GIB, max_model_len=max_model_len,
                        **{"dtype": "float32", **extra})
    result = estimate(scenario)
    blocks, tokens, concurrency = expected
    assert result.capacity.num_gpu_blocks == blocks
    assert result.capacity.kv_cache_tokens == tokens
    assert result.capacity.max_concurrency == pytest.approx(concurrency, rel=1e-12)


def test_eight_blocks_cannot_hold_1024_tokens_and_vllm_estimates_896():
    # Real server: `--max-model-len 1024 --num-gpu-blocks-override 8` refused: "estimated maximum model length is 896".
    result = estimate(Scenario(model=str(TINY / "tiny-llama.config.json"), gpu=None, device="cpu",
                               vllm_version="0.32.0", kv_cache_memory_bytes=GIB, max_model_len=1024,
                               dtype="float32", num_gpu_blocks_override=8))
    assert not result.fits
    assert result.max_fitting_model_len == 896
    assert "the estimated maximum model length is 896" in result.error


# What real servers of other versions reported (vllm:cache_config_info; for 0.19.1, whose labels have no token
# figures, its log lines), same settings. Source: tests/test_against_vllm.py and benchmarks/version_matrix.py runs.
# (version, config, extra settings) -> (block_size, num_gpu_blocks, kv_cache_size_tokens, kv_cache_max_concurrency)
VERSION_RECORDS = [
    # 0.25-0.29: the sliding window gets the CPU kernel's smallest block, 16 (MultipleOf(16)) ...
    ("0.28.0", "tiny-mistral", {}, (16, 65536, 1_024_000, 1024.0)),
    ("0.28.0", "tiny-mistral", {"block_size": 128}, (16, 65536, 1_024_000, 1024.0)),  # issue 11's measurement
    ("0.28.0", "tiny-llama", {"block_size": 16}, (16, 65536, 1_040_253, 1040.2539682539682)),
    ("0.28.0", "tiny-gemma3", {}, (128, 16384, 309_132, 309.1320754716981)),
    ("0.28.0", "tiny-gptoss", {}, (128, 4096, 240_941, 240.94117647058823)),
    # ... then 32 (MultipleOf(32)) ...
    ("0.29.0", "tiny-mistral", {}, (32, 32768, 992_969, 992.9696969696969)),
    # ... and from 0.30 the primary block again.
    ("0.30.0", "tiny-mistral", {}, (128, 8192, 910_222, 910.2222222222222)),
    # 0.19.1 logged "GPU KV cache size: 1,048,576 tokens" / "Maximum concurrency for 1,000 tokens per request: 910.22x"
    ("0.19.1", "tiny-mistral", {}, (128, 8192, 1_048_576, 910.22)),
]


def _record_id(version: str, config: str, extra: dict) -> str:
    return "-".join([version, config, *(f"{key}={value}" for key, value in extra.items())])


@pytest.mark.parametrize(("version", "config", "extra", "expected"), VERSION_RECORDS,
                         ids=[_record_id(*record[:3]) for record in VERSION_RECORDS])
def test_prediction_equals_what_servers_of_other_versions_reported(version, config, extra, expected):
    result = estimate(Scenario(model=str(TINY / f"{config}.config.json"), gpu=None, device="cpu",
                               vllm_version=version, kv_cache_memory_bytes=GIB, max_model_len=1000,
                               **{"dtype": "float32", **extra}))
    block, blocks, tokens, concurrency = expected
    assert (result.layout.block_size, result.capacity.num_gpu_blocks, result.capacity.kv_cache_tokens) == (
        block, blocks, tokens)
    assert result.capacity.max_concurrency == pytest.approx(concurrency, rel=1e-12 if version != "0.19.1" else 5e-5)


MNBT_ERROR = ("max_num_batched_tokens (512) is smaller than max_model_len (2048). This effectively limits the maximum "
              "sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
              "max_num_batched_tokens or decrease max_model_len.")
# What real servers of versions outside CI refused to serve, in their own words (benchmarks/version_matrix.py runs;
# the same table is in docs/accuracy.md). (version, config, settings) -> the error in the server's log
REFUSAL_RECORDS = [
    # 0.10.2: V1 rejects sliding window (and any --kv-cache-dtype) on CPU and the CPU platform has no V0 any more.
    ("0.10.2", "tiny-mistral", {}, "CPU backend only supports V1."),
    ("0.10.2", "tiny-gemma2", {}, "CPU backend only supports V1."),
    ("0.10.2", "tiny-gptoss", {}, "CPU backend only supports V1."),
    ("0.10.2", "tiny-llama", {"kv_cache_dtype": "fp8"}, "CPU backend only supports V1."),
    ("0.10.2", "tiny-gemma3", {}, "assert config.tie_word_embeddings"),  # models/gemma3.py, before the attention
    ("0.10.2", "tiny-deepseekv2", {"dtype": "bfloat16"}, "MLA is not supported on CPU."),
    ("0.10.2", "tiny-llama", {"block_size": 96},
     "argument --block-size: invalid choice: 96 (choose from 1, 8, 16, 32, 64, 128)"),
    ("0.10.2", "tiny-mistral", {"max_model_len": 2048, "max_num_batched_tokens": 512}, MNBT_ERROR),  # V0
    # 0.8.5: V0 on CPU, a plain install without IPEX.
    ("0.8.5", "tiny-mixtral", {}, "No module named 'intel_extension_for_pytorch'"),
    ("0.8.5", "tiny-qwen2moe", {}, "No module named 'intel_extension_for_pytorch'"),
    ("0.8.5", "tiny-llama", {"kv_cache_dtype": "fp8"},
     "Torch SDPA backend FP8 KV cache requires intel_extension_for_pytorch support."),
    ("0.8.5", "tiny-gemma3", {}, "assert config.tie_word_embeddings"),
    ("0.8.5", "tiny-mistral", {"max_model_len": 2048, "max_num_batched_tokens": 512}, MNBT_ERROR),
    # 0.19.1: V1 on CPU.
    ("0.19.1", "tiny-deepseekv2", {"dtype": "bfloat16"}, "MLA is not supported on CPU."),
    ("0.19.1", "tiny-llama", {"kv_cache_dtype": "fp8"},
     "Chunked-prefill and prefix-cache on the CPU backend is not compatible with FP8 KV cache."),
]


@pytest.mark.parametrize(("version", "config", "extra", "refusal"), REFUSAL_RECORDS,
                         ids=[_record_id(*record[:3]) for record in REFUSAL_RECORDS])
def test_we_say_does_not_run_where_servers_of_other_versions_refused(version, config, extra, refusal):
    result = estimate(Scenario(model=str(TINY / f"{config}.config.json"), gpu=None, device="cpu",
                               vllm_version=version, kv_cache_memory_bytes=GIB,
                               **{"max_model_len": 1000, "dtype": "float32", **extra}))
    assert verdict(result) == "does not run"
    assert result.refusal == refusal
