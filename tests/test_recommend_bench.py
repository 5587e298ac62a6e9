"""Recommend on a `vllm bench serve` load: each deployment's replica simulated under the run, TTFT p95 judged and
ranked on it, with its regime's band and "at risk" when only the optimistic edge meets the SLO."""

from __future__ import annotations

import json

import pytest

from calculator import GpuPrice, Slo, Traffic, estimate, load_model_spec, recommend
from calculator.engine.vllm_versions import LATEST_VERSION
from calculator.speed.bands import bench_regime, ttft_band
from calculator.speed.bench import BenchLoad, EngineLimits, LinearStepCost, simulate
from calculator.speed.bench_command import parse_bench_command
from calculator.speed.calibration import REGIME_BAND_FACTOR
from calculator.speed.predict import Band, bench_prediction
from calculator.speed.recommend import MAX_BENCH_PROMPTS, BenchTtft, bench_verdict
from test_speed_cli import _run

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TRAFFIC = Traffic(input_tokens=512, output_tokens=128, concurrency=32)
PRICES = {"h100-sxm-80gb": GpuPrice(usd_per_gpu_hour=3.0, source="test"),
          "l4-24gb": GpuPrice(usd_per_gpu_hour=0.5, source="test")}
BENCH = ("--dataset-name random --random-input-len 511 --random-output-len 128 --max-concurrency 32 "
         "--num-prompts 320 --ignore-eos")


def test_a_closed_loop_of_two_clients_gives_the_hand_computed_ttft_p95() -> None:
    # Steps take 10 ms; the budget is 10 tokens, so a 10-token prompt fills a step. Two clients send r0, r1 at 0.
    # Step 1 (0-10): r0's prompt -> first token at 10 (TTFT 10). Step 2 (10-20): r0 decodes, r1 gets the 9 tokens
    # left; r0 ends at 20 and its client sends r2. Step 3 (20-30): r1's last prompt token -> TTFT 30; r2 gets 9.
    # Step 4 (30-40): r1 decodes and ends, r2's last token -> TTFT 40 - 20 = 20; r3 sent at 40. Step 5 (40-50):
    # r2 decodes and ends, r3 gets 9; step 6 (50-60): r3's last token -> TTFT 20.
    # TTFTs 10, 20, 20, 30: numpy's linear p95 is 20 + 0.85 x 10 = 28.5, p99 20 + 0.97 x 10 = 29.7.
    load = BenchLoad(input_tokens=(10,) * 4, output_tokens=(2,) * 4, max_concurrency=2)
    limits = EngineLimits(max_num_seqs=8, max_num_batched_tokens=10, kv_cache_tokens=10_000)
    run = simulate(load, limits, LinearStepCost(fixed_s=0.010, per_token_s=0.0))
    assert run.p95_ttft_ms == pytest.approx(28.5)
    assert run.p99_ttft_ms == pytest.approx(29.7)
    assert run.mean_ttft_ms == pytest.approx(20.0)
    assert run.duration_s == pytest.approx(0.070)


def test_the_slo_is_judged_on_the_benchmark_p95_and_its_band() -> None:
    simulated = BenchTtft(arrival="a", simulated_prompts=4, ttft_p95_ms=100.0, ttft_p99_ms=120.0,
                          regime="saturated", band=Band(low=50.0, high=200.0))
    assert bench_verdict(simulated, Slo(ttft_p95_ms=90.0), ()) == {
        "reason": "TTFT p95 100.0 ms under the benchmark load > SLO 90.0 ms"}
    assert bench_verdict(simulated, Slo(ttft_p95_ms=150.0), ("ITL x",)) == {"risks": (
        "TTFT p95 100.0 ms (benchmark load) meets 150.0 ms, but its band reaches 200.0 ms", "ITL x")}
    assert bench_verdict(simulated, Slo(ttft_p95_ms=250.0), ()) == {}
    assert bench_verdict(simulated, Slo(), ()) == {}


def test_a_benchmark_runs_regime_and_band() -> None:
    assert bench_regime(1, 5.0) == "one request"
    assert bench_regime(32, 0.5) == "saturated"
    assert bench_regime(32, 0.0) == "below the knee"
    assert bench_regime(None, 0.0) == "below the knee"
    factor = REGIME_BAND_FACTOR["saturated"]["ttft"]
    band = ttft_band(100.0, "saturated", widened=False)
    assert (band.low, band.high) == pytest.approx((100.0 / factor, 100.0 * factor))


def test_recommend_ranks_on_the_simulated_benchmark_ttft() -> None:
    spec = load_model_spec(MODEL)
    load = parse_bench_command(BENCH).load
    result = recommend(spec, TRAFFIC, Slo(ttft_p95_ms=2000.0), gpus=["h100", "l4"], prices=PRICES, bench=load)
    assert result.bench_prompts == MAX_BENCH_PROMPTS == 100
    assert "first 100 of its 320 prompts simulated" in result.ttft_load
    assert "closed loop of 32 clients" in result.ttft_load
    ranked = result.by_ttft_p95
    assert ranked and all(o.bench is not None for o in ranked)
    assert [o.ttft_p95_ms for o in ranked] == sorted(o.ttft_p95_ms for o in ranked)
    first = ranked[0]
    # the figure is the simulation of the run's first 100 prompts on that deployment's own replica
    scenario = first.deployment.scenario(MODEL, LATEST_VERSION, result.max_model_len)
    cut = load.model_copy(update={"input_tokens": load.input_tokens[:100], "output_tokens": load.output_tokens[:100]})
    assert first.bench.ttft_p95_ms == pytest.approx(bench_prediction(estimate(scenario, spec), cut).p95_ttft_ms)
    assert first.ttft_p95_band == first.bench.band
    missed = [o for o in result.rejected if o.reason and "under the benchmark load" in o.reason]
    assert missed and all(o.deployment.gpu == "l4-24gb" for o in missed)
    at_risk = [o for o in ranked if o.slo_status == "at risk"]
    assert at_risk and all("(benchmark load) meets 2.00 s" in o.risks[0] for o in at_risk)


def test_recommend_cli_takes_a_bench_line_and_says_which_load(capsys) -> None:
    argv = ["recommend", "--model", MODEL, "--input-tokens", "512", "--output-tokens", "128",
            "--concurrent-users", "32", "--ttft-p95-ms", "2000", "--gpu", "h100", "--bench", BENCH]
    code, out, _ = _run([*argv, "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and "the benchmark load on one replica (closed loop of 32 clients" in data["ttft_load"]
    rows = data["by_ttft_p95"]
    assert rows and all(row["bench"]["simulated_prompts"] == 100 for row in rows)
    assert [row["bench"]["ttft_p95_ms"] for row in rows] == sorted(row["bench"]["ttft_p95_ms"] for row in rows)
    code, out, _ = _run(argv, capsys)
    assert code == 0 and "TTFT p95 (judged against the SLO): the benchmark load on one replica" in out
    code, _, err = _run([*argv[:-1], "--dataset-name sharegpt"], capsys)
    assert code == 2 and "--dataset-name sharegpt is not modelled" in err and len(err.strip().splitlines()) == 1


def test_speed_cli_names_the_arrival_its_ttft_assumes(capsys) -> None:
    argv = ["speed", "--model", MODEL, "--gpu", "h100", "--input-tokens", "512", "--output-tokens", "128"]
    code, out, _ = _run([*argv, "--request-rate", "4", "--json"], capsys)
    assert code == 0 and json.loads(out)["arrival"] == (
        "steady load: Poisson arrivals at 4 req/s, the queue in its long-run state")
    code, out, _ = _run([*argv, "--concurrency", "8"], capsys)
    assert code == 0 and "steady load: 8 users in a closed loop" in out
