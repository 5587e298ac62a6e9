"""How benchmarks/speed_aiconfigurator.py asks AIConfigurator for a record's prediction and reads its answer.

AIConfigurator is not installed with the planner (it runs from its own environment, see the script's docstring), so
these tests put a small executable in its place that prints what ``aiconfigurator cli estimate`` prints and records
the arguments it was given: the real subprocess boundary, without NVIDIA's kernel database."""

from __future__ import annotations

import stat
from pathlib import Path

from benchmarks import speed_aiconfigurator, speed_replay

ESTIMATE = "  TTFT: 47.599 ms\n  TPOT: 3.701 ms\n  Request Latency: 3,526.286 ms\n  tokens/s: 1,066.28\n"
OOM = ("Traceback (most recent call last):\n    raise RuntimeError(\n"
       "RuntimeError: OOM: the model '$model' does not fit in GPU memory on system 'h100_sxm' with the given "
       "parallelism (tp=1, pp=1, dp=1).\n")


def _binary(tmp_path, printed: str) -> tuple[str, Path]:
    """An executable that writes its arguments to a file and prints ``printed`` ($model: the --model-path folder)."""
    args = tmp_path / "args"
    script = tmp_path / "aiconfigurator"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {args}\nmodel="$4"\ncat <<TEXT\n{printed}TEXT\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), args


def _record(record_id: str) -> dict:
    return next(r for r in speed_replay.load_records() if r["id"] == record_id)


def test_a_moe_record_names_how_its_experts_are_sharded_and_its_figures_are_read(tmp_path) -> None:
    binary, args = _binary(tmp_path, ESTIMATE)
    predicted = speed_aiconfigurator.predict(_record("gpuconc-h200-gptoss20b-c4"), binary)
    sent = args.read_text().split()
    assert sent[sent.index("--system") + 1] == "h200_sxm" and sent[sent.index("--batch-size") + 1] == "4"
    assert sent[sent.index("--moe-tp-size") + 1] == "1" and sent[sent.index("--moe-ep-size") + 1] == "1"
    assert {k: predicted[k] for k in ("ttft_ms", "tpot_ms", "e2e_ms", "output_tok_s")} == {
        "ttft_ms": 47.599, "tpot_ms": 3.701, "e2e_ms": 3526.286, "output_tok_s": 1066.28}


def test_dynamic_fp8_at_tp2_and_a_dense_model_are_asked_as_they_ran(tmp_path) -> None:
    binary, args = _binary(tmp_path, ESTIMATE)
    speed_aiconfigurator.predict(_record("vultr-b200-nemotron3-nano-30b-fp8-tp2-c8"), binary)
    sent = args.read_text().split()
    assert sent[sent.index("--gemm-quant-mode") + 1] == sent[sent.index("--moe-quant-mode") + 1] == "fp8"
    assert sent[sent.index("--tp-size") + 1] == sent[sent.index("--moe-tp-size") + 1] == "2"
    speed_aiconfigurator.predict(_record("gpustackh100-qwen3-8b-sharegpt-c1"), binary)
    assert "--moe-tp-size" not in args.read_text().split()


def test_a_refusal_is_its_last_error_line_without_the_temporary_folder(tmp_path) -> None:
    binary, _ = _binary(tmp_path, OOM)
    answer = speed_aiconfigurator.predict(_record("gpustackh100-qwen3-8b-sharegpt-c1"), binary)
    assert answer["error"].startswith("RuntimeError: OOM: the model '<config>' does not fit")
    assert speed_aiconfigurator.predict(_record("tt394-rtx4090-qwen3-4b-isl128-osl128-c1"), binary) == {
        "error": "no vLLM database for rtx-4090"}
