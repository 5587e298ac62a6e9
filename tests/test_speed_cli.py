"""`python -m calculator speed` and `recommend`: the JSON contract, readable text, exit 2 with one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from calculator.cli import main

SPEED = ["speed", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100", "--max-model-len", "8192",
         "--input-tokens", "1024", "--output-tokens", "256"]
SPEED_KEYS = {"ttft_ms", "ttft_p95_ms", "tpot_ms", "e2e_ms", "per_user_tok_s", "output_throughput_tok_s",
              "total_throughput_tok_s", "request_throughput", "effective_concurrency", "concurrency_limit",
              "decode_bound", "gpu_hour_cost", "cost_per_million_output_tokens"}


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_speed_json_has_the_contract_keys(capsys) -> None:
    code, out, _ = _run([*SPEED, "--concurrency", "16", "--input-tokens-p95", "4096", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and SPEED_KEYS <= set(data)
    assert data["concurrency_limit"] in ("requested", "max_num_seqs", "kv_cache")
    assert data["decode_bound"] in ("memory", "compute")
    assert data["ttft_p95_ms"] > data["ttft_ms"]  # the p95 prompt is 4x the mean
    assert data["gpu_hour_cost"] == 3.0  # the bundled H100 SXM price
    assert data["per_user_tok_s"] == pytest.approx(1000 / data["tpot_ms"], rel=1e-3)


def test_speed_binding_limit_and_price_override(capsys) -> None:
    code, out, _ = _run([*SPEED, "--concurrency", "64", "--max-num-seqs", "16", "--price-per-gpu-hour", "2",
                         "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["concurrency_limit"] == "max_num_seqs" and data["effective_concurrency"] == 16
    assert data["gpu_hour_cost"] == 2.0 and data["queue_wait_ms"] > 0


def test_speed_text_names_the_limit_and_the_cost(capsys) -> None:
    code, out, _ = _run([*SPEED, "--request-rate", "2"], capsys)
    assert code == 0 and "TTFT mean / p95" in out and "per million output tokens" in out


def test_custom_gpu_takes_bandwidth_and_tflops(capsys) -> None:
    base = ["speed", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-gib", "80", "--max-model-len",
            "8192", "--input-tokens", "512", "--output-tokens", "128", "--concurrency", "1"]
    code, _, err = _run(base, capsys)
    assert code == 2 and err.count("\n") == 1 and "--gpu-memory-bandwidth-gb-s" in err
    code, out, _ = _run([*base, "--gpu-memory-bandwidth-gb-s", "3350", "--gpu-bf16-tflops", "989.5", "--json"],
                        capsys)
    data = json.loads(out)
    assert code == 0 and data["gpu_hour_cost"] is None and data["tpot_ms"] > 0


@pytest.mark.parametrize("extra", [
    ["--concurrency", "0"],
    ["--concurrency", "4", "--request-rate", "2"],
    [],
    ["--concurrency", "4", "--input-tokens-p95", "10"],
    ["--request-rate", "nan"],
])
def test_bad_speed_input_exits_2_with_one_line(capsys, extra) -> None:
    code, out, err = _run([*SPEED, *extra], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: ")


def test_recommend_json_ranks_by_cost(capsys) -> None:
    code, out, _ = _run(["recommend", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--input-tokens", "512",
                         "--output-tokens", "128", "--concurrent-users", "64", "--ttft-p95-ms", "2000",
                         "--tpot-ms", "60", "--gpu", "h100", "--gpu", "l40s", "--gpu", "a100", "--max-gpus", "8",
                         "--json"], capsys)
    data = json.loads(out)
    hourly = [row["cost_per_hour"] for row in data["by_cost_per_hour"]]
    assert code == 0 and hourly and hourly == sorted(hourly)
    assert all(row["ttft_p95_ms"] <= 2000 and row["tpot_ms"] <= 60 for row in data["by_cost_per_hour"])
    assert all(row["reason"] for row in data["rejected"])


def test_recommend_text_and_bad_gpu(capsys) -> None:
    args = ["recommend", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--input-tokens", "512",
            "--output-tokens", "128", "--request-rate", "5", "--gpu", "l4"]
    code, out, _ = _run(args, capsys)
    assert code == 0 and "$/hour" in out and "deployments qualify" in out
    code, out, err = _run([*args[:-1], "no-such-gpu"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Unknown GPU" in err


def test_module_entry_point_runs_speed() -> None:
    done = subprocess.run([sys.executable, "-m", "calculator", *SPEED, "--concurrency", "4", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and SPEED_KEYS <= set(json.loads(done.stdout))
