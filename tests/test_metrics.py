"""Parsing real vLLM /metrics captures (vLLM 0.32.0 CPU, from shared/data) and the older metric generation."""

from __future__ import annotations

from pathlib import Path

import pytest

from calculator.observe.metrics import NotVllmMetrics, parse_metrics, rates

CAPTURES = Path(__file__).parent / "data" / "vllm-metrics"
SATURATED = (CAPTURES / "vllm-0.32.0-cpu-saturated.txt").read_text()
DEFAULT = (CAPTURES / "vllm-0.32.0-cpu.txt").read_text()


def test_saturated_capture_values_as_exposed():
    engine = parse_metrics(SATURATED).engine("tiny")
    assert (engine.model_name, engine.engine) == ("tiny", "0")
    assert (engine.running, engine.waiting, engine.kv_cache_usage) == (0.0, 0.0, 0.0)
    assert engine.usage_metric == "vllm:kv_cache_usage_perc"
    assert engine.preemptions_total == 8.0
    assert (engine.prefix_cache_queries_total, engine.prefix_cache_hits_total) == (36.0, 0.0)
    assert (engine.prompt_tokens_total, engine.generation_tokens_total) == (36.0, 6048.0)
    assert engine.config_int("num_gpu_blocks") == 16 and engine.config_int("block_size") == 128
    assert engine.config_int("num_gpu_blocks_override") == 16
    assert engine.config_float("kv_cache_max_concurrency") == 2.0 and engine.config_int("kv_cache_size_tokens") == 2048


def test_length_histograms():
    histograms = parse_metrics(SATURATED).engine("tiny").histograms
    prompt, generated = histograms["prompt_tokens"], histograms["generation_tokens"]
    assert (prompt.count, prompt.sum) == (9.0, 36.0) and prompt.mean == 4.0
    assert generated.count == 9.0 and generated.mean == 672.0
    assert prompt.buckets[-1][0] == float("inf")


def test_default_capture_cache_config():
    engine = parse_metrics(DEFAULT).engine("tiny")
    assert engine.config_int("num_gpu_blocks") == 16384
    assert engine.config_int("kv_cache_size_tokens") == 2_097_152
    assert engine.config_float("kv_cache_max_concurrency") == 1024.0
    assert engine.config_int("num_gpu_blocks_override") is None


OLD_GENERATION = """\
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="llama"} 0.25
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="llama"} 3.0
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{model_name="llama"} 1.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",gpu_memory_utilization="0.82",num_gpu_blocks="573",num_cpu_blocks="1024"} 1.0
"""


def test_older_generation_without_engine_label():
    engine = parse_metrics(OLD_GENERATION).engine("llama")
    assert engine.engine == "0" and engine.usage_metric == "vllm:gpu_cache_usage_perc"
    assert (engine.kv_cache_usage, engine.running, engine.swapped) == (0.25, 3.0, 1.0)
    assert engine.used_blocks == 0.25 * 572
    assert engine.config_float("gpu_memory_utilization") == 0.82


def test_two_engines_and_two_models():
    text = "\n".join([
        "# TYPE vllm:kv_cache_usage_perc gauge",
        'vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.5',
        'vllm:kv_cache_usage_perc{engine="1",model_name="a"} 0.75',
        'vllm:kv_cache_usage_perc{engine="0",model_name="b"} 0.1',
        "# TYPE vllm:cache_config_info gauge",
        'vllm:cache_config_info{engine="0",num_gpu_blocks="101",block_size="16"} 1.0',
        'vllm:cache_config_info{engine="1",num_gpu_blocks="201",block_size="16"} 1.0', ""])
    snapshot = parse_metrics(text)
    assert [(e.model_name, e.engine) for e in snapshot.engines] == [("a", "0"), ("a", "1"), ("b", "0")]
    assert snapshot.engine("a", "1").used_blocks == 0.75 * 200


def test_nan_and_inf_are_dropped_with_a_warning():
    text = ('# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine="0",model_name="m"} NaN\n'
            '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0",model_name="m"} +Inf\n'
            '# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine="0",model_name="m"} 2\n')
    snapshot = parse_metrics(text)
    engine = snapshot.engine("m")
    assert (engine.kv_cache_usage, engine.running, engine.waiting) == (None, None, 2.0)
    assert len(snapshot.warnings) == 2


@pytest.mark.parametrize("text", ["", "<html><body>Welcome to nginx</body></html>", "\x00\x01garbage{{{",
                                  "# TYPE node_load1 gauge\nnode_load1 0.5\n"])
def test_not_vllm(text):
    with pytest.raises(NotVllmMetrics):
        parse_metrics(text)


def test_rates_and_restarts():
    before = parse_metrics(SATURATED).engine("tiny")
    after = before.model_copy(update={"preemptions_total": 18.0, "generation_tokens_total": 7048.0,
                                      "prefix_cache_queries_total": 136.0, "prefix_cache_hits_total": 50.0})
    change = rates(before, after, interval_s=5.0)
    assert (change.preemptions_per_s, change.generation_tokens_per_s) == (2.0, 200.0)
    assert change.prefix_cache_hit_rate == 0.5 and not change.restarted
    restarted = rates(after, before, interval_s=5.0)
    assert restarted.restarted and restarted.preemptions_per_s is None


# --- issue 28: histograms with NaN, repeated or -Inf bounds; a /metrics of 8 MiB of buckets ----------------------

HISTOGRAM = """# TYPE vllm:request_prompt_tokens histogram
vllm:request_prompt_tokens_bucket{{engine="0",le="1.0",model_name="m"}} 1.0
vllm:request_prompt_tokens_bucket{{engine="0",le="{bound}",model_name="m"}} 2.0
vllm:request_prompt_tokens_bucket{{engine="0",le="+Inf",model_name="m"}} 3.0
vllm:request_prompt_tokens_count{{engine="0",model_name="m"}} 3.0
vllm:request_prompt_tokens_sum{{engine="0",model_name="m"}} 30.0
vllm:num_requests_running{{engine="0",model_name="m"}} 1.0
"""


@pytest.mark.parametrize("bound", ["NaN", "nan", "1.0", "-Inf"])
def test_a_histogram_with_a_nan_repeated_or_minus_infinite_bound_is_ignored_with_a_warning(bound):
    snapshot = parse_metrics(HISTOGRAM.format(bound=bound))
    assert snapshot.engine("m").histograms == {} and snapshot.engine("m").running == 1.0
    assert "the prompt_tokens histogram of m (engine 0) is not a valid histogram" in snapshot.warnings[0]


def test_a_histogram_with_a_1e308_bound_is_kept_as_sent():
    """A huge but ordered bound is a histogram; what it implies is checked where it becomes a workload."""
    histogram = parse_metrics(HISTOGRAM.format(bound="1e308")).engine("m").histograms["prompt_tokens"]
    assert histogram.buckets == ((1.0, 1.0), (1e308, 2.0), (float("inf"), 3.0))


def test_eight_mebibytes_of_buckets_are_parsed_within_a_line_budget():
    """Issue 28: 8 MiB of histogram buckets took ~6 s of CPU to parse after the deadline, on every refresh."""
    import time

    from calculator.observe.metrics import MAX_PARSED_LINES

    lines = [f'vllm:request_prompt_tokens_bucket{{engine="0",le="{i}.0",model_name="m"}} {i}' for i in range(120_000)]
    text = SATURATED + "\n".join(lines) + "\n"
    assert len(text) > 8 << 20
    started = time.process_time()
    snapshot = parse_metrics(text)
    assert time.process_time() - started < 3  # ~8,000 lines; the whole text took ~15 s of CPU on the same machine
    left_out = int(snapshot.warnings[0].split(" ")[0].replace(",", ""))
    assert 120_000 - MAX_PARSED_LINES < left_out < 120_000  # the capture's own lines come first and are read
    assert snapshot.warnings[0] == (f"{left_out:,} more lines of vLLM metrics than this page reads "
                                    f"({MAX_PARSED_LINES:,}); the rest were not read")
    assert snapshot.engine("tiny").preemptions_total == 8.0
