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


def test_speed_names_the_matmul_ceiling_it_divides_by(capsys) -> None:
    # H100 SXM: 794.5 TFLOPS BF16 in Stas Bekman's MAMF table; A30: no published measurement, 0.80 x 165
    code, out, _ = _run([*SPEED, "--concurrency", "1"], capsys)
    assert code == 0 and "H100 SXM 80GB x 1, bf16 matmuls (matmul ceiling 794.5 TFLOPS, measured on the card;" in out
    code, out, _ = _run([*SPEED, "--gpu", "a30", "--concurrency", "1", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and (data["compute_ceiling_tflops"], data["compute_ceiling_measured"]) == (132.0, False)
    code, out, _ = _run([*SPEED, "--gpu", "a30", "--concurrency", "1"], capsys)
    assert "matmul ceiling 132.0 TFLOPS: 0.80 x the 165.0 TFLOPS peak, the median share measured on other cards" in out


def test_speed_names_the_share_of_the_ceiling_the_routed_experts_run_at(capsys) -> None:
    # gpt-oss-20b's MXFP4 experts on an H100: OpenAI's Triton matmul_ogs at 551 of the 781 TFLOPS AIConfigurator
    # times for dense BF16 GEMMs on the card (benchmarks/data/expert_gemm_shares.json), 0.71
    moe = ["speed", "--model", "openai/gpt-oss-20b", "--gpu", "h100", "--input-tokens", "512", "--output-tokens", "128",
           "--concurrency", "1"]
    code, out, _ = _run(moe, capsys)
    assert code == 0 and "routed experts at 0.71 of it, the rate vLLM's fused-MoE kernels were timed at" in out
    code, out, _ = _run([*moe, "--json"], capsys)
    assert json.loads(out)["expert_gemm_share"] == 0.71
    code, out, _ = _run([*SPEED, "--concurrency", "1", "--json"], capsys)
    assert code == 0 and json.loads(out)["expert_gemm_share"] is None  # a dense model


def test_custom_gpu_takes_bandwidth_and_tflops(capsys) -> None:
    base = ["speed", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-gib", "80", "--max-model-len",
            "8192", "--input-tokens", "512", "--output-tokens", "128", "--concurrency", "1"]
    code, _, err = _run(base, capsys)
    assert code == 2 and err.count("\n") == 1 and "--gpu-memory-bandwidth-gb-s" in err
    code, out, _ = _run([*base, "--gpu-memory-bandwidth-gb-s", "3350", "--gpu-bf16-tflops", "989.5", "--json"],
                        capsys)
    data = json.loads(out)
    assert code == 0 and data["gpu_hour_cost"] is None and data["tpot_ms"] > 0
    # The peak typed here, not a datasheet's, is what the 0.80 share applies to: 989.5 x 0.80 = 791.6; and the
    # bandwidth typed here what the 0.82 streaming share applies to: 3,350 x 0.82 = 2,747
    code, out, _ = _run([*base, "--gpu-memory-bandwidth-gb-s", "3350", "--gpu-bf16-tflops", "989.5"], capsys)
    assert code == 0 and "matmul ceiling 791.6 TFLOPS: 0.80 x the 989.5 TFLOPS peak" in out
    assert "weights streamed at 2,747 GB/s: 0.82 x the 3,350 GB/s peak, the median share timed on other cards" in out


def test_an_fp8_deployment_names_the_speedup_its_ceiling_rests_on(capsys) -> None:
    # H100 SXM: 794.5 TFLOPS BF16 (MAMF) x 1.15, vLLM's per-tensor FP8 linear layer at 899 TFLOPS against its BF16
    # one's 784 in AIConfigurator 0.12.0's table = 913.7 TFLOPS (not the best FP8 matmul's 1,402.6)
    fp8 = [*SPEED, "--quantization", "fp8", "--concurrency", "1"]
    code, out, _ = _run(fp8, capsys)
    assert code == 0 and ("fp8 matmuls (matmul ceiling 913.7 TFLOPS: the BF16 one measured on the card x 1.15, the "
                          "speedup vLLM's FP8 GEMMs were timed at over its BF16 ones;") in out
    code, out, _ = _run([*fp8, "--json"], capsys)
    data = json.loads(out)
    assert (data["compute_ceiling_tflops"], data["speedup_over_bf16"]) == (913.7, 1.15)
    code, out, _ = _run([*SPEED, "--concurrency", "1", "--json"], capsys)
    assert json.loads(out)["speedup_over_bf16"] is None  # BF16 weights


def test_an_fp4_deployment_names_the_speedup_its_ceiling_rests_on(capsys) -> None:
    # B200: 1,745 TFLOPS BF16 (MAMF) x 2.17, vLLM's NVFP4 linear layer at 3,355 TFLOPS against its BF16 one's 1,547
    # in AIConfigurator 0.12.0's table = 3,786.65 TFLOPS (not the datasheet's 9,000 FP4 x 1,745 / 2,250 = 6,980)
    fp4 = ["speed", "--model", "openai/gpt-oss-20b", "--gpu", "b200", "--max-model-len", "8192", "--input-tokens",
           "1024", "--output-tokens", "256", "--concurrency", "1"]
    code, out, _ = _run(fp4, capsys)
    assert code == 0 and ("fp4 matmuls (matmul ceiling 3,786.7 TFLOPS: the BF16 one measured on the card x 2.17, the "
                          "speedup vLLM's FP4 GEMMs were timed at over its BF16 ones;") in out
    code, out, _ = _run([*fp4, "--json"], capsys)
    data = json.loads(out)
    assert (data["compute_path"], data["compute_ceiling_tflops"], data["speedup_over_bf16"]) == ("fp4", 3786.7, 2.17)


def test_speed_names_the_streaming_rate_it_divides_bytes_by(capsys) -> None:
    # H100 SXM: vLLM's BF16 linear layer at M <= 4 streams 2,978 GB/s in AIConfigurator 0.12.0's table
    # (benchmarks/data/linear_layer_rates.json); A30: not timed, 0.82 x 933 = 765 GB/s
    code, out, _ = _run([*SPEED, "--concurrency", "1"], capsys)
    assert code == 0 and "weights streamed at 2,978 GB/s, the rate vLLM's decode GEMMs were timed at on the card" in out
    code, out, _ = _run([*SPEED, "--concurrency", "1", "--json"], capsys)
    data = json.loads(out)
    assert (data["streaming_bandwidth_gb_s"], data["streaming_bandwidth_measured"]) == (2978, True)
    code, out, _ = _run([*SPEED, "--gpu", "a30", "--concurrency", "1", "--json"], capsys)
    data = json.loads(out)
    assert (data["streaming_bandwidth_gb_s"], data["streaming_bandwidth_measured"]) == (765, False)
    code, out, _ = _run([*SPEED, "--gpu", "a30", "--concurrency", "1"], capsys)
    assert "weights streamed at 765 GB/s: 0.82 x the 933 GB/s peak, the median share timed on other cards" in out


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


# Issue 25 items 8-10 and issue 28 item 6: every rate flag has the bounds a share link has, and input no deployment
# could serve is an input error. Each case is the issue's own command line.
QWEN = ["--model", "Qwen/Qwen2.5-7B-Instruct", "--input-tokens", "1000", "--output-tokens", "100"]


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--gpu-bf16-tflops", "5e-324", "input should be greater than or equal to 0.001, got '5e-324'"),
    ("--gpu-bf16-tflops", "1e-300", "input should be greater than or equal to 0.001, got '1e-300'"),
    ("--gpu-memory-bandwidth-gb-s", "1e-300", "input should be greater than or equal to 1, got '1e-300'"),
    ("--gpu-memory-bandwidth-gb-s", "1000001", "input should be less than or equal to 1000000, got '1000001'"),
    ("--gpu-fp8-tflops", "5e-324", "input should be greater than or equal to 0.001, got '5e-324'"),
    ("--gpu-interconnect-gb-s", "1e-300", "input should be greater than or equal to 1, got '1e-300'"),
    ("--price-per-gpu-hour", "1e-300", "input should be greater than or equal to 0.01, got '1e-300'"),
    ("--price-per-gpu-hour", "1e9", "input should be less than 10000, got '1e9'"),
])
def test_a_rate_flag_outside_the_link_bounds_exits_2_naming_the_flag(capsys, flag, value, message) -> None:
    code, out, err = _run(["speed", *QWEN, "--concurrency", "1", flag, value, "--json"], capsys)
    assert (code, out, err) == (2, "", f"error: argument {flag}: {message}\n")


@pytest.mark.parametrize(("flag", "value"), [("--request-rate", "5e-324"), ("--tpot-ms", "5e-324"),
                                             ("--ttft-p95-ms", "1e-300"), ("--e2e-s", "1e-300"),
                                             ("--min-tok-s-per-user", "1e-300"), ("--budget-per-hour", "0")])
def test_recommend_rate_and_slo_flags_have_the_same_bounds(capsys, flag, value) -> None:
    load = [] if flag == "--request-rate" else ["--concurrent-users", "1"]
    code, out, err = _run(["recommend", *QWEN, *load, flag, value], capsys)
    assert code == 2 and out == "" and err.startswith(f"error: argument {flag}: ") and err.count("\n") == 1


@pytest.mark.parametrize(("extra", "message"), [
    (["--output-tokens", "5000", "--max-model-len", "1024"],
     "error: requests of 6,000 tokens (p95 prompt + output) exceed max_model_len 1,024: vLLM rejects them; raise "
     "--max-model-len\n"),
    (["--vllm-version", "abc"], "error: not a vLLM version: 'abc' (use X.Y or X.Y.Z, e.g. 0.34.0)\n"),
    (["--vllm-version", "1e20.0"], "error: not a vLLM version: '1e20.0' (use X.Y or X.Y.Z, e.g. 0.34.0)\n"),
    (["--input-tokens", "30000", "--output-tokens", "5000"],  # Qwen2.5-7B's config: 32,768 positions
     "error: requests of 35,000 tokens (p95 prompt + output) exceed the 32,768 tokens Qwen/Qwen2.5-7B-Instruct "
     "supports: no deployment serves them\n"),
    (["--max-model-len", "1000000"],
     "error: max_model_len 1,000,000 is above the 32,768 tokens Qwen/Qwen2.5-7B-Instruct supports: vLLM refuses it "
     "(unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)\n"),
])
def test_recommend_input_no_deployment_could_serve_exits_2_with_one_line(capsys, extra, message) -> None:
    code, out, err = _run(["recommend", *QWEN, "--concurrent-users", "1", *extra], capsys)
    assert (code, out, err) == (2, "", message)


def test_rates_a_deployment_does_not_use_are_named_on_stderr(capsys) -> None:
    code, out, err = _run(["speed", *QWEN, "--concurrency", "1", "--gpu-fp8-tflops", "100",
                           "--gpu-interconnect-gb-s", "900", "--json"], capsys)
    assert code == 0 and json.loads(out)["compute_path"] == "bf16"
    assert err.splitlines() == [
        "warning: --gpu-fp8-tflops is unused: this deployment's matmuls run on the bf16 path (FP8 weights, e.g. -q "
        "fp8, take the FP8 one)",
        "warning: --gpu-interconnect-gb-s is unused: with tensor parallel 1 no all-reduce crosses the link"]
    code, out, err = _run(["speed", *QWEN, "--concurrency", "1", "-q", "fp8", "-tp", "2", "--gpu-fp8-tflops", "100",
                           "--gpu-interconnect-gb-s", "900", "--json"], capsys)
    assert code == 0 and json.loads(out)["compute_path"] == "fp8" and err == ""


def test_a_rule_across_flags_names_the_flags_not_an_internal_field(capsys) -> None:
    code, out, err = _run(["speed", *QWEN, "--output-tokens-p95", "10", "--concurrency", "1"], capsys)
    assert (code, out, err) == (2, "", "error: --output-tokens-p95 cannot be below the mean --output-tokens\n")


def test_a_catalog_gpu_takes_the_bandwidth_flag(capsys) -> None:
    _, catalog, _ = _run(["speed", *QWEN, "--concurrency", "1", "--json"], capsys)
    _, slowed, _ = _run(["speed", *QWEN, "--concurrency", "1", "--gpu-memory-bandwidth-gb-s", "50", "--json"], capsys)
    # NOTE: one user's decode streams the weights each step: at 50 GB/s instead of the H100's 3,350 the step is
    # bandwidth-bound and at least 3,350 / 50 / 2 times slower, whatever the fixed overheads.
    assert json.loads(slowed)["tpot_ms"] > json.loads(catalog)["tpot_ms"] * 3350 / 50 / 2


def test_a_reader_that_stops_early_gets_no_traceback() -> None:
    # NOTE: the pipe's read end is closed before the CLI writes, so its first write fails with EPIPE every time.
    process = subprocess.Popen([sys.executable, "-m", "calculator", "gpus"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.close()
    _, err = process.communicate(timeout=60)
    assert b"Traceback" not in err and err == b"" and process.returncode == 1


def test_recommend_ranks_on_one_providers_prices_when_asked_and_says_which_list(capsys) -> None:
    args = ["recommend", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--input-tokens", "512", "--output-tokens",
            "128", "--concurrent-users", "8", "--gpu", "a100-sxm-80gb", "--gpu", "t4"]
    code, out, _ = _run([*args, "--price-set", "runpod-serverless-active", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["price_set"] == "runpod-serverless-active"
    # $0.00060/s x 3,600 s = $2.16 per A100 80GB-hour; the provider rents no T4
    assert {row["cost_per_hour"] / row["gpus"] for row in data["by_cost_per_hour"]} == {2.16}
    assert {row["gpu"] for row in data["by_cost_per_hour"]} == {"a100-sxm-80gb"}
    code, out, _ = _run(args, capsys)
    assert code == 0 and "prices: the mixed default list (sources differ by GPU" in out.splitlines()[0]
    code, _, err = _run([*args, "--price-set", "cheapest"], capsys)
    assert code == 2 and "invalid choice: 'cheapest'" in err


def test_speed_json_gives_the_regimes_band_and_says_when_it_is_widened(capsys) -> None:
    code, out, _ = _run([*SPEED, "--concurrency", "1", "--json"], capsys)
    bands = json.loads(out)["bands"]
    assert code == 0 and bands["regime"] == "one request" and bands["outside_measured_runs"] == []
    code, out, _ = _run(["speed", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "v100-sxm2-32gb",
                         "--max-model-len", "4096", "--input-tokens", "512", "--output-tokens", "128",
                         "--concurrency", "1", "--json"], capsys)
    data = json.loads(out)
    assert code == 0
    assert data["bands"]["outside_measured_runs"] == ["No measured run on the volta generation: the band is widened."]
    low, high = data["bands"]["ttft_ms"]
    assert high / data["ttft_ms"] == pytest.approx(data["ttft_ms"] / low, rel=1e-3)  # x/÷ the same factor


def test_recommend_json_marks_each_option_met_or_at_risk_and_ranks_on_ttft_p95(capsys) -> None:
    code, out, _ = _run(["recommend", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
                         "--input-tokens", "512", "--output-tokens", "128", "--concurrent-users", "4", "--json"],
                        capsys)
    data = json.loads(out)
    assert code == 0 and data["by_ttft_p95"]
    assert {row["slo_status"] for row in data["by_cost_per_hour"]} == {"met"}  # no SLO: nothing at risk
    ttfts = [row["ttft_p95_ms"] for row in data["by_ttft_p95"]]
    assert ttfts == sorted(ttfts) and all(row["bands"]["regime"] for row in data["by_ttft_p95"])


@pytest.mark.parametrize("command", ["estimate", "speed", "recommend"])
def test_eplb_flags_with_vllms_names_on_every_command(command) -> None:
    from calculator.cli import _parser
    from calculator.speed.cli import eplb_settings

    load = ["--input-tokens", "1000", "--output-tokens", "200", "--request-rate", "2"]
    common = ["--model", "Qwen/Qwen3-30B-A3B"] + (load if command != "estimate" else [])
    args = _parser().parse_args([command, *common, "--enable-eplb", "--eplb-config", '{"num_redundant_experts": 8}'])
    assert eplb_settings(args) == {"enable_eplb": True, "num_redundant_experts": 8}
    older = _parser().parse_args([command, *common, "--enable-eplb", "--num-redundant-experts", "16"])
    assert eplb_settings(older) == {"enable_eplb": True, "num_redundant_experts": 16}
