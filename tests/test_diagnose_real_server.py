"""The log reader on logs real vLLM CPU servers print now: one that starts and one that refuses to start.

Each server's log is captured afresh (tests/support/startup_logs.py, the recipe that wrote the kept logs under
tests/data/vllm-startup-logs/). What the reader recovers must equal what the server reports on its own channel,
``vllm:cache_config_info`` on /metrics, and what the kept log of the same case gives (settings and figures that do
not depend on the host or the run).
"""

from __future__ import annotations

import pytest
from support.startup_logs import CASES_BY_NAME, LOGS_DIR, capture

from calculator.observe.startup_log import read_startup_log

pytestmark = pytest.mark.vllm_server

# NOTE: the model folder, port and host memory differ from run to run; everything else must not.
_RUN_SPECIFIC = {"model"}


def _stable(log) -> tuple[dict, dict, str, str | None]:
    printed = {k: v for k, v in log.printed.present().items() if k != "total_memory_gib"}
    settings = {k: v for k, v in log.settings.items() if k not in _RUN_SPECIFIC}
    return settings, printed, str(log.outcome.status), log.outcome.kind


def test_a_started_server_log_is_read_as_its_metrics_say(tiny_model_factory, tmp_path):
    case = CASES_BY_NAME["cpu-0.32.0-llama-started"]
    text, labels = capture(case, tiny_model_factory, tmp_path / case.name)
    assert labels is not None, text[-3000:]
    log = read_startup_log(text)
    assert log.printed.kv_cache_tokens == int(labels["kv_cache_size_tokens"])
    assert log.printed.max_concurrency == round(float(labels["kv_cache_max_concurrency"]), 2)
    assert log.printed.available_kv_cache_gib * 2**30 == int(labels["kv_cache_memory_bytes"])
    assert log.settings["max_model_len"] == 1000 and log.settings["max_num_seqs"] == 8
    assert log.outcome.status == "started"
    assert _stable(log) == _stable(read_startup_log((LOGS_DIR / f"{case.name}.log").read_text()))


def test_a_refused_start_is_read_with_its_error(tiny_model_factory, tmp_path):
    case = CASES_BY_NAME["cpu-0.32.0-llama-max-len-too-long"]
    text, labels = capture(case, tiny_model_factory, tmp_path / case.name)
    assert labels is None
    log = read_startup_log(text)
    assert log.outcome.kind == "max_len" and log.printed.estimated_max_model_len == 896
    assert _stable(log) == _stable(read_startup_log((LOGS_DIR / f"{case.name}.log").read_text()))
