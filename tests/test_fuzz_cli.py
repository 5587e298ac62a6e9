"""A bounded, seeded fuzz campaign over CLI argument sets (issue 10, item 6).

Every argument set ends in exit 0 with a result that makes physical sense, or exit 2 with one ``error:`` line:
never a traceback, never the safety net's "unexpected" line, never an absurd value reported as fitting. Most cases
run ``cli.main`` in this process (the same code path as the console script); a sample runs the real subprocess.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from calculator import cli

REPO = Path(__file__).resolve().parents[1]
SEED = 20_260_111
MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "deepseek-ai/DeepSeek-V3", "google/gemma-3-27b-it",
          "Qwen/Qwen3-30B-A3B", "openai/gpt-oss-20b")
FLAGS = ("--gpu", "--gpu-memory-gib", "--device", "-tp", "-pp", "--gpu-memory-utilization", "--max-model-len",
         "--max-num-seqs", "--max-num-batched-tokens", "--block-size", "--dtype", "--kv-cache-dtype", "-q",
         "--kv-cache-memory-bytes", "--num-gpu-blocks-override", "--vllm-version", "--other-processes-memory-gib",
         "--model")
HOSTILE = ("inf", "-inf", "nan", "1e400", "1e30", "0", "-1", "7", "48", "1000000000000", "99999999999999999999999",
           "1.5", "x", "", " ", "auto", "8G", "8Gi", "1.5G", "25.6k", "1e3", "0x10", "1_000", "a" * 300,
           "/" + "a" * 300, "99.0", "1.0", "0.35.0", "1e20.0", "0.10.0", "0.6.6", "0.3", "fp8", "int3", "half",
           "tpu-v5", "NVIDIA H100 80GB HBM3", "l4", "cpu", "\u2603", "--json", "1000000000000000", "4096", "131072")
# Values each flag accepts, at and near its extremes: these reach the engine instead of the parser.
EDGES = {
    "--max-model-len": ("1", "100000000", "131073", "16k", "auto"), "--block-size": ("1", "16", "272", "4096"),
    "-tp": ("1024", "3", "8", "2"), "-pp": ("2", "1024", "61"), "--gpu-memory-utilization": ("0.0001", "1", "0.05"),
    "--max-num-seqs": ("1", "1000000", "2048"), "--max-num-batched-tokens": ("1", "100000000", "8k"),
    "--kv-cache-memory-bytes": ("0", "1", "1T", "1000000000000000", "70G"),
    "--num-gpu-blocks-override": ("1", "1099511627776", "4000"), "--gpu-memory-gib": ("0.25", "9999", "0.001"),
    "--other-processes-memory-gib": ("79", "9999", "0.5"), "--vllm-version": ("0.4.3", "0.8.5", "0.20.0", "1.0"),
    "--device": ("cpu", "rocm"), "--gpu": ("l4", "b200", "mi300x"), "--kv-cache-dtype": ("fp8", "fp8_ds_mla"),
    "-q": ("fp8", "awq"), "--dtype": ("float32", "half"),
}
BOOLEAN_FLAGS = ("--enforce-eager", "--enable-extensible-kv-cache", "--no-enable-extensible-kv-cache",
                 "--async-scheduling", "--no-async-scheduling", "--json")


def argument_sets(seed: int, count: int) -> list[list[str]]:
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        args = ["estimate", "--model", rng.choice(MODELS)]
        for _ in range(rng.randint(1, 3)):
            flag = rng.choice(FLAGS)
            edges = EDGES.get(flag)
            args += [flag, rng.choice(edges) if edges and rng.random() < 0.6 else rng.choice(HOSTILE)]
        if rng.random() < 0.3:
            args.append(rng.choice(BOOLEAN_FLAGS))
        args.append("--json")
        cases.append(args)
    return cases


CASES = argument_sets(SEED, 300)


@pytest.fixture(autouse=True)
def hub_offline(monkeypatch):
    """Fuzzed --model values that are not presets go to the Hub: keep that deterministic (the subprocess sample
    sets HF_HUB_OFFLINE=1 for the same reason)."""
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)


def run_in_process(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(args)
        except SystemExit as exc:  # argparse's own refusals
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def assert_outcome(args: list[str], code: int, stdout: str, stderr: str) -> None:
    assert "Traceback" not in stderr, (args, stderr)
    if code == 2:
        lines = stderr.strip().splitlines()
        assert stdout == "" and len(lines) == 1 and lines[0].startswith("error: "), (args, stderr)
        assert "unexpected" not in lines[0], (args, lines[0])  # the safety net must never be what answers
        return
    assert code == 0, (args, code, stderr)
    result = json.loads(stdout)
    for key, value in result.items():
        if isinstance(value, float):
            assert math.isfinite(value), (args, key)
    if result["fits"]:
        # Anything that fits must fit on the device: the weights and the pool within the GPU's memory.
        assert result["weights_bytes"] + result["kv_cache_bytes"] <= result["gpu_memory_bytes"] or (
            result["gpu_memory_bytes"] == 0), args
        assert result["kv_cache_tokens"] >= 1 and 1 <= result["max_model_len"] <= 100_000_000, args
    else:
        assert result["error"], args


def test_the_campaign_is_seeded_and_hostile():
    assert argument_sets(SEED, 300) == CASES
    assert sum(1 for args in CASES if {"inf", "1e400", "nan", "1e30"} & set(args)) >= 15
    edges = {value for values in EDGES.values() for value in values}
    assert sum(1 for args in CASES if edges & set(args[3:])) > 150  # most cases reach the engine, not the parser


@pytest.mark.parametrize("args", CASES, ids=[f"{i:03d}" for i in range(len(CASES))])
def test_every_argument_set_ends_in_a_sane_result_or_one_line(args):
    assert_outcome(args, *run_in_process(args))


def test_a_sample_through_the_real_console_entry_point():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for args in CASES[::15]:
        done = subprocess.run([sys.executable, "-m", "calculator", *args], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=60)
        assert_outcome(args, done.returncode, done.stdout, done.stderr)


# Issues 25 (items 8 and 9) and 28 (item 6): `speed` and `recommend` with hostile rates, tiny positive floats in
# every rate and SLO flag, unservable lengths and versions. Exit 0 means real numbers (no null where a saturated
# queue does not explain it); exit 2 is one line naming the flag.
RATE_FLAGS = ("--gpu-memory-bandwidth-gb-s", "--gpu-bf16-tflops", "--gpu-fp8-tflops", "--gpu-interconnect-gb-s",
              "--price-per-gpu-hour")
SLO_FLAGS = ("--ttft-p95-ms", "--tpot-ms", "--min-tok-s-per-user", "--e2e-s", "--budget-per-hour")
FAIR_RATES = ("1", "2.5", "50", "989.5", "3350", "1000000")  # every rate and SLO flag takes these
RATES = (*FAIR_RATES, "5e-324", "1e-300", "1e-6", "0.001", "0.01", "1000001", "1e9", "nan", "inf", "-1", "0", "x")


def rate(rng: random.Random) -> str:
    """Mostly a value the flag takes (so the case reaches the speed model), else a hostile or tiny one."""
    return rng.choice(FAIR_RATES) if rng.random() < 0.6 else rng.choice(RATES)
SPEED_MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "openai/gpt-oss-20b")
TIMINGS = ("ttft_ms", "ttft_p95_ms", "tpot_ms", "e2e_ms", "output_throughput_tok_s")


def speed_argument_sets(seed: int, count: int) -> list[list[str]]:
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        args = ["speed", "--model", rng.choice(SPEED_MODELS), "--max-model-len", "8192",
                "--input-tokens", rng.choice(("1", "512", "4096")), "--output-tokens", rng.choice(("1", "128", "2048"))]
        args += rng.choice((["--concurrency", rng.choice(("1", "64"))], ["--request-rate", rate(rng)]))
        if rng.random() < 0.3:
            args += ["--gpu-memory-gib", "80"]  # a custom GPU: the rates are its only ones
        if rng.random() < 0.3:
            args += rng.choice((["-q", "fp8"], ["-tp", "2"]))
        for flag in rng.sample(RATE_FLAGS, rng.randint(1, 3)):
            args += [flag, rate(rng)]
        cases.append([*args, "--json"])
    return cases


def recommend_argument_sets(seed: int, count: int) -> list[list[str]]:
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        args = ["recommend", "--model", rng.choice(SPEED_MODELS[:2]), "--gpu", rng.choice(("h100", "l40s")),
                "--input-tokens", rng.choice(("512", "30000")), "--output-tokens", rng.choice(("128", "5000"))]
        args += rng.choice((["--concurrent-users", "8"], ["--request-rate", rate(rng)]))
        if rng.random() < 0.4:
            args += ["--max-model-len", rng.choice(("1024", "8192", "1000000"))]
        if rng.random() < 0.3:
            args += ["--vllm-version", rng.choice(("abc", "1e20.0", "0.8.5", "99.0"))]
        for flag in rng.sample(SLO_FLAGS, rng.randint(0, 2)):
            args += [flag, rate(rng)]
        cases.append([*args, "--json"])
    return cases


# Every rate flag (and the load's rate) at the two tiny floats, on a catalog GPU and on a custom one.
TINY_CASES = [["speed", "--model", SPEED_MODELS[0], "--input-tokens", "512", "--output-tokens", "128", *gpu,
               *(["--request-rate", tiny] if flag == "--request-rate" else ["--concurrency", "4", flag, tiny]),
               "--json"]
              for flag in (*RATE_FLAGS, "--request-rate") for tiny in ("5e-324", "1e-300")
              for gpu in ([], ["--gpu-memory-gib", "80", "--gpu-memory-bandwidth-gb-s", "3350",
                               "--gpu-bf16-tflops", "989.5"])]
SPEED_CASES = speed_argument_sets(SEED + 1, 80) + TINY_CASES
RECOMMEND_CASES = recommend_argument_sets(SEED + 2, 24)


def test_the_speed_campaign_reaches_tiny_floats_in_every_rate_flag():
    for flag in (*RATE_FLAGS, "--request-rate"):
        assert any(flag in args and args[args.index(flag) + 1] in ("5e-324", "1e-300") for args in SPEED_CASES), flag
    assert sum(1 for args in SPEED_CASES if "--gpu-memory-gib" not in args and "--gpu-memory-bandwidth-gb-s" in args
               and args[args.index("--gpu-memory-bandwidth-gb-s") + 1] in FAIR_RATES) >= 3  # catalog GPUs overridden
    assert sum(1 for args in SPEED_CASES if run_in_process(args)[0] == 0) >= 20  # the model answers, not argparse


def json_or_one_line(args: list[str]) -> dict | None:
    """The command's JSON (exit 0, only warnings on stderr), or None after checking its one error line (exit 2)."""
    code, stdout, stderr = run_in_process(args)
    assert "Traceback" not in stderr, (args, stderr)
    if code == 2:
        lines = stderr.strip().splitlines()
        assert stdout == "" and len(lines) == 1 and lines[0].startswith("error: "), (args, stderr)
        assert "unexpected" not in lines[0] and "--value" not in lines[0], (args, lines[0])
        return None
    assert code == 0, (args, code, stderr)
    assert all(line.startswith("warning: ") for line in stderr.splitlines()), (args, stderr)
    return json.loads(stdout)


@pytest.mark.parametrize("args", SPEED_CASES, ids=[f"{i:03d}" for i in range(len(SPEED_CASES))])
def test_every_speed_argument_set_ends_in_real_numbers_or_one_line(args):
    result = json_or_one_line(args)
    if result is not None and not result["saturated"]:
        assert all(result[key] is not None and result[key] > 0 for key in TIMINGS), (args, result)


@pytest.mark.parametrize("args", RECOMMEND_CASES, ids=[f"{i:03d}" for i in range(len(RECOMMEND_CASES))])
def test_every_recommend_argument_set_ends_in_a_ranking_or_one_line(args):
    result = json_or_one_line(args)
    if result is None:
        return
    # Input no deployment could serve is refused up front, never repeated as every row's reason.
    reasons = {row["reason"] for row in result["rejected"]}
    assert not any("not a vLLM version" in r or "exceed max_model_len" in r or "derived max_model_len" in r
                   for r in reasons), (args, reasons)
