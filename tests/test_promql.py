"""PromQL builders: escaping, validated names and filters, bounded ranges."""

from __future__ import annotations

import pytest

from calculator.observe.promql import (
    INSTANT_METRICS,
    MAX_POINTS,
    MAX_RANGE_S,
    InvalidQuery,
    Matcher,
    TimeRange,
    duration,
    escape_label_value,
    instant_query,
    parse_filters,
    range_query,
    selector,
    series_match,
    time_range,
)


def test_label_values_are_escaped():
    assert escape_label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    assert selector(["vllm:num_requests_running"], [Matcher(name="pod", value='x"} or vector(1) #')]) == (
        '{__name__=~"vllm:num_requests_running",pod="x\\"} or vector(1) #"}')


@pytest.mark.parametrize("name", ["__name__", "1pod", "po-d", "", "a b"])
def test_label_names_must_follow_prometheus_grammar(name):
    with pytest.raises(InvalidQuery):
        Matcher(name=name, value="x")


def test_metric_names_are_checked():
    with pytest.raises(InvalidQuery):
        selector(['vllm:x"}'])
    with pytest.raises(InvalidQuery):
        selector([])


def test_the_fleet_queries_name_every_series_they_read():
    query = instant_query([Matcher(name="namespace", value="prod")])
    assert query.startswith('{__name__=~"vllm:cache_config_info|') and query.endswith(',namespace="prod"}')
    for name in ("vllm:num_preemptions_total", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                 "vllm:request_prompt_tokens_bucket", "vllm:request_generation_tokens_count",
                 "vllm:prefix_cache_hits_total", "vllm:num_requests_waiting"):
        assert name in INSTANT_METRICS
    assert range_query() == ('{__name__=~"vllm:gpu_cache_usage_perc|vllm:kv_cache_usage_perc|'
                             'vllm:num_requests_running|vllm:num_requests_waiting"}')
    assert series_match() == '{__name__=~"vllm:num_requests_running"}'


def test_filters_parse_into_matchers():
    assert parse_filters('namespace="prod", job=~"vllm.*",pod!=a , team!~"x,y"') == (
        Matcher(name="namespace", value="prod"), Matcher(name="job", op="=~", value="vllm.*"),
        Matcher(name="pod", op="!=", value="a"), Matcher(name="team", op="!~", value="x,y"))
    assert parse_filters("") == () and parse_filters(" , ") == ()
    assert parse_filters(r'pod="a\"b"')[0].value == 'a"b'


@pytest.mark.parametrize("text", ["namespace", "=prod", "name space=x", 'job=~"("'])
def test_bad_filters_say_what_is_wrong(text):
    with pytest.raises(InvalidQuery):
        parse_filters(text)


def test_durations():
    assert [duration(s) for s in (0.2, 1, 59, 90, 3600, 5400, 86400 + 61)] == [
        "1s", "1s", "59s", "1m30s", "1h", "1h30m", "1d1m1s"]


def test_time_ranges_are_bounded_in_length_and_points():
    window = time_range(end_s=10_000.0, duration_s=900)
    assert (window.start_s, window.end_s, window.step_s, window.points) == (9100.0, 10_000.0, 1, 901)
    week = time_range(end_s=1e9, duration_s=MAX_RANGE_S)
    assert week.step_s == 606 and week.points <= MAX_POINTS
    with pytest.raises(InvalidQuery):
        time_range(end_s=1e9, duration_s=MAX_RANGE_S + 1)
    with pytest.raises(InvalidQuery):
        time_range(end_s=1e9, duration_s=0)
    with pytest.raises(InvalidQuery):
        TimeRange(start_s=0, end_s=3600, step_s=1)  # 3,601 points
    with pytest.raises(InvalidQuery):
        TimeRange(start_s=10, end_s=10, step_s=1)
