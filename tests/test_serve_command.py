"""`vllm serve` export and import round trip."""

from __future__ import annotations

import pytest

from calculator import InvalidInput, Scenario
from calculator.serve_command import parse_serve_command, serve_command


def test_only_non_default_settings_are_written():
    command = serve_command(Scenario(model="Qwen/Qwen3-32B", tensor_parallel_size=2, max_model_len=32768,
                                     kv_cache_dtype="fp8", enforce_eager=True), multiline=False)
    assert command == ("vllm serve Qwen/Qwen3-32B --tensor-parallel-size 2 --max-model-len 32768 "
                       "--kv-cache-dtype fp8 --enforce-eager")


def test_round_trip_keeps_every_setting():
    scenario = Scenario(model="meta-llama/Llama-3.1-70B-Instruct", gpu="a100-sxm-80gb", tensor_parallel_size=4,
                        pipeline_parallel_size=2, gpu_memory_utilization=0.85, max_model_len=65536,
                        max_num_seqs=128, max_num_batched_tokens=4096, block_size=32, dtype="float16",
                        kv_cache_dtype="fp8_e5m2", quantization="fp8", enforce_eager=True,
                        enable_extensible_kv_cache=False, vllm_version="0.33.0")
    parsed, warnings = parse_serve_command(serve_command(scenario), base=Scenario(gpu="a100-sxm-80gb",
                                                                                  vllm_version="0.33.0"))
    assert parsed == scenario and warnings == []


def test_reads_the_api_server_module_form_with_equals_env_and_short_flags():
    text = ("VLLM_USE_V1=1 python -m vllm.entrypoints.openai.api_server --model=mistralai/Mistral-7B-v0.1 "
            "--host 0.0.0.0 --port 8000 -tp 2 --gpu-memory-utilization=0.8 --max-model-len 16k "
            "--kv-cache-memory-bytes 20G --trust-remote-code --served-model-name m")
    parsed, warnings = parse_serve_command(text)
    assert parsed.model == "mistralai/Mistral-7B-v0.1"
    assert (parsed.tensor_parallel_size, parsed.gpu_memory_utilization) == (2, 0.8)
    assert parsed.max_model_len == 16_000  # vLLM: lower-case k is decimal
    assert parsed.kv_cache_memory_bytes == 20 * 1024**3
    assert warnings == []


def test_unknown_flags_are_reported_not_fatal():
    parsed, warnings = parse_serve_command("vllm serve Qwen/Qwen3-8B --speculative-config '{}' --max-num-seqs 64")
    assert parsed.max_num_seqs == 64
    assert len(warnings) == 1 and "--speculative-config" in warnings[0]


@pytest.mark.parametrize("text", [
    "docker run vllm/vllm-openai",
    "vllm serve --max-model-len 4096",
    "vllm serve m --gpu-memory-utilization 2",
    "vllm serve m --max-num-seqs many",
    "vllm serve 'unterminated",
])
def test_bad_commands_give_a_clear_error(text):
    with pytest.raises(InvalidInput):
        parse_serve_command(text)
