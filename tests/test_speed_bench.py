"""The `vllm bench serve` simulation (calculator/speed/bench.py), its command-line reader and `python -m calculator
bench`. Every expected number is worked by hand from a linear step cost (10 ms a step + 0.1 ms a token) and vLLM
V1's scheduling rules; the parser's refusals are vLLM's own (its option table)."""

from __future__ import annotations

import json
import math

import pytest

from calculator.cli import main
from calculator.engine.estimate import estimate
from calculator.errors import InvalidInput
from calculator.scenario import Scenario
from calculator.speed.bench import (
    BenchLoad,
    EngineLimits,
    LinearStepCost,
    StepBatch,
    fit_linear_step_cost,
    fit_measured_run,
    percentile,
    simulate,
    cached_test_prompt_tokens,
)
from calculator.speed.bench_cli import BENCH_JSON_KEYS
from calculator.speed.bench_command import parse_bench_command
from calculator.speed.predict import _Replica, bench_prediction, speed_estimate
from calculator.speed.step_time import step_time
from calculator.speed.traffic import Traffic
from test_speed_cli import _run

BIG = EngineLimits(max_num_seqs=256, max_num_batched_tokens=1000, kv_cache_tokens=1_000_000)


def linear(batch: StepBatch) -> float:
    return 0.010 + 0.0001 * batch.tokens


def test_a_burst_in_one_step_then_lockstep_decodes() -> None:
    # 4 prompts of 100 share one 400-token step (50 ms), then 9 decode steps of 4 tokens (10.4 ms each).
    run = simulate(BenchLoad(input_tokens=(100,) * 4, output_tokens=(10,) * 4), BIG, linear)
    assert run.mean_ttft_ms == pytest.approx(50.0) and run.p99_ttft_ms == pytest.approx(50.0)
    assert run.mean_tpot_ms == pytest.approx(10.4) and run.mean_itl_ms == pytest.approx(10.4)
    assert run.mean_e2el_ms == pytest.approx(50 + 9 * 10.4)
    assert run.duration_s == pytest.approx(0.1436)
    assert run.output_throughput == pytest.approx(40 / 0.1436)
    assert run.total_token_throughput == pytest.approx(440 / 0.1436)


def test_closed_loop_burst_queues_the_prompts_one_step_each() -> None:
    # --max-concurrency 4 starts with 4 prompts at once; a 1000-token budget fits one 1000-token prompt per step
    # (110 ms), so the i-th waits i steps: TTFT 110, 220, 330, 440 ms.
    run = simulate(BenchLoad(input_tokens=(1000,) * 4, output_tokens=(1,) * 4, max_concurrency=4), BIG, linear)
    assert run.mean_ttft_ms == pytest.approx(275.0) and run.median_ttft_ms == pytest.approx(275.0)
    assert run.p99_ttft_ms == pytest.approx(330 + 0.97 * 110)  # numpy's linear percentile of the four
    assert run.duration_s == pytest.approx(0.44)


def test_the_server_reports_only_the_steps_that_gave_a_token() -> None:
    # One prompt of 2,500 tokens under the 1,000-token budget: chunks of 1,000, 1,000 and 500, the last giving the
    # first token, then 3 decode steps: 6 steps run. vLLM's front end sees no outputs from the first two (a prompt's
    # middle chunk), so vllm:iteration_tokens_total counts 4.
    run = simulate(BenchLoad(input_tokens=(2500,), output_tokens=(4,)), BIG, linear)
    assert (run.steps, run.reported_steps) == (6, 4)
    # 4 prompts of 100 in one step, then 9 lockstep decodes (repeated as one): every step gives tokens
    lockstep = simulate(BenchLoad(input_tokens=(100,) * 4, output_tokens=(10,) * 4), BIG, linear)
    assert (lockstep.steps, lockstep.reported_steps) == (10, 10)


def test_a_new_prompt_shares_the_budget_with_the_running_decode() -> None:
    # Step 1: r0's prompt (110 ms). Step 2: r0 decodes 1 token and r1 gets the 999 left of the budget (110 ms).
    # Step 3: r0's last decode and r1's last prompt token (10.2 ms): r1's first token at 230.2 ms. Then r1 decodes
    # twice (10.1 ms each).
    run = simulate(BenchLoad(input_tokens=(1000, 1000), output_tokens=(3, 3)), BIG, linear)
    assert run.mean_ttft_ms == pytest.approx((110 + 230.2) / 2)
    assert run.p99_ttft_ms == pytest.approx(110 + 0.99 * 120.2)
    assert run.mean_tpot_ms == pytest.approx(((230.2 - 110) / 2 + 10.1) / 2)
    assert run.mean_itl_ms == pytest.approx((110 + 10.2 + 10.1 + 10.1) / 4)
    assert run.duration_s == pytest.approx(0.2504)


def test_a_request_arriving_mid_step_waits_for_the_step_in_flight() -> None:
    # Evenly spaced (burstiness inf) at 10 req/s: r0 at 100 ms, r1 at 200 ms while r0's prompt runs (100-210 ms).
    # r1 starts at 210 ms with r0's decode beside its 999-token chunk (to 320 ms), then its last token (10.1 ms).
    load = BenchLoad(input_tokens=(1000, 1000), output_tokens=(2, 1), request_rate=10, burstiness=float("inf"))
    run = simulate(load, BIG, linear)
    assert run.mean_ttft_ms == pytest.approx((110 + 130.1) / 2)
    assert run.p99_ttft_ms == pytest.approx(110 + 0.99 * 20.1)
    assert run.duration_s == pytest.approx(0.3301)
    assert "evenly spaced at 10 req/s" in run.arrival


FRONT_END = BIG.model_copy(update={"front_end_s": 0.020})  # 20 ms of the API server's loop per request


def test_a_burst_waits_for_every_preprocessing_before_any_reaches_the_engine() -> None:
    # 4 prompts at once: the loop preprocesses all four (80 ms) before the first one's continuation runs, so all
    # reach the engine at 80 ms; then the burst above: one 400-token step (50 ms) and 9 decodes of 10.4 ms.
    run = simulate(BenchLoad(input_tokens=(100,) * 4, output_tokens=(10,) * 4), FRONT_END, linear)
    assert run.mean_ttft_ms == pytest.approx(130.0) and run.p99_ttft_ms == pytest.approx(130.0)
    assert run.mean_tpot_ms == pytest.approx(10.4)
    assert run.duration_s == pytest.approx(0.080 + 0.1436)


def test_requests_that_arrive_apart_each_pay_one_preprocessing() -> None:
    # 10 req/s evenly spaced: each request finds the loop idle, 20 ms of preprocessing, then its 100-token prompt
    # alone (20 ms): TTFT 40 ms. A closed loop of one client: the same.
    spaced = BenchLoad(input_tokens=(100,) * 3, output_tokens=(1,) * 3, request_rate=10.0, burstiness=math.inf)
    assert simulate(spaced, FRONT_END, linear).mean_ttft_ms == pytest.approx(40.0)
    one_client = BenchLoad(input_tokens=(100,) * 3, output_tokens=(1,) * 3, max_concurrency=1)
    assert simulate(one_client, FRONT_END, linear).mean_ttft_ms == pytest.approx(40.0)
    assert simulate(one_client, BIG, linear).mean_ttft_ms == pytest.approx(20.0)


def test_a_request_arriving_during_a_preprocessing_holds_back_the_one_before() -> None:
    # 100 req/s evenly spaced: r0 at 10 ms, preprocessed 10-30 ms; r1 arrives at 20 ms, before that end, so the
    # loop runs r1's preprocessing (30-50 ms) before r0's continuation: both reach the engine at 50 ms and share one
    # 200-token step (30 ms). TTFT 70 and 60 ms (a plain queue would give 40 and 50).
    load = BenchLoad(input_tokens=(100,) * 2, output_tokens=(1,) * 2, request_rate=100.0, burstiness=math.inf)
    run = simulate(load, FRONT_END, linear)
    assert run.mean_ttft_ms == pytest.approx(65.0) and run.steps == 1


def test_a_full_kv_cache_preempts_the_newest_request_and_recomputes_it() -> None:
    # 3 blocks of 4 tokens; two prompts of 4 tokens each take a block. r0's 5th token needs a second block: none is
    # free, so r1 (the newest) is preempted and waits; it recomputes its 4 + 1 tokens (10.5 ms) once r0 ends.
    limits = EngineLimits(max_num_seqs=8, max_num_batched_tokens=1000, kv_cache_tokens=12, block_size=4)
    run = simulate(BenchLoad(input_tokens=(4, 4), output_tokens=(4, 4)), limits, linear)
    assert run.preemptions == 1
    assert run.mean_ttft_ms == pytest.approx(10.8)
    assert run.mean_e2el_ms == pytest.approx((41.1 + 71.8) / 2)
    assert run.duration_s == pytest.approx(0.0718)
    assert run.p99_itl_ms == pytest.approx(percentile(sorted([10.1, 10.1, 10.1, 40.8, 10.1, 10.1]), 99))


def test_with_prefix_caching_a_preempted_request_finds_its_full_blocks_again() -> None:
    # The run above with V1's prefix cache: r1's one full block (its 4 prompt tokens) stays cached while free. r0's
    # decodes take their blocks from the never-used one, so when r0 ends (41.1 ms) r1 gets its block back and
    # computes only its 5th token (10.1 ms, not 10.5): its second token at 51.2 ms, then two decodes of 10.1 ms.
    limits = EngineLimits(max_num_seqs=8, max_num_batched_tokens=1000, kv_cache_tokens=12, block_size=4,
                          prefix_caching=True)
    run = simulate(BenchLoad(input_tokens=(4, 4), output_tokens=(4, 4)), limits, linear)
    assert run.preemptions == 1
    assert run.duration_s == pytest.approx(0.0714)
    assert run.mean_e2el_ms == pytest.approx((41.1 + 71.4) / 2)
    assert run.p99_itl_ms == pytest.approx(percentile(sorted([10.1, 10.1, 10.1, 40.4, 10.1, 10.1]), 99))


def test_a_cached_prefix_that_other_allocations_evict_is_recomputed() -> None:
    # r0 now generates 6 tokens: its 9th token needs a third block while r1 waits, and the least recently freed
    # free block is r1's cached one, so r1 recomputes all 5 tokens when r0 ends (61.3 ms): 10.5 ms, then 2 x 10.1.
    load = BenchLoad(input_tokens=(4, 4), output_tokens=(6, 4))
    cached = EngineLimits(max_num_seqs=8, max_num_batched_tokens=1000, kv_cache_tokens=12, block_size=4,
                          prefix_caching=True)
    run = simulate(load, cached, linear)
    assert run.duration_s == pytest.approx(0.0613 + 0.0105 + 2 * 0.0101)
    assert run.duration_s == pytest.approx(simulate(load, cached.model_copy(update={"prefix_caching": False}),
                                                    linear).duration_s)


def test_gamma_arrivals_are_rescaled_to_num_prompts_over_rate() -> None:
    times = BenchLoad(input_tokens=(8,) * 50, output_tokens=(2,) * 50, request_rate=5, burstiness=0.3).arrival_times_s()
    assert times[-1] == pytest.approx(50 / 5)  # vLLM rescales the cumulative gaps to num_prompts / rate
    assert times == sorted(times)


@pytest.mark.parametrize("burstiness", [1.0, 0.3, 2.5])
def test_arrivals_are_the_very_draws_of_vllm_bench_serve(burstiness: float) -> None:
    # vllm/benchmarks/serve.py (0.32.0): np.random.seed(args.seed), then one np.random.gamma(burstiness,
    # 1 / (rate * burstiness)) per request, cumulated and rescaled to num_prompts / rate. numpy itself draws them here.
    import numpy as np

    np.random.seed(7)
    gaps = np.cumsum([np.random.gamma(shape=burstiness, scale=1 / (4 * burstiness)) for _ in range(40)])
    expected = gaps * (40 / 4) / gaps[-1]
    load = BenchLoad(input_tokens=(8,) * 40, output_tokens=(2,) * 40, request_rate=4, burstiness=burstiness, seed=7)
    assert load.arrival_times_s() == pytest.approx(expected.tolist(), rel=1e-12)


def test_a_seed_numpy_refuses_is_refused_with_a_sentence() -> None:
    load = BenchLoad(input_tokens=(8,), output_tokens=(2,), request_rate=4, seed=-1)
    with pytest.raises(ValueError, match="a legacy numpy seed is 0 to 2\\*\\*32 - 1, not -1"):
        load.arrival_times_s()


def test_a_request_that_never_fits_is_refused() -> None:
    limits = EngineLimits(max_num_seqs=8, max_num_batched_tokens=64, kv_cache_tokens=32, block_size=16)
    with pytest.raises(ValueError, match="does not fit in the KV cache"):
        simulate(BenchLoad(input_tokens=(30,), output_tokens=(10,)), limits, linear)


LINE = ("vllm bench serve --model meta-llama/Llama-3.1-8B-Instruct --dataset-name random --random-input-len 1024 "
        "--random-output-len 256 --max-concurrency 32 --num-prompts 320")


def test_the_bench_line_reads_as_vllm_reads_it() -> None:
    command = parse_bench_command(LINE)
    assert command.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert command.load.max_concurrency == 32 and command.load.request_rate is None
    assert set(command.load.input_tokens) == {1024} and set(command.load.output_tokens) == {256}
    assert len(command.load.input_tokens) == 320
    # abbreviations, underscores and --flag=value, as FlexibleArgumentParser takes them
    other = parse_bench_command("vllm bench serve --max_concurrency=8 --num-prom 10 --request-rate 4 --burst 0.5")
    assert other.load.max_concurrency == 8 and other.load.num_prompts == 10 and other.load.burstiness == 0.5
    assert set(other.load.input_tokens) == {1024} and set(other.load.output_tokens) == {128}  # vLLM's defaults


def test_range_ratio_samples_vllms_ranges() -> None:
    # input: 1024 less the BOS, 1023 -> [floor(511.5), ceil(1534.5)] = [511, 1535], and the server adds the BOS back
    command = parse_bench_command(LINE + " --random-range-ratio 0.5")
    assert 512 <= min(command.load.input_tokens) and max(command.load.input_tokens) <= 1536
    assert 128 <= min(command.load.output_tokens) and max(command.load.output_tokens) <= 384
    assert len(set(command.load.input_tokens)) > 100
    split = parse_bench_command(LINE + " --random-range-ratio '{\"input\": 0, \"output\": 0.5}'")
    assert set(split.load.input_tokens) == {1024} and len(set(split.load.output_tokens)) > 50


@pytest.mark.parametrize(("extra", "said"), [
    ("--max-concurency 3", "unrecognized arguments: --max-concurency 3"),
    ("--dataset-name sharegpt", "--dataset-name sharegpt is not modelled"),
    ("--ramp-up-strategy linear", "does not model --ramp-up-strategy"),
    ("--random-range-ratio 1.5", "must be in [0, 1)"),
    ("--num-prompts many", "invalid int value: 'many'"),
    ("--random-prefix-len 100", "--random-prefix-len is not modelled"),
    ("--num-prompts 10000000", "simulates at most 20,000 requests"),
    ("--backend openai-chat", "OpenAI Chat Completions API URL must end with one of: {'chat/completions'}"),
    ("--backend openai-audio", "--backend openai-audio is not modelled"),
])
def test_what_vllm_refuses_or_the_planner_does_not_model_is_a_sentence(extra: str, said: str) -> None:
    with pytest.raises(InvalidInput, match=None) as raised:
        parse_bench_command(f"{LINE} {extra}")
    assert said in str(raised.value)


GPU = ["bench", "--gpu", "h100", "--max-model-len", "4096"]


def test_bench_cli_prints_the_block_and_returns_the_keys(capsys) -> None:
    code, out, _ = _run([*GPU, "--json", "--", *LINE.split()], capsys)
    data = json.loads(out)
    assert code == 0 and set(BENCH_JSON_KEYS) <= set(data)
    assert data["arrival"].startswith("closed loop of 32 clients: a burst of 32 prompts")
    assert data["completed"] == 320 and data["total_input_tokens"] == 320 * 1023  # the client counts without BOS
    result = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100", max_model_len=4096))
    direct = bench_prediction(result, parse_bench_command(LINE).load)
    assert data["median_ttft_ms"] == round(direct.median_ttft_ms, 3)
    code, text, _ = _run([*GPU, "--", *LINE.split()], capsys)
    assert code == 0 and "Median TTFT (ms):" in text and "closed loop of 32 clients" in text


CHAT = ("vllm bench serve --model Qwen/Qwen3-8B --backend openai-chat --endpoint /v1/chat/completions "
        "--dataset-name random --random-input-len 128 --random-output-len 4 --num-prompts 1000 --request-rate inf")


def test_a_chat_bench_line_posts_each_prompt_in_the_chat_template() -> None:
    # the random dataset samples 128 less the tokenizer's BOS; a chat request is tokenized without it, and the
    # template's own tokens come around it instead
    bare, templated = parse_bench_command(CHAT), parse_bench_command(CHAT, chat_template_tokens=9)
    assert bare.load.endpoint == templated.load.endpoint == "chat"
    assert set(bare.load.input_tokens) == {127} and set(templated.load.input_tokens) == {127 + 9}
    assert templated.chat_template_tokens == 9
    completions = parse_bench_command(LINE, chat_template_tokens=9)
    assert completions.load.input_tokens[0] == 1024 and completions.chat_template_tokens == 0  # no template there


def test_bench_cli_on_the_chat_endpoint_waits_for_every_template_parse(capsys) -> None:
    # vLLM 0.11.0 parses Qwen3's chat template on every chat request, 12.22 ms each on the API server's one event
    # loop (benchmarks/data/chat_template_parse.json), and every request's parse runs before any is handed over:
    # 1,000 requests sent at once reach the engine after 1,000 x 12.22 ms = 12.22 s
    args = ["bench", "--gpu", "h100", "--model", "Qwen/Qwen3-8B", "--vllm-version", "0.11.0", "--json", "--"]
    code, out, _ = _run([*args, *CHAT.split()], capsys)
    data = json.loads(out)
    assert code == 0 and data["endpoint"] == "chat" and data["front_end_ms"] == 12.22
    assert data["total_input_tokens"] == 1000 * 127 and data["chat_template_tokens"] == 0
    assert data["mean_ttft_ms"] > 1000 * 12.22
    code, out, _ = _run([*args[:-2], "--chat-template-tokens", "9", "--json", "--", *CHAT.split()], capsys)
    assert json.loads(out)["total_input_tokens"] == 1000 * 127  # the client counts the dataset's tokens only
    code, text, _ = _run([*args[:-2], "--", *CHAT.split()], capsys)
    assert "requests go to /v1/chat/completions: the chat template's own tokens around each prompt are not " \
           "counted" in text and "front end: vLLM 0.11.0 parses the chat template on every chat request" in text
    code, _, err = _run([*args[:-2], "--chat-template-tokens", "-1", "--", *CHAT.split()], capsys)
    assert code == 2 and "--chat-template-tokens must be between 0 and 4,096" in err


def test_fixed_lengths_move_in_waves_so_every_wave_is_a_burst() -> None:
    # With --ignore-eos fixed lengths the 32 requests of a closed loop end together and the next 32 arrive together:
    # each prompt queues behind its wave's other prompts. On an H100 the budget is 8,192 tokens: 8 prompts of 1,024
    # per step (S), so a wave's prompts get their first token after 1, 2, 3 or 4 steps; the p99 request waits 4 S and
    # the median one 2-3 S (the first wave's four groups start decoding a step apart, so later waves arrive in
    # groups that also share steps with decodes), where a steady state of staggered requests has each prompt beside
    # the decodes alone.
    result = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100", max_model_len=4096))
    assert result.settings.max_num_batched_tokens == 8192
    run = bench_prediction(result, parse_bench_command(LINE).load)
    replica = _Replica(result, None)
    step_ms = 1e3 * step_time(replica.costs, replica.rates, replica.constants, decode_tokens=0,
                              decode_context_tokens=0, prefill_tokens=8192, prefill_prompts=8, requests=8).total_s
    overhead_ms = replica.constants.request_overhead_s * 1e3
    assert run.p99_ttft_ms == pytest.approx(overhead_ms + 4 * step_ms, rel=0.03)
    assert overhead_ms + 2 * step_ms <= run.median_ttft_ms <= (overhead_ms + 3 * step_ms) * 1.03
    steady = speed_estimate(result, Traffic(input_tokens=1024, output_tokens=256, concurrency=32))
    assert run.median_ttft_ms > 5 * steady.ttft_ms


@pytest.mark.parametrize(("extra", "said"), [
    (["--", "vllm", "bench", "serve", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-concurency", "3"],
     "unrecognized arguments: --max-concurency 3"),
    ([], "give the bench command after --"),
    (["--", "vllm", "bench", "serve", "--num-prompts", "3"], "name the model"),
    (["-pp", "2", "--", *LINE.split()], "pipeline parallel"),
])
def test_bad_bench_input_exits_2_with_one_line(capsys, extra: list[str], said: str) -> None:
    code, out, err = _run([*GPU, *extra], capsys)
    assert code == 2 and out == "" and said in err and len(err.strip().splitlines()) == 1


def test_a_linear_step_cost_is_recovered_from_the_means_a_server_measures() -> None:
    # A run timed by 12 ms + 40 us a token shows some mean ITL and mean prefill time; from those two the fit must
    # give back the 12 ms and 40 us (what a server's histograms give the real-server test).
    limits = EngineLimits(max_num_seqs=16, max_num_batched_tokens=256, kv_cache_tokens=100_000, block_size=16)
    load = BenchLoad(input_tokens=(448,) * 32, output_tokens=(4,) * 32, max_concurrency=8)
    truth = LinearStepCost(fixed_s=0.012, per_token_s=40e-6)
    shown = simulate(load, limits, truth)
    fitted = fit_linear_step_cost(load, limits, mean_itl_s=shown.mean_itl_ms / 1e3,
                                  mean_prefill_s=shown.mean_prefill_ms / 1e3)
    assert fitted.fixed_s == pytest.approx(0.012, rel=1e-3) and fitted.per_token_s == pytest.approx(40e-6, rel=1e-3)


def test_a_request_that_reaches_a_busy_engine_waits_for_the_step_outside_vllm_queue_time() -> None:
    # vLLM 0.32's engine loop takes new requests in between steps (EngineCore.run_busy_loop); the scheduler stamps
    # QUEUED then, so the wait for the step in flight is in the server's TTFT but not in its queue histogram.
    # 10 ms steps, 4 ms outside the engine, 2 clients: requests 0 and 1 reach the idle engine at 4 ms and share the
    # step 4-14; request 1 ends at 24, request 2 is sent then and reaches the engine at 28, mid-step (24-34): it is
    # taken in at 34 (waited 6 ms), scheduled at once (queue 0) and has its first token at 44 (TTFT 44 - 24 = 20).
    limits = EngineLimits(max_num_seqs=8, max_num_batched_tokens=256, kv_cache_tokens=10_000, block_size=16,
                          request_overhead_s=0.004)
    load = BenchLoad(input_tokens=(100,) * 3, output_tokens=(5, 2, 2), max_concurrency=2)
    run = simulate(load, limits, LinearStepCost(fixed_s=0.010, per_token_s=0.0))
    assert run.mean_intake_wait_ms == pytest.approx(6 / 3)
    assert run.mean_queue_ms == pytest.approx(0.0)
    assert run.mean_ttft_ms == pytest.approx((14 + 14 + 20) / 3)
    # what that server's histograms show: TTFT 16 ms on average, queue 0, prefill 10, ITL 10; 16 - 0 - 10 = 6 ms
    # beside the engine, of which 2 ms on average is the wait for the step in flight, so 4 ms outside it
    cost, overhead_s = fit_measured_run(load, limits.model_copy(update={"request_overhead_s": 0.0}),
                                        mean_ttft_s=0.016, mean_queue_s=0.0, mean_prefill_s=0.010, mean_itl_s=0.010)
    assert overhead_s == pytest.approx(0.004) and cost.fixed_s == pytest.approx(0.010)


@pytest.mark.parametrize(("server_ttft_ms", "fitted_ttft_ms"), [(11.0, 10.0), (13.0, 40 / 3)])
def test_the_time_outside_the_engine_lands_on_the_nearer_side_of_a_step(server_ttft_ms: float,
                                                                        fitted_ttft_ms: float) -> None:
    # 10 ms steps, 2 clients, outputs 4, 2, 4, 2, 4, 2 tokens. With nothing outside the engine every request reaches
    # it as a step ends (or at an idle engine): each TTFT is one step, 10 ms. With any time outside at all, requests
    # 2 (sent at 20 ms) and 3 (sent at 40 ms) reach it just after a step began and wait that step out: TTFTs 10, 10,
    # 20, 20, 10, 10, mean 13.33 ms. No time outside gives a server's mean TTFT between those two (queue 0, prefill
    # 10); the fit takes the nearer one (it took the first above, and a real closed loop, whose few stalled requests
    # raised the mean, came out with a whole step outside the engine and a median TTFT 38 % high).
    limits = EngineLimits(max_num_seqs=8, max_num_batched_tokens=256, kv_cache_tokens=10_000, block_size=16)
    load = BenchLoad(input_tokens=(100,) * 6, output_tokens=(4, 2, 4, 2, 4, 2), max_concurrency=2)
    step = LinearStepCost(fixed_s=0.010, per_token_s=0.0)
    assert simulate(load, limits, step).mean_ttft_ms == pytest.approx(10.0)
    nudged = simulate(load, limits.model_copy(update={"request_overhead_s": 1e-6}), step)
    assert nudged.mean_ttft_ms == pytest.approx((10 + 10 + 20 + 20 + 10 + 10) / 6, abs=1e-3)
    cost, overhead_s = fit_measured_run(load, limits, mean_ttft_s=server_ttft_ms / 1e3, mean_queue_s=0.0,
                                        mean_prefill_s=0.010, mean_itl_s=0.010)
    fitted = simulate(load, limits.model_copy(update={"request_overhead_s": overhead_s}), cost)
    assert fitted.mean_ttft_ms == pytest.approx(fitted_ttft_ms, abs=1e-3) and overhead_s < 1e-6


def test_measured_step_times_replace_the_roofline_for_a_cpu_server(capsys) -> None:
    # 10 ms a step, no per-token cost, no time before the engine: 4 prompts of 100 in one step, then 9 decodes.
    code, out, _ = _run(["bench", "--model", "tests/data/tiny-configs/tiny-llama.config.json", "--device", "cpu",
                         "--max-model-len", "1024", "--measured-step-ms", "10", "--prompt-special-tokens", "0",
                         "--json", "--", "vllm", "bench", "serve", "--random-input-len", "100",
                         "--random-output-len", "10", "--num-prompts", "4"], capsys)
    data = json.loads(out)
    assert code == 0 and data["median_ttft_ms"] == pytest.approx(10.0) and data["mean_tpot_ms"] == pytest.approx(10.0)
    assert data["duration_s"] == pytest.approx(0.1)
    code, _, err = _run(["bench", "--model", "tests/data/tiny-configs/tiny-llama.config.json", "--device", "cpu",
                         "--measured-step-ms", "-1", "--", "vllm", "bench", "serve"], capsys)
    assert code == 2 and "--measured-step-ms must be positive" in err


@pytest.mark.parametrize(("prompt", "hit"), [(100, 96), (4096, 4080), (64, 48), (16, 0), (1, 0)])
def test_the_test_prompt_leaves_its_full_blocks_but_the_last_token_cached(prompt, hit) -> None:
    # V1's get_computed_blocks caps a hit at prompt - 1 tokens, whole 16-token blocks: 99 // 16 = 6 blocks = 96;
    # 4095 // 16 = 255 blocks = 4080; a prompt of exactly 4 blocks recomputes its last one (63 // 16 = 3 blocks).
    assert cached_test_prompt_tokens(prompt, 16) == hit


def test_the_first_request_of_a_run_prefills_only_what_the_test_prompt_did_not_cache() -> None:
    # vllm bench serve sends input_requests[0] once before the run; with prefix caching the run's first request
    # computes 100 - 96 = 4 prompt tokens: its first step takes 10 ms + 4 x 0.1 ms = 10.4 ms, the second
    # request's 10 ms + 100 x 0.1 ms = 20 ms (one at a time, nothing else in the step): mean (10.4 + 20) / 2 = 15.2.
    limits = EngineLimits(max_num_seqs=8, max_num_batched_tokens=1000, kv_cache_tokens=10_000, block_size=16)
    cost = LinearStepCost(fixed_s=0.010, per_token_s=1e-4)
    cached = BenchLoad(input_tokens=(100, 100), output_tokens=(3, 3), max_concurrency=1, first_prompt_cached=True)
    cold = cached.model_copy(update={"first_prompt_cached": False})
    assert simulate(cached, limits, cost).mean_ttft_ms == pytest.approx(15.2)
    assert simulate(cold, limits, cost).mean_ttft_ms == pytest.approx(20.0)
    assert simulate(cached, limits, cost).total_input_tokens == 200  # the client still counts the whole prompts


def test_prompts_a_sweep_left_cached_prefill_only_their_uncached_tails() -> None:
    # Two 100-token prompts one at a time, the second finding 96 tokens cached (an earlier run of the same seeded
    # prompts): its first step computes 4 tokens, 10 ms + 4 x 0.1 ms = 10.4 ms; the first computes all 100, 20 ms.
    limits = EngineLimits(max_num_seqs=8, max_num_batched_tokens=1000, kv_cache_tokens=10_000, block_size=16)
    cost = LinearStepCost(fixed_s=0.010, per_token_s=1e-4)
    load = BenchLoad(input_tokens=(100, 100), output_tokens=(3, 3), max_concurrency=1, cached_prompt_tokens=(0, 96))
    assert simulate(load, limits, cost).mean_ttft_ms == pytest.approx(15.2)
    # with the test prompt's hit on the first as well, both take 10.4 ms
    both = load.model_copy(update={"first_prompt_cached": True})
    assert simulate(both, limits, cost).mean_ttft_ms == pytest.approx(10.4)
    with pytest.raises(ValueError, match="1 cached-token counts for 2 prompts"):
        BenchLoad(input_tokens=(100, 100), output_tokens=(3, 3), cached_prompt_tokens=(96,))
    with pytest.raises(ValueError, match="fewer than its tokens"):
        BenchLoad(input_tokens=(100,), output_tokens=(3,), cached_prompt_tokens=(100,))


@pytest.mark.parametrize(("server", "bench", "mean_ttft_ms"), [
    ([], [], 40.0),  # vllm bench serve's defaults (0.14+, vllm#30975): no ready check, so nothing cached before the run
    ([], ["--ready-check-timeout-sec", "600"], 27.2),  # the ready check sends the first prompt; V1 caches it
    ([], ["--num-warmups", "1"], 27.2),  # a warm-up sends the same prompt
    (["--no-enable-prefix-caching"], ["--ready-check-timeout-sec", "600"], 40.0),  # sent, but the server keeps nothing
])
def test_the_bench_cli_caches_the_test_prompt_where_the_server_caches_prefixes(capsys, server, bench,
                                                                              mean_ttft_ms) -> None:
    # Two 300-token prompts one at a time, 10 ms a step plus 0.1 ms a token, 128-token blocks (vLLM's CPU default).
    # After a test prompt the first request finds (300 - 1) // 128 = 2 blocks = 256 tokens cached and computes 44:
    # 10 + 4.4 = 14.4 ms; the second computes all 300: 10 + 30 = 40 ms; mean 27.2 ms. Else 40 ms each.
    code, out, _ = _run(["bench", "--model", "tests/data/tiny-configs/tiny-llama.config.json", "--device", "cpu",
                         "--vllm-version", "0.32.0", "--max-model-len", "1024", "--max-num-batched-tokens", "512",
                         "--measured-step-ms", "10", "--measured-step-us-per-token", "100",
                         "--prompt-special-tokens", "0", *server, "--json", "--", "vllm", "bench", "serve",
                         "--random-input-len", "300", "--random-output-len", "2", "--num-prompts", "2",
                         "--max-concurrency", "1", *bench], capsys)
    assert code == 0
    assert json.loads(out)["mean_ttft_ms"] == pytest.approx(mean_ttft_ms)
