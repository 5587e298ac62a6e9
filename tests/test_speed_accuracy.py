"""The speed model against the measured runs (benchmarks/data/speed_records.jsonl, a copy of the shared records,
and benchmarks/data/speed_records_mined.jsonl, the runs mined for issue 19).

These are the in-sample figures of docs/speed-accuracy.md (the held-out refits take minutes and run in
``python benchmarks/speed_accuracy.py``). On the shared records the targets are issue 12's: TPOT and output
throughput median error within 15 %, TTFT within 30 %; on all records, better than both peers' published methods on
each, and no worse than the model reaches today (``IN_SAMPLE_GUARD_PCT``: TTFT 25 %, TPOT 13 %, output throughput
12.5 %, beside issue 19's targets of 25 / 12 / 12: in sample 22.7 / 12.2 / 10.6 % on 7 Dec 2026).
"""

from __future__ import annotations

import json
import math
import re
import statistics

import pytest

from benchmarks import speed_accuracy, speed_peers, speed_replay
from calculator.speed.bench import BenchLoad
from calculator.speed.calibration import BAND_FACTOR, COVERAGE, REGIME_BAND_FACTOR, constants_for
from calculator.speed.predict import bench_prediction

TARGETS_PCT = {"ttft_ms": 30.0, "tpot_ms": 15.0, "output_tok_s": 15.0}  # issue 12, on the shared records
# NOTE: 31 runs of 9 more sources (tt-inference-server's RTX 4090 / A100 / 2 x H100 sweeps, vLLM PRs' and recipes'
# bench runs, PegaInfer's RTX 5090 baselines) took the in-sample medians on all records from 21.3 / 9.4 / 7.7 % to
# 31.3 / 11.6 / 8.2 % (TTFT / TPOT / throughput) after the refit, and held out from 24.8 / 15.9 / 12.5 to
# 34.7 / 20.1 / 10.4 % (docs/speed-accuracy.md): of issue 19's targets (25 / 12 / 12) only throughput's is met.
# The graph-mode kernel gap, the MoE layer latency and the LM head on sampled rows (second refit of 6 Dec 2026, 181
# scored records) took them to 24.5 / 10.0 / 10.6 % in sample, held out 26.3 / 16.4 / 13.4 %; the fused-MoE kernels'
# measured share of the dense rate (7 Dec 2026) to 24.7 / 9.6 / 10.4 %, held out 26.7 / 15.2 / 13.5 %, before the
# refit with it, and to 24.1 / 10.1 / 10.4 %, held out 26.1 / 14.7 / 13.0 %, after. 17 runs of five sources mined
# since, scored before any fit saw them, took them to 24.1 / 11.1 / 11.7 %, held out 25.9 / 15.4 / 13.7 %, and the
# refit with them to 24.2 / 10.7 / 12.1 %, held out 27.3 / 15.5 / 15.1 % (three of the five are MoE pages at TP 8 that
# no constant reconciles with the rest): the throughput bound sits just above where the refit left it. InferenceX's
# gpt-oss-120b at TP 4-8 (six runs, held out by the constants fitted before them) took them to 24.2 / 10.0 / 11.4 %,
# held out 27.3 / 14.7 / 14.5 %; the refit with them to 24.0 / 11.5 / 11.5 %, held out 27.2 / 15.4 / 13.3 % (the
# fit traded the one-request decodes' TPOT for the MoE pages' throughput). Bytes priced over each card's measured
# streaming rate and refitted: 24.1 / 12.5 / 11.8 %, held out 25.7 / 15.1 / 12.8 % (the fit's loss weighs sources
# equally, not the median of records: in sample TPOT rose a point while every held-out median fell). FP8 FLOPs over
# the speedup vLLM's FP8 GEMMs were timed at (rescored): 24.1 / 12.4 / 11.4 %, held out 25.1 / 14.7 / 12.8 %; FP4
# FLOPs over the speedup its NVFP4 GEMMs were timed at (rescored): 23.2 / 12.3 / 11.3 %, held out 24.4 / 14.7 / 12.3 %;
# the layers a quantized checkpoint leaves 16-bit at the BF16 ceiling: 23.0 / 12.3 / 11.2 %, held out unchanged.
# Seven runs of three sources scored as they came (an RTX 5090, a B200 pair, an RTX 4090 chat run), with the RTX
# 5090's same-chip FP4 / FP8 speedups: 22.7 / 12.2 / 10.6 %, held out 24.0 / 14.3 / 11.3 %.
# These bounds keep the model at what it reaches, so that a change that loses accuracy fails here.
IN_SAMPLE_GUARD_PCT = {"ttft_ms": 25.0, "tpot_ms": 13.0, "output_tok_s": 12.5}
MINED = [json.loads(line) for line in speed_replay.MINED.read_text(encoding="utf-8").splitlines() if line.strip()]


def _errors(records: list[dict]) -> dict[str, dict[str, list[float]]]:
    table: dict[str, dict[str, list[float]]] = {"ours": {}, "ridgepoint": {}, "llm-optimizer": {}}
    for record in records:
        platform = speed_replay.deployment(record["id"]).gpu.platform
        predictions = {"ours": speed_replay.predict(record, constants_for(platform)),
                       "ridgepoint": speed_peers.ridgepoint(record), "llm-optimizer": speed_peers.llm_optimizer(record)}
        for metric, measured in speed_replay.measured(record).items():
            for method, predicted in predictions.items():
                if predicted and math.isfinite(predicted.get(metric, math.nan)):
                    table[method].setdefault(metric, []).append(abs(predicted[metric] / measured - 1) * 100)
    return table


@pytest.fixture(scope="module")
def errors() -> dict[str, dict[str, list[float]]]:
    return _errors(speed_replay.scored_records())


@pytest.fixture(scope="module")
def shared_errors() -> dict[str, dict[str, list[float]]]:
    mined = {r["id"] for r in MINED}
    return _errors([r for r in speed_replay.scored_records() if r["id"] not in mined])


def test_the_records_are_the_shared_data_set_and_the_mined_runs() -> None:
    records = speed_replay.load_records()
    assert len(records) == 41 + 178 and len({r["id"] for r in records}) == 219
    assert all(speed_replay.run_for(r) for r in records)  # every record has a replay mapping
    assert len({speed_replay.source_of(r) for r in MINED}) == 45  # held out source by source


def test_every_mined_run_says_where_it_comes_from_and_how_to_rerun_it() -> None:
    for record in MINED:
        assert record["source"].startswith("https://") and record["quote"], record["id"]
        for field in ("model", "gpu", "tensor_parallel_size", "vllm_version", "input_tokens", "output_tokens",
                      "num_prompts"):
            assert record[field] is not None, (record["id"], field)
        sent_at_once = speed_replay.run_for(record).mode in ("rate_inf", "burst")
        assert record["concurrency"] or record["request_rate"] or sent_at_once, record["id"]
        assert speed_replay.measured(record), record["id"]
        for metric, why in record.get("unscored", {}).items():  # a figure its source contradicts, and why
            assert metric in speed_replay.METRICS and metric not in speed_replay.measured(record), record["id"]
            assert len(why) > 40, record["id"]
        # the mean (or median) TTFT each source prints is in its quote, as printed
        ttft = record["ttft_ms_mean"]
        if ttft is not None and not record["id"].startswith("gpuconc"):  # gpu_conc: the JSON's full digits
            assert re.search(rf"(?<![\d.]){re.escape(str(ttft))}0*(?!\d)", record["quote"]), record["id"] # 64.00


def test_the_coverage_the_bands_rely_on_is_what_the_records_span() -> None:
    spans = speed_accuracy.coverage(speed_replay.scored_records())
    assert set(spans["gpu_families"]) == COVERAGE.gpu_families
    assert set(spans["engines"]) == COVERAGE.engines and set(spans["model_kinds"]) == COVERAGE.model_kinds
    assert spans["max_running_requests"] == COVERAGE.max_running_requests


def test_the_bands_are_the_ones_the_stored_held_out_errors_give_under_these_constants() -> None:
    # Each record's regime comes from the in-sample replay, so the bands change with the constants: calibration.py must
    # carry what the held-out predictions (benchmarks/data/speed_held_out.json) give with the constants it holds,
    # the bands docs/speed-accuracy.md shows.
    records = speed_replay.scored_records()
    table = speed_accuracy.errors(records, speed_accuracy.predictions(records, reuse_held_out=True))
    pooled = speed_accuracy.bands(table)
    assert pooled == BAND_FACTOR
    assert speed_accuracy.regime_bands(speed_accuracy.regime_residuals(table), pooled) == REGIME_BAND_FACTOR


def test_the_fit_replays_a_record_again_only_when_a_term_it_reads_moves() -> None:
    # benchmarks/speed_fit.py keeps each record's errors by the terms its replay reads; moving any other term must
    # leave the replay exactly as it was, or the fit would score a stale prediction.
    from benchmarks import speed_fit

    base = constants_for("cuda")
    records = [r for r in speed_replay.scored_records() if speed_replay.fitted_as_steady_state(r)]
    checked = 0
    for record in records:
        before = speed_replay.log_errors(base, [record], step_by_step=False)
        for name in set(speed_fit.BOUNDS) - set(speed_fit._terms_read(record["id"])):
            moved = base.model_copy(update={name: speed_fit.BOUNDS[name][1]})
            assert speed_replay.log_errors(moved, [record], step_by_step=False) == before, (record["id"], name)
            checked += 1
    assert checked > 300  # the eager gap, graph gaps, MoE latency and collectives of the records that lack them


def test_a_refit_cut_short_goes_on_where_it_stopped_while_its_inputs_are_unchanged(tmp_path, monkeypatch) -> None:
    from concurrent.futures import ThreadPoolExecutor

    fitted: list[str] = []
    cuda = constants_for("cuda")

    def fold(job):
        fitted.append(job[1])
        return job[1], cuda, cuda

    monkeypatch.setattr(speed_accuracy, "PARTIAL", tmp_path / "partial.json")
    monkeypatch.setattr(speed_accuracy, "_fold", fold)
    with ThreadPoolExecutor(max_workers=1) as pool:
        speed_accuracy.fold_fits([], ["a"], pool)  # a refit stopped after one fold
        folds = speed_accuracy.fold_fits([], ["a", "b"], pool)
        assert fitted == ["a", "b"] and set(folds) == {"a", "b"}
        assert folds["b"] == {"cuda": cuda.model_dump(), "rocm": cuda.model_dump()}
        monkeypatch.setattr(speed_accuracy, "model_fingerprint", lambda: "another model")
        speed_accuracy.fold_fits([], ["a", "b"], pool)  # a file the fits read changed: every fold again
    assert fitted == ["a", "b", "a", "b"]



def test_a_source_added_after_the_last_refit_is_held_out_by_the_constants_fitted_before_it(tmp_path,
                                                                                          monkeypatch) -> None:
    folds = tmp_path / "folds.json"
    folds.write_text(json.dumps({"old": {"cuda": {}, "rocm": {}}}))
    monkeypatch.setattr(speed_accuracy, "FOLD_CONSTANTS", folds)
    assert speed_accuracy.newer_than_the_fit(["old", "new"]) == {
        "new": {"cuda": constants_for("cuda").model_dump(), "rocm": constants_for("rocm").model_dump()}}

@pytest.mark.parametrize("metric", list(TARGETS_PCT))
def test_median_error_on_the_shared_records_meets_issue_12s_target(shared_errors, metric) -> None:
    assert statistics.median(shared_errors["ours"][metric]) <= TARGETS_PCT[metric]


@pytest.mark.parametrize("metric", list(IN_SAMPLE_GUARD_PCT))
def test_median_error_on_all_records_holds_its_level(errors, metric) -> None:
    assert statistics.median(errors["ours"][metric]) <= IN_SAMPLE_GUARD_PCT[metric]


@pytest.mark.parametrize("metric", list(TARGETS_PCT))
def test_ours_beats_the_peers_on_all_records(errors, metric) -> None:
    ours = statistics.median(errors["ours"][metric])
    for peer in ("ridgepoint", "llm-optimizer"):
        assert ours < statistics.median(errors[peer][metric]), peer


def test_lengths_of_throughput_only_sharegpt_rows_come_from_their_throughputs() -> None:
    record = next(r for r in speed_replay.load_records() if r["id"].startswith("vllm-12315"))
    # 714.48 output tok/s at 3.28 req/s -> 218 tokens; (1414.42 - 714.48) / 3.28 -> 213 prompt tokens
    assert speed_replay.lengths(record) == (213, 218)


def test_a_sharegpt_wave_lasts_as_long_as_its_expected_longest_output() -> None:
    # 200 exponential lengths of mean 218: the longest is 218 x H_200 = 218 x 5.8780 = 1,281.4 tokens
    assert speed_replay.sharegpt_longest_output(218, 213, 200) == 1281
    # the ShareGPT sampler keeps prompt + output <= 2,048: a 1,000-token prompt leaves at most 1,048
    assert speed_replay.sharegpt_longest_output(400, 1000, 200) == 1048
    assert speed_replay.sharegpt_longest_output(218, 213, 1) == 218  # one request: its own (mean) length


def test_a_finite_closed_loop_is_sent_as_the_benchmark_sends_it() -> None:
    records = {r["id"]: r for r in speed_replay.load_records()}
    # mushfiq, Workload A: 300 prompts of 256 tokens asking for 128; outputs stop at EOS (a mean of 100)
    record = records["mushfiq-rtx4090-mistral7b-c16"]
    load = speed_replay.bench_load(record, speed_replay.deployment(record["id"]), 256, 100)
    assert load.max_concurrency == 16 and load.num_prompts == 300 and set(load.input_tokens) == {256}
    assert max(load.output_tokens) == 128 and min(load.output_tokens) == 1
    assert abs(sum(load.output_tokens) / 300 - 100) < 0.5
    assert load.first_prompt_cached  # 0.11's client sent its test prompt; V1 caches prefixes by default
    # vLLM #43232: --ignore-eos, so all 128 outputs are the 1,000 tokens asked for
    record = records["vllm-43232-4xb200-qwen3-235b-fp8-c64"]
    load = speed_replay.bench_load(record, speed_replay.deployment(record["id"]), 30000, 1000)
    assert load.output_tokens == (1000,) * 128 and load.max_concurrency == 64
    # vLLM 0.22's vllm bench serve skips its ready check by default (vllm#30975), so no test prompt was cached
    assert not load.first_prompt_cached


def test_a_finite_poisson_run_above_what_the_engine_serves_is_simulated_not_an_endless_queue() -> None:
    # PegaInfer's vLLM 0.22.1 sweep at 16 requests/s: 60 x 16 = 960 prompts of 1,024 tokens, --ignore-eos 128
    record = next(r for r in speed_replay.load_records() if r["id"] == "pegainfer-rtx5090-qwen3-4b-v0221-qps16")
    result = speed_replay.deployment(record["id"])
    load = speed_replay.bench_load(record, result, 1024, 128)
    assert load.request_rate == 16 and load.max_concurrency is None and load.num_prompts == 960
    assert load.output_tokens == (128,) * 960
    # the steady state has no answer above capacity (its queue never ends); the finite run ends when the 960 do
    steady = speed_replay.predict(record, step_by_step=False)
    simulated = speed_replay.predict(record)
    assert steady["ttft_ms"] == math.inf
    assert math.isfinite(simulated["ttft_ms"]) and simulated["request_per_s"] < 16
    assert simulated["output_tok_s"] == pytest.approx(simulated["request_per_s"] * 128, rel=1e-9)


def test_one_request_runs_of_vllms_client_have_their_first_prompt_cached() -> None:
    # tt340's 4,096-token Qwen3-14B row: 2 prompts through benchmark_serving on a V1 server (prefix caching on by
    # default), the sweep's 3,072-token run before it (3071 // 16 = 191 blocks = 3,056 tokens of each prompt) and its
    # own test prompt (4095 // 16 = 255 blocks = 4,080 tokens of prompt 0). The one-request replay (the steady state
    # of one prompt, less what each cached tail saves) must agree with the step-by-step simulation of the same two
    # prompts, an independent path, up to the attention over the cached blocks that only the simulation counts.
    record = next(r for r in speed_replay.load_records() if r["id"] == "tt340-a100-qwen3-14b-isl4096-osl128-c1")
    result = speed_replay.deployment(record["id"])
    assert speed_replay.first_prompt_cached(record, result)
    cached = bench_prediction(result, BenchLoad(input_tokens=(4096, 4096), output_tokens=(128, 128),
                                                max_concurrency=1, cached_prompt_tokens=(4080, 3056)))
    cold = bench_prediction(result, BenchLoad(input_tokens=(4096, 4096), output_tokens=(128, 128),
                                              max_concurrency=1))
    assert speed_replay.predict(record)["ttft_ms"] == pytest.approx(cached.mean_ttft_ms, rel=1e-9)
    assert speed_replay.predict(record, step_by_step=False)["ttft_ms"] == pytest.approx(cached.mean_ttft_ms, rel=0.1)
    # prompt 0 costs what a request costs outside the engine and one block's step, prompt 1 the prefill of its last
    # 1,040 tokens (a quarter of the prompt, over 3,056 cached ones): the mean is above an eighth of the cold one and
    # under a fifth
    assert 0.125 < cached.mean_ttft_ms / cold.mean_ttft_ms < 0.2
    # gpu_conc's own harness sends no test prompt
    gpuconc = next(r for r in speed_replay.load_records() if r["id"] == "gpuconc-h200-gptoss20b-c1")
    assert not speed_replay.first_prompt_cached(gpuconc, speed_replay.deployment(gpuconc["id"]))


def test_a_tt_inference_server_sweep_leaves_each_later_run_its_prompts_prefixes_cached() -> None:
    # tt-inference-server seeds prompt i alike in every run of its one-request sweep, which runs 128/128 (8
    # prompts), 128/1024 (4), 1024/128 (4), 2048/128 (4), ... (benchmark_config.py, v0.0.5). The 2,048-token run's
    # prompts 0-3 begin with the 1,024-token run's: (1024 - 1) // 16 = 63 blocks = 1,008 tokens cached (the 128-token
    # runs' 112 are inside them); its own test prompt leaves prompt 0's (2048 - 1) // 16 = 127 blocks = 2,032.
    records = {r["id"]: r for r in speed_replay.load_records()}
    record = records["tt340-a100-qwen3-14b-isl2048-osl128-c1"]
    result = speed_replay.deployment(record["id"])
    assert speed_replay.cached_prompt_tokens(record, result) == (2032, 1008, 1008, 1008)
    # the sweep's first run finds only its test prompt's 112 tokens; the 128/1024 run finds all four prompts' 112
    assert speed_replay.cached_prompt_tokens(records["tt340-a100-qwen3-14b-isl128-osl128-c1"], result) == (
        112, 0, 0, 0, 0, 0, 0, 0)
    assert speed_replay.cached_prompt_tokens(records["tt340-a100-qwen3-14b-isl128-osl1024-c1"], result) == (112,) * 4
    # 8,192 tokens, 2 prompts: the 4,096-token run's prompts 0 and 1 give 4,080 each, the test prompt 8,176
    assert speed_replay.cached_prompt_tokens(records["tt340-a100-qwen3-14b-isl8192-osl128-c1"], result) == (
        8176, 4080)
    # a sweep that filled the KV cache before the run has had its blocks evicted: nothing is counted
    earlier = ((1024, 128, 4),)
    assert speed_replay.sweep_cached_prompt_tokens(2048, 2, earlier, 16, kv_cache_tokens=4 * 1152) == (1008, 1008)
    assert speed_replay.sweep_cached_prompt_tokens(2048, 2, earlier, 16, kv_cache_tokens=4 * 1152 - 1) == (0, 0)


def test_gpu_conc_times_the_first_text_after_gpt_osss_harmony_header() -> None:
    # gpu_conc's concurrency.py times the first chunk whose delta.content or delta.reasoning_content is non-empty.
    # gpt-oss replies open with <|channel|>analysis<|message|> (tokens 200005, 35644, 200008 in openai_harmony's
    # encoding), which vLLM 0.10's harmony streaming sends as empty reasoning deltas: the timed token is the 4th, so
    # the harness's TTFT is the server's first token plus 3 decode steps; nothing else it measures moves.
    records = {r["id"]: r for r in speed_replay.load_records()}
    for record_id in ("gpuconc-h200-gptoss20b-c1", "gpuconc-b200-gptoss20b-c16"):
        served, timed = speed_replay.served(records[record_id]), speed_replay.predict(records[record_id])
        assert timed["ttft_ms"] == pytest.approx(served["ttft_ms"] + 3 * served["tpot_ms"])
        assert {k: v for k, v in timed.items() if k != "ttft_ms"} == {k: v for k, v in served.items() if k != "ttft_ms"}
    # vllm bench serve times the first chunk with choices (the role chunk vLLM sends with the prefill's token)
    record = records["mushfiq-rtx4090-mistral7b-c16"]
    assert speed_replay.predict(record) == speed_replay.served(record)


def test_a_dataset_note_that_names_ignore_eos_to_say_it_was_off_is_not_read_as_fixed_lengths() -> None:
    fixed = speed_replay.fixed_output_lengths
    assert fixed({"dataset": "random, --ignore-eos"}) and fixed({"dataset": "random (ignore_eos)"})
    assert not fixed({"dataset": "sharegpt, 200 prompts, no --ignore-eos, backend openai-chat"})
    assert not fixed({"dataset": "aiperf synthetic prompts (no ignore_eos set; actual mean 499.5)"})
    assert not fixed({"dataset": "random, 2048 in / 512 out (ignore-eos not stated)"})
    # the flag off, but the record's own totals show every output ran to its cap
    assert fixed({"dataset": "random (no --ignore-eos; every output ran to its cap: 102,400 = fixed lengths)"})
