"""Latency percentiles, achieved efficiency and the diagnosis on the real vLLM 0.32.0 /metrics capture (pure);
expected numbers are worked out by hand from the capture's bucket counts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from calculator import InvalidInput, Scenario, estimate
from calculator.engine.workload import Workload
from calculator.observe.latency import (
    diagnosis,
    efficiency,
    interval_percentiles,
    latency_history,
    observed_traffic,
    predicted,
)
from calculator.observe.metrics import parse_metrics
from calculator.observe.live import advice
from calculator.speed.traffic import Traffic

CAPTURE = (Path(__file__).parent / "data" / "vllm-metrics" / "vllm-0.32.0-cpu-saturated.txt").read_text()


def engine(text: str = CAPTURE):
    return parse_metrics(text).engines[0]


def edited(text: str = CAPTURE, **samples: float) -> str:
    """The capture with whole series replaced: ``edited(vllm_num_requests_waiting=3)``."""
    for name, value in samples.items():
        metric = name.replace("vllm_", "vllm:", 1)
        text = re.sub(rf"^({re.escape(metric)}\{{[^}}]*\}}) \S+$", rf"\g<1> {value}", text, flags=re.M)
    return text


def ttft_before(count: float, total_s: float) -> str:
    """The capture as it read earlier: only ``count`` first tokens, all under 5 ms."""
    text = re.sub(r'^(vllm:time_to_first_token_seconds_bucket\{engine="0",le="([^"]+)",model_name="tiny"\}) (\S+)$',
                  lambda m: f"{m.group(1)} {0.0 if m.group(2) == '0.001' else count}", CAPTURE, flags=re.M)
    return edited(text, vllm_time_to_first_token_seconds_count=count, vllm_time_to_first_token_seconds_sum=total_s)


def test_percentiles_since_the_server_started_interpolate_inside_the_bucket() -> None:
    # TTFT: 9 requests, 2 under 5 ms, the other 7 in (10 ms, 20 ms]. p50 is the 4.5th: 2.5 of 7 into the bucket,
    # 10 + 10 x 2.5/7 = 13.571 ms; p95 the 8.55th: 10 + 10 x 6.55/7 = 19.357 ms. Mean: 0.10289 s / 9.
    ttft = interval_percentiles(None, engine())["ttft_s"]
    assert ttft.p50_s == pytest.approx(0.01 + 0.01 * 2.5 / 7, rel=1e-12)
    assert ttft.p95_s == pytest.approx(0.01 + 0.01 * 6.55 / 7, rel=1e-12)
    assert ttft.mean_s == pytest.approx(0.10289311408996582 / 9, rel=1e-12) and ttft.count == 9
    assert set(interval_percentiles(None, engine())) == {"queue_s", "ttft_s", "itl_s", "prefill_s", "decode_s",
                                                         "e2e_s"}


def test_an_interval_counts_only_the_requests_that_finished_in_it() -> None:
    # Earlier read: the 2 fast ones. In between: 7 first tokens, all in (10 ms, 20 ms]: p50 = 10 + 10 x 3.5/7 = 15
    # ms, p95 = 10 + 10 x 6.65/7 = 19.5 ms.
    before, after = engine(ttft_before(2, 0.005)), engine()
    ttft = interval_percentiles(before, after)["ttft_s"]
    assert (ttft.p50_s, ttft.count) == (pytest.approx(0.015, rel=1e-12), 7)
    assert ttft.p95_s == pytest.approx(0.0195, rel=1e-12)
    history = latency_history([(100.0, before), (105.0, after)])
    assert [(t, p.count) for t, p in history["ttft_s"]] == [(105.0, 7)]


def test_the_older_time_per_output_token_histogram_stands_in_for_inter_token_latency() -> None:
    older = CAPTURE.replace("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
    itl = interval_percentiles(None, engine(older))["itl_s"]
    assert itl.count == 6039 and itl.mean_s == pytest.approx(20.63908349999997 / 6039, rel=1e-12)


def test_achieved_bandwidth_and_flops_come_from_vllms_roofline_counters() -> None:
    before = engine()  # the capture's counters read 0
    after = engine(edited(vllm_estimated_read_bytes_per_gpu_total=6.7e12, vllm_estimated_flops_per_gpu_total=4e14))
    achieved = efficiency(before, after, 10.0, peak_bytes_s=3.35e12, peak_flops=989.5e12)
    assert achieved.read_bytes_per_s == 6.7e11 and achieved.bandwidth_utilisation == pytest.approx(0.2)
    assert achieved.flops_utilisation == pytest.approx(4e13 / 989.5e12)
    assert efficiency(before, before, 10.0, 3.35e12, 989.5e12) is None  # no work: nothing to say


def test_a_cpu_server_gets_no_speed_prediction() -> None:
    with pytest.raises(InvalidInput, match="covers GPUs"):
        predicted(estimate(Scenario(device="cpu")), Traffic(input_tokens=4, output_tokens=672, concurrency=1))


def test_server_lengths_the_speed_model_cannot_take_are_a_sentence_not_a_crash() -> None:
    # A server's length histograms can put the p95 below the mean (its tail in the +Inf bucket). Workload takes that;
    # the speed model's Traffic does not, and the Live page used to stop on the bare ValidationError.
    lengths = Workload(prompt_tokens_mean=1000, prompt_tokens_p95=800, output_tokens_mean=200, output_tokens_p95=300)
    with pytest.raises(InvalidInput, match=r"^input_tokens_p95 cannot be below the mean input_tokens$"):
        observed_traffic(lengths, concurrency=4)
    fine = observed_traffic(Workload(prompt_tokens_mean=1000, prompt_tokens_p95=1200, output_tokens_mean=200),
                            concurrency=3.6)
    assert (fine.input_tokens, fine.input_tokens_p95, fine.output_tokens, fine.concurrency) == (1000, 1200, 200, 4)
    assert observed_traffic(lengths, concurrency=0.4) is None  # nothing ran


def test_kv_near_full_with_preemptions_is_memory_bound() -> None:
    full = edited(vllm_kv_cache_usage_perc=0.99)
    notes = diagnosis([(0.0, engine(edited(full, vllm_num_preemptions_total=3))), (5.0, engine(full))])
    assert notes == ["Memory is the bottleneck: the KV cache reached 99% and requests are being preempted. Its "
                     "pool is fixed at 16 blocks by --num-gpu-blocks-override 16: raise that override or remove "
                     "it; or add GPUs (tensor parallel or replicas)."]


def test_low_kv_usage_with_waiting_requests_is_compute_or_scheduling() -> None:
    notes = diagnosis([(0.0, engine(edited(vllm_kv_cache_usage_perc=0.2, vllm_num_requests_waiting=3)))])
    assert notes == ["Compute or scheduling limits the server: the KV cache is only 20% full yet 3 request(s) "
                     "wait. Raise --max-num-batched-tokens or --max-num-seqs, or use tensor parallelism."]
    slow = diagnosis([(0.0, engine(edited(vllm_kv_cache_usage_perc=0.2, vllm_num_requests_running=4)))],
                     measured_tok_s=100.0, predicted_tok_s=400.0)
    assert "it generates 100 tok/s where the speed model expects 400" in slow[0]


def test_a_queue_behind_a_partly_free_cache_is_memory_when_the_pool_holds_no_more_full_requests() -> None:
    # The capture's finished requests: 36 prompt tokens / 9 = 4 and 6,048 output tokens / 9 = 672, so 676 tokens
    # each; its pool is (16 - 1) x 128 = 1,920 tokens = 2.84 of them. Two running leave no room for a third once
    # all have grown (a preempted one comes back needing its whole context): memory, whatever the gauge reads now.
    # Seen on a real server: 1 running, 22 waiting at 40 % for minutes, each request 1,005 of a 1,920-token pool.
    busy = edited(vllm_kv_cache_usage_perc=0.4, vllm_num_requests_waiting=3, vllm_num_requests_running=2)
    held = ("requests here grow to 676 tokens on average (prompt + output), so the 1,920-token pool holds 2.8 of "
            "them: a waiting request is admitted only while its blocks fit, and a preempted one needs its whole "
            "context again. More KV memory helps: its pool is fixed at 16 blocks by --num-gpu-blocks-override 16: "
            "raise that override or remove it")
    assert diagnosis([(0.0, engine(busy))]) == [f"Memory is the bottleneck although the KV cache reads only 40%: "
                                                f"{held}."]
    assert advice(engine(busy), None, preempting_now=False) == [
        f"3 request(s) wait although the KV cache reads only 40% now: memory is the bottleneck all the same, {held}."]
    one_running = edited(vllm_kv_cache_usage_perc=0.4, vllm_num_requests_waiting=3, vllm_num_requests_running=1)
    assert diagnosis([(0.0, engine(one_running))])[0].startswith("Compute or scheduling limits the server")


def test_rising_queue_time_asks_for_replicas() -> None:
    def queued(count: int, bucket: str) -> str:
        # ``count`` requests so far, the newest ones all waited up to ``bucket`` seconds
        lines = []
        for line in CAPTURE.splitlines():
            match = re.match(r'(vllm:request_queue_time_seconds_bucket\{engine="0",le="([^"]+)",model_name="tiny"\})',
                             line)
            if match:
                le = float(match.group(2))
                line = f"{match.group(1)} {count if le >= float(bucket) else 0}"
            lines.append(line)
        return edited("\n".join(lines) + "\n", vllm_request_queue_time_seconds_count=count,
                      vllm_request_queue_time_seconds_sum=count * float(bucket))
    # Each interval's 10 new requests sit in a later bucket; the cumulative counts only grow.
    reads = [engine(queued(10, "0.3"))]
    text = queued(10, "0.3")
    for total, bucket in ((20, "0.5"), (30, "1.0"), (40, "2.5")):
        text = _add_queue(text, 10, bucket, total)
        reads.append(engine(text))
    notes = diagnosis([(float(i), e) for i, e in enumerate(reads)])
    # p50 of each interval's 10 requests, all in one of vLLM's buckets (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5 s, ...):
    # its middle. (0.3, 0.5] -> 400 ms, (0.8, 1.0] -> 900 ms, (2.0, 2.5] -> 2,250 ms.
    assert notes == ["Queue time is rising (400 ms → 900 ms → 2,250 ms at p50): the load outgrows this server. "
                     "Add replicas."]


def _add_queue(text: str, added: int, bucket: str, total: int) -> str:
    """``added`` more queue waits in the bucket whose upper bound is ``bucket``."""
    def bump(match: re.Match) -> str:
        le, value = float(match.group(2)), float(match.group(3))
        return f"{match.group(1)} {value + added if le >= float(bucket) else value}"
    text = re.sub(r'^(vllm:request_queue_time_seconds_bucket\{engine="0",le="([^"]+)",model_name="tiny"\}) (\S+)$',
                  bump, text, flags=re.M)
    return edited(text, vllm_request_queue_time_seconds_count=total)


def test_the_diagnosis_replaces_the_latest_reads_advice_but_a_restart_is_always_said() -> None:
    from calculator.observe.latency import notes_to_show
    from calculator.observe.live import RESTART_NOTE

    advice = ["The KV cache is 97% full with 3 request(s) waiting: ...", RESTART_NOTE]
    assert notes_to_show([], advice) == [(advice[0], False), (RESTART_NOTE, False)]
    assert notes_to_show(["Memory is the bottleneck: ..."], advice) == [
        ("Memory is the bottleneck: ...", True), (RESTART_NOTE, False)]
