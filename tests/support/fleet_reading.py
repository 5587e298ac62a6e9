"""A hand-made Prometheus reading of a small fleet, every number chosen so tests can work results out by hand.

Replica A (llama, prod) is saturated, B (llama, staging) appeared within the range, C (qwen, prod) is idle, and D
(llama, prod) served requests early in the range and is gone by its end. Steps of 10 s from 1000 to 1100.
"""

from __future__ import annotations

from calculator.observe.fleet_client import FleetReading, Sample, Series
from calculator.observe.promql import time_range

WINDOW = time_range(end_s=1100.0, duration_s=100.0, max_points=11)  # steps of 10 s: 1000, 1010, ..., 1100
TIMES = [1000.0 + 10 * i for i in range(11)]


def target(instance: str, namespace: str, model: str | None = "llama") -> dict[str, str]:
    labels = {"job": "vllm", "instance": instance, "namespace": namespace, "engine": "0"}
    return {**labels, "model_name": model} if model else labels


def samples(labels: dict[str, str], values: dict[str, float]) -> list[Sample]:
    return [Sample(labels={"__name__": name, **labels}, value=value) for name, value in values.items()]


def cache_config(instance: str, namespace: str, blocks: int, concurrency: str) -> Sample:
    return Sample(labels={"__name__": "vllm:cache_config_info", **target(instance, namespace, None),
                          "block_size": "16", "num_gpu_blocks": str(blocks), "kv_cache_size_tokens": str(blocks * 16),
                          "kv_cache_max_concurrency": concurrency, "cache_dtype": "auto"}, value=1.0)


def histogram(labels: dict[str, str], name: str, buckets: dict[str, float], total: float) -> list[Sample]:
    count = buckets["+Inf"]
    return [*(Sample(labels={"__name__": f"vllm:{name}_bucket", **labels, "le": le}, value=v)
              for le, v in buckets.items()),
            Sample(labels={"__name__": f"vllm:{name}_sum", **labels}, value=total),
            Sample(labels={"__name__": f"vllm:{name}_count", **labels}, value=count)]


A, B, C = target("a:8000", "prod"), target("b:8000", "staging"), target("c:8000", "prod", "qwen")
D = target("d:8000", "prod")
AT_END = (
    *samples(A, {"vllm:num_requests_running": 2, "vllm:num_requests_waiting": 3, "vllm:kv_cache_usage_perc": 0.9,
                 "vllm:num_preemptions_total": 7, "vllm:prompt_tokens_total": 5000,
                 "vllm:generation_tokens_total": 9000, "vllm:prefix_cache_hits_total": 300,
                 "vllm:prefix_cache_queries_total": 1200}),
    cache_config("a:8000", "prod", 101, "2.0"),  # 1,616 tokens / max_model_len 808
    *histogram(A, "request_prompt_tokens", {"100.0": 10, "200.0": 30, "500.0": 40, "+Inf": 40}, 8000),
    *histogram(A, "request_generation_tokens", {"100.0": 20, "200.0": 40, "+Inf": 40}, 5000),
    *samples(B, {"vllm:num_requests_running": 1, "vllm:num_requests_waiting": 0, "vllm:kv_cache_usage_perc": 0.1,
                 "vllm:num_preemptions_total": 0, "vllm:prompt_tokens_total": 2000,
                 "vllm:generation_tokens_total": 1000, "vllm:prefix_cache_hits_total": 0,
                 "vllm:prefix_cache_queries_total": 500}),
    cache_config("b:8000", "staging", 201, "3.98019801980198"),  # 3,216 / 808
    *histogram(B, "request_prompt_tokens", {"100.0": 2, "200.0": 6, "500.0": 10, "+Inf": 10}, 2500),
    *histogram(B, "request_generation_tokens", {"100.0": 10, "200.0": 10, "+Inf": 10}, 400),
    *samples(C, {"vllm:num_requests_running": 0, "vllm:num_requests_waiting": 0, "vllm:kv_cache_usage_perc": 0.0,
                 "vllm:num_preemptions_total": 0, "vllm:generation_tokens_total": 0}),
    cache_config("c:8000", "prod", 50, "1.0"),
)
AT_START = (  # B did not exist yet; C and D are left out (no counters changed for C, D is not at the end)
    *samples(A, {"vllm:num_requests_running": 0, "vllm:num_preemptions_total": 4, "vllm:prompt_tokens_total": 1000,
                 "vllm:generation_tokens_total": 3000, "vllm:prefix_cache_hits_total": 100,
                 "vllm:prefix_cache_queries_total": 200}),
    *histogram(A, "request_prompt_tokens", {"100.0": 5, "200.0": 10, "500.0": 10, "+Inf": 10}, 1500),
    *histogram(A, "request_generation_tokens", {"100.0": 10, "200.0": 10, "+Inf": 10}, 600),
)


def series(labels: dict[str, str], name: str, values: list[float]) -> Series:
    return Series(labels={"__name__": name, **labels}, points=tuple(zip(TIMES, values)))


OVER_RANGE = (
    series(A, "vllm:num_requests_running", [0, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2]),
    series(A, "vllm:num_requests_waiting", [0, 0, 1, 3, 4, 3, 3, 3, 3, 3, 3]),
    series(A, "vllm:kv_cache_usage_perc", [0, .2, .5, .85, .95, .9, .9, .9, .9, .9, .9]),
    series(B, "vllm:num_requests_running", [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]),
    series(B, "vllm:num_requests_waiting", [0] * 11),
    series(B, "vllm:kv_cache_usage_perc", [0, 0, 0, .1, .1, .1, .1, .1, .1, .1, .1]),
    series(C, "vllm:num_requests_running", [0] * 11),
    series(C, "vllm:num_requests_waiting", [0] * 11),
    Series(labels={"__name__": "vllm:num_requests_running", **D}, points=((1000.0, 3), (1010.0, 3), (1020.0, 0))),
    Series(labels={"__name__": "vllm:num_requests_waiting", **D}, points=((1000.0, 2), (1010.0, 0), (1020.0, 0))),
)
READING = FleetReading(base_url="http://prometheus:9090", time_range=WINDOW, at_end=AT_END, at_start=AT_START,
                       over_range=OVER_RANGE)
