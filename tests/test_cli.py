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


def test_weights_past_the_gpu_lead_the_table_and_fail_at_load_not_at_the_kv_sizing():
    # Qwen3-30B-A3B: 30,532,122,624 parameters x 2 B = 56.87 GiB of bf16 weights; an L40S reports 44.39 GiB. vLLM never
    # reaches "No available memory for the cache blocks": torch's allocator raises while the checkpoint loads.
    done = run_cli("estimate", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "l40s")
    assert done.returncode == 0, done.stderr
    rows = dict(line.split(None, 1) for line in done.stdout.splitlines() if line.startswith(("verdict", "fits")))
    assert rows["verdict"] == "Does not fit: the weights alone (56.87 GiB per GPU) exceed the GPU (44.39 GiB)."
    assert rows["fits"] == ("NO — CUDA out of memory while loading the weights (torch.OutOfMemoryError): 56.87 GiB "
                            "per GPU do not fit in the GPU's 44.39 GiB, so vLLM stops before it sizes the KV cache.")


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


def assert_one_line_refusal(done: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2 and done.stdout == "", done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


LLAMA = REPO / "calculator" / "data" / "presets" / "meta-llama__Llama-3.1-8B-Instruct.json"


@pytest.mark.parametrize(("mutate", "named"), [
    # issue 10 item 5's reproducers: each printed a 19-31-line traceback and exit 1
    (lambda text: text.replace('"architectures": [', '"architectures": 1.5, "x": ['), "architectures"),
    (lambda text: "[" * 1000, "nested too deeply"),
    (lambda text: text.replace('"bos_token_id"', '"bos_token_\xff_id"'), "not UTF-8"),
    (lambda text: text.replace('"hidden_act"', '"sliding_window": Infinity, "hidden_act"'), "sliding_window = inf"),
    (lambda text: text.replace('"hidden_act"', '"head_dim": 0, "hidden_act"'), "head_dim = 0"),
    (lambda text: text.replace('"num_attention_heads": 32', '"num_attention_heads": 1e18'), "num_attention_heads"),
    (lambda text: text.replace('"num_hidden_layers": 32', '"num_hidden_layers": 1000000000'), "num_hidden_layers"),
    (lambda text: text.replace('"num_key_value_heads": 8', '"num_key_value_heads": -1'), "num_key_value_heads"),
])
def test_hostile_config_files_exit_2_with_one_line_naming_the_field(tmp_path, mutate, named):
    path = tmp_path / "config.json"
    text = mutate(LLAMA.read_text())
    path.write_bytes(text.encode("latin-1") if "\xff" in text else text.encode())
    assert_one_line_refusal(run_cli("estimate", "--model", str(path)), named)


@pytest.mark.parametrize(("args", "named"), [
    # issue 10 item 6: each printed a traceback
    (("--max-model-len", "inf"), "--max-model-len: not a size: 'inf'"),
    (("--kv-cache-memory-bytes", "inf"), "--kv-cache-memory-bytes: not a size"),
    (("--max-num-batched-tokens", "1e400"), "--max-num-batched-tokens: not a size: '1e400'"),
    # vLLM's human_readable_int has no exponents: `vllm serve --kv-cache-memory-bytes 1e30` is an argparse error too
    (("--kv-cache-memory-bytes", "1e30"), "not a size: '1e30'"),
    (("--kv-cache-memory-bytes", "1.5G"), "decimals are not allowed with binary suffixes like G"),
    (("--max-model-len", "1000000000"), "--max-model-len: Input should be less than or equal to 100000000"),
    (("--num-gpu-blocks-override", "99999999999999999999999"), "--num-gpu-blocks-override: Input should be less"),
    (("--vllm-version", "99.0"), "vLLM 99.0 is not a vLLM release"),
    (("--vllm-version", "1e20.0"), "not a vLLM version: '1e20.0'"),
    (("--vllm-version", "0.34.0garbage"), "not a vLLM version"),
    (("--gpu-memory-utilization", "nan"), "--gpu-memory-utilization"),
    (("--gpu-memory-gib", "inf"), "--gpu-memory-gib"),
    (("--dtype", "x" * 500), "--dtype: String should have at most 64 characters"),
])
def test_absurd_flags_exit_2_with_one_line(args, named):
    assert_one_line_refusal(run_cli("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", *args), named)


@pytest.mark.parametrize(("model", "named"), [
    ("a" * 300, "is not a valid Hub model id"),
    ("org/" + "b" * 300, "is not a valid Hub model id"),
    ("/" + "a" * 300 + ".json", "cannot read /aaaa"),
    ("./" + "c" * 5000, "--model: String should have at most 1024 characters"),
])
def test_a_model_name_too_long_for_the_file_system_is_one_line(model, named):
    # NOTE: before the fix, Path.is_dir() raised OSError "File name too long" out of load_config.
    assert_one_line_refusal(run_cli("estimate", "--model", model), named)


def test_a_kv_pool_larger_than_the_device_does_not_fit():
    # 10**15 B = 931,322.57 GiB on an 80 GB H100: vLLM's allocation fails (CUDA out of memory); it said "fits".
    done = run_cli("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--kv-cache-memory-bytes",
                   "1000000000000000", "--json")
    result = json.loads(done.stdout)
    assert done.returncode == 0 and result["fits"] is False
    assert result["error"].startswith("--kv-cache-memory-bytes asks for a 931,322.57 GiB KV cache")


def test_a_block_override_larger_than_the_device_does_not_fit():
    # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x (K+V) x 2 B = 131,072 B per token; 64-token blocks (0.34) = 8 MiB;
    # 10**12 blocks x 8 MiB = 7,812,500,000 GiB.
    done = run_cli("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--num-gpu-blocks-override",
                   "1000000000000", "--vllm-version", "0.34.0", "--json")
    result = json.loads(done.stdout)
    assert result["fits"] is False
    assert result["error"].startswith("--num-gpu-blocks-override asks for a 7,812,500,000.00 GiB KV cache")


@pytest.mark.parametrize(("version", "named"), [
    ("0.34.0", "No common block size for 7 (FLASH_ATTN: [MultipleOf(16)])"),
    ("0.10.0", "argument --block-size: invalid choice: 7 (choose from 1, 8, 16, 32, 64, 128)"),
])
def test_block_size_7_is_refused_as_vllm_refuses_it(version, named):
    done = run_cli("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--block-size", "7", "--vllm-version",
                   version, "--json")
    result = json.loads(done.stdout)
    assert result["fits"] is False and named in result["error"]


def test_max_model_len_auto_is_the_models_own_context():
    done = run_cli("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "auto", "--json")
    assert json.loads(done.stdout)["max_model_len"] == 131_072  # max_position_embeddings of Llama 3.1


@pytest.mark.parametrize("version", ["0.35.0", "1.0"])
def test_a_version_newer_than_the_model_says_whose_rules_it_uses(version):
    done = run_cli("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--vllm-version", version, "--json")
    result = json.loads(done.stdout)
    assert result["vllm_version"] == {"0.35.0": "0.35.0", "1.0": "1.0.0"}[version]
    assert any("its figures use vLLM 0.34's rules" in w for w in result["warnings"])
    table = run_cli("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--vllm-version", version)
    assert "warning: vLLM" in table.stdout and "newer than the newest release modelled (0.34)" in table.stdout


def test_the_json_caps_requests_at_once_by_max_num_seqs_and_names_the_limit():
    # Issue 9 item 1: vLLM's "Maximum concurrency" counts KV blocks (3.75 requests of 131,072 tokens fit 491,520
    # tokens of KV cache), but its scheduler never runs more than max_num_seqs sequences.
    args = ("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100-sxm-80gb",
            "--kv-cache-memory-bytes", "60G", "--vllm-version", "0.34.0", "--json")
    free = json.loads(run_cli(*args).stdout)
    assert (free["max_running_requests"], free["max_running_requests_limited_by"]) == (3, "kv_cache")
    capped = json.loads(run_cli(*args, "--max-num-seqs", "2").stdout)
    assert (capped["max_running_requests"], capped["max_running_requests_limited_by"]) == (2, "max_num_seqs")


def test_install_docker_takes_flashinfers_sampler_in_0_11_0():
    base = ("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100-sxm-80gb", "--vllm-version",
            "0.11.0", "--json")
    pip, docker = (json.loads(run_cli(*base, *extra).stdout) for extra in ((), ("--install", "docker")))
    # 1024 seqs x 128,256 vocab: torch's 9.7 fp32 copies against FlashInfer's bf16 logits + 3 fp32 copies + the
    # 8,192 x 4,096 bf16 hidden states (tests/test_overheads.py TestFlashInferSampler)
    assert (pip["activation_bytes"], docker["activation_bytes"]) == (5_095_764_787, 1_905_786_880)
    assert run_cli(*base, "--install", "conda").returncode == 2


def test_a_borderline_start_names_its_cause_not_the_band():
    # DGX Spark at the default 0.9 asks vLLM 0.11.0 for 0.9 x 121.69 = 109.52 GiB free at start on a pool the host
    # shares: the budget holds ~93 GiB of KV, so the risk is the start-up check, not the band (which the lead
    # sentence used to blame); the table says why in a row of its own, as the Plan page does under the verdict
    done = run_cli("estimate", "--model", "mistralai/Mistral-7B-Instruct-v0.3", "--gpu", "gb10-dgx-spark",
                   "--max-model-len", "32768", "--vllm-version", "0.11.0")
    assert done.returncode == 0, done.stderr
    verdict_line, why_line = done.stdout.splitlines()[:2]
    assert verdict_line.startswith("verdict          Borderline: vLLM starts at the estimate (")
    assert verdict_line.endswith("but something outside the memory budget can stop the start (why below).")
    assert why_line.startswith("why borderline") and "vLLM needs 109.52 GiB free at start" in why_line


def test_a_borderline_fit_within_the_records_blames_the_calibrated_band():
    done = run_cli("estimate", "--model", "meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size", "2",
                   "--max-model-len", "20000")
    assert done.returncode == 0, done.stderr
    verdict_line, why_line = done.stdout.splitlines()[:2]
    assert verdict_line.endswith("but the calibrated error band reaches below what one full-length request needs.")
    assert why_line.startswith("why borderline") and "the KV cache does not hold one request at the low end" in why_line
