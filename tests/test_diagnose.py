"""A read log reproduced and explained: printed vs predicted, the cause, the fixes, the calibration; and the CLI.

Expected numbers are vLLM's own (what the logs print), never the estimate's output.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from calculator.engine.estimate import estimate
from calculator.errors import InvalidInput
from calculator.observe.diagnose import diagnose_text
from calculator.units import GIB

ROOT = Path(__file__).parents[1]
LOGS = ROOT / "tests" / "data" / "vllm-startup-logs"
TINY_LLAMA = str(ROOT / "tests" / "data" / "tiny-configs" / "tiny-llama.config.json")


def test_started_cpu_server_is_reproduced_exactly():
    found = diagnose_text((LOGS / "cpu-0.32.0-llama-started.log").read_text(), model=TINY_LLAMA)
    rows = {row.key: row for row in found.rows}
    # "CPU KV cache size: 1,024,000 tokens, Maximum concurrency for 1,000 tokens per request: 1024.00x"
    assert (rows["kv_cache_tokens"].printed, rows["kv_cache_tokens"].predicted) == (1_024_000, 1_024_000)
    assert rows["max_concurrency"].predicted == pytest.approx(1024.00, abs=0.005)
    assert found.cause is None and found.fixes == ()
    assert found.calibrated is None and "set explicitly" in found.calibration_note


def test_refused_cpu_server_cause_and_fixes_match_what_vllm_said():
    found = diagnose_text((LOGS / "cpu-0.32.0-llama-max-len-too-long.log").read_text(), model=TINY_LLAMA)
    assert found.log.outcome.kind == "max_len"
    assert found.cause.startswith("One request of max_model_len 4,096 tokens needs 0.00 GiB of KV cache")
    assert found.cause.endswith("the longest that fits is 896 tokens.")
    # vLLM: "Based on the available memory, the estimated maximum model length is 896."
    assert found.fixes[0].changes == {"max_model_len": 896}
    assert all(fix.kv_cache_tokens > 0 and fix.max_concurrency >= 1 for fix in found.fixes)


def test_printed_terms_calibrate_the_estimate_to_the_kv_cache_vllm_printed():
    found = diagnose_text((LOGS / "records" / "file-80gb-llava16-mistral-7b-v0102.log").read_text(),
                          gpu="h100-sxm-80gb")
    assert found.scenario.gpu_memory_gib == 79.19  # "Free memory on device (78.66/79.19 GiB)"
    calibrated = estimate(found.calibrated)
    assert round(calibrated.budget.kv_cache_bytes / GIB, 2) == 55.15  # "Available KV cache memory: 55.15 GiB"
    compared = [row for row in found.rows if row.difference is not None and row.key.endswith("_gib")
                and row.key != "available_kv_cache_gib"]
    biggest = max(compared, key=lambda row: abs(row.difference))
    assert found.largest.startswith(f"{biggest.label} explains the largest difference: vLLM printed "
                                    f"{biggest.printed:,.2f} GiB")


def test_v0_blocks_calibrate_to_the_printed_block_count():
    found = diagnose_text((LOGS / "records" / "file-rocm-24gb-opt125m-serverlessllm.log").read_text(),
                          gpu="mi300x", model="facebook/opt-125m")
    assert found.calibration_note == "from the printed number of KV cache blocks"
    assert estimate(found.calibrated).capacity.num_gpu_blocks == 37011  # "# rocm blocks: 37011"


def test_the_gpu_is_asked_for_never_guessed():
    with pytest.raises(InvalidInput, match=r"does not say which GPU ran it \(vLLM printed 79.19 GiB of device "
                                           r"memory\): give the GPU"):
        diagnose_text((LOGS / "records" / "file-80gb-llava16-mistral-7b-v0102.log").read_text())


NO_KV_MEMORY = """\
(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.11.0
(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:1] non-default args: {'model': 'meta-llama/Llama-3.1-8B-Instruct', \
'gpu_memory_utilization': 0.2}
(EngineCore_DP0 pid=7) INFO 01-01 00:00:30 [gpu_model_runner.py:1] Model loading took 14.99 GiB and 31.46 seconds
(EngineCore_DP0 pid=7) ERROR 01-01 00:00:40 [core.py:1] ValueError: No available memory for the cache blocks. Try \
increasing `gpu_memory_utilization` when initializing the engine.
"""


def test_no_kv_memory_cause_and_a_fix_that_starts_it():
    found = diagnose_text(NO_KV_MEMORY, gpu="h100-sxm-80gb")
    assert found.cause.startswith("Weights, activation peak and non-torch memory take all of "
                                  "gpu_memory_utilization × GPU memory")
    assert "raise gpu_memory_utilization to 0.95" in [fix.description for fix in found.fixes]
    weights = next(row for row in found.rows if row.key == "weights_gib")
    assert weights.printed == 14.99


# -- the CLI ----------------------------------------------------------------------------------------------------


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "calculator", "diagnose", *args], cwd=ROOT, input=stdin,
                          capture_output=True, timeout=120)


def test_cli_json_has_the_keys_the_issue_lists():
    done = _cli(str(LOGS / "cpu-0.32.0-llama-max-len-too-long.log"), "--model", TINY_LLAMA, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {"settings", "printed", "predicted", "outcome", "cause", "fixes"} <= set(report)
    assert report["settings"]["max_model_len"] == 4096 and report["settings"]["vllm_version"] == "0.32.0"
    assert report["printed"]["estimated_max_model_len"] == 896
    assert report["outcome"].startswith("failed: To serve at least one request with the model's max seq len (4096)")
    assert report["fixes"][0]["changes"] == {"max_model_len": 896}
    assert {"kv_cache_tokens", "max_concurrency", "change"} <= set(report["fixes"][0])


def test_cli_reads_stdin_and_prints_a_table():
    done = _cli("-", "--gpu", "h100-sxm-80gb",
                stdin=(LOGS / "records" / "file-80gb-llava16-mistral-7b-v0102.log").read_bytes())
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert "KV cache memory" in out and "55.15" in out
    assert "calibration: +" in out and "adj=" in out


@pytest.mark.parametrize(("content", "message"), [
    (bytes(range(256)) * 10, "error: - is a binary file, not a vLLM log"),
    (b"hello\n", "error: no vLLM start-up lines in these 1 lines"),
])
def test_cli_exits_2_with_one_line(content: bytes, message: str):
    done = _cli("-", stdin=content)
    assert done.returncode == 2
    assert done.stderr.decode().startswith(message) and done.stderr.decode().count("\n") == 1


def test_cli_asks_for_the_gpu():
    done = _cli(str(LOGS / "records" / "file-80gb-llava16-mistral-7b-v0102.log"))
    assert done.returncode == 2
    assert done.stderr.decode().startswith("error: the log does not say which GPU ran it")


def test_a_calibration_beyond_what_a_link_holds_is_refused_with_a_reason():
    text = NO_KV_MEMORY.replace("Model loading took 14.99 GiB", "Model loading took 99999.0 GiB").replace(
        "'gpu_memory_utilization': 0.2", "'gpu_memory_utilization': 0.9")
    found = diagnose_text(text, gpu="h100-sxm-80gb")
    assert found.calibrated is None
    assert re.match(r"the printed figures are \+99,9\d\d GiB away from the estimate, too far", found.calibration_note)


CUDA_OOM = """\
(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.11.0
(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:1] non-default args: {'model': 'meta-llama/Llama-3.1-8B-Instruct', \
'max_num_batched_tokens': 65536, 'max_model_len': 65536}
(EngineCore_DP0 pid=7) INFO 01-01 00:00:30 [gpu_model_runner.py:1] Model loading took 14.99 GiB and 31.46 seconds
(EngineCore_DP0 pid=7) ERROR 01-01 00:00:40 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to \
allocate 7.83 GiB. GPU 0 has a total capacity of 79.19 GiB of which 3.12 GiB is free.
"""


def test_a_cuda_oom_while_profiling_gets_fixes_for_that_stage():
    found = diagnose_text(CUDA_OOM, gpu="h100-sxm-80gb")
    assert found.cause == ("The GPU ran out of memory while profiling memory (the activation peak of a "
                           "max_num_batched_tokens forward pass).")
    changes = [fix.changes for fix in found.fixes]
    assert {"max_num_batched_tokens": 32768} in changes  # half of the 65,536 the log set
    assert all(fix.kv_cache_tokens > 0 and fix.max_concurrency > 0 for fix in found.fixes)


def test_a_server_that_started_gets_no_fixes():
    found = diagnose_text((LOGS / "cpu-0.32.0-llama-started.log").read_text(), model=TINY_LLAMA)
    assert found.log.outcome.status == "started" and found.fixes == ()


def test_a_model_path_that_cannot_be_read_here_asks_for_the_model():
    text = (LOGS / "cpu-0.32.0-llama-started.log").read_text().replace("/tmp/", "/nonexistent/")
    with pytest.raises(InvalidInput, match=r"^the log's model '/nonexistent/.*tiny-llama' cannot be read here "
                                           r"\(.*\): give the model \(--model"):
        diagnose_text(text)


def test_the_two_stacks_hold_what_was_printed_and_what_is_predicted():
    from calculator.observe.diagnose_chart import PREDICTED, PRINTED, printed_vs_predicted_figure

    found = diagnose_text((LOGS / "records" / "file-80gb-llava16-mistral-7b-v0102.log").read_text(),
                          gpu="h100-sxm-80gb")
    figure = printed_vs_predicted_figure(found)
    bars = {trace.name: dict(zip(trace.x, trace.y)) for trace in figure.data}
    # "Actual usage is 14.08 GiB for weight, 1.97 GiB for peak activation, 0.07 GiB for non-torch memory, and 0.67
    # GiB for CUDAGraph memory"; "Model loading took 14.0786 GiB"; "Available KV cache memory: 55.15 GiB"
    assert {name: bar[PRINTED] for name, bar in bars.items()} == {
        "Weights": 14.0786, "Activation peak": 1.97, "Non-torch (NCCL, cuBLAS)": 0.07, "CUDA graphs": 0.67,
        "KV cache": 55.15}
    assert all(bar[PREDICTED] > 0 for bar in bars.values())
    assert figure.layout.shapes[0].y0 == 71.27  # "Desired GPU memory utilization is (0.9, 71.27 GiB)"


def test_the_plan_fills_only_what_the_log_does_not_print():
    # issue 29 item 6: Diagnose reproduces against the plan the user was just looking at, never over the log
    from calculator import Scenario
    from calculator.observe.diagnose import scenario_from_log
    from calculator.observe.startup_log import read_startup_log

    log = read_startup_log((LOGS / "cpu-0.32.0-llama-started.log").read_text())
    planned = Scenario(model=TINY_LLAMA, vllm_version="0.30.0", tensor_parallel_size=2)
    scenario, notes = scenario_from_log(log, planned=planned)
    assert (scenario.model, scenario.vllm_version) == (log.settings["model"], "0.32.0")
    assert not any("from your plan" in note for note in notes)
    silent = log.model_copy(update={"settings": {k: v for k, v in log.settings.items() if k != "model"}})
    scenario, notes = scenario_from_log(silent, planned=planned)
    assert scenario.model == TINY_LLAMA and scenario.tensor_parallel_size == log.settings.get("tensor_parallel_size", 1)
    assert f"model {TINY_LLAMA} from your plan: the log does not print it" in notes
