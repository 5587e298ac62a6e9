"""vLLM's limits on concurrency, chunked prefill sharing the token budget, and the queue models' limits."""

from __future__ import annotations

import math

import pytest

from calculator import Scenario, Traffic, estimate, speed_estimate
from calculator.speed.calibration import CUDA
from calculator.speed.costs import forward_costs
from calculator.speed.hardware import gpu_rates
from calculator.speed.queueing import (QueueWait, burst_wait, closed_loop_wait, erlang_c, open_loop_wait,
                                      p95_with_step_in_flight)
from calculator.speed.scheduler import prefill_time_s, served_concurrency, steady_state


@pytest.mark.parametrize(("requested", "max_num_seqs", "kv", "served", "binding"), [
    (10, 256, 100, 10, "requested"),
    (500, 256, 100, 100, "kv_cache"),
    (500, 64, 100, 64, "max_num_seqs"),
    (None, 64, 100, 64, "max_num_seqs"),  # a request rate: the engine's own limit
    (100, 100, 100, 100, "max_num_seqs"),  # all equal: the engine limit is named, not the request
])
def test_served_concurrency_is_the_least_limit_and_names_it(requested, max_num_seqs, kv, served, binding) -> None:
    limits = served_concurrency(requested, max_num_seqs, kv)
    assert (limits.served, limits.binding) == (served, binding)


def _llama8(**settings):
    return estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb", **settings))


def test_max_num_seqs_binds_and_the_rest_queue() -> None:
    result = _llama8(max_model_len=8192, max_num_seqs=8)
    speed = speed_estimate(result, Traffic(input_tokens=512, output_tokens=128, concurrency=32), prices={})
    assert speed.concurrency.binding == "max_num_seqs" and speed.running_requests == 8
    service_ms = speed.e2e_ms - speed.queue_wait_ms
    assert speed.queue_wait_ms == pytest.approx(service_ms * (32 / 8 - 1), rel=1e-9)  # Little's law, closed loop
    assert speed.request_throughput == pytest.approx(8 / (service_ms / 1e3), rel=1e-9)


def test_kv_cache_binds_when_requests_are_long() -> None:
    result = _llama8(max_model_len=32768, kv_cache_memory_bytes=8 << 30)
    speed = speed_estimate(result, Traffic(input_tokens=30000, output_tokens=2000, concurrency=64), prices={})
    # 8 GiB of KV at 131,072 bytes per token: 1,024 blocks of 64 tokens, one of them the null block; a request of
    # 32,000 tokens holds 500 blocks, so two fit
    assert speed.concurrency.binding == "kv_cache" and speed.concurrency.kv_cache_limit == 2


def test_a_long_prompt_is_chunked_by_the_token_budget() -> None:
    result = _llama8(max_model_len=32768, max_num_batched_tokens=8192)
    costs, rates = forward_costs(result), gpu_rates(result.gpu, None)
    state = steady_state(costs, rates, CUDA, running=1, prompt_tokens=16000, output_tokens=200, budget_tokens=8192)
    assert state.prefill_steps == 2  # ceil(16000 / 8192)
    busy = steady_state(costs, rates, CUDA, running=64, prompt_tokens=16000, output_tokens=200, budget_tokens=8192)
    assert busy.decode_batch < 64 and busy.prefill_tokens_per_step > 0  # decodes first, prompts in what is left
    assert busy.step.total_s > busy.decode_only_step.total_s  # the chunks slow the running decodes
    alone = prefill_time_s(costs, rates, CUDA, prompt_tokens=16000, state=state, budget_tokens=8192)
    crowded = prefill_time_s(costs, rates, CUDA, prompt_tokens=16000, state=busy, budget_tokens=8192)
    assert crowded > alone


def test_closed_loop_queue_limits() -> None:
    assert closed_loop_wait(users=10, served=10, service_s=2.0).mean_s == 0.0  # nobody waits below the limit
    assert closed_loop_wait(users=30, served=10, service_s=2.0).mean_s == pytest.approx(4.0)  # 2 s x (30/10 - 1)
    assert closed_loop_wait(users=5, served=0, service_s=2.0).saturated


def test_open_loop_queue_matches_m_m_1_and_m_m_c() -> None:
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: P(wait) = utilisation
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)  # M/M/2 at a = 1: (a^2/2)/(1-a/2) / (1 + a + ...) = 1/3
    one = open_loop_wait(rate_per_s=0.5, servers=1, service_s=1.0)
    assert one.mean_s == pytest.approx(1.0)  # rho / (mu - lambda) = 0.5 / 0.5
    assert one.p95_s == pytest.approx(math.log(0.5 / 0.05) / 0.5)  # P(W > t) = rho e^-(mu - lambda) t
    idle = open_loop_wait(rate_per_s=1e-6, servers=64, service_s=2.0)
    assert idle.mean_s < 1e-12 and idle.p95_s == 0.0 and not idle.saturated  # zero load: no wait
    full = open_loop_wait(rate_per_s=40, servers=64, service_s=2.0)  # 80 requests' worth of work for 64 slots
    assert full.saturated and full.mean_s == math.inf and full.utilisation == pytest.approx(1.25)


def test_the_step_in_flight_adds_to_the_ttft_p95_as_a_uniform_wait() -> None:
    # a fixed wait w: the step in flight at arrival is uniform over the step, so its 95th percentile is 0.95 step
    fixed = closed_loop_wait(users=30, served=10, service_s=2.0)
    assert p95_with_step_in_flight(fixed, 0.1) == pytest.approx(4.0 + 0.095)
    # an M/M/c tail, P(W > t) = 0.5 e^-10t, beside a 0.1 s step: past the step, P(U + W > t) =
    # 0.5 e^-10t (e^(10 x 0.1) - 1) / (10 x 0.1), which is 0.05 at t = ln(0.5 (e - 1) / 0.05) / 10 = 0.28439 s
    tail = QueueWait(mean_s=0.05, p95_s=math.log(0.5 / 0.05) / 10, utilisation=0.5, saturated=False,
                     drain_per_s=10.0, wait_probability=0.5)
    assert p95_with_step_in_flight(tail, 0.1) == pytest.approx(math.log(0.5 * (math.e - 1) / 0.05) / 10, rel=1e-9)
    assert p95_with_step_in_flight(tail, 0.0) == pytest.approx(tail.p95_s)  # no step in flight: the queue alone
    # a tail that rarely waits: the 95th percentile stays inside the step, where (1 - p) t / s + p H(t) = 0.95
    rare = QueueWait(mean_s=0.0, p95_s=0.0, utilisation=0.1, saturated=False, drain_per_s=10.0,
                     wait_probability=0.01)
    t = p95_with_step_in_flight(rare, 0.1)
    assert t < 0.1 and 0.99 * t / 0.1 + 0.01 * (t + math.expm1(-10 * t) / 10) / 0.1 == pytest.approx(0.95)
    assert math.isinf(p95_with_step_in_flight(open_loop_wait(rate_per_s=40, servers=64, service_s=2.0), 0.1))


def test_a_steady_closed_loop_gives_its_ttft_p95_the_step_in_flight() -> None:
    result = _llama8(max_model_len=8192)
    # fixed lengths and no queue: the mean lines up half a step, the p95 0.95 of one
    crowd = speed_estimate(result, Traffic(input_tokens=1024, output_tokens=256, concurrency=32), prices={})
    assert crowd.queue_wait_ms == 0.0
    assert crowd.ttft_p95_ms - crowd.ttft_ms == pytest.approx(0.45 * crowd.decode_step.total_s * 1e3, rel=1e-9)
    alone = speed_estimate(result, Traffic(input_tokens=1024, output_tokens=256, concurrency=1), prices={})
    assert alone.ttft_p95_ms == pytest.approx(alone.ttft_ms)  # one request finds no step in flight


def test_a_burst_of_prompts_queues_once() -> None:
    wait = burst_wait(requests=1000, served=32, request_throughput_per_s=3.26)
    assert wait.mean_s == pytest.approx(968 ** 2 / (2 * 1000 * 3.26))  # 143.7 s
    assert wait.p95_s == pytest.approx((950 - 32) / 3.26)
    assert burst_wait(requests=10, served=32, request_throughput_per_s=3.0).mean_s == 0.0


def test_saturated_request_rate_reports_an_unbounded_ttft() -> None:
    speed = speed_estimate(_llama8(max_model_len=8192), Traffic(input_tokens=1024, output_tokens=256,
                                                                request_rate=1e6), prices={})
    assert speed.saturated and math.isinf(speed.ttft_ms)
    assert speed.utilisation > 1 and 0 < speed.request_throughput < 1e6  # it serves at capacity, not the rate


def test_latency_grows_and_per_user_speed_falls_with_concurrency() -> None:
    result = _llama8(max_model_len=8192)
    speeds = [speed_estimate(result, Traffic(input_tokens=1024, output_tokens=256, concurrency=c), prices={})
              for c in (1, 8, 64)]
    assert speeds[0].tpot_ms < speeds[1].tpot_ms < speeds[2].tpot_ms
    assert speeds[0].output_throughput_tok_s < speeds[1].output_throughput_tok_s < speeds[2].output_throughput_tok_s
    assert speeds[0].per_user_tok_s == pytest.approx(1000 / speeds[0].tpot_ms)


def test_pipeline_stages_add_to_every_token() -> None:
    one = estimate(Scenario(model="meta-llama/Llama-3.1-70B-Instruct", gpu="h100-sxm-80gb", tensor_parallel_size=2,
                            max_model_len=8192))
    staged = estimate(Scenario(model="meta-llama/Llama-3.1-70B-Instruct", gpu="h100-sxm-80gb", tensor_parallel_size=2,
                               pipeline_parallel_size=2, max_model_len=8192))
    traffic = Traffic(input_tokens=512, output_tokens=128, concurrency=1)
    a, b = speed_estimate(one, traffic, prices={}), speed_estimate(staged, traffic, prices={})
    # each stage holds half the layers, so a stage step is about half as long, but a token crosses both stages
    # plus one hop: a single request gains nothing from PP (the latency of a token is not split)
    assert b.decode_step.memory_s == pytest.approx(a.decode_step.memory_s / 2, rel=0.05)
    assert b.tpot_ms == pytest.approx(2 * b.decode_step.total_s * 1e3 + CUDA.all_reduce_latency_s * 1e3, rel=1e-9)
    assert b.tpot_ms == pytest.approx(a.tpot_ms, rel=0.1)


def test_the_speed_model_refuses_what_it_cannot_model() -> None:
    from calculator.errors import InvalidInput
    cpu = estimate(Scenario(model="meta-llama/Llama-3.2-1B-Instruct", gpu=None, device="cpu", max_model_len=4096))
    with pytest.raises(InvalidInput, match="covers GPUs"):
        speed_estimate(cpu, Traffic(input_tokens=10, output_tokens=10, concurrency=1))
    too_big = estimate(Scenario(model="meta-llama/Llama-3.1-70B-Instruct", gpu="l4-24gb", max_model_len=4096))
    with pytest.raises(InvalidInput, match="does not start"):
        speed_estimate(too_big, Traffic(input_tokens=10, output_tokens=10, concurrency=1))


def test_requests_longer_than_max_model_len_are_refused() -> None:
    from calculator.errors import InvalidInput
    with pytest.raises(InvalidInput, match="requests of 9,000 tokens .* exceed max_model_len 8,192"):
        speed_estimate(_llama8(max_model_len=8192), Traffic(input_tokens=1000, input_tokens_p95=8000,
                                                            output_tokens=1000, concurrency=1))


def test_only_the_steps_that_carry_a_prompt_chunk_pay_the_piecewise_graph_breaks() -> None:
    # vLLM 0.11+ replays a decode-only step as one full CUDA graph and breaks the graph at each attention op in a
    # step with prompt tokens. 8 users, 1,000-token prompts in one chunk (k = 1), 201 output tokens: each request's
    # cycle is 1 + 200 steps, so the other 7 users' chunks land at 7 / 201 a step and a step carries one with
    # probability 1 - exp(-7/201) = 0.034226. Llama-3.1-8B: 320 kernels, 32 layers.
    constants = CUDA.model_copy(update={"kernel_overhead_s": 4e-6, "piecewise_layer_overhead_s": 20e-6,
                                        "full_graph_kernel_overhead_s": 1e-6, "moe_layer_overhead_s": 0.0})
    result = _llama8(vllm_version="0.32.0")
    costs, rates = forward_costs(result), gpu_rates(result.gpu, None)
    state = steady_state(costs, rates, constants, running=8, prompt_tokens=1000, output_tokens=201,
                         budget_tokens=8192)
    share = 1 - math.exp(-7 / 201)
    assert share == pytest.approx(0.034226, abs=1e-6)
    pieces, full_graph = 320 * 4e-6 + 32 * 20e-6, 320 * 1e-6
    assert state.step.overhead_s == pytest.approx(share * pieces + (1 - share) * full_graph, rel=1e-9)
    assert state.decode_only_step.overhead_s == pytest.approx(full_graph, rel=1e-12)
    # before 0.11 (PIECEWISE only) every step breaks at each layer
    old = _llama8(vllm_version="0.10.1")
    state = steady_state(forward_costs(old), rates, constants, running=8, prompt_tokens=1000, output_tokens=201,
                         budget_tokens=8192)
    assert state.step.overhead_s == pytest.approx(pieces, rel=1e-12)


def test_the_steady_load_is_named_in_words_with_its_own_count() -> None:
    one = Traffic(input_tokens=512, output_tokens=128, concurrency=1).arrival
    assert one == "steady load: 1 user in a closed loop, each sending as its last request ends (no ramp-up, no tail)"
    assert Traffic(input_tokens=512, output_tokens=128, concurrency=1200).arrival.startswith(
        "steady load: 1,200 users in a closed loop")
