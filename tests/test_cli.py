"""The CLI contract: flags named like `vllm serve`, one JSON object with --json, exit 2 on bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONTRACT_KEYS = {"num_params", "weights_bytes", "activation_bytes", "non_torch_bytes", "cudagraph_bytes",
                 "kv_cache_bytes", "kv_bytes_per_token", "block_size", "num_gpu_blocks", "kv_cache_tokens",
                 "max_concurrency", "max_model_len", "max_fitting_model_len", "fits", "vllm_version", "warnings",
                 "kv_cache_bytes_low", "kv_cache_bytes_high", "kv_cache_tokens_low", "kv_cache_tokens_high", "verdict"}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # the Hub is out of reach here; make that deterministic
    return subprocess.run([sys.executable, "-m", "calculator", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def test_json_has_the_contract_keys_and_exact_kv_figures():
    done = run_cli("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "NVIDIA H100 80GB HBM3",
                   "--kv-cache-memory-bytes", "60G", "--vllm-version", "0.34.0", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert CONTRACT_KEYS <= set(result)
    assert result["num_params"] == 8_030_261_248
    assert (result["num_gpu_blocks"], result["kv_cache_tokens"], result["max_concurrency"]) == (7680, 491_520, 3.75)
    assert result["kv_bytes_per_token"] == 131_072 and result["block_size"] == 64


def test_exit_zero_when_it_does_not_fit():
    done = run_cli("estimate", "--model", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "l4", "--json")
    assert done.returncode == 0
    assert json.loads(done.stdout)["fits"] is False


def test_readable_table_without_json():
    done = run_cli("estimate", "--model", "Qwen/Qwen3-8B", "--gpu", "a100-sxm-80gb", "--max-model-len", "32768")
    assert done.returncode == 0
    assert "KV cache" in done.stdout and "vLLM would log" in done.stdout


@pytest.mark.parametrize("args", [
    ("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h1000"),
    ("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-utilization", "1.5"),
    ("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "3"),
    ("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--kv-cache-dtype", "int3"),
    ("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "lots"),
    ("estimate", "--model", "no-such-org/no-such-model"),
    ("estimate", "--model", "/nonexistent/config.json"),
    ("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--vllm-version", "banana"),
])
def test_bad_input_exits_2_with_one_line(args):
    done = run_cli(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:")


def test_console_script_is_declared():
    assert 'vllm-capacity-planner = "calculator.cli:main"' in (REPO / "pyproject.toml").read_text()
