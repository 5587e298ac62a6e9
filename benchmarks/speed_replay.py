"""Replay a measured vLLM run (benchmarks/data/speed_records.jsonl) through the speed model.

Each record is mapped to the deployment it ran (model, GPU, vLLM version, flags it printed) and to the way its
benchmark loaded the engine: a closed loop (``vllm bench serve --max-concurrency``), one batch submitted at once
(``benchmark_latency.py``, bursts, offline runs), all prompts at once at ``--request-rate inf``, or Poisson
arrivals at a rate. The mapping states only what the record or its notes say; assumptions are marked.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from calculator import Scenario, estimate, load_model_spec
from calculator.engine.estimate import Estimate
from calculator.speed.calibration import SpeedConstants
from calculator.speed.bands import engine_generation
from calculator.speed.bench import BenchLoad, cached_test_prompt_tokens
from calculator.speed.front_end import Endpoint
from calculator.speed.output_lengths import eos_output_lengths
from calculator.speed.predict import _Replica, bench_prediction, speed_estimate
from calculator.speed.queueing import burst_wait
from calculator.speed.scheduler import burst_timeline
from calculator.speed.traffic import Traffic

DATA = Path(__file__).resolve().parent / "data"
RECORDS = DATA / "speed_records.jsonl"
MINED = DATA / "speed_records_mined.jsonl"  # mined for issue 19: V1 engines, H100 / H200 / B200 / MI300X, sweeps
CONFIGS = DATA / "speed_configs"
METRICS = ("ttft_ms", "tpot_ms", "output_tok_s", "request_per_s", "e2e_ms")


@dataclass(frozen=True)
class Run:
    """How one record's deployment and load are replayed."""

    model: str  # preset id or a config under speed_configs/
    gpu: str
    vllm_version: str  # the record's, or the era's release when the source does not print it (assumed)
    mode: str  # closed | burst | rate_inf | rate
    settings: dict = field(default_factory=dict)
    longest_output_tokens: int | None = None  # runs whose outputs may stop at EOS: the max_tokens cap
    # The benchmark client sent the first prompt once before the run (benchmark_serving.py always; vllm bench serve
    # with --ready-check-timeout-sec > 0 or --num-warmups, its default until vllm#30975).
    test_prompt: bool = False
    # What the harness times as the first token: "chunk", the first streamed chunk with choices (vllm bench serve,
    # benchmark_serving.py: vLLM sends it, with the role, as soon as the prefill yields a token); or "text", the first
    # chunk whose content or reasoning is non-empty (gpu_conc), which tokens that stream as no text precede.
    first_token: str = "chunk"
    # The one-request runs (prompt tokens, output tokens, prompts) that the harness sent the same server before, in
    # order, when it seeds prompt i alike in every run (``sweep_cached_prompt_tokens``); empty: none, or unknown.
    sweep: tuple[tuple[int, int, int], ...] = ()
    # The endpoint the harness posts to: "chat" (vllm bench serve --backend openai-chat) renders the chat template,
    # which some versions parse on every request (calculator/speed/front_end.py).
    endpoint: Endpoint = "completions"


# tt-inference-server's one-request sweep, in the order run_benchmarks.py runs it (release v0.0.5, July 2025:
# benchmarking/benchmark_config.py, BATCH_1_BENCHMARK_COMMON_ISL_OSL_PAIRS, with get_num_prompts' counts: 8 for
# 128 / 128, 4 up to 4,000 prompt tokens, 2 above). Its client's "cleaned-random" dataset (CleanedPromptGenerator.
# generate_multiple_stable_tokens) seeds prompt i with --seed + i in every run, and torch.randint draws a prompt's
# tokens in order, so every run of a sweep sends the same prompts, and prompt i of a longer run begins with prompt i
# of a shorter one (decoded and re-encoded, so only its last tokens may differ).
TT_BATCH_1_SWEEP = ((128, 128, 8), (128, 1024, 4), (1024, 128, 4), (2048, 128, 4), (3072, 128, 4), (4096, 128, 2),
                    (8192, 128, 2), (16384, 128, 2), (32000, 128, 2))

# The same sweep as tt-inference-server ran it in March-April 2025 (benchmark_config.py at 7c1e3d1c1: get_num_prompts
# gave every OSL-128 run 8 prompts). Its client was vLLM's benchmark_serving.py "random" dataset with --seed 0: prompt
# i is the tokens (offset_i + i + j) mod vocab, and the offsets are the generator's first draws in every run (the
# length draws before them span one value at the default range ratio 1.0, which draws nothing), so prompt i of a
# longer run begins with prompt i of a shorter one, as with the cleaned-random prompts.
TT_BATCH_1_SWEEP_2025_03 = ((128, 128, 8), (128, 1024, 4), (1024, 128, 8), (2048, 128, 8), (3072, 128, 8),
                            (4096, 128, 8), (8192, 128, 8), (16384, 128, 8), (32000, 128, 8))


def sweep_cached_prompt_tokens(prompt_tokens: int, num_prompts: int, earlier: tuple[tuple[int, int, int], ...],
                               block_size: int, kv_cache_tokens: int) -> tuple[int, ...]:
    """Tokens of each prompt of a run that a prefix-caching server finds cached when the harness sent ``earlier``
    runs (prompt tokens, output tokens, prompts) of the same seeded prompts before it (the run's own test prompt
    aside: ``cached_prompt_tokens``).

    Prompt i shares with an earlier run's prompt i its first ``min`` of both lengths, less the last token (where
    re-encoding may part them and V1 recomputes a prompt's last token anyway), counted in whole blocks
    (``cached_test_prompt_tokens``). The earlier runs' blocks stay cached while the sweep has not used the KV cache
    up (V1 hands out never-used free blocks before it evicts a cached one); beyond that, nothing is counted."""
    if sum(count * (prompt + output) for prompt, output, count in earlier) > kv_cache_tokens:
        earlier = ()
    return tuple(max((cached_test_prompt_tokens(min(prompt_tokens, prompt), block_size)
                      for prompt, _, count in earlier if index < count), default=0)
                 for index in range(num_prompts))


# NOTE: gpt-oss's harmony format opens every reply with <|channel|>analysis<|message|> (tokens 200005, 35644,
# 200008, after the prompt's <|start|>assistant); vLLM 0.10 streams them as empty reasoning deltas (serving_chat.py:
# harmony's last_content_delta is None until the first analysis token), so a harness timing the first non-empty text
# sees the 4th token: the prefill's token and three decode steps later.
HARMONY_HEADER_TOKENS = 3


def untimed_lead_tokens(run: Run) -> int:
    """Tokens the server generates before the one the record's harness times as the first."""
    return HARMONY_HEADER_TOKENS if run.first_token == "text" and run.model.startswith("openai/gpt-oss") else 0


def _config(name: str) -> str:
    return str(CONFIGS / f"{name}.json")


def _dennislee22(mode: str, sweep: tuple[tuple[int, int, int], ...] = ()) -> Run:
    """One of dennislee22's runs: the same server settings, harness and output cap, a different load (see RUNS)."""
    return Run("Qwen/Qwen2.5-7B-Instruct", "a100-sxm-80gb", "0.10.1", mode,
               {"max_model_len": 16384, "gpu_memory_utilization": 0.5}, 1024, test_prompt=True, sweep=sweep)


KNOOP_SETTINGS = {"max_model_len": 9216, "max_num_batched_tokens": 8192, "gpu_memory_utilization": 0.9}


# Record id prefix -> Run. Versions in brackets are assumptions by date of the source (see docs/speed-accuracy.md).
RUNS: dict[str, Run] = {
    "ridgepoint-a100-80g-llama3-8b-c1": Run("meta-llama/Meta-Llama-3-8B-Instruct", "a100-sxm-80gb", "0.28.0", "closed",
                                            {"max_model_len": 8192}),
    "ridgepoint-h100-80g-llama3-8b-c1": Run("meta-llama/Meta-Llama-3-8B-Instruct", "h100-sxm-80gb", "0.28.0", "closed",
                                            {"max_model_len": 8192}),
    "ridgepoint-a100-80g-llama3-8b-c32": Run("meta-llama/Meta-Llama-3-8B-Instruct", "a100-sxm-80gb", "0.28.0",
                                             "burst", {"max_model_len": 8192}),
    "ridgepoint-h100-80g-llama3-8b-c32": Run("meta-llama/Meta-Llama-3-8B-Instruct", "h100-sxm-80gb", "0.28.0",
                                             "burst", {"max_model_len": 8192}),
    "oracle-mi300x": Run("meta-llama/Meta-Llama-3.1-405B-Instruct-FP8", "mi300x-192gb", "0.6.2", "burst",
                         {"tensor_parallel_size": 8, "max_model_len": 8192}),
    # Fixed lengths (random, --ignore-eos) in a closed loop: all C requests start together and, being equal,
    # finish together, so the loop runs in lockstep waves: replayed as one batch of C.
    "wmx-l4": Run(_config("Qwen__Qwen2.5-0.5B-Instruct"), "l4-24gb", "0.23.0", "burst",
                  {"gpu_memory_utilization": 0.6}),
    # NOTE: vllm bench serve skips its ready check (the test prompt) by default since vllm#30975 (Dec 2025; the
    # 0.28-0.32 wheels' default is 0), so the 0.2x runs below send none unless they say so.
    "musgrave-a100-40g": Run("meta-llama/Llama-3.1-8B-Instruct", "a100-sxm-40gb", "0.23.0", "closed",
                             {"max_model_len": 8192}),
    "qwen3-1536-a100-80g": Run("Qwen/Qwen3-14B-AWQ", "a100-sxm-80gb", "0.9.0", "closed",
                               {"max_num_seqs": 30, "enforce_eager": True}),
    "tt356-8xh100": Run(_config("DeepSeek-R1-0528-AWQ"), "h100-sxm-80gb", "0.9.0", "closed",
                        {"tensor_parallel_size": 8, "max_model_len": 16384}, test_prompt=True, sweep=TT_BATCH_1_SWEEP),
    # benchmark_throughput.py: 200 ShareGPT prompts to LLM.generate at once, max_num_seqs 256: one wave that lasts
    # as long as the longest ShareGPT output (sharegpt_longest_output), the batch shrinking as outputs end.
    "vllm-12315-4xa100": Run("meta-llama/Llama-3.3-70B-Instruct", "a100-sxm-80gb", "0.6.6", "burst",
                             {"tensor_parallel_size": 4, "max_num_seqs": 256, "max_model_len": 8192}),
    "vllm-20710-2xb200": Run("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", "b200-180gb", "0.9.0", "closed",
                             {"tensor_parallel_size": 2}),
    "vllm-17788-h100nvl": Run("Qwen/Qwen3-32B", "h100-nvl-94gb", "0.8.5", "rate_inf", {"max_num_seqs": 32}),
    "dbmart-a40-llama31-8b": Run("meta-llama/Llama-3.1-8B-Instruct", "a40-48gb", "0.8.0", "burst",
                                 {"max_model_len": 4096}, 600),
    "dbmart-a40-r1d-llama-8b": Run("meta-llama/Llama-3.1-8B-Instruct", "a40-48gb", "0.8.0", "burst",
                                   {"max_model_len": 4096}, 600),
    "dbmart-a40-r1d-qwen-14b": Run("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "a40-48gb", "0.8.0", "burst",
                                   {"max_model_len": 4096}, 600),
    "dbmart-a40-qwen25-14b": Run("Qwen/Qwen2.5-14B-Instruct", "a40-48gb", "0.8.0", "burst",
                                 {"max_model_len": 4096}, 600),
    "dbmart-a40-qwen25-7b": Run("Qwen/Qwen2.5-7B-Instruct", "a40-48gb", "0.8.0", "burst",
                                {"max_model_len": 4096}, 600),
    "dbmart-a40-gemma3-12b": Run(_config("google__gemma-3-12b-it"), "a40-48gb", "0.8.0", "burst",
                                 {"max_model_len": 4096}, 600),
    "dbmart-rtx4090-qwen25-3b": Run(_config("Qwen__Qwen2.5-3B-Instruct"), "rtx-4090", "0.8.0", "rate_inf",
                                    {"max_model_len": 4096}, longest_output_tokens=600),
    "dbmart-rtx4090-r1d-qwen-1.5b": Run(_config("deepseek-ai__DeepSeek-R1-Distill-Qwen-1.5B"), "rtx-4090", "0.8.0",
                                        "rate_inf", {"max_model_len": 4096}, longest_output_tokens=600),
    "dbmart-rtx4090-r1d-llama-8b": Run("meta-llama/Llama-3.1-8B-Instruct", "rtx-4090", "0.8.0", "rate_inf",
                                       {"max_model_len": 4096}, longest_output_tokens=600),
    "dbmart-rtx4090-r1d-qwen-7b": Run("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "rtx-4090", "0.8.0", "rate_inf",
                                      {"max_model_len": 4096}, longest_output_tokens=600),
    "dbmart-rtx4090-gemma2-9b": Run("google/gemma-2-9b-it", "rtx-4090", "0.8.0", "rate_inf", {"max_model_len": 4096},
                                    longest_output_tokens=600),
    "pricecompass-6-2xa10g": Run("meta-llama/Meta-Llama-3-8B-Instruct", "a10g-24gb", "0.5.4", "rate_inf",
                                 {"tensor_parallel_size": 2}),
    "lmdeploy-2019-2xa800": Run("mistralai/Mixtral-8x7B-Instruct-v0.1", "a100-sxm-80gb", "0.5.1", "rate",
                                {"tensor_parallel_size": 2, "max_model_len": 8192}),
    # speed_records_mined.jsonl. gpu_conc: C asyncio workers in a closed loop, EOS-allowed outputs of ~900 tokens
    # (max_tokens 1000); its TTFT ends at the first non-empty delta.content or delta.reasoning_content
    # (concurrency.py, process_streaming_response, the same at every commit that added results).
    "gpuconc-h100pcie": Run("openai/gpt-oss-20b", "h100-pcie-80gb", "0.10.2", "closed", {"max_model_len": 8192},
                            1000, first_token="text"),
    "gpuconc-h200": Run("openai/gpt-oss-20b", "h200-141gb", "0.10.2", "closed", {"max_model_len": 8192},
                        1000, first_token="text"),
    "gpuconc-b200": Run("openai/gpt-oss-20b", "b200-180gb", "0.10.2", "closed", {"max_model_len": 8192},
                        1000, first_token="text"),
    "gpuconc-mi300x": Run("openai/gpt-oss-20b", "mi300x-192gb", "0.10.2", "closed", {"max_model_len": 8192},
                          1000, first_token="text"),
    # Workload A asks for 128 tokens; the outputs stop at EOS (a mean of 100.5).
    "mushfiq-rtx4090": Run("mistralai/Mistral-7B-Instruct-v0.3", "rtx-4090", "0.11.0", "closed",
                           {"max_model_len": 8192}, 128, test_prompt=True),
    # Fixed 1024 / 1024 lengths (random): lockstep waves of 32, as the fixed-length closed loops above.
    "recipes431-mi300x": Run("Qwen/Qwen3-8B", "mi300x-192gb", "0.19.0", "burst"),
    "vllm-43232-4xb200": Run("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "b200-180gb", "0.22.0", "closed",
                             {"tensor_parallel_size": 4, "kv_cache_dtype": "fp8", "max_model_len": 32768,
                              "gpu_memory_utilization": 0.85, "enable_prefix_caching": True}),  # 0.22: no test prompt
    "tt340-a100-qwen3-30b-a3b": Run("Qwen/Qwen3-30B-A3B", "a100-sxm-80gb", "0.9.2", "closed",
                           {"max_model_len": 16384}, test_prompt=True, sweep=TT_BATCH_1_SWEEP),
    "tt340-a100-qwen3-14b": Run("Qwen/Qwen3-14B", "a100-sxm-80gb", "0.9.2", "closed",
                       {"max_model_len": 16384}, test_prompt=True, sweep=TT_BATCH_1_SWEEP),
    "tt340-a100-qwen3-1.7b": Run(_config("Qwen__Qwen3-1.7B"), "a100-sxm-80gb", "0.9.2", "closed",
                                  {"max_model_len": 16384}, test_prompt=True, sweep=TT_BATCH_1_SWEEP),
    # tt-inference-server #394 (2025-11-12): the harness of that date (benchmark_config.py at dd34ceed5) runs the
    # same one-request sweep with the same cleaned-random prompts; server flags not printed (vLLM's defaults).
    "tt394-rtx4090-qwen3-4b": Run(_config("Qwen__Qwen3-4B"), "rtx-4090", "0.11.0", "closed", {},
                                  test_prompt=True, sweep=TT_BATCH_1_SWEEP),
    # tt-inference-server #521 (2025-09-03): the harness of that date (benchmark_config.py at 446898bb6) runs the
    # same sweep with the same prompts; server flags not printed, A100 80 GB assumed. Prefix caching off: its rows
    # show no cache hit at all, not even the test prompt's (the 4,096-token row's two prompts, the first sent before
    # as the test prompt, sit 50 ms above the 3,072-token row's four), where a V1 engine of 0.9.2-0.11 finds the same
    # hits as for tt340 (its KV cache manager, run in process over gemma-3's 29 sliding-window and 5 full-attention
    # layers, hits 1,008-4,080 tokens): a V0 engine (prefix caching off for multimodal models, engine/arg_utils.py)
    # or --no-enable-prefix-caching.
    "tt521-a100-gemma3-4b-it": Run(_config("google__gemma-3-4b-it"), "a100-sxm-80gb", "0.10.1", "closed",
                                   {"enable_prefix_caching": False}, test_prompt=True, sweep=TT_BATCH_1_SWEEP),
    # tt-inference-server #143 (2025-04-01): H100 variant, dtype and flags not printed; BF16 on SXM 80 GB with the
    # flags the same author gave for a 72B model on 2 x H100 in #235 (2025-05-22) assumed.
    "tt143-2xh100-qwen25-72b": Run("Qwen/Qwen2.5-72B-Instruct", "h100-sxm-80gb", "0.8.2", "closed",
                                   {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.95, "max_num_seqs": 32,
                                    "max_model_len": 16384}, test_prompt=True, sweep=TT_BATCH_1_SWEEP_2025_03),
    "kvcached-h100-qwen3-0.6b-rate-inf": Run("Qwen/Qwen3-0.6B", "h100-sxm-80gb", "0.19.0", "rate_inf",
                                             {"gpu_memory_utilization": 0.5, "max_model_len": 2048}),
    "kvcached-h100-qwen3-0.6b-rate16": Run("Qwen/Qwen3-0.6B", "h100-sxm-80gb", "0.19.0", "rate",
                                           {"gpu_memory_utilization": 0.5, "max_model_len": 2048}),
    # vLLM PR #23696 (B200 MXFP4 MoE, 2025-08): vllm bench serve's defaults, 1,000 ShareGPT prompts all at once.
    "vllm-23696-8xb200": Run("openai/gpt-oss-120b", "b200-180gb", "0.10.1", "rate_inf",
                             {"tensor_parallel_size": 8, "max_model_len": 32768}),
    # vllm-project/recipes PR #41 (2025-08-28): Seed-OSS-36B on RTX 3090s, TP 8 from the recipe's serve command;
    # the context the run set is not printed (65,536 assumed: the default 524,288 does not fit 8 x 24 GB).
    "recipes41-8xrtx3090": Run("ByteDance-Seed/Seed-OSS-36B-Instruct", "rtx-3090", "0.10.2", "rate",
                               {"tensor_parallel_size": 8, "max_model_len": 65536}),
    # vLLM PR #28200 (2025-11-06): MiniMax-M2 on 4 x H100 (TP 4 from the tuned file's N=384), the recipe's flags; its
    # outputs stop at EOS (a mean of 941 tokens) under the 1,024-token cap.
    "vllm-28200-4xh100": Run("MiniMaxAI/MiniMax-M2", "h100-sxm-80gb", "0.11.1", "closed", {"tensor_parallel_size": 4},
                             1024),
    # vLLM PR #27323 (2025-10-22): GLM-4.6 BF16 on 8 x MI300X at TP 8, vLLM 0.11.0 (printed), replayed with GLM-4.7's
    # config (the same glm4_moe architecture); 1,000 fixed-length chat prompts at --max-concurrency 64.
    "vllm-27323-8xmi300x": Run("zai-org/GLM-4.7", "mi300x-192gb", "0.11.0", "closed",
                               {"tensor_parallel_size": 8, "gpu_memory_utilization": 0.85,
                                "enable_prefix_caching": False}, test_prompt=True, endpoint="chat"),
    # vLLM PR #23151 (2025-08-19): Qwen3-30B-A3B BF16 on one H100, default flags; benchmark_serving.py (test prompt
    # first), 100 prompts at --max-concurrency 10, outputs stopping at EOS under the 1,024 cap.
    "vllm-23151-h100": Run("Qwen/Qwen3-30B-A3B", "h100-sxm-80gb", "0.10.1", "closed", {}, 1024, test_prompt=True),
    # vllm-project/recipes PR #165 (2025-12-15): Nemotron-3-Nano-30B-A3B FP8 on one H200, the recipe's flags in the
    # v0.12.0 image; replayed with the BF16 preset quantized to FP8 (the same nemotron_h architecture). 20 warm-ups.
    "recipes165-h200": Run("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "h200-141gb", "0.12.0", "closed",
                           {"quantization": "fp8", "kv_cache_dtype": "fp8", "async_scheduling": True,
                            "install": "docker"}, test_prompt=True),
    # PegaInfer's vLLM baselines on one RTX 5090 (Qwen3-4B BF16, prefix caching off): a one-request probe on vLLM
    # 0.19.1 (--max-num-seqs 1) and a Poisson sweep on vLLM 0.22.1 (60 s of arrivals a level); versions printed.
    "pegainfer-rtx5090-qwen3-4b-v0191": Run(_config("Qwen__Qwen3-4B"), "rtx-5090", "0.19.1", "closed",
                                           {"max_model_len": 8192, "gpu_memory_utilization": 0.9, "max_num_seqs": 1,
                                            "enable_prefix_caching": False}),
    "pegainfer-rtx5090-qwen3-4b-v0221": Run(_config("Qwen__Qwen3-4B"), "rtx-5090", "0.22.1", "rate",
                                           {"max_model_len": 8192, "gpu_memory_utilization": 0.9,
                                            "enable_prefix_caching": False}),
    # vllm-project/recipes PR #30 (2025-08-22): Qwen2.5-VL-72B BF16 on 4 x A100 80 GB at TP 4, prefix caching off;
    # 128 random 8,000 / 1,000 text prompts all at once, outputs stopping at EOS (a mean of 893 tokens).
    "recipes30-4xa100": Run("Qwen/Qwen2.5-VL-72B-Instruct", "a100-sxm-80gb", "0.10.1", "rate_inf",
                            {"tensor_parallel_size": 4, "enable_prefix_caching": False}),
    # GPUStack Performance Lab (gpustack/gpustack docs/performance-lab, 2025-10..2026-01): the vLLM baselines ("vLLM
    # without any optimizations", `vllm serve M`, vLLM v0.11.0 printed) driven by vllm bench serve --backend
    # openai-chat; the throughput pages send every prompt at once (--request-rate inf, its default), the latency page
    # runs 100 ShareGPT prompts at --max-concurrency 1-8, whose outputs stop at EOS or at the ShareGPT reply's length
    # (the sampler keeps prompt + output <= 2,048 tokens: at most 1,815 after the 233-token mean prompt). The v0.11
    # client sent its first prompt once before the run (the ready check, default before vllm#30975). One source per
    # host: the H100 SXM pages and the A100 SXM 80 GB pages.
    "gpustackh100-qwen3-8b": Run("Qwen/Qwen3-8B", "h100-sxm-80gb", "0.11.0", "closed", {}, 1815,
                                 test_prompt=True, endpoint="chat"),
    "gpustackh100-qwen3-14b": Run("Qwen/Qwen3-14B", "h100-sxm-80gb", "0.11.0", "rate_inf", {},
                                  test_prompt=True, endpoint="chat"),
    "gpustackh100-qwen3-32b": Run("Qwen/Qwen3-32B", "h100-sxm-80gb", "0.11.0", "rate_inf", {},
                                  test_prompt=True, endpoint="chat"),
    "gpustackh100-gptoss20b": Run("openai/gpt-oss-20b", "h100-sxm-80gb", "0.11.0", "rate_inf", {},
                                  test_prompt=True, endpoint="chat"),
    # vLLM PR #50040 (2026-07-27): Nemotron-3-Nano-30B-A3B FP8 on one H200, the PR's flags (FP8 KV cache, 16 sequences,
    # prefix caching off) on main of that date (0.25.0 assumed); 60 ShareGPT prompts one at a time, 300 tokens each,
    # after 200 warm-ups. Replayed with the BF16 preset quantized to FP8, as recipes165.
    "vllm-50040-h200": Run("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "h200-141gb", "0.25.0", "closed",
                           {"quantization": "fp8", "kv_cache_dtype": "fp8_e4m3", "max_num_seqs": 16,
                            "enable_prefix_caching": False}),
    # violet-quartz/vllm-serving-experiments: an RTX 4090 rented on AutoDL, vLLM 0.25.1 with its defaults, 200
    # ShareGPT prompts per run at --max-concurrency 1, 4, 8, 16 and 32 to /v1/completions, outputs capped at 2,048
    # less the 218-token mean prompt. The runs follow one another on one server with prefix caching on, and the
    # author saw a rerun of the same prompts reach a 50 % hit rate (TTFT 66 -> 51 ms at 4 requests), so the later
    # runs' TTFTs may be lower than a fresh server's; their TPOTs are not moved by it.
    # The same author's run on the chat endpoint (experiments/exp_concurrency_performance.md: 200 ShareGPT prompts at
    # --max-concurrency 4, a fresh server, so its prefix cache was cold; the GPU and version as the runs below).
    "cn4090blog-rtx4090-qwen25-7b-sharegpt-chat-c": Run("Qwen/Qwen2.5-7B-Instruct", "rtx-4090", "0.25.1", "closed",
                                                        {}, 1830, endpoint="chat"),
    "cn4090blog-rtx4090-qwen25-7b-sharegpt-c": Run("Qwen/Qwen2.5-7B-Instruct", "rtx-4090", "0.25.1", "closed", {},
                                                   1830),
    # GPUStack's gpt-oss-120b pages (the 'baseline', vLLM without any tuning, --max-model-len 32768): 100 ShareGPT
    # prompts at --max-concurrency 4 and 1,000 sent at once, openai-chat, the ready check's prompt first; vLLM
    # 0.10.2 on the H100 page (SXM assumed, as the lab's other H100 pages), 0.11.0 on the A100 SXM 80 GB page.
    "gpustack-gptoss120b-h100-baseline-sharegpt-bs4": Run("openai/gpt-oss-120b", "h100-sxm-80gb", "0.10.2", "closed",
                                                          {"max_model_len": 32768}, 1819, test_prompt=True,
                                                          endpoint="chat"),
    "gpustack-gptoss120b-h100-baseline-sharegpt-1000": Run("openai/gpt-oss-120b", "h100-sxm-80gb", "0.10.2",
                                                           "rate_inf", {"max_model_len": 32768}, test_prompt=True,
                                                           endpoint="chat"),
    "gpustack-gptoss120b-a100-baseline-sharegpt-bs4": Run("openai/gpt-oss-120b", "a100-sxm-80gb", "0.11.0", "closed",
                                                          {"max_model_len": 32768}, 1819, test_prompt=True,
                                                          endpoint="chat"),
    "gpustack-gptoss120b-a100-baseline-sharegpt-1000": Run("openai/gpt-oss-120b", "a100-sxm-80gb", "0.11.0",
                                                           "rate_inf", {"max_model_len": 32768}, test_prompt=True,
                                                           endpoint="chat"),
    # GPUStack's A100 SXM 80 GB pages (same harness as the H100 ones above); Qwen3-32B with the page's
    # --max-model-len 32768.
    "gpustacka100-qwen3-14b": Run("Qwen/Qwen3-14B", "a100-sxm-80gb", "0.11.0", "rate_inf", {},
                                  test_prompt=True, endpoint="chat"),
    "gpustacka100-qwen3-32b": Run("Qwen/Qwen3-32B", "a100-sxm-80gb", "0.11.0", "rate_inf", {"max_model_len": 32768},
                                  test_prompt=True, endpoint="chat"),
    "gpustacka100-gptoss20b": Run("openai/gpt-oss-20b", "a100-sxm-80gb", "0.11.0", "rate_inf", {},
                                  test_prompt=True, endpoint="chat"),
    # vLLM PR #17530 (2025-05-01): Qwen3-30B-A3B-FP8 on one MI300X, benchmark_throughput.py (200 fixed-length prompts
    # at once, offline), FP8 KV cache, 0.95 of memory, --max-model-len 32768; the 'Before Tuning' column (main, ~0.8.5).
    "vllm-17530-mi300x": Run("Qwen/Qwen3-30B-A3B", "mi300x-192gb", "0.8.5", "burst",
                             {"quantization": "fp8", "kv_cache_dtype": "fp8", "gpu_memory_utilization": 0.95,
                              "max_model_len": 32768}),
    # vLLM PR #17535 (2025-05-01): Qwen3-235B-A22B-FP8 at TP 4 with #17530's command and harness (200 fixed-length
    # prompts at once, offline, FP8 KV cache, 0.95 memory); MI300X assumed (#17530's card), main of that day (~0.8.5).
    "vllm-17535-4xmi300x": Run("Qwen/Qwen3-235B-A22B", "mi300x-192gb", "0.8.5", "burst",
                               {"tensor_parallel_size": 4, "quantization": "fp8", "kv_cache_dtype": "fp8",
                                "gpu_memory_utilization": 0.95, "max_model_len": 32768}),
    # GPUStack's 8 x H200 SXM page for GLM-4.x (same harness as the H100 and A100 ones above): zai-org/GLM-4.6 BF16 at
    # TP 8, replayed with the GLM-4.7 preset (the same glm4_moe architecture), as vllm-27323; the ShareGPT run at
    # --max-concurrency 4 caps its outputs at 2,048 less its 230-token mean prompt.
    "gpustackh200-glm46-sharegpt-c4": Run("zai-org/GLM-4.7", "h200-141gb", "0.11.0", "closed",
                                          {"tensor_parallel_size": 8}, 1818, test_prompt=True, endpoint="chat"),
    "gpustackh200-glm46": Run("zai-org/GLM-4.7", "h200-141gb", "0.11.0", "rate_inf", {"tensor_parallel_size": 8},
                              test_prompt=True, endpoint="chat"),
    # vllm-project/recipes PR #99 (2025-10-27): MiniMax-M2 (FP8) on 4 x H20-3e at TP 4, the recipe's serve command on
    # the nightly of that date (0.11.1 assumed); the same client command as vllm-28200: 100 random 2,048-token prompts
    # at --max-concurrency 10, outputs stopping at EOS under the 1,024 cap; the ready check's test prompt first.
    "recipes99-4xh20-3e": Run("MiniMaxAI/MiniMax-M2", "h20-3e-141gb", "0.11.1", "closed", {"tensor_parallel_size": 4},
                              1024, test_prompt=True),
    # vllm-project/recipes PR #134 (2025-12-04): DeepSeek-V3.2 (FP8) at TP 8 on 8 x H20 (the 141 GB H20-3e assumed: the
    # author's card in #99), the recipe's serve command on the nightly of that date (0.12.0 assumed); 100 random
    # 2,048 / 1,024 prompts arriving at 10 requests/s (Poisson), every output to the cap; the ready check's test prompt.
    "recipes134-8xh20-3e": Run("deepseek-ai/DeepSeek-V3.2", "h20-3e-141gb", "0.12.0", "rate", {"tensor_parallel_size": 8},
                               test_prompt=True),
    # vllm-project/recipes PR #304 (2026-03-28): GLM-5-FP8 at TP 8 on 8 x H200 with MTP speculative decoding (3 draft
    # tokens), prefix caching off, the recipe's v0.18.0 image; replayed with the GLM-5.1 preset (same glm_moe_dsa
    # architecture) quantized to FP8, and the acceptance a = 0.407 whose 1 + a + a^2 + a^3 is the printed acceptance
    # length 1.64. 32 random 8,000 / 1,024 prompts (--ignore-eos) arriving at 10 requests/s.
    "recipes304-8xh200": Run("zai-org/GLM-5.1", "h200-141gb", "0.18.0", "rate",
                             {"tensor_parallel_size": 8, "quantization": "fp8", "speculative_method": "mtp",
                              "num_speculative_tokens": 3, "speculative_acceptance_rate": 0.407,
                              "enable_prefix_caching": False}),
    # vllm-project/recipes PR #240 (2026-02-11): GLM-5-FP8 at TP 8 on 8 x H200 with the MTP drafter (1 draft token),
    # prefix caching off, the nightly of that date (0.16.0 assumed); mean ITL = mean TPOT, so no draft was accepted:
    # acceptance 0. GLM-5.1 preset quantized to FP8, as recipes304. 32 random 8,000 / 1,024 prompts at 10 requests/s.
    "recipes240-8xh200": Run("zai-org/GLM-5.1", "h200-141gb", "0.16.0", "rate",
                             {"tensor_parallel_size": 8, "quantization": "fp8", "speculative_method": "mtp",
                              "num_speculative_tokens": 1, "speculative_acceptance_rate": 0.0,
                              "enable_prefix_caching": False}),
    # vllm-project/recipes PR #112 (2025-11-06): MiniMax-M2 (FP8) at TP 4 on 4 x H100 with DeepGEMM on (vLLM's default
    # when installed), main of that date (0.11.1 assumed); vllm-28200's client command (same author, same day): 100
    # random 2,048-token prompts at --max-concurrency 10, outputs stopping at EOS under the 1,024 cap; test prompt first.
    "recipes112-4xh100": Run("MiniMaxAI/MiniMax-M2", "h100-sxm-80gb", "0.11.1", "closed", {"tensor_parallel_size": 4},
                             1024, test_prompt=True),
    # vllm-project/recipes PR #58 (2025-09-15, open): Qwen3-Next-80B-A3B-Instruct BF16 on 4 x B200 at TP 4, the
    # nightly of that date (0.10.2 assumed); replayed with the Qwen3-Coder-Next preset (the same qwen3_next
    # dimensions). 1,000 random 2,048 / 1,024 prompts at --max-concurrency 256, outputs stopping at EOS under the
    # 1,024 cap; the test prompt first, but vLLM 0.10 turns prefix caching off for hybrid models.
    "recipes58-4xb200": Run("Qwen/Qwen3-Coder-Next", "b200-180gb", "0.10.2", "closed",
                            {"tensor_parallel_size": 4, "enable_prefix_caching": False}, 1024, test_prompt=True),
    # vllm-project/recipes PR #127 (2025-11-27, AMD's ROCm Llama recipes): Llama-3.3-70B-Instruct FP8 (FP8 KV cache) on
    # one MI355X, vLLM main built that day (0.11.2 assumed) with AITER on; 128 random 8,192 / 1,024 prompts
    # (--ignore-eos) at --max-concurrency 64, prefix caching off, --max-num-batched-tokens 32768, async scheduling.
    "recipes127-mi355x": Run("meta-llama/Llama-3.3-70B-Instruct", "mi355x-288gb", "0.11.2", "closed",
                             {"quantization": "fp8", "kv_cache_dtype": "fp8", "max_num_batched_tokens": 32768,
                              "enable_prefix_caching": False, "async_scheduling": True}, test_prompt=True),
    # vLLM PR #26887 (2025-10-15): Qwen3-Next-80B-A3B-Instruct-FP8 at TP 2 on 2 x H100 (SXM assumed), vLLM 0.11.0
    # (printed), prefix caching off, 0.85 of memory; replayed with the Qwen3-Coder-Next preset (the same qwen3_next
    # dimensions) quantized to FP8. 1,000 fixed-length chat prompts (--ignore-eos) at --max-concurrency 64.
    "vllm-26887-2xh100": Run("Qwen/Qwen3-Coder-Next", "h100-sxm-80gb", "0.11.0", "closed",
                             {"tensor_parallel_size": 2, "quantization": "fp8", "gpu_memory_utilization": 0.85,
                              "enable_prefix_caching": False}, test_prompt=True, endpoint="chat"),
    # vLLM PR #29438 (2025-11-25): Qwen3-VL-32B-Instruct-FP8 on one L40S, text only, --max-model-len 24000, prefix
    # caching off, main of that date (0.11.2 assumed); replayed with the Qwen3-32B-FP8 preset (the same text decoder).
    # 1,000 ShareGPT prompts all at once; outputs stop at EOS or at the reply's length (prompt + output <= 2,048).
    "vllm-29438-l40s": Run("Qwen/Qwen3-32B-FP8", "l40s-48gb", "0.11.2", "rate_inf",
                           {"max_model_len": 24000, "enable_prefix_caching": False}, 1831, test_prompt=True),
    # vLLM PR #20059 (comment of 2025-06-29): Qwen2.5-1.5B-Instruct on one A100 40 GB (the machine the PR's first
    # version, #20050, names; SXM assumed), vLLM's defaults on main of that date (0.9.2 assumed); benchmark_serving.py,
    # 100 ShareGPT prompts at Poisson QPS 1-100, outputs stopping at EOS or at the reply's length (prompt + output
    # <= 2,048); the 'piecewise cg' rows (V1's default CUDA graphs).
    "vllm-20059-a100-40g": Run("Qwen/Qwen2.5-1.5B-Instruct", "a100-sxm-40gb", "0.9.2", "rate", {}, 1815,
                               test_prompt=True),
    # vLLM PR #28992 (2025-11-19): DeepSeek-V3.1 (block FP8) at TP 8 on 8 x H200, main of that date (0.11.1 assumed),
    # the MoE layers on Triton (VLLM_MOE_USE_DEEP_GEMM=0); replayed with the DeepSeek-V3 preset (same architecture).
    # 160 one-token prompts, 100 output tokens each (--ignore-eos), at --max-concurrency 16.
    "vllm-28992-8xh200": Run("deepseek-ai/DeepSeek-V3", "h200-141gb", "0.11.1", "closed", {"tensor_parallel_size": 8},
                             test_prompt=True),
    # vLLM issue #7567 (2024-08-22): Llama-3.1-70B-Instruct BF16 at TP 8 (the maintainer's 'tp8 instance') on 8 x
    # A100-SXM4-40GB, vLLM 0.5.4 assumed (PyTorch 2.4.0), V0 defaults (CUDA graphs: the reporter had dropped
    # --enforce-eager); benchmark_serving.py's defaults: 1,000 ShareGPT prompts all at once, outputs stopping at EOS
    # or at the reply's length (prompt + output <= 2,048).
    "vllm-7567-8xa100-40g": Run("meta-llama/Llama-3.1-70B-Instruct", "a100-sxm-40gb", "0.5.4", "rate_inf",
                                {"tensor_parallel_size": 8}, 1833, test_prompt=True),
    # Moved from the candidates on 7 Dec 2026, predicted first by constants fitted without them
    # (docs/speed-accuracy.md).
    # dennislee22/vLLM-benchmarking: Qwen2-7B-Instruct (Qwen2.5-7B-Instruct's very dimensions) on one A100 80GB (SXM
    # assumed), vLLM 0.10.1.1 as its server log prints, --max-model-len 16384 --gpu-memory-utilization 0.5;
    # benchmark_serving.py's random 1,024 / 1,024 prompts all sent at once, outputs stopping at EOS under the 1,024
    # cap, its test prompt first. Its seeded prompts are the same in every run (prompt i of a longer run is prompt i
    # of a shorter one), and the server cached prefixes: on the server of 4 Sep the 200-prompt run followed the
    # 100-prompt one (its log: a 33 % hit rate), the 500-prompt one both (which filled the cache: nothing counted);
    # on that of 9 Sep the one-request run followed the 50-prompt one (and two unrecorded ones).
    "dennislee22-a100-qwen2-7b-np500": _dennislee22("rate_inf",
                                                    ((1021, 1016, 100), (1020, 1002, 200), (1021, 1005, 500))),
    "dennislee22-a100-qwen2-7b-np200": _dennislee22("rate_inf", ((1021, 1016, 100), (1020, 1002, 200))),
    "dennislee22-a100-qwen2-7b-np1": _dennislee22("closed", ((1020, 1022, 50), (1024, 1024, 1))),
    "dennislee22-a100-qwen2-7b": _dennislee22("rate_inf"),
    # tgarg01/silybench-data: Qwen3-8B with --quantization fp8 (dynamic) on one H100 SXM, vLLM 0.30.0, --max-model-len
    # 16384 --gpu-memory-utilization 0.9; vllm bench serve closed loops of 2,048 / 2,048 fixed-length prompts
    # (--ignore-eos) at 1-128 requests (5 prompts a client); the medians of 3 repeats, throughput only.
    "silybench-h100-qwen3-8b-fp8": Run("Qwen/Qwen3-8B", "h100-sxm-80gb", "0.30.0", "closed",
                                       {"quantization": "fp8", "max_model_len": 16384}),
    # GPUStack's DeepSeek pages on 8 x H200 SXM (the baseline, `vllm serve M -tp 8` and vLLM's defaults):
    # DeepSeek-R1-0528 on 0.11.0 and DeepSeek-V3.2 on 0.13.0 (their presets, block FP8), vllm bench serve on the chat endpoint, the
    # ready check's test prompt first: random prompts all sent at once, every output to its cap (totals / prompts are
    # exactly the requested lengths), and 100 ShareGPT prompts at --max-concurrency 4.
    "gpustackdsr1-h200x8-tp8-rand4k200": Run("deepseek-ai/DeepSeek-V3", "h200-141gb", "0.11.0", "rate_inf",
                                             {"tensor_parallel_size": 8}, 200, test_prompt=True, endpoint="chat"),
    "gpustackdsr1-h200x8-tp8-rand2k100": Run("deepseek-ai/DeepSeek-V3", "h200-141gb", "0.11.0", "rate_inf",
                                             {"tensor_parallel_size": 8}, 100, test_prompt=True, endpoint="chat"),
    "gpustackdsr1-h200x8-tp8-sharegpt-c4": Run("deepseek-ai/DeepSeek-V3", "h200-141gb", "0.11.0", "closed",
                                               {"tensor_parallel_size": 8}, 1820, test_prompt=True, endpoint="chat"),
    "gpustackdsv32-h200x8-tp8-rand2k100": Run("deepseek-ai/DeepSeek-V3.2", "h200-141gb", "0.13.0", "rate_inf",
                                              {"tensor_parallel_size": 8}, 100, test_prompt=True, endpoint="chat"),
    "gpustackdsv32-h200x8-tp8-rand4k200": Run("deepseek-ai/DeepSeek-V3.2", "h200-141gb", "0.13.0", "rate_inf",
                                              {"tensor_parallel_size": 8}, 200, test_prompt=True, endpoint="chat"),
    "gpustackdsv32-h200x8-tp8-rand1k2k": Run("deepseek-ai/DeepSeek-V3.2", "h200-141gb", "0.13.0", "rate_inf",
                                             {"tensor_parallel_size": 8}, 2000, test_prompt=True, endpoint="chat"),
    # GPUStack's GLM-4.6-FP8 page on 8 x H100 SXM (0.11.0, `-tp 8 --gpu-memory-utilization 0.85`): the GLM-4.7 preset
    # (the same glm4_moe architecture) in FP8; 1,000 ShareGPT prompts at once on the chat endpoint.
    "gpustackglm46fp8-h100x8": Run("zai-org/GLM-4.7", "h100-sxm-80gb", "0.11.0", "rate_inf",
                                   {"tensor_parallel_size": 8, "quantization": "fp8", "gpu_memory_utilization": 0.85},
                                   1834, test_prompt=True, endpoint="chat"),
    # SemiAnalysisAI/InferenceX issue #828 (March 2026): gpt-oss-120b on H100 (SXM assumed) at TP 8 and TP 4, vLLM
    # 0.15.1 (the branch's image), --max-num-seqs C --max-num-batched-tokens 8192 --max-model-len 10240, prefix caching
    # off; its benchmark_serving.py client: 10 x C random prompts of 1,024 / 1,024 tokens at --random-range-ratio 0.8
    # (lengths drawn from 819-1,024: 922 on average, as inferencex832's totals show), --ignore-eos, at
    # --max-concurrency C, after 2 x C warm-up requests. A bot's summary of the run: TPOT and throughput only.
    "ix828-h100x8": Run("openai/gpt-oss-120b", "h100-sxm-80gb", "0.15.1", "closed",
                        {"tensor_parallel_size": 8, "max_num_batched_tokens": 8192, "max_model_len": 10240,
                         "enable_prefix_caching": False}),
    "ix828-h100x4": Run("openai/gpt-oss-120b", "h100-sxm-80gb", "0.15.1", "closed",
                        {"tensor_parallel_size": 4, "max_num_batched_tokens": 8192, "max_model_len": 10240,
                         "enable_prefix_caching": False}),
    # Vultr's inference cookbook (concurrency tuning, March 2026): Nemotron-3-Nano-30B-A3B FP8 at TP 2 on an HGX B200,
    # vLLM 0.16.0, --max-model-len 32768 and --gpu-memory-utilization 0.9; vllm bench serve random 2,048 / 512 prompts
    # (50 at one request, 400 above), every output to its cap (c8: 8 / (152 ms + 511 x 3.96 ms) x 512 = 1,882 tok/s
    # against 1,881 printed); 0.16's client sends no test prompt (vllm#30975). Replayed as recipes165.
    "vultr-b200-nemotron3-nano-30b-fp8-tp2": Run("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "b200-180gb", "0.16.0",
                                                 "closed", {"tensor_parallel_size": 2, "quantization": "fp8",
                                                            "max_model_len": 32768, "gpu_memory_utilization": 0.9}),
    # arXiv 2601.09527's raw data (hholtmann/llm-consumer-gpu-benchmark, RTX 5090 on vast.ai, vLLM 0.12.0 as its image
    # pins): --max-model-len 9216 --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9, prefix caching at its
    # default; NVIDIA aiperf 0.3.0 on the chat endpoint (thinking off), 500 synthetic 8,192-token prompts in a closed
    # loop after 5 warm-up requests (prompts of their own), max_tokens 512 with EOS allowed; its TTFT ends at the
    # first chunk with text or reasoning.
    # Qwen3-8B-NVFP4 is Qwen3-8B's config with ModelOpt's NVFP4 quantization (group 16, the LM head excluded).
    "knoop2601-rtx5090-qwen3-8b-bf16": Run("Qwen/Qwen3-8B", "rtx-5090", "0.12.0", "closed", KNOOP_SETTINGS, 512,
                                           first_token="text", endpoint="chat"),
    "knoop2601-rtx5090-qwen3-8b-nvfp4": Run(_config("nvidia__Qwen3-8B-NVFP4"), "rtx-5090", "0.12.0", "closed",
                                            KNOOP_SETTINGS, 512, first_token="text", endpoint="chat"),
    "knoop2601-rtx5090-gpt-oss-20b": Run("openai/gpt-oss-20b", "rtx-5090", "0.12.0", "closed", KNOOP_SETTINGS, 512,
                                         first_token="text", endpoint="chat"),
}


# vLLM's ShareGPT sampler drops pairs whose prompt + output exceed 2,048 tokens (benchmark_throughput.py and
# benchmark_serving.py, sample_requests), so no output is longer than that minus its prompt.
SHAREGPT_MAX_TOKENS = 2048


def sharegpt_longest_output(mean_output_tokens: float, prompt_tokens: float, requests: int) -> int:
    """Expected longest of ``requests`` ShareGPT outputs of this mean, taking the lengths as exponential (the
    records give only means; ShareGPT replies have a long tail): mean x H_n, the n-th harmonic number, capped by the
    sampler's 2,048-token limit."""
    harmonic = sum(1 / i for i in range(1, requests + 1))
    return round(min(mean_output_tokens * harmonic, SHAREGPT_MAX_TOKENS - prompt_tokens))


def load_records() -> list[dict]:
    """The shared records and the mined ones, in that order."""
    return [json.loads(line) for path in (RECORDS, MINED) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def refused(record: dict) -> str | None:
    """Why the planner says the record's deployment cannot start (None when it starts). The run was measured, so
    a reason here is the planner's error, reported, not scored."""
    result = deployment(record["id"])
    return None if result.fits else (result.error or "does not start").split("\n")[0]


def scored_records() -> list[dict]:
    """The records whose deployment the planner starts: the ones the speed model can be scored on."""
    return [r for r in load_records() if refused(r) is None]


def run_for(record: dict) -> Run:
    for prefix, run in RUNS.items():
        if record["id"].startswith(prefix):
            return run
    raise KeyError(f"no replay mapping for record {record['id']}")


def source_of(record: dict) -> str:
    """Records of one publication share a source group (held out together in cross-validation)."""
    return record["id"].split("-")[0] if not record["id"].startswith("vllm-") else "-".join(record["id"].split("-")[:2])


def measured(record: dict) -> dict[str, float]:
    """The figures a record gives, by metric (means where printed, otherwise medians), less those its ``unscored``
    field names (a figure its own source contradicts, with the reason)."""
    pick = lambda *names: next((record[n] for n in names if record.get(n) is not None), None)  # noqa: E731
    values = {"ttft_ms": pick("ttft_ms_mean", "ttft_ms_median"), "tpot_ms": pick("tpot_ms_mean", "tpot_ms_median"),
              "output_tok_s": record.get("output_throughput_tok_s"), "e2e_ms": record.get("e2e_ms_mean"),
              "request_per_s": record.get("request_throughput") if record.get("output_throughput_tok_s") is None
              else None}
    return {k: float(v) for k, v in values.items() if v is not None and v > 0 and k not in record.get("unscored", {})}


def lengths(record: dict) -> tuple[int, int]:
    """Prompt and output tokens; the ridgepoint prompts are ~8 tokens ('Count from one to two hundred:').

    A ShareGPT run that prints only throughputs gives its mean lengths as output / requests and
    (total - output) / requests.
    """
    rate, out, total = record["request_throughput"], record["output_throughput_tok_s"], record["total_throughput_tok_s"]
    if record["input_tokens"] is None and rate and out and total:
        return round((total - out) / rate), round(out / rate)
    prompt = record["input_tokens"] or 8
    output = record["output_tokens"] or 128
    return max(1, round(prompt)), max(1, round(output))


@cache
def deployment(record_id: str) -> Estimate:
    record = next(r for r in load_records() if r["id"] == record_id)
    run = run_for(record)
    scenario = Scenario(model=run.model, gpu=run.gpu, vllm_version=run.vllm_version, **run.settings)
    return estimate(scenario, load_model_spec(run.model))


def predict(record: dict, constants: SpeedConstants | None = None, *, step_by_step: bool = True) -> dict[str, float]:
    """Our prediction of every metric the record measures, as its harness times them; ``step_by_step=False``
    replays a finite closed loop as the steady state instead of simulating it (what the fit uses, see
    ``log_errors``).

    NOTE: the untimed lead tokens move only the TTFT: the harness's TPOT and throughput count the text chunks, which
    the record's output length already is, and the lead's 3 steps are 0.3 % of a ~900-token request."""
    values = served(record, constants, step_by_step=step_by_step)
    lead = untimed_lead_tokens(run_for(record))
    return values | {"ttft_ms": values["ttft_ms"] + lead * values["tpot_ms"]} if lead else values


def served(record: dict, constants: SpeedConstants | None = None, *, step_by_step: bool = True) -> dict[str, float]:
    """The record's metrics with the first token as vLLM's own client times it (the first streamed chunk)."""
    run, result = run_for(record), deployment(record["id"])
    prompt, output = lengths(record)
    concurrency = record.get("concurrency")
    if run.mode == "burst":
        replica = _Replica(result, constants)
        batch = int(concurrency or record["num_prompts"])
        longest = run.longest_output_tokens
        if record.get("dataset") == "sharegpt":
            longest = sharegpt_longest_output(output, prompt, batch)
        timeline = burst_timeline(replica.costs, replica.rates, replica.constants, requests=batch,
                                  prompt_tokens=prompt, output_tokens=output, budget_tokens=replica.budget,
                                  longest_output_tokens=longest)
        pp_total = replica.token_latency_s(timeline.total_s) + replica.constants.request_overhead_s
        return {"ttft_ms": (timeline.mean_first_token_s + replica.constants.request_overhead_s) * 1e3,
                "tpot_ms": replica.token_latency_s(timeline.decode_step.total_s) * 1e3,
                "output_tok_s": batch * output / pp_total, "request_per_s": batch / pp_total,
                "e2e_ms": pp_total * 1e3}
    if step_by_step and simulated_step_by_step(record, result):
        return _simulated(record, result, constants, prompt, output)
    if run.mode == "closed":
        traffic = Traffic(input_tokens=prompt, output_tokens=output, concurrency=int(concurrency),
                          endpoint=run.endpoint)
        if concurrency == 1 and record.get("num_prompts") and any(cached := cached_prompt_tokens(record, result)):
            return _one_at_a_time_with_cached(result, constants, prompt, output, cached, run.endpoint)
    elif run.mode == "rate_inf":
        traffic = Traffic(input_tokens=prompt, output_tokens=output, concurrency=int(record["num_prompts"]),
                          endpoint=run.endpoint)
    else:
        traffic = Traffic(input_tokens=prompt, output_tokens=output, request_rate=float(record["request_rate"]),
                          endpoint=run.endpoint)
    speed = speed_estimate(result, traffic, constants=constants, prices={})
    values = {"ttft_ms": speed.ttft_ms, "tpot_ms": speed.tpot_ms, "output_tok_s": speed.output_throughput_tok_s,
              "request_per_s": speed.request_throughput, "e2e_ms": speed.e2e_ms}
    if run.mode == "rate_inf":
        # All prompts at once: the engine runs at its limit and the rest queue once (a finite burst, not a loop).
        served = speed.concurrency.served
        service_ms = speed.e2e_ms - speed.queue_wait_ms
        rate = served / (service_ms / 1e3)
        wait = burst_wait(int(record["num_prompts"]), served, rate)
        values.update(ttft_ms=speed.ttft_ms - speed.queue_wait_ms + wait.mean_s * 1e3,
                      request_per_s=rate, output_tok_s=rate * output)
    elif run.mode == "rate":
        # A finite run: the last arrival still needs its own end-to-end time after the arrivals stop.
        prompts = record["num_prompts"]
        duration = prompts / speed.request_throughput + speed.e2e_ms / 1e3
        values.update(request_per_s=prompts / duration, output_tok_s=prompts * output / duration)
    return values


def prefix_caching(record: dict, result: Estimate) -> bool:
    """Whether the record's server cached prefixes: V1's default, V0's off, unless the run says."""
    return run_for(record).settings.get("enable_prefix_caching", engine_generation(result) != "V0")


def first_prompt_cached(record: dict, result: Estimate) -> bool:
    """Whether the run's first prompt was in the server's prefix cache: vLLM's benchmark client sent it once before
    the run (``Run.test_prompt``) and the server caches prefixes."""
    return run_for(record).test_prompt and prefix_caching(record, result)


def cached_prompt_tokens(record: dict, result: Estimate) -> tuple[int, ...]:
    """Tokens of each of the record's prompts that the server found cached when the run began: its test prompt's
    (``cached_test_prompt_tokens``) and what the earlier runs of its harness's sweep left (``Run.sweep``)."""
    count, (prompt, output), run = int(record["num_prompts"]), lengths(record), run_for(record)
    if not prefix_caching(record, result):
        return (0,) * count
    block = result.layout.block_size
    cached = [0] * count
    if (prompt, output, count) in run.sweep:
        fits = tuple(earlier for earlier in run.sweep[:run.sweep.index((prompt, output, count))]
                     if earlier[0] + earlier[1] <= result.settings.max_model_len)  # longer ones vLLM refuses
        cached = list(sweep_cached_prompt_tokens(prompt, count, fits, block,
                                                 result.capacity.num_gpu_blocks * block))
    if run.test_prompt:
        cached[0] = max(cached[0], cached_test_prompt_tokens(prompt, block))
    return tuple(cached)


def _one_at_a_time_with_cached(result: Estimate, constants: SpeedConstants | None, prompt: int, output: int,
                               cached: tuple[int, ...], endpoint: Endpoint) -> dict[str, float]:
    """A closed loop of one request whose prompts find ``cached`` tokens each in the prefix cache: the means over
    the run's requests take each prompt's prefill of its uncached tail.

    NOTE: a cached request is priced as a prompt of the uncached tail alone (its attention over the cached blocks
    is left out: a small share of the step for the test prompt's one-block tail, up to ~10 % for a sweep's
    half-cached prompt; the scored prediction simulates the run step by step, which counts it)."""
    full = speed_estimate(result, Traffic(input_tokens=prompt, output_tokens=output, concurrency=1, endpoint=endpoint),
                          constants=constants, prices={})
    tails = {tail: speed_estimate(result, Traffic(input_tokens=tail, output_tokens=output, concurrency=1,
                                                  endpoint=endpoint),
                                  constants=constants, prices={}).ttft_ms
             for tail in {prompt - hit for hit in cached if hit}}
    saved_ms = sum(full.ttft_ms - tails[prompt - hit] for hit in cached if hit) / len(cached)
    e2e_ms = full.e2e_ms - saved_ms
    return {"ttft_ms": full.ttft_ms - saved_ms, "tpot_ms": full.tpot_ms, "e2e_ms": e2e_ms,
            "output_tok_s": full.output_throughput_tok_s * full.e2e_ms / e2e_ms,
            "request_per_s": full.request_throughput * full.e2e_ms / e2e_ms}


# "no --ignore-eos", "no ignore_eos set", "ignore-eos not stated": a dataset note that names the flag to say it was off
NEGATED_IGNORE_EOS = re.compile(r"\bno -*ignore[-_]eos|-*ignore[-_]eos (?:not|was not|unset)\b")


def fixed_output_lengths(record: dict) -> bool:
    """Whether every request of the record generated the same count: ``--ignore-eos`` or a harness that fixes the
    lengths (otherwise outputs stop at EOS)."""
    dataset = NEGATED_IGNORE_EOS.sub("", (record.get("dataset") or "").lower())
    return "ignore-eos" in dataset or "ignore_eos" in dataset or "fixed lengths" in dataset


def simulated_step_by_step(record: dict, result: Estimate) -> bool:
    """Whether the scored replay simulates the record's finite run (calculator/speed/bench.py) rather than take a
    steady state: a known number of prompts on one pipeline stage, sent by a closed loop of several clients (or a
    one-request sweep whose earlier runs left prefixes cached), or arriving at a rate or all at once on a V1 engine
    (the simulation schedules as V1 does)."""
    run = run_for(record)
    if not record.get("num_prompts") or result.settings.pipeline_parallel_size != 1:
        return False
    if run.mode == "closed":
        return (record.get("concurrency") or 1) > 1 or bool(run.sweep)
    return run.mode in ("rate", "rate_inf") and engine_generation(result) != "V0"


def fitted_as_steady_state(record: dict) -> bool:
    """Whether the fit's steady-state replay (``log_errors(step_by_step=False)``) stands for the record's run.

    NOTE: not for all prompts sent at once to a V1 engine: a finite burst of N prompts is no steady state of N
    requests (GPUStack's 100 prompts of 32,000 tokens for gpt-oss-20b on one H100 read 28.5 requests/s as a steady
    state, 1.5 simulated, 0.87 measured: the prefills queue behind one another), and simulating costs ~0.3 s a
    record, ~5,000 times a fit. Such runs are scored (simulated) and held out like every record, but not fitted."""
    return not (run_for(record).mode == "rate_inf" and simulated_step_by_step(record, deployment(record["id"])))


def bench_load(record: dict, result: Estimate, prompt: int, output: int) -> BenchLoad:
    """The record's run as ``vllm bench serve`` sends it: num_prompts requests, at most C in flight (a closed loop)
    or arriving at the record's rate (Poisson, the client's seeded draws); the outputs fixed, or spread as EOS stops
    them (``output_lengths.py``) up to the request's max_tokens (``Run.longest_output_tokens``) or else the context
    left after the prompt."""
    count, run = int(record["num_prompts"]), run_for(record)
    if fixed_output_lengths(record):
        outputs = (output,) * count
    else:
        limit = run.longest_output_tokens or result.settings.max_model_len - prompt
        outputs = eos_output_lengths(float(record["output_tokens"]), count, cap_tokens=limit)
    return BenchLoad(input_tokens=(prompt,) * count, output_tokens=outputs,
                     max_concurrency=int(record["concurrency"]) if record.get("concurrency") else None,
                     request_rate=float(record["request_rate"]) if run.mode == "rate" else None,
                     first_prompt_cached=first_prompt_cached(record, result),
                     cached_prompt_tokens=cached_prompt_tokens(record, result) if run.sweep else (),
                     endpoint=run.endpoint)


def _simulated(record: dict, result: Estimate, constants: SpeedConstants | None, prompt: int,
               output: int) -> dict[str, float]:
    """A finite run replayed step by step (calculator/speed/bench.py): a closed loop's opening burst, the waves of
    fixed lengths or their de-synchronisation when outputs stop at EOS, and its tail; a Poisson run's arrivals,
    including a rate above what the engine serves, whose queue grows until the arrivals stop (the steady state has
    no answer there: its queue never ends)."""
    figures = bench_prediction(result, bench_load(record, result, prompt, output), constants=constants)
    ttft = figures.mean_ttft_ms if record.get("ttft_ms_mean") is not None else figures.median_ttft_ms
    tpot = figures.mean_tpot_ms if record.get("tpot_ms_mean") is not None else figures.median_tpot_ms
    return {"ttft_ms": ttft, "tpot_ms": tpot, "output_tok_s": figures.output_throughput,
            "request_per_s": figures.request_throughput, "e2e_ms": figures.mean_e2el_ms}


def log_errors(constants: SpeedConstants | None = None, records: list[dict] | None = None, *,
               step_by_step: bool = True) -> list[tuple]:
    """(record id, metric, log(predicted / measured)) for every measured figure.

    NOTE: the fit passes ``step_by_step=False``: simulating the finite closed loops makes one loss evaluation ~3x
    dearer (hours of refits on two cores), and the fitted terms are the step's hardware and overhead terms that
    both replays share; the scored predictions simulate."""
    rows = []
    for record in records or load_records():
        got = predict(record, constants, step_by_step=step_by_step)
        for metric, value in measured(record).items():
            if metric in got and math.isfinite(got[metric]) and got[metric] > 0:
                rows.append((record["id"], metric, math.log(got[metric] / value)))
    return rows


def load_of(record: dict) -> Traffic:
    """The steady load that stands for the record's run when it is classified (regime, requests in the engine)."""
    prompt, output = lengths(record)
    run = run_for(record)
    if run.mode == "rate":
        return Traffic(input_tokens=prompt, output_tokens=output, request_rate=float(record["request_rate"]))
    users = record.get("concurrency") if run.mode in ("closed", "burst") else None
    return Traffic(input_tokens=prompt, output_tokens=output, concurrency=int(users or record["num_prompts"]))


@cache
def regime_of(record_id: str) -> str:
    """One request, below the knee or saturated (calculator/speed/bands.py), as the model sees the record's load."""
    from calculator.speed.bands import regime_of as classify

    record = next(r for r in load_records() if r["id"] == record_id)
    return classify(speed_estimate(deployment(record_id), load_of(record), prices={}))


@cache
def running_requests(record_id: str) -> float:
    record = next(r for r in load_records() if r["id"] == record_id)
    return speed_estimate(deployment(record_id), load_of(record), prices={}).running_requests
