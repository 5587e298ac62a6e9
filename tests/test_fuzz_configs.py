"""A bounded, seeded fuzz campaign over config.json uploads (issue 10, items 4 and 5).

Every mutated config ends in a result that makes physical sense or in one ``CalculatorError`` line that names the
field the mutation touched: never a traceback, never a silent absurd figure. A sample also goes through the real
CLI in a subprocess (exit 0 with one JSON object, or exit 2 with one ``error:`` line).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from calculator import CalculatorError, Scenario, estimate, model_spec_from_text
from calculator.limits import MAX_CONTEXT_TOKENS, MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH
from calculator.summary import estimate_summary
from tests.support.config_fuzz import Mutation, mutations

REPO = Path(__file__).resolve().parents[1]
SEED = 20_260_110
CASES = mutations(SEED, 400)
CLI_SAMPLE = CASES[::16]  # 25 cases through the real CLI
# Messages that name the problem without naming one field: the document as a whole is not a config.
WHOLE_DOCUMENT = ("not valid JSON", "not UTF-8 text", "nested too deeply", "must be a JSON object, not",
                  "too large for a config.json")


def outcome(case: Mutation) -> tuple[str, object]:
    try:
        spec = model_spec_from_text(case.data, "fuzz.json")
        return "result", estimate(Scenario(model="fuzz.json"), spec=spec)
    except CalculatorError as exc:
        return "refused", str(exc)


def assert_sane(result) -> None:
    """What any estimate of any config must satisfy; a mutated config that passes must still be a real model."""
    spec = result.model
    assert 1 <= spec.num_hidden_layers <= MAX_LAYERS and 1 <= spec.hidden_size <= MAX_WIDTH
    assert 1 <= spec.num_attention_heads <= MAX_HEADS and 1 <= spec.vocab_size <= MAX_VOCAB
    assert 1 <= spec.derived_max_model_len <= MAX_CONTEXT_TOKENS and spec.num_params > 0
    summary = estimate_summary(result)
    for key, value in summary.items():
        if isinstance(value, float):
            assert math.isfinite(value), key
        if key.endswith(("_bytes", "_tokens", "num_gpu_blocks", "max_concurrency")) and isinstance(value, int | float):
            assert value >= 0 or (key == "kv_cache_bytes" and not summary["fits"]), (key, value)
    assert summary["weights_bytes"] > 0
    if summary["fits"]:
        assert summary["kv_cache_bytes"] <= summary["gpu_memory_bytes"]
        assert summary["kv_cache_tokens"] >= 1 and summary["max_fitting_model_len"] >= 1
    else:
        assert summary["error"]


def test_the_campaign_is_seeded_and_covers_every_kind_of_mutation():
    assert [c.description for c in mutations(SEED, 400)] == [c.description for c in CASES]
    kinds = {c.description.rsplit(" ", 1)[1] for c in CASES if ": text " in c.description}
    assert {"truncate", "bad_utf8", "brackets", "deep_objects", "non_finite", "giant_int"} <= kinds
    assert sum(1 for c in CASES if c.field) > 300


@pytest.mark.parametrize("case", CASES, ids=[f"{i:03d}" for i in range(len(CASES))])
def test_library_gives_a_sane_result_or_one_line_naming_the_field(case):
    kind, value = outcome(case)
    if kind == "result":
        assert_sane(value)
        return
    message = str(value)
    assert "\n" not in message and len(message) < 600, case.description
    assert message.startswith("fuzz.json"), message
    assert "inconsistent (" not in message, f"{case.description}: hit the safety net: {message}"
    if case.field and not any(marker in message for marker in WHOLE_DOCUMENT):
        assert case.field in message or _names_a_related_field(message), f"{case.description}: {message}"


def _names_a_related_field(message: str) -> bool:
    # NOTE: deleting or breaking one field can surface as a missing *required* field, or a derived-size clash
    # that names the fields involved (hidden_size vs num_attention_heads, experts per token vs experts).
    return any(name in message for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
                                            "num_experts", "context length", "layer", "weight layout needs"))


def test_a_sample_through_the_real_cli_exits_0_with_json_or_2_with_one_line(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for index, case in enumerate(CLI_SAMPLE):
        path = tmp_path / f"case{index}.json"
        path.write_bytes(case.data)
        done = subprocess.run([sys.executable, "-m", "calculator", "estimate", "--model", str(path), "--json"],
                              cwd=REPO, env=env, capture_output=True, timeout=60)
        stderr = done.stderr.decode(errors="replace")
        assert "Traceback" not in stderr, f"{case.description}: {stderr}"
        if done.returncode == 0:
            assert json.loads(done.stdout)["num_params"] > 0, case.description
        else:
            assert done.returncode == 2 and done.stdout == b"", f"{case.description}: {stderr}"
            lines = stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), f"{case.description}: {stderr}"
