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
