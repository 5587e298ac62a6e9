"""The fleet's latency queries: PromQL built from validated parts, and their answers sorted by replica."""

from __future__ import annotations

import pytest

from calculator.observe.fleet_client import Sample
from calculator.observe.fleet_latency import latency_by_replica
from calculator.observe.promql import InvalidQuery, latency_quantile_query, parse_filters


def test_a_quantile_query_is_histogram_quantile_of_the_bucket_increase_per_replica() -> None:
    assert latency_quantile_query("ttft_s", 0.95, 900, parse_filters('namespace="a\\"b"')) == (
        'histogram_quantile(0.95, (sum by (job, instance, engine, model_name, le) '
        '(increase({__name__=~"vllm:time_to_first_token_seconds_bucket",namespace="a\\"b"}[15m]))))')


def test_inter_token_latency_falls_back_to_the_older_histogram_only_where_the_newer_is_missing() -> None:
    query = latency_quantile_query("itl_s", 0.5, 3600, ())
    assert query == ('histogram_quantile(0.5, (sum by (job, instance, engine, model_name, le) '
                     '(increase({__name__=~"vllm:inter_token_latency_seconds_bucket"}[1h]))) or '
                     '(sum by (job, instance, engine, model_name, le) '
                     '(increase({__name__=~"vllm:time_per_output_token_seconds_bucket"}[1h]))))')


def test_unknown_latencies_and_quantiles_are_refused() -> None:
    with pytest.raises(InvalidQuery, match="not a latency"):
        latency_quantile_query("tokens", 0.5, 60)
    with pytest.raises(InvalidQuery, match="between 0 and 1"):
        latency_quantile_query("ttft_s", 95, 60)


def test_answers_are_sorted_by_replica_and_named_series_are_not_quantiles() -> None:
    replica = {"job": "vllm", "instance": "10.0.0.1:8000", "engine": "0", "model_name": "m"}
    result = latency_by_replica({
        ("ttft_s", 0.5): (Sample(labels=replica, value=0.12),
                          Sample(labels={**replica, "__name__": "vllm:num_requests_running"}, value=3.0)),
        ("ttft_s", 0.95): (Sample(labels=replica, value=0.4),),
    })
    (key,) = result
    assert key == ("vllm", "10.0.0.1:8000", "0")
    assert (result[key].get("ttft_s", 0.5), result[key].get("ttft_s", 0.95), result[key].get("itl_s", 0.5)) == (
        0.12, 0.4, None)
