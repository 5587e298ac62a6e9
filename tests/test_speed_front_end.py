"""The API server's per-request work (calculator/speed/front_end.py): which vLLM versions parse the chat template on
every chat request, read in vllm/entrypoints/chat_utils.py of each wheel on PyPI, and what that costs a burst.

The parse times come from benchmarks/chat_template_parse.py's measurement (benchmarks/data/chat_template_parse.json);
the burst's floor is worked by hand from the mechanism (the event loop runs every request's parse before any
continuation)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calculator import Scenario, estimate, load_model_spec
from calculator.engine.vllm_versions import rules_for
from calculator.speed.bench import BenchLoad
from calculator.speed.front_end import PARSE_MS, front_end_work
from calculator.speed.predict import bench_prediction, speed_estimate
from calculator.speed.traffic import Traffic

MEASURED = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "chat_template_parse.json")
                      .read_text(encoding="utf-8"))


@pytest.mark.parametrize(("version", "parse"), [
    ("0.6.6", None),  # resolve_chat_template_content_format under @lru_cache
    ("0.8.1", None),  # the same cache
    ("0.8.2", "content_format"),  # lru_cache only on _log_chat_template_content_format: detection every request
    ("0.9.1", "content_format"),
    ("0.9.2", None),  # @lru_cache(maxsize=32) on _detect_content_format (PR #20065)
    ("0.10.2", None),
    ("0.11.0", "template_kwargs"),  # resolve_chat_template_kwargs: parse + find_undeclared_variables, uncached
    ("0.11.1", None),  # _cached_resolve_chat_template_kwargs = lru_cache(_resolve_chat_template_kwargs)
    ("0.32.0", None),
])
def test_the_versions_that_parse_the_template_on_every_chat_request(version: str, parse: str | None) -> None:
    assert rules_for(version).chat_template_parse == parse


def test_the_parse_times_are_the_benchmarks_measurement() -> None:
    for template, times in PARSE_MS.items():
        measured = MEASURED["templates"][template]
        assert times["template_kwargs"] == pytest.approx(measured["resolve_kwargs_0_11_0_ms"], abs=0.05)
        assert times["content_format"] == pytest.approx(measured["detect_format_0_8_2_to_0_9_1_ms"], abs=0.05)


def _deployment(model: str, version: str):
    return estimate(Scenario(model=model, gpu="h100-sxm-80gb", vllm_version=version), load_model_spec(model))


def test_only_chat_requests_on_those_versions_pay_it_and_gpt_oss_never() -> None:
    qwen3 = _deployment("Qwen/Qwen3-8B", "0.11.0")
    parse_s = MEASURED["templates"]["Qwen__Qwen3-8B"]["resolve_kwargs_0_11_0_ms"] / 1e3
    assert front_end_work(qwen3.rules, qwen3.model, "chat").seconds == pytest.approx(parse_s, abs=5e-5)
    assert front_end_work(qwen3.rules, qwen3.model, "completions").seconds == 0
    cached = _deployment("Qwen/Qwen3-8B", "0.11.1")
    assert front_end_work(cached.rules, cached.model, "chat").seconds == 0
    harmony = _deployment("openai/gpt-oss-20b", "0.11.0")  # serving_chat's use_harmony: no Jinja template
    assert front_end_work(harmony.rules, harmony.model, "chat").seconds == 0


def test_one_chat_request_waits_one_parse_longer_for_its_first_token() -> None:
    qwen3 = _deployment("Qwen/Qwen3-8B", "0.11.0")
    plain = speed_estimate(qwen3, Traffic(input_tokens=233, output_tokens=221, concurrency=1), prices={})
    chat = speed_estimate(qwen3, Traffic(input_tokens=233, output_tokens=221, concurrency=1, endpoint="chat"),
                          prices={})
    parse_ms = MEASURED["templates"]["Qwen__Qwen3-8B"]["resolve_kwargs_0_11_0_ms"]
    assert chat.ttft_ms - plain.ttft_ms == pytest.approx(parse_ms, abs=0.05)
    assert chat.tpot_ms == pytest.approx(plain.tpot_ms)


def test_a_burst_of_chat_requests_reaches_the_engine_after_every_parse() -> None:
    # 1,000 chat requests at once: the loop parses all 1,000 templates before the first continuation hands a request
    # to the engine, so no first token comes before 1,000 parses (11 s); the completions endpoint has no such floor.
    qwen3 = _deployment("Qwen/Qwen3-8B", "0.11.0")
    parse_ms = MEASURED["templates"]["Qwen__Qwen3-8B"]["resolve_kwargs_0_11_0_ms"]
    load = BenchLoad(input_tokens=(128,) * 1000, output_tokens=(4,) * 1000, endpoint="chat")
    chat = bench_prediction(qwen3, load)
    plain = bench_prediction(qwen3, load.model_copy(update={"endpoint": "completions"}))
    floor_ms = 1000 * parse_ms
    assert plain.median_ttft_ms < floor_ms
    assert chat.median_ttft_ms > floor_ms and chat.mean_ttft_ms > floor_ms
    # every request reaches the engine at the same moment, so the run is the completions run shifted by the floor
    assert chat.mean_ttft_ms == pytest.approx(plain.mean_ttft_ms + floor_ms, rel=1e-6)


def test_the_speed_cli_takes_the_endpoint_and_says_what_the_front_end_costs(capsys) -> None:
    from test_speed_cli import _run

    args = ["speed", "--model", "Qwen/Qwen3-8B", "--gpu", "h100-sxm-80gb", "--vllm-version", "0.11.0",
            "--input-tokens", "233", "--output-tokens", "221", "--concurrency", "1"]
    parse_ms = MEASURED["templates"]["Qwen__Qwen3-8B"]["resolve_kwargs_0_11_0_ms"]
    code, out, _ = _run([*args, "--endpoint", "chat", "--json"], capsys)
    chat = json.loads(out)
    assert code == 0 and chat["endpoint"] == "chat" and chat["front_end_ms"] == pytest.approx(parse_ms)
    assert chat["front_end"].startswith("vLLM 0.11.0 parses the chat template on every chat request")
    code, out, _ = _run([*args, "--json"], capsys)
    plain = json.loads(out)
    assert plain["front_end_ms"] == 0 and plain["front_end"] is None
    assert chat["ttft_ms"] - plain["ttft_ms"] == pytest.approx(parse_ms, abs=0.002)
    code, out, _ = _run([*args, "--endpoint", "chat"], capsys)
    assert code == 0 and any(line.startswith("front end ") and "vLLM 0.11.0 parses the chat template" in line
                             for line in out.splitlines())
    code, _, err = _run([*args, "--endpoint", "grpc"], capsys)
    assert code == 2 and "invalid choice: 'grpc'" in err
