"""`vllm serve` export and import round trip."""

from __future__ import annotations

import pytest

from calculator import InvalidInput, Scenario
from calculator.serve_command import import_serve_command, parse_serve_command, serve_command


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
    assert warnings == ["ignored --host 0.0.0.0: no effect on GPU memory or capacity",
                        "ignored --port 8000: no effect on GPU memory or capacity",
                        "ignored --trust-remote-code: no effect on GPU memory or capacity",
                        "ignored --served-model-name m: no effect on GPU memory or capacity",
                        "ignored environment variable VLLM_USE_V1: not modelled"]


def test_unknown_flags_are_reported_not_fatal():
    parsed, warnings = parse_serve_command("vllm serve Qwen/Qwen3-8B --speculative-config '{}' --max-num-seqs 64")
    assert parsed.max_num_seqs == 64
    assert len(warnings) == 1 and "--speculative-config" in warnings[0]


@pytest.mark.parametrize("text", [
    "docker run vllm/vllm-openai",
    "docker run -p 8000:8000 nginx --max-model-len 4096",
    "echo vllm serve-like",
    "vllm serve --max-model-len 4096",
    "vllm serve m --gpu-memory-utilization 2",
    "vllm serve m --max-num-seqs many",
    "vllm serve 'unterminated",
])
def test_bad_commands_give_a_clear_error(text):
    with pytest.raises(InvalidInput):
        parse_serve_command(text)


COMMON = "--tensor-parallel-size 2 --max-model-len 8192"
EXPECTED = Scenario(model="Qwen/Qwen3-8B", tensor_parallel_size=2, max_model_len=8192)


@pytest.mark.parametrize("text", [
    f"docker run --gpus all -v ~/.cache/huggingface:/root/.cache/huggingface --env HF_TOKEN=x -p 8000:8000 "
    f"--ipc=host vllm/vllm-openai:latest --model Qwen/Qwen3-8B {COMMON}",
    f"docker run --runtime nvidia --gpus all vllm/vllm-openai Qwen/Qwen3-8B {COMMON}",
    f"sudo -E vllm serve Qwen/Qwen3-8B {COMMON}",
    f"python3.11 -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B {COMMON}",
    f"env CUDA_VISIBLE_DEVICES=0,1 VLLM_LOGGING_LEVEL=DEBUG vllm serve Qwen/Qwen3-8B {COMMON}",
    f"python -m vllm.entrypoints.cli.main serve Qwen/Qwen3-8B {COMMON}",
    f"uv run --with vllm vllm serve Qwen/Qwen3-8B {COMMON}",
    f"$ vllm serve Qwen/Qwen3-8B {COMMON}",
    f"nohup vllm serve Qwen/Qwen3-8B {COMMON} > server.log 2>&1 &",
    f"vllm serve Qwen/Qwen3-8B {COMMON};",
    f"cd /srv && vllm serve Qwen/Qwen3-8B {COMMON} | tee log",
    "export HF_HOME=/data\nvllm serve Qwen/Qwen3-8B \\\n  --tensor-parallel-size 2 \\\n  --max-model-len 8192",
    "/opt/venv/bin/vllm serve Qwen/Qwen3-8B --tensor_parallel_size=2 --max_model_len=8192",
    "(venv) user@host:~$ vllm serve Qwen/Qwen3-8B -tp 2 --max-model-len 8192",
])
def test_common_launch_lines_are_read(text):
    parsed, report = import_serve_command(text.replace("\\n", "\n"))
    assert parsed == EXPECTED, report
    assert report.unknown == ()


def test_a_trailing_semicolon_is_not_glued_to_the_value():
    parsed, _ = import_serve_command("vllm serve Qwen/Qwen3-8B --max-num-seqs 64;")
    assert parsed.max_num_seqs == 64


@pytest.mark.parametrize(("written", "dtype"), [("half", "float16"), ("float", "float32"), ("bfloat16", "bfloat16"),
                                                ("float16", "float16"), ("auto", "auto")])
def test_dtype_spellings_vllm_accepts(written, dtype):
    assert import_serve_command(f"vllm serve m --dtype {written}")[0].dtype == dtype


def test_a_container_tag_names_the_version():
    parsed, report = import_serve_command("docker run --gpus all vllm/vllm-openai:v0.8.5 --model Qwen/Qwen3-8B")
    assert parsed.vllm_version == "0.8.5"
    assert "vLLM 0.8.5 (the container tag)" in report.imported
    assert not any(a.startswith("vLLM") for a in report.assumed)


def test_memory_relevant_flags_are_modelled():
    parsed, report = import_serve_command(
        "vllm serve Qwen/Qwen3-30B-A3B -dp 4 --enable-expert-parallel --cpu-offload-gb 8 "
        "--no-enable-prefix-caching --max-num-seqs 64")
    assert (parsed.data_parallel_size, parsed.enable_expert_parallel, parsed.cpu_offload_gb) == (4, True, 8.0)
    assert parsed.enable_prefix_caching is False and parsed.max_num_seqs == 64
    assert report.imported == ("--data-parallel-size 4", "--enable-expert-parallel", "--cpu-offload-gb 8",
                               "--no-enable-prefix-caching", "--max-num-seqs 64")
    assert report.ignored == ()


def test_flags_that_change_nothing_are_listed_by_name_with_the_reason():
    _, report = import_serve_command("vllm serve m --swap-space 16 --enable-chunked-prefill --kv-offloading-size 64 "
                                     "--speculative-config '{}'", base=Scenario(vllm_version="0.32.0"))
    assert report.ignored == (
        "--swap-space 16: CPU memory for swapped-out KV blocks (V0; V1 recomputes instead): the GPU plan is unchanged",
        "--enable-chunked-prefill: always on in the V1 engine: nothing changes",
        "--kv-offloading-size 64: a CPU buffer for offloaded KV blocks: the GPU pool is unchanged",
        "--speculative-config {}: not modelled: the plan assumes vLLM's default for it")


def test_a_misspelled_flag_gets_did_you_mean():
    parsed, report = import_serve_command("vllm serve m --gpu-memory-utilisation 0.8 --max-num-seqs 32")
    assert report.unknown == ("'--gpu-memory-utilisation 0.8' is not a vllm serve flag (vLLM would refuse to start); "
                              "did you mean --gpu-memory-utilization?",)
    assert parsed.gpu_memory_utilization is None and parsed.max_num_seqs == 32


def test_settings_the_command_omits_are_vllms_defaults_but_the_gpu_is_kept():
    base = Scenario(model="x/y", gpu="l40s", tensor_parallel_size=4, max_num_seqs=7, vllm_version="0.30.0",
                    other_processes_memory_gib=1.5)
    parsed, report = import_serve_command("vllm serve Qwen/Qwen3-8B", base=base)
    assert parsed == Scenario(model="Qwen/Qwen3-8B", gpu="l40s", vllm_version="0.30.0", other_processes_memory_gib=1.5)
    assert report.assumed == ("GPU l40s: a launch line does not name it; pick yours under Hardware",
                              "vLLM 0.30.0: the command does not say which version; pick it under vLLM settings")


def test_low_gpu_memory_utilization_is_accepted_like_vllm():
    assert import_serve_command("vllm serve m --gpu-memory-utilization 0.1")[0].gpu_memory_utilization == 0.1


@pytest.mark.parametrize("text", ["vllm serve m --max-model-len inf", "vllm serve m --cpu-offload-gb nan",
                                  "vllm serve m --dtype int3", "vllm serve m --tensor-parallel-size"])
def test_impossible_values_name_the_flag(text):
    with pytest.raises(InvalidInput, match="--"):
        import_serve_command(text)


def test_the_new_flags_round_trip():
    scenario = Scenario(model="Qwen/Qwen3-30B-A3B", data_parallel_size=2, enable_expert_parallel=True,
                        cpu_offload_gb=2.5, enable_prefix_caching=False, async_scheduling=False)
    assert import_serve_command(serve_command(scenario))[0] == scenario


def test_a_container_tag_newer_than_modelled_says_whose_rules_apply():
    parsed, report = import_serve_command("docker run vllm/vllm-openai:v0.99.1 --model Qwen/Qwen3-8B")
    assert parsed.vllm_version == "0.99.1"
    assert ("vLLM 0.99.1 is newer than the newest release modelled (0.34): its figures use vLLM 0.34's rules, which "
            "may have changed since") in \
        report.assumed
