"""The speed model against the measured runs (benchmarks/data/speed_records.jsonl, a copy of the shared records).

These are the in-sample figures of docs/speed-accuracy.md (the held-out refits take minutes and run in
``python benchmarks/speed_accuracy.py``). The targets are issue 12's: TPOT and output throughput median error
within 15 %, TTFT within 30 %, and better than both peers' published methods on each.
"""

from __future__ import annotations

import math
import statistics

import pytest

from benchmarks import speed_peers, speed_replay
from calculator.speed.calibration import constants_for

TARGETS_PCT = {"ttft_ms": 30.0, "tpot_ms": 15.0, "output_tok_s": 15.0}


@pytest.fixture(scope="module")
def errors() -> dict[str, dict[str, list[float]]]:
    table: dict[str, dict[str, list[float]]] = {"ours": {}, "ridgepoint": {}, "llm-optimizer": {}}
    for record in speed_replay.load_records():
        platform = speed_replay.deployment(record["id"]).gpu.platform
        predictions = {"ours": speed_replay.predict(record, constants_for(platform)),
                       "ridgepoint": speed_peers.ridgepoint(record), "llm-optimizer": speed_peers.llm_optimizer(record)}
        for metric, measured in speed_replay.measured(record).items():
            for method, predicted in predictions.items():
                if predicted and math.isfinite(predicted.get(metric, math.nan)):
                    table[method].setdefault(metric, []).append(abs(predicted[metric] / measured - 1) * 100)
    return table


def test_the_copy_is_the_shared_data_set() -> None:
    records = speed_replay.load_records()
    assert len(records) == 41 and len({r["id"] for r in records}) == 41
    assert all(speed_replay.run_for(r) for r in records)  # every record has a replay mapping


@pytest.mark.parametrize("metric", list(TARGETS_PCT))
def test_median_error_meets_the_target_and_beats_the_peers(errors, metric) -> None:
    ours = statistics.median(errors["ours"][metric])
    assert ours <= TARGETS_PCT[metric]
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
