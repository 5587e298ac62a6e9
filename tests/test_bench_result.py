"""A `vllm bench serve` result against the speed model, and the efficiencies that make the model meet it.

The result block under tests/data/vllm-bench/ is laid out with vLLM 0.32.0's own format strings
(vllm/benchmarks/serve.py: "{:<40} {:<10.2f}") holding the measured figures of the speed record
qwen3-1536-a100-80g-qwen3-14b-awq-c1-16k (benchmarks/data/speed_records.jsonl): 30 prompts of 16,000 + 200
tokens, one at a time, Mean TTFT 3345.37 ms, Mean TPOT 20.63 ms, 26.84 tok/s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from calculator.engine.estimate import estimate
from calculator.observe.bench_result import diagnose_bench, read_bench_result
from calculator.observe.startup_log import LogUnreadable
from calculator.speed.calibration import constants_for
from calculator.speed.predict import speed_estimate

ROOT = Path(__file__).parents[1]
BLOCK = ROOT / "tests" / "data" / "vllm-bench" / "qwen3-1536-a100-80g-qwen3-14b-awq-c1-16k.txt"


def test_result_block_is_read():
    bench = read_bench_result(BLOCK.read_text())
    assert bench.figures["mean_ttft_ms"] == 3345.37 and bench.figures["mean_tpot_ms"] == 20.63
    assert (bench.input_tokens, bench.output_tokens) == (16000, 200)
    assert (bench.max_concurrency, bench.request_rate, bench.model) == (1, 1.0, "Qwen/Qwen3-14B-AWQ")


def test_saved_json_is_read():
    saved = {"model_id": "Qwen/Qwen3-14B-AWQ", "max_concurrency": 1, "request_rate": "inf", "completed": 30,
             "total_input_tokens": 480000, "total_output_tokens": 6000, "mean_ttft_ms": 3345.37,
             "mean_tpot_ms": 20.63, "output_throughput": 26.84, "ttfts": [3.3] * 30}
    bench = read_bench_result(json.dumps(saved))
    assert (bench.max_concurrency, bench.request_rate, bench.output_tokens) == (1, None, 200)


def test_measured_efficiencies_make_the_speed_model_meet_the_run():
    found = diagnose_bench(BLOCK.read_text(), gpu="a100-sxm-80gb")
    assert found.scenario.enforce_eager and found.scenario.max_model_len == 16384  # the `vllm serve` line
    result = estimate(found.scenario)
    constants = constants_for("cuda").model_copy(update={
        "bandwidth_efficiency": found.measured.bandwidth_efficiency,
        "compute_efficiency": found.measured.compute_efficiency})
    replay = speed_estimate(result, found.traffic, constants=constants)
    assert replay.tpot_ms == pytest.approx(20.63, rel=2e-3)
    assert replay.ttft_ms == pytest.approx(3345.37, rel=2e-3)


@pytest.mark.parametrize("text", ["Successful requests: 3\n", "{not json", "[1, 2]"])
def test_a_partial_result_is_refused_with_a_sentence(text: str):
    with pytest.raises(LogUnreadable):
        read_bench_result(text)


def test_cli_compares_a_bench_result():
    done = subprocess.run([sys.executable, "-m", "calculator", "diagnose", str(BLOCK), "--gpu", "a100-sxm-80gb",
                           "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["measured"]["mean_tpot_ms"] == 20.63
    # mbu is a share of the card's streaming rate (up to 1.2), mfu of its matmul ceiling
    assert 0 < report["calibration"]["mbu"] <= 1.2 and 0 < report["calibration"]["mfu"] <= 1
