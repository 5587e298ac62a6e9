"""The start-up log reader recovers every setting and figure vLLM printed, exactly, and refuses what is not one log.

Expected numbers are what vLLM printed: in the real CPU servers' logs kept under tests/data/vllm-startup-logs/
(support/startup_logs.py captured them; test_diagnose_real_server.py captures them again), and in the curated
records of benchmarks/data/calibration*.jsonl, whose quoted log lines are laid out under records/.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from calculator.observe.startup_log import LogUnreadable, read_startup_log

LOGS = Path(__file__).parent / "data" / "vllm-startup-logs"
RECORDS = LOGS / "records"
BENCHMARK_DATA = Path(__file__).parents[1] / "benchmarks" / "data"


def _log(name: str) -> str:
    return (LOGS / name).read_text()


def test_real_cpu_0_32_started_log_every_setting_and_figure():
    log = read_startup_log(_log("cpu-0.32.0-llama-started.log"))
    # non-default args: {..., 'dtype': 'float32', 'max_model_len': 1000, 'enforce_eager': True, ...,
    # 'max_num_batched_tokens': 1024, 'max_num_seqs': 8}; banner "version 0.32.0"
    assert (log.engine, log.vllm_version, log.device) == ("v1", "0.32.0", "cpu")
    expected = {"max_model_len": 1000, "dtype": "float32", "enforce_eager": True, "max_num_seqs": 8,
                "max_num_batched_tokens": 1024, "tensor_parallel_size": 1, "pipeline_parallel_size": 1,
                "data_parallel_size": 1, "kv_cache_dtype": "auto", "vllm_version": "0.32.0"}
    assert {key: log.settings[key] for key in expected} == expected
    assert log.settings["model"].endswith("/tiny-llama")
    assert log.sources["max_num_seqs"] == "non-default args"
    # "Explicitly set (1.0/23.54) GiB for KV cache on node 0." and
    # "CPU KV cache size: 1,024,000 tokens, Maximum concurrency for 1,000 tokens per request: 1024.00x"
    assert log.printed.present() == {"available_kv_cache_gib": 1.0, "total_memory_gib": 23.54,
                                     "kv_cache_tokens": 1_024_000, "max_concurrency": 1024.0,
                                     "max_concurrency_tokens_per_request": 1000}
    assert log.outcome.status == "started"
    assert log.missing == ()  # a CPU log needs no GPU


def test_real_cpu_0_32_refused_start_names_the_one_request_check():
    log = read_startup_log(_log("cpu-0.32.0-llama-max-len-too-long.log"))
    assert log.settings["max_model_len"] == 4096
    assert log.settings["kv_cache_memory_bytes"] == 1_048_576
    assert log.outcome.status == "failed" and log.outcome.kind == "max_len"
    assert log.outcome.error.startswith("To serve at least one request with the model's max seq len (4096), (0.0 GiB")
    assert "one-request check" in log.outcome.check
    # "... (0.0 GiB KV cache is needed, ... available KV cache memory (0.0 GiB). ... estimated maximum model
    # length is 896."
    assert log.printed.estimated_max_model_len == 896
    assert (log.printed.kv_cache_needed_gib, log.printed.available_kv_cache_gib) == (0.0, 0.0)


def test_real_cpu_0_28_started_log():
    log = read_startup_log(_log("cpu-0.28.0-llama-started.log"))
    # 0.28 prints "GPU KV cache size" on every device (0.30 says "CPU"): the CPU worker's "Explicitly set (1.0/23.54)
    # GiB for KV cache" says it is a CPU.
    assert (log.engine, log.vllm_version, log.device) == ("v1", "0.28.0", "cpu")
    assert log.settings["max_model_len"] == 2048
    assert log.printed.kv_cache_tokens == 1_048_576 and log.printed.max_concurrency == 512.0
    assert log.outcome.status == "started"


def _record(record_id: str) -> dict:
    for path in sorted(BENCHMARK_DATA.glob("calibration*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip() and json.loads(line)["id"] == record_id:
                return json.loads(line)
    raise AssertionError(f"no record {record_id}")


# The record's observed key -> the reader's printed key.
_OBSERVED = {"model_loading_gib": "weights_gib", "available_kv_cache_gib": "available_kv_cache_gib",
             "num_gpu_blocks": "num_gpu_blocks", "num_cpu_blocks": "num_cpu_blocks",
             "kv_cache_tokens": "kv_cache_tokens", "max_concurrency": "max_concurrency",
             "max_concurrency_tokens_per_request": "max_concurrency_tokens_per_request",
             "activation_peak_gib": "activation_peak_gib", "non_torch_memory_gib": "non_torch_memory_gib",
             "cudagraph_gib": "cudagraph_gib", "free_memory_at_startup_gib": "free_memory_at_startup_gib"}


@pytest.mark.parametrize("path", sorted(RECORDS.glob("*.log")), ids=lambda p: p.stem)
def test_record_log_lines_give_the_records_figures(path: Path):
    text = path.read_text()
    record, log = _record(path.stem), read_startup_log(text)
    observed = dict(record["observed"])
    if observed.get("startup_outcome", "").startswith("failed: max seq len"):  # V0's error prints the KV tokens
        other = observed.get("other") or {}
        observed["kv_cache_tokens"] = other.get("kv_cache_tokens_derived") or other["kv_cache_tokens_capacity_printed"]
    # NOTE: the figures of the record's quoted lines (a record may add figures from lines it did not quote).
    expected = {ours: observed[theirs] for theirs, ours in _OBSERVED.items() if observed.get(theirs) is not None
                and (f"{observed[theirs]}" in text or f"{observed[theirs]:,}" in text)}
    assert len(expected) >= 1
    assert {key: getattr(log.printed, key) for key in expected} == expected
    assert log.engine == (record["engine"] if path.stem != "vllm-6156-2xl40-deepseek-coder-v2-lite-tp2" else None)
    outcome = record["observed"].get("startup_outcome", "")
    if outcome.startswith("failed"):
        assert log.outcome.status == "failed"
        assert log.outcome.kind == ("no_kv_memory" if "No available memory" in outcome else "max_len")


def test_v0_max_len_error_gives_tokens_and_length():
    log = read_startup_log((RECORDS / "file-a10g-phi35-vision-v061-30k-failed.log").read_text())
    record = _record("file-a10g-phi35-vision-v061-30k-failed")
    assert log.printed.kv_cache_tokens == record["observed"]["other"]["kv_cache_tokens_derived"] == 19632
    assert log.settings["max_model_len"] == 30000
    assert log.vllm_version == "0.6.1"  # "0.6.1.dev238+ge2c6e0a82"


def test_launch_line_at_the_top_is_read_by_the_importer():
    log = read_startup_log((RECORDS / "vllm-6156-2xl40-deepseek-coder-v2-lite-tp2.log").read_text())
    assert log.settings["tensor_parallel_size"] == 2 and log.settings["dtype"] == "float16"
    assert log.settings["model"] == "DeepSeek-Coder-V2-Lite-Instruct"
    assert log.sources["tensor_parallel_size"] == "launch line"
    assert log.missing == ("gpu", "vllm_version")  # asked for, never guessed


def test_v0_profiling_line_and_version_from_engine_config():
    log = read_startup_log((RECORDS / "file-a100-40g-phi4-mini-ft-v073.log").read_text())
    assert log.vllm_version == "0.7.3" and log.engine == "v0"
    assert log.settings["gpu_memory_utilization"] == 0.9
    assert (log.printed.total_memory_gib, log.printed.requested_memory_gib) == (39.56, 35.6)
    assert log.settings["max_model_len"] == 2048 and log.settings["dtype"] == "float16"


def test_0_27_consumed_memory_gives_non_torch_with_the_loading_line():
    log = read_startup_log((RECORDS / "file-8xh200-glm53-flash-tp8.log").read_text())
    # "Model loading took 38.24 GiB" and "39.98 GiB for consumed memory (weights + non-torch)"
    assert (log.printed.consumed_memory_gib, log.printed.non_torch_memory_gib) == (39.98, 1.74)


PREFIXED = """\
(APIServer pid=1) INFO 07-06 22:50:01 [api_server.py:1] vLLM API server version 0.11.0
(APIServer pid=1) INFO 07-06 22:50:01 [utils.py:1] non-default args: {'model': 'meta-llama/Llama-3.1-8B-Instruct', \
'tensor_parallel_size': 2, 'gpu_memory_utilization': 0.85, 'max_model_len': 8192}
(Worker_TP0 pid=20) INFO 07-06 22:51:00 [gpu_model_runner.py:1] Model loading took 7.5123 GiB and 3.1 seconds
(Worker_TP1 pid=21) INFO 07-06 22:51:00 [gpu_model_runner.py:1] Model loading took 7.5124 GiB and 3.2 seconds
(Worker_TP0 pid=20) INFO 07-06 22:51:10 [gpu_worker.py:1] Available KV cache memory: 55.20 GiB
(Worker_TP1 pid=21) INFO 07-06 22:51:10 [gpu_worker.py:1] Available KV cache memory: 55.10 GiB
(EngineCore_DP0 pid=10) INFO 07-06 22:51:11 [kv_cache_utils.py:1] GPU KV cache size: 902,784 tokens
(EngineCore_DP0 pid=10) INFO 07-06 22:51:11 [kv_cache_utils.py:1] Maximum concurrency for 8,192 tokens per \
request: 110.20x
(APIServer pid=1) INFO:     Application startup complete.
"""


def test_prefixed_ranks_keep_the_busiest_rank():
    log = read_startup_log(PREFIXED)
    assert log.settings["tensor_parallel_size"] == 2 and log.settings["gpu_memory_utilization"] == 0.85
    assert log.printed.weights_gib == 7.5124  # the heavier rank
    assert log.printed.available_kv_cache_gib == 55.10  # the engine is sized by its smallest rank
    assert log.printed.kv_cache_tokens == 902_784 and log.printed.max_concurrency == 110.2
    assert log.outcome.status == "started"


def test_ansi_colours_and_timestamps_do_not_hide_lines():
    coloured = "\x1b[32mINFO\x1b[0m 07-06 22:51:11 [kv_cache_utils.py:1] GPU KV cache size: 1,234 tokens\n"
    assert read_startup_log(coloured).printed.kv_cache_tokens == 1234


FAILURES = {
    "cuda_oom": ("INFO Model loading took 70.10 GiB memory and 20.0 seconds\n"
                 "ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total "
                 "capacity of 79.19 GiB of which 1.02 GiB is free.\n",
                 "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB", "while profiling memory"),
    "no_kv_memory": ("(EngineCore_DP0 pid=7) INFO Model loading took 67.72 GiB memory and 45.09 seconds\n"
                     "(EngineCore_DP0 pid=7) ERROR ValueError: No available memory for the cache blocks. Try "
                     "increasing `gpu_memory_utilization` when initializing the engine.\n",
                     "ValueError: No available memory for the cache blocks.", "the KV-cache budget check"),
}


@pytest.mark.parametrize("kind", FAILURES)
def test_a_failure_names_its_error_and_check(kind: str):
    text, error, check = FAILURES[kind]
    log = read_startup_log(text)
    assert log.outcome.kind == kind
    assert log.outcome.error.startswith(error)
    assert check in log.outcome.check


# -- hostile input: a clear sentence, quickly -------------------------------------------------------------------


def _quickly(text: str | bytes) -> str:
    started = time.monotonic()
    with pytest.raises(LogUnreadable) as caught:
        read_startup_log(text)
    assert time.monotonic() - started < 2.0
    return str(caught.value)


def test_fifty_megabytes_is_refused_at_once():
    message = _quickly("INFO GPU KV cache size: 1 tokens\n" * 1_600_000)  # 52.8 MB
    assert message.startswith("the paste is 52.8 MB; a start-up log is read up to 5 MB")


def test_binary_is_refused():
    assert "binary" in _quickly(bytes(range(256)) * 100)
    assert "binary" in _quickly("\x00\x01\x02garbage" * 1000)


def test_another_programs_log_is_refused():
    nginx = '127.0.0.1 - - [04/Dec/2026:05:00:00 +0000] "GET / HTTP/1.1" 200 612 "-" "curl/8.0"\n' * 1000
    assert _quickly(nginx).startswith("no vLLM start-up lines in these 1,000 lines")


def test_two_interleaved_servers_are_named():
    one, other = _log("cpu-0.32.0-llama-started.log"), _log("cpu-0.28.0-llama-started.log")
    mixed = "\n".join(line for pair in zip(one.splitlines(), other.splitlines()) for line in pair)
    assert _quickly(mixed).startswith("these lines came from two servers: vLLM 0.28.0 and 0.32.0")
    twice = _log("cpu-0.32.0-llama-started.log").replace("EngineCore pid=", "EngineCore pid=1")
    assert "two servers" in _quickly(_log("cpu-0.32.0-llama-started.log") + twice)


def test_one_huge_line_does_not_hang():
    line = "Memory profiling results: total_gpu_memory=1GiB " + "peak_torch_memory=" * 200_000
    started = time.monotonic()
    log = read_startup_log("INFO vLLM API server version 0.6.4\n" + line)
    assert time.monotonic() - started < 2.0
    assert log.vllm_version == "0.6.4"


def test_v0_engine_config_line_as_vllm_0_6_prints_it():
    # The line as record file-a10g-phi35-vision-v061-30k-failed quotes it.
    line = ("INFO 09-10 12:00:00 llm_engine.py:213] Initializing an LLM engine (v0.6.1.dev238+ge2c6e0a82) with "
            "config: model='microsoft/Phi-3.5-vision-instruct', speculative_config=None, dtype=torch.bfloat16, "
            "max_seq_len=131072, download_dir=None, tensor_parallel_size=1, pipeline_parallel_size=1, "
            "disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=auto, "
            "enable_prefix_caching=False\n")
    log = read_startup_log(line)
    assert (log.vllm_version, log.engine) == ("0.6.1", "v0")
    assert {key: log.settings[key] for key in ("model", "dtype", "max_model_len", "tensor_parallel_size",
                                                "enforce_eager", "kv_cache_dtype")} == {
        "model": "microsoft/Phi-3.5-vision-instruct", "dtype": "bfloat16", "max_model_len": 131072,
        "tensor_parallel_size": 1, "enforce_eager": False, "kv_cache_dtype": "auto"}


def test_v0_engine_config_line_says_whether_prefills_are_chunked():
    # vllm/config.py 0.8.5 (VllmConfig.__str__): "... enable_prefix_caching=..., chunked_prefill_enabled=..., ...".
    # A V0 server started with --enable-chunked-prefill and a batch below max_model_len: the plan must take the flag,
    # or it calls the start-up "does not run" (vLLM refuses such a batch without chunked prefill).
    line = ("INFO 06-03 10:00:00 [llm_engine.py:240] Initializing a V0 LLM engine (v0.8.5) with config: "
            "model='/qwen/qwen3-30b-a3b', dtype=torch.float16, max_seq_len=32768, download_dir=None, "
            "load_format=auto, tensor_parallel_size=4, pipeline_parallel_size=1, disable_custom_all_reduce=True, "
            "quantization=None, enforce_eager=False, kv_cache_dtype=auto,  device_config=cuda, seed=None, "
            "num_scheduler_steps=1, multi_step_stream_outputs=True, enable_prefix_caching=None, "
            "chunked_prefill_enabled=True, use_async_output_proc=True\n")
    log = read_startup_log(line)
    assert (log.vllm_version, log.engine) == ("0.8.5", "v0")
    assert log.settings["enable_chunked_prefill"] is True
    assert log.settings["max_model_len"] == 32768 and log.settings["tensor_parallel_size"] == 4


def test_docker_run_line_names_the_version_by_its_image_tag():
    text = ("docker run --gpus all -p 8000:8000 vllm/vllm-openai:v0.8.5 --model Qwen/Qwen3-8B "
            "--tensor-parallel-size 2 --max-model-len 32768 --kv-cache-dtype fp8\n"
            "INFO 05-01 10:00:00 [gpu_worker.py:1] Available KV cache memory: 60.00 GiB\n")
    log = read_startup_log(text)
    assert log.vllm_version is None and log.settings["vllm_version"] == "0.8.5"  # not printed, but not missing
    assert log.missing == ("gpu",)
    assert {key: log.settings[key] for key in ("model", "tensor_parallel_size", "max_model_len", "kv_cache_dtype")} \
        == {"model": "Qwen/Qwen3-8B", "tensor_parallel_size": 2, "max_model_len": 32768, "kv_cache_dtype": "fp8"}


def test_plain_version_line_without_the_logo_is_one_server():
    text = ("(APIServer pid=3) INFO 12-04 05:40:07 [api_utils.py:313] vLLM server version 0.28.0, serving model "
            "Qwen/Qwen3-8B\n"
            "(EngineCore pid=4) INFO 12-04 05:41:25 [core.py:122] Initializing a V1 LLM engine (v0.28.0) with "
            "config: model='Qwen/Qwen3-8B', dtype=torch.bfloat16, max_seq_len=40960\n")
    log = read_startup_log(text)
    assert log.vllm_version == "0.28.0" and log.settings["model"] == "Qwen/Qwen3-8B"
    assert log.sources["model"] == "the version banner"


def test_a_value_vllm_could_not_have_printed_is_left_out():
    log = read_startup_log("INFO non-default args: {'model': 'm', 'gpu_memory_utilization': abc, 'max_model_len': x}\n")
    assert log.settings == {"model": "m"}


def test_another_failure_keeps_its_root_cause():
    text = ("(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.32.0\n"
            "(APIServer pid=1) WARNING 01-01 00:00:01 [system_utils.py:1] ... `OSError: [Errno 24] Too many open "
            "files`. Consider increasing with ulimit -n\n"
            "(EngineCore pid=2) ERROR 01-01 00:00:09 [core.py:1] NotImplementedError: MLA is not supported on CPU.\n"
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n")
    log = read_startup_log(text)
    assert (log.outcome.status, log.outcome.kind) == ("failed", "other")
    assert log.outcome.error == "NotImplementedError: MLA is not supported on CPU."
