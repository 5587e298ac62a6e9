"""Measure the CPU time vLLM's OpenAI API server spends on each request and on each streamed token.

vLLM's API server runs every request's handler and the engine's output handling on one asyncio event loop, in its
own process beside the engine core (V1). Whatever that loop does per request caps the requests per second one API
server can take, however fast the GPU is, and a burst of requests queues for it (calculator/speed/front_end.py).

This runs real ``vllm bench serve`` bursts (``--request-rate inf``, every prompt at once, as GPUStack's 128-in /
4-out runs) against a real vLLM CPU server here (tests/support/vllm_server.py, a tiny random Llama), once per
endpoint and output length, and reads the API server process's CPU time (user + system, /proc/PID/stat) before and
after each. CPU time, not wall time: the engine core and the client run in processes of their own and the host's
other load does not enter it. The per-request cost is the CPU time of a burst of one-token requests over its
requests; the per-token cost is the slope between one-token and ``--tokens`` bursts.

    python benchmarks/api_server_cost.py [--requests 200] [--tokens 16] [--repeats 3]

Writes ``benchmarks/data/api_server_cost.json`` (the medians, each run, the vLLM version, the CPU, the load average).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from benchmarks.chat_template_parse import cpu_name  # noqa: E402
from support.tiny_models import TinyModelFactory  # noqa: E402
from support.vllm_bench import run_benches  # noqa: E402
from support.vllm_server import VllmCpuServer, provisioned_venv  # noqa: E402

OUTPUT = REPO / "benchmarks" / "data" / "api_server_cost.json"
ENDPOINTS = {"completions": ("openai", "/v1/completions"), "chat": ("openai-chat", "/v1/chat/completions")}
PROMPT_TOKENS = 128


def engine_core_pids(api_server_pid: int) -> list[int]:
    """The API server's child processes (the engine core and its helpers)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # a process that ended while we looked
        if parent == api_server_pid:
            children.append(int(stat.parent.name))
    return children


def bench_arguments(base_url: str, model: Path, endpoint: str, requests: int, output_tokens: int,
                    seed: int) -> list[str]:
    backend, path = ENDPOINTS[endpoint]
    return ["--base-url", base_url, "--backend", backend, "--endpoint", path, "--model", "tiny", "--tokenizer",
            str(model), "--dataset-name", "random",
            "--random-input-len", str(PROMPT_TOKENS), "--random-output-len", str(output_tokens), "--ignore-eos",
            "--num-prompts", str(requests), "--request-rate", "inf", "--seed", str(seed), "--disable-tqdm"]


def measured(run: list[str], outcome: dict) -> dict:
    """One burst's settings, the API server's and the engine core's CPU seconds, and what the client measured."""
    result, (api_s, *engine_s) = outcome["result"], outcome["cpu_s"]
    return {"endpoint": "chat" if "openai-chat" in run else "completions",
            "output_tokens": int(run[run.index("--random-output-len") + 1]), "completed": result["completed"],
            "api_server_cpu_s": round(api_s, 3), "engine_core_cpu_s": round(sum(engine_s), 3),
            "client_cpu_s": round(outcome["client_cpu_s"], 3),
            "duration_s": round(result["duration"], 3), "request_throughput": round(result["request_throughput"], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="requests per burst")
    parser.add_argument("--tokens", type=int, default=16, help="output tokens of the longer bursts")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    venv = provisioned_venv()
    with tempfile.TemporaryDirectory(prefix="api-server-cost-") as scratch:
        model = TinyModelFactory(venv, Path(scratch))("tiny-llama")
        with VllmCpuServer(model, venv=venv, extra_args=("--max-model-len", "1000", "--max-num-seqs", "256"),
                           kv_cache_space_gib=2) as server:
            warmups = [bench_arguments(server.base_url, model, endpoint, 20, 4, 99) for endpoint in ENDPOINTS]
            bursts = [bench_arguments(server.base_url, model, endpoint, args.requests, tokens, seed)
                      for seed in range(args.repeats) for endpoint in ENDPOINTS for tokens in (1, args.tokens)]
            pids = (server.pid, *engine_core_pids(server.pid))
            outcomes = run_benches(venv, server.base_url, warmups + bursts, cpu_pids=pids)[len(warmups):]
            runs = [measured(run, outcome) for run, outcome in zip(bursts, outcomes)]
            version = venv.name
    summary = {}
    for endpoint in ENDPOINTS:
        for process in ("api_server", "client"):
            def per_request(tokens: int) -> float:
                return statistics.median(run[f"{process}_cpu_s"] / run["completed"] for run in runs
                                         if run["endpoint"] == endpoint and run["output_tokens"] == tokens)
            one, many = per_request(1), per_request(args.tokens)
            summary.setdefault(endpoint, {})[process] = {
                "request_ms": round(one * 1e3, 3), "token_us": round((many - one) / (args.tokens - 1) * 1e6, 1)}
    report = {"vllm": version, "model": "tiny-llama (tests/data/tiny-configs)", "prompt_tokens": PROMPT_TOKENS,
              "cpu": platform.processor() or platform.machine(), "cpu_model": cpu_name(),
              "load_average": os.getloadavg(), "summary": summary, "runs": runs}
    OUTPUT.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
