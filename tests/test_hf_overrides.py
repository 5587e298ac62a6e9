"""--hf-overrides (issue 25 item 4): a JSON object applied to the model's config.json the way vLLM's ModelConfig
applies it, before the spec is built; every figure below is computed by hand from Llama-3.1-8B's config."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from calculator import InvalidInput, Scenario, estimate
from calculator.model.hf_overrides import (
    MAX_HF_OVERRIDES_CHARS,
    apply_hf_overrides,
    parse_hf_overrides,
    with_hf_overrides,
)
from calculator.model.model_source import load_model_spec

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
# Llama-3.1-8B: hidden 4096, MLP 14336, 32 heads, 8 KV heads of 128, vocab 128256, untied embeddings.
LAYER_PARAMS = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096  # q, o; k, v; MLP; two norms
OUTSIDE_LAYERS = 2 * 128256 * 4096 + 4096  # embedding, lm_head, final norm


def test_half_the_layers_halve_the_layer_part_of_the_weights_and_the_kv_bytes_per_token():
    full = estimate(Scenario(model=LLAMA))
    half = estimate(Scenario(model=LLAMA, hf_overrides='{"num_hidden_layers": 16}'))
    assert full.model.num_params == 32 * LAYER_PARAMS + OUTSIDE_LAYERS == 8_030_261_248
    assert half.model.num_params == 16 * LAYER_PARAMS + OUTSIDE_LAYERS == 4_540_469_248
    assert half.budget.weights_bytes == 2 * 4_540_469_248  # bfloat16
    # K and V, 8 heads of 128, 2 bytes, per layer: 4,096 bytes per token and layer
    assert full.layout.kv_bytes_per_token_per_stage == (32 * 4096,)
    assert half.layout.kv_bytes_per_token_per_stage == (16 * 4096,)
    assert half.model.num_hidden_layers == 16 and half.scenario.hf_overrides == '{"num_hidden_layers":16}'


def test_overrides_apply_as_vllm_applies_them():
    config = {"num_hidden_layers": 32, "rope_scaling": {"type": "llama3", "factor": 8.0},
              "text_config": {"num_hidden_layers": 40, "hidden_size": 5120}, "quantization_config": {"bits": 4}}
    out = apply_hf_overrides(config, {"num_hidden_layers": 2, "rope_scaling": {"factor": 2.0},
                                      "text_config": {"num_hidden_layers": 4}, "quantization_config": {"x": 1}})
    assert out == {"num_hidden_layers": 2, "rope_scaling": {"factor": 2.0},  # a dict attribute: replaced whole
                   "text_config": {"num_hidden_layers": 4, "hidden_size": 5120},  # a nested config: merged
                   "quantization_config": {"x": 1}}
    assert config["text_config"]["num_hidden_layers"] == 40  # the original is untouched


@pytest.mark.parametrize(("text", "said"), [
    ("[1, 2]", "must be a JSON object such as"),
    ("null", "not null"),
    ("{num_hidden_layers: 16}", "is not JSON"),
    ('{"a":' * 9 + "1" + "}" * 9, "nests deeper than 8 levels"),
    ('{"a": "' + "x" * MAX_HF_OVERRIDES_CHARS + '"}', "the planner reads at most 4,096"),
])
def test_anything_but_a_small_json_object_is_refused_with_a_sentence(text, said):
    with pytest.raises(InvalidInput, match=said):
        parse_hf_overrides(text)
    with pytest.raises(ValidationError, match=said):
        Scenario(hf_overrides=text)


def test_a_value_the_config_cannot_take_names_the_flag_and_the_field():
    with pytest.raises(InvalidInput, match=r"--hf-overrides \{\"num_hidden_layers\":0\}: .*num_hidden_layers"):
        estimate(Scenario(model=LLAMA, hf_overrides='{"num_hidden_layers": 0}'))


def test_equal_overrides_are_one_scenario_and_an_empty_object_is_none():
    assert Scenario(hf_overrides='{ "b": 1, "a": 2 }') == Scenario(hf_overrides={"a": 2, "b": 1})
    assert Scenario(hf_overrides="{}").hf_overrides is None
    spec = load_model_spec(LLAMA)
    assert with_hf_overrides(spec, None) is spec


def test_the_cli_plans_with_the_overrides_and_refuses_a_bad_one_with_exit_2():
    from test_cli import run_cli

    done = run_cli("estimate", "--model", LLAMA, "--gpu", "h100-sxm-80gb", "--kv-cache-memory-bytes", "60G",
                   "--vllm-version", "0.34.0", "--hf-overrides", '{"num_hidden_layers": 16}', "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["num_params"] == 4_540_469_248 and result["kv_bytes_per_token"] == 16 * 4096
    # 60 GiB in blocks of 64 tokens x 65,536 bytes (4 MiB): 15,360 blocks, twice the 32-layer model's 7,680
    assert (result["num_gpu_blocks"], result["kv_cache_tokens"]) == (15_360, 983_040)
    bad = run_cli("estimate", "--model", LLAMA, "--hf-overrides", "[16]")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr == "error: --hf-overrides must be a JSON object such as '{\"num_hidden_layers\": 16}', not list\n"


def test_a_link_carries_the_overrides_and_refuses_a_bad_one_keeping_the_rest():
    from calculator.url_state import read_link, to_query_params

    scenario = Scenario(model=LLAMA, hf_overrides={"num_hidden_layers": 16}, tensor_parallel_size=2)
    params = to_query_params(scenario)
    assert params["hfo"] == '{"num_hidden_layers":16}' and read_link(params).scenario == scenario
    state = read_link({"m": LLAMA, "tp": "2", "hfo": "[16]"})
    assert (state.scenario.hf_overrides, state.scenario.tensor_parallel_size) == (None, 2)
    assert state.warnings == ("ignored link value hfo='[16]': --hf-overrides must be a JSON object such as "
                              "'{\"num_hidden_layers\": 16}', not list; using the default",)
    huge = '{"a": "' + "x" * 5000 + '"}'
    (warning,) = read_link({"hfo": huge}).warnings
    assert len(warning) < 400 and "(5,009 characters): --hf-overrides is 5,009 characters; the planner reads at " \
                                  "most 4,096; using the default" in warning


def test_recommend_ranks_the_overridden_model_as_speed_predicts_it():
    from test_cli import run_cli

    traffic = ("--model", LLAMA, "--input-tokens", "1000", "--output-tokens", "100", "--json")
    overrides = ("--hf-overrides", '{"num_hidden_layers": 16}')
    speed = json.loads(run_cli("speed", *traffic, "--concurrency", "8", *overrides).stdout)
    plain = json.loads(run_cli("speed", *traffic, "--concurrency", "8").stdout)
    ranked = json.loads(run_cli("recommend", *traffic, "--concurrent-users", "8", "--gpu", "h100-sxm-80gb",
                                *overrides).stdout)
    best = ranked["by_cost_per_hour"][0]
    assert (best["gpu"], best["tensor_parallel_size"]) == ("h100-sxm-80gb", 1)
    assert best["tpot_ms"] == speed["tpot_ms"] < plain["tpot_ms"]  # half the layers: less to read per token
