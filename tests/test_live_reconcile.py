"""The dtype a server runs, inferred from its own pool (issue 29 item 1): the issue's float32 CPU server read
with the sidebar's "auto". The tiny Llama (2 layers, 2 KV heads of 32) holds 2 x 2 x 2 x 32 = 256 values a token:
1,024 bytes in float32, 512 in bfloat16; a 128-token block is 131,072 or 65,536 bytes, and 1 GiB holds 8,192 or
16,384 of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from calculator import Scenario, estimate, model_spec_from_text
from calculator.observe.live import live_usage, scenario_from_server, with_actual_blocks
from calculator.observe.metrics import parse_metrics
from calculator.observe.reconcile import reconcile, whole_factor

DATA = Path(__file__).parent / "data"
SPEC = model_spec_from_text((DATA / "tiny-configs" / "tiny-llama.config.json").read_text(), "config.json")
CAPTURE = (DATA / "vllm-metrics" / "vllm-0.32.0-cpu.txt").read_text()  # 1 GiB, no override


def server(blocks: int, override: str = "None"):
    """The capture as a server with ``blocks`` blocks in its 1 GiB reports it."""
    text = (CAPTURE.replace('num_gpu_blocks="16384"', f'num_gpu_blocks="{blocks}"')
            .replace('kv_cache_size_tokens="2097152"', f'kv_cache_size_tokens="{blocks * 128}"')
            .replace('num_gpu_blocks_override="None"', f'num_gpu_blocks_override="{override}"'))
    return parse_metrics(text).engines[0]


def estimated(engine, dtype: str):
    return estimate(scenario_from_server(engine, None, "0.32.0", Scenario(model=SPEC.model_id, gpu=None,
                                                                           device="cpu", dtype=dtype)), SPEC)


def test_a_float32_server_read_with_auto_gets_float32_proposed_and_the_reason() -> None:
    engine = server(8192)
    result = estimated(engine, "auto")
    assert (result.capacity.num_gpu_blocks, result.layout.bytes_per_block) == (16384, 65536)  # the 2x
    found = reconcile(result, SPEC, engine)
    assert (found.proposed_dtype, found.factor) == ("float32", 2)
    assert found.message == (
        "The estimate assumes --dtype bfloat16 (auto, from the model config); the server's kv_cache_memory_bytes "
        "1,073,741,824 over its num_gpu_blocks 8,192 is 131,072 bytes per block, where --dtype bfloat16 (auto, from "
        "the model config) gives 65,536. --dtype float32 reconciles them: the server runs float32 (the sidebar's "
        "\"dtype the server runs\").")
    assert reconcile(estimated(engine, "float32"), SPEC, engine) is None  # the proposal gives 0 % error


def test_kv_memory_in_use_agrees_with_the_servers_kv_cache_memory_bytes_whatever_the_dtype_assumed() -> None:
    engine = server(8192)
    for dtype in ("auto", "float32"):
        usage = live_usage(engine, with_actual_blocks(estimated(engine, dtype), 8192))
        assert usage.pool_bytes == 1073741824  # 8,192 x 131,072, not the 0.500 GiB the issue saw


def test_server_info_says_the_dtype_outright_and_under_an_override_the_configs_dtype_is_named() -> None:
    engine = server(16, override="16")
    result = estimated(engine, "auto")
    info = {"vllm_config": {"model_config": {"dtype": "torch.float32"}}}
    assert reconcile(result, SPEC, engine, info).proposed_dtype == "float32"
    # 16 blocks either way: the pool cannot reveal the dtype, but the config.json the server names stores float32,
    # which "auto" narrows to bfloat16: the knob is named with both block sizes (65,536 and 131,072 bytes)
    found = reconcile(result, SPEC, engine)
    assert (found.proposed_dtype, found.factor) == ("float32", None)
    assert found.message == (
        "--num-gpu-blocks-override 16 fixes this server's pool at 16 blocks whatever the dtype, so its blocks cannot "
        "say which it runs. Its model's config.json stores float32, which --dtype auto runs in bfloat16 here (65,536 "
        "bytes a block). A server started with --dtype float32 holds 131,072 bytes a block, 2,097,152 in all: if it "
        "was (the planner's CPU recipe starts it so), choose float32 as the dtype the server runs.")
    for chosen in ("float32", "bfloat16"):  # a dtype the user chose is not second-guessed
        assert reconcile(estimated(engine, chosen), SPEC, engine) is None


def test_a_whole_factor_no_dtype_explains_names_the_other_knobs() -> None:
    # 4,096 blocks in 1 GiB: 262,144 bytes a block, twice float32's: no --dtype gives it
    engine = server(4096)
    found = reconcile(estimated(engine, "float32"), SPEC, engine)
    assert found.proposed_dtype is None and found.factor == 2
    assert found.message.endswith("a setting, not overhead. No --dtype reconciles it; check --kv-cache-dtype (auto "
                                  "assumed), --tensor-parallel-size (1 assumed) and the model config the estimate "
                                  "uses.")


@pytest.mark.parametrize(("predicted", "actual", "factor"), [(16384, 8192, 2), (8192, 16384, 2), (8200, 8192, None),
                                                             (3, 1, 3), (0, 5, None)])
def test_whole_factors(predicted, actual, factor) -> None:
    assert whole_factor(predicted, actual) == factor
