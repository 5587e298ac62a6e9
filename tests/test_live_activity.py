"""The interval summary between two reads: exact increases of vLLM's counters and a worked Little's-law bound."""

from __future__ import annotations

from calculator.observe.activity import describe, interval_activity, peak_in_server
from calculator.observe.metrics import Histogram, parse_metrics

LABELS = 'engine="0",model_name="tiny"'


def scrape(*, stop: int, length: int, prompt: int, generation: int, preemptions: int, e2e_le1: int, e2e_le5: int,
           e2e_sum: float, running: int = 0, waiting: int = 0):
    """A /metrics text in vLLM 0.32's names, every number given by the test."""
    total = stop + length
    text = f"""# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{{LABELS}}} {running}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{{LABELS}}} {waiting}
# TYPE vllm:request_success_total counter
vllm:request_success_total{{{LABELS},finished_reason="stop"}} {stop}
vllm:request_success_total{{{LABELS},finished_reason="length"}} {length}
vllm:request_success_total{{{LABELS},finished_reason="abort"}} 0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{{LABELS}}} {prompt}
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{{LABELS}}} {generation}
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{{LABELS}}} {preemptions}
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{{{LABELS},le="1.0"}} {e2e_le1}
vllm:e2e_request_latency_seconds_bucket{{{LABELS},le="5.0"}} {e2e_le5}
vllm:e2e_request_latency_seconds_bucket{{{LABELS},le="+Inf"}} {total}
vllm:e2e_request_latency_seconds_sum{{{LABELS}}} {e2e_sum}
vllm:e2e_request_latency_seconds_count{{{LABELS}}} {total}
"""
    return parse_metrics(text).engine("tiny")


BEFORE = dict(stop=2, length=3, prompt=100, generation=500, preemptions=1, e2e_le1=2, e2e_le5=5, e2e_sum=10.0)
# 16 requests of 200 prompt and 200 generated tokens, 3 s each in the server, all between the two reads
AFTER = dict(stop=2, length=19, prompt=3300, generation=3700, preemptions=3, e2e_le1=2, e2e_le5=21, e2e_sum=58.0)


def test_a_burst_between_two_reads_is_counted_exactly():
    activity = interval_activity(scrape(**BEFORE), scrape(**AFTER), interval_s=5.0)
    assert activity.requests_finished == 16 and activity.finished_by_reason == {"length": 16}
    assert (activity.prompt_tokens, activity.generation_tokens, activity.preemptions) == (3200, 3200, 2)
    assert activity.mean_e2e_s == 3.0  # 48 s over 16 requests
    # idle at the earlier read: all 16 lived inside the 5 s interval, 48 s of requests in 5 s -> at least 9.6
    assert activity.idle_before and activity.peak_requests_at_least == 10
    assert describe(activity) == ("In the last 5.0 s: 16 request(s) finished (16 length); 3,200 prompt and 3,200 "
                                  "generated tokens; at least 10 request(s) in the server at once; 2 preemption(s).")


def test_when_the_server_was_busy_before_the_window_reaches_back_by_the_longest_request():
    activity = interval_activity(scrape(**BEFORE, running=1), scrape(**AFTER), interval_s=5.0)
    # every e2e increase lies under the 5.0 s bound: window 5 + 5 = 10 s, 48 / 10 = 4.8 -> at least 5
    assert not activity.idle_before and activity.peak_requests_at_least == 5


def test_a_quiet_interval_and_a_restart():
    quiet = interval_activity(scrape(**AFTER), scrape(**AFTER), interval_s=5.0)
    assert not quiet.busy and quiet.requests_finished == 0 and quiet.peak_requests_at_least == 0
    assert describe(quiet) == "Nothing finished and no tokens were processed in the last 5.0 s."
    restart = interval_activity(scrape(**AFTER), scrape(**BEFORE), interval_s=5.0)
    assert restart.restarted and restart.requests_finished is None


def test_the_bound_needs_a_finite_longest_latency_unless_the_server_was_idle():
    over = Histogram(buckets=((1.0, 0.0), (float("inf"), 2.0)), sum=100.0, count=2.0)
    assert peak_in_server(over, 10.0, idle_before=False) is None  # a request may have lived for any time
    assert peak_in_server(over, 10.0, idle_before=True) == 10  # 100 s of requests inside 10 s
    assert peak_in_server(over, 10.0, idle_before=False, seen=(3.0,)) == 3
