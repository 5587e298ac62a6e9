"""Fleet logic on a hand-made Prometheus reading (tests/support/fleet_reading.py): three live replicas and one
gone, every expected number worked out here."""

from __future__ import annotations

import math

import pytest
from support.fleet_reading import AT_START, OVER_RANGE, READING, cache_config

from calculator import Scenario, estimate, load_model_spec, workload_capacity
from calculator.observe.fleet import (
    engine_from_samples,
    flags,
    fleet_plan,
    gpu_change,
    group_replicas,
    groupable_labels,
    merge_histograms,
    observed_workload,
    replica_scenario,
    replicas_from_reading,
    requests_that_fit,
    what_if,
)
from calculator.observe.metrics import Histogram


@pytest.fixture(scope="module")
def replicas():
    return {r.name: r for r in replicas_from_reading(READING)}


def test_replicas_present_at_the_end_with_their_settings_from_cache_config_info(replicas):
    assert sorted(replicas) == ["a:8000", "b:8000", "c:8000"]
    a = replicas["a:8000"]
    assert a.now.model_name == "llama" and a.labels["namespace"] == "prod"
    assert a.now.cache_config == {"block_size": "16", "num_gpu_blocks": "101", "kv_cache_size_tokens": "1616",
                                  "kv_cache_max_concurrency": "2.0", "cache_dtype": "auto"}
    assert (a.usable_blocks, a.kv_groups, a.max_model_len) == (100, 1, 808)
    assert replicas["b:8000"].max_model_len == 808
    assert (a.now.running, a.now.waiting, a.now.kv_cache_usage, a.now.preemptions_total) == (2, 3, 0.9, 7)


def test_increases_over_the_range_count_from_zero_for_a_replica_that_appeared(replicas):
    a, b = replicas["a:8000"], replicas["b:8000"]
    assert a.increases == {"preemptions_total": 3, "prompt_tokens_total": 4000, "generation_tokens_total": 6000,
                           "prefix_cache_hits_total": 200, "prefix_cache_queries_total": 1000}
    assert b.increases["prompt_tokens_total"] == 2000 and b.increases["prefix_cache_queries_total"] == 500
    assert a.per_second("generation_tokens_total") == 60.0 and a.prefix_cache_hit_rate == 0.2
    assert a.histograms["prompt_tokens"] == Histogram(buckets=((100, 5), (200, 20), (500, 30), (math.inf, 30)),
                                                      sum=6500, count=30)
    assert b.histograms["generation_tokens"].count == 10


def test_a_counter_that_went_down_means_a_restart_and_counts_from_zero():
    restarted = READING.model_copy(update={"at_start": tuple(
        s.model_copy(update={"value": 10_000.0}) if s.labels["__name__"] == "vllm:prompt_tokens_total" else s
        for s in AT_START)})
    assert {r.name: r for r in replicas_from_reading(restarted)}["a:8000"].increases["prompt_tokens_total"] == 5000


def test_peaks_and_saturated_steps_over_the_range(replicas):
    a = replicas["a:8000"]
    assert (a.peak_running, a.peak_waiting, a.peak_usage) == (2, 4, 0.95)
    assert a.saturated_steps == 8  # usage >= 0.8 with requests waiting from 1030 to 1100


def test_group_by_model_sums_the_load_of_every_series_including_a_gone_replica(replicas):
    groups = {g.title: g for g in group_replicas(list(replicas.values()), OVER_RANGE)}
    assert sorted(groups) == ["llama", "qwen"]
    llama = groups["llama"]
    assert [r.name for r in llama.replicas] == ["a:8000", "b:8000"]
    # demand per step: D's 5 and 3, then A (+ B from 1030): 3, 6, 7, 6, ...
    assert [r + w for r, w in zip(llama.running, llama.waiting)] == [5, 4, 3, 6, 7, 6, 6, 6, 6, 6, 6]
    assert llama.peak_demand == 7 and llama.kv_cache_tokens == 1616 + 3216
    assert llama.used_tokens[4] == pytest.approx(0.95 * 1616 + 0.1 * 3216)


def test_group_by_chosen_labels(replicas):
    groups = group_replicas(list(replicas.values()), OVER_RANGE, by=["namespace"])
    assert [g.title for g in groups] == ["llama · namespace=prod", "llama · namespace=staging",
                                         "qwen · namespace=prod"]
    assert groups[0].peak_demand == 6  # A and D only
    assert groupable_labels(replicas.values()) == ["instance", "job", "namespace"]


def test_observed_workload_merges_the_replicas_histograms(replicas):
    workload = observed_workload([replicas["a:8000"], replicas["b:8000"]])
    # prompts: (100: 7, 200: 26, 500: 40) of 40, sum 9,000: mean 225, p95 = 200 + 300 x 12/14 = 457.1 -> 458
    # outputs: (100: 20, 200: 40) of 40, sum 4,800: mean 120, p95 = 100 + 100 x 18/20 = 190
    # prefix hits 200 of 1,500 queried tokens: 13.3 % of 225 = 30 shared tokens
    assert (workload.prompt_tokens_mean, workload.prompt_tokens_p95) == (225, 458)
    assert (workload.output_tokens_mean, workload.output_tokens_p95) == (120, 190)
    assert workload.shared_prefix_tokens == 30 and workload.parallel_samples == 1


def test_merging_histograms_with_different_bounds_counts_at_the_nearest_bound_below():
    short = Histogram(buckets=((10, 1), (100, 3), (math.inf, 3)), sum=50, count=3)
    long = Histogram(buckets=((10, 2), (50, 4), (100, 5), (math.inf, 6)), sum=900, count=6)
    assert merge_histograms([short, long]) == Histogram(
        buckets=((10, 3), (50, 5), (100, 8), (math.inf, 9)), sum=950, count=9)


def test_requests_that_fit_and_the_fleet_plan(replicas):
    llama = group_replicas(list(replicas.values()), OVER_RANGE)[0]
    workload = observed_workload(llama.replicas)
    # p95 request: 458 + 190 = 648 tokens -> 41 blocks of 16; 28 full prompt blocks, 1 of them the shared prefix:
    # 27 own prompt blocks + 13 tail blocks = 40 per request, plus the prefix block once.
    assert requests_that_fit(replicas["a:8000"], workload) == (100 - 1) // 40 == 2
    assert requests_that_fit(replicas["b:8000"], workload) == (200 - 1) // 40 == 4
    plan = fleet_plan(llama, workload, headroom_percent=20)
    assert plan.target_concurrent_requests == 7  # the observed peak
    assert plan.required_concurrent_requests == 9  # ceil(7 x 1.2)
    assert plan.fleet_concurrent_requests == 6 and plan.per_replica == {"a:8000": 2, "b:8000": 4}
    assert plan.replicas_needed == 3  # 9 requests / 3 per replica on average
    assert fleet_plan(llama, workload, target=30, headroom_percent=0).replicas_needed == 10


def test_max_model_len_caps_the_request_length(replicas):
    workload = observed_workload([replicas["a:8000"], replicas["b:8000"]])
    workload = workload.model_copy(update={"output_tokens_p95": 5000})
    # capped at max_model_len 808 -> 51 blocks; own prompt blocks 28 - 1 + tail 51 - 28 = 50
    assert requests_that_fit(replicas["a:8000"], workload) == (100 - 1) // 50


def test_flags_saturated_idle_and_unlike_the_estimate(replicas):
    a, b, c = replicas["a:8000"], replicas["b:8000"], replicas["c:8000"]
    assert [f.kind for f in flags(a)] == ["saturated"]
    assert "3 preemption(s)" in flags(a)[0].message and "at 8 step(s)" in flags(a)[0].message
    assert flags(b) == [] and [f.kind for f in flags(c)] == ["idle"]
    assert [f.kind for f in flags(b, estimated_blocks=180)] == ["estimate"]  # 21 of 201 blocks: over 5 %
    assert flags(b, estimated_blocks=195) == []


def test_engine_from_samples_needs_a_served_model():
    assert engine_from_samples([cache_config("a:8000", "prod", 101, "2.0")]) is None


LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def test_what_if_asks_the_engine_with_the_replicas_settings(replicas):
    spec = load_model_spec(LLAMA)
    deployed = replica_scenario(replicas["b:8000"], Scenario(model=LLAMA, gpu="a100-sxm-80gb"))
    assert (deployed.block_size, deployed.max_model_len, deployed.gpu) == (16, 808, "a100-sxm-80gb")
    workload = observed_workload([replicas["a:8000"], replicas["b:8000"]])
    change = what_if(deployed, spec, workload, 90, "on an H100", gpu_change("h100-sxm-80gb"))
    expected = workload_capacity(estimate(deployed.replace(gpu="h100-sxm-80gb"), spec), workload).concurrency_p95
    assert change.scenario == deployed.replace(gpu="h100-sxm-80gb")
    assert change.concurrency_per_replica == expected > 0
    assert change.replicas == math.ceil(90 / expected) and change.total_gpus == change.replicas


def test_what_if_notes_requests_longer_than_max_model_len_and_reports_what_does_not_fit(replicas):
    spec = load_model_spec(LLAMA)
    deployed = replica_scenario(replicas["b:8000"], Scenario(model=LLAMA, gpu="a100-sxm-80gb"))
    workload = observed_workload([replicas["b:8000"]])
    short = what_if(deployed, spec, workload, 10, "shorter", {"max_model_len": 256})
    assert "exceed max_model_len 256" in short.notes[0]
    huge = what_if(deployed, load_model_spec("meta-llama/Llama-3.1-405B-Instruct"), workload, 10, "405B", {})
    assert huge.error and huge.replicas is None and huge.total_gpus is None
