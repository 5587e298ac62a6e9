"""The engine's result models built without re-validation (calculator/computed.py) are the validated ones.

The suite runs with CALCULATOR_VALIDATE_COMPUTED=1 (conftest.py), so these tests switch the fast path on by hand.
"""

from __future__ import annotations

import pydantic
import pytest

from calculator import Scenario, estimate, load_model_spec
from calculator import computed as computed_module
from calculator.computed import computed
from calculator.engine.estimate import clear_caches
from calculator.engine.memory import MemoryBudget, MemorySegment

SCENARIOS = [
    Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb"),
    Scenario(model="google/gemma-3-27b-it", gpu="a100-sxm-80gb", tensor_parallel_size=2, pipeline_parallel_size=2),
    Scenario(model="deepseek-ai/DeepSeek-V3", gpu="h200", tensor_parallel_size=8, vllm_version="0.10.1"),
    Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb", max_model_len=131072,
             gpu_memory_utilization=0.3),  # does not fit: the error path
]


@pytest.fixture
def fast_path(monkeypatch):
    monkeypatch.setattr(computed_module, "_VALIDATE", False)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=["llama", "gemma-pp2", "deepseek-0.10.1", "too-long"])
def test_an_estimate_built_without_validation_equals_the_validated_one(scenario, monkeypatch):
    spec = load_model_spec(scenario.model)
    clear_caches()
    validated = estimate(scenario, spec)
    monkeypatch.setattr(computed_module, "_VALIDATE", False)
    clear_caches()
    fast = estimate(scenario, spec)
    assert fast == validated
    assert fast.model_dump() == validated.model_dump()
    assert fast.model_dump_json() == validated.model_dump_json()
    assert hash(fast.settings) == hash(validated.settings) and hash(fast.budget) == hash(validated.budget)
    assert fast.budget.model_fields_set == validated.budget.model_fields_set


def test_computed_fills_the_defaults_and_stays_frozen(fast_path):
    segment = computed(MemorySegment, {"key": "kv_cache", "label": "KV cache", "bytes": 1024, "inside_budget": True})
    assert segment == MemorySegment(key="kv_cache", label="KV cache", bytes=1024, inside_budget=True)
    with pytest.raises(pydantic.ValidationError):
        segment.bytes = 0  # type: ignore[misc]
    copy = segment.model_copy(update={"bytes": 2048})
    assert (copy.bytes, segment.bytes) == (2048, 1024)


def test_the_suite_validates_what_the_engine_builds():
    # NOTE: a wrong type from the engine must fail the tests: under the suite, computed() is cls(**values).
    assert computed_module._VALIDATE
    with pytest.raises(pydantic.ValidationError):
        computed(MemorySegment, {"key": "kv_cache", "label": "KV cache", "bytes": "a lot", "inside_budget": True})


def test_the_fields_set_are_the_fields_given(fast_path):
    values = dict(formula="v1_free_drop", total_bytes=80, requested_bytes=72, gpu_memory_utilization=0.9,
                  other_processes_bytes=0, context_bytes=1, weights_bytes=16, activation_bytes=2, non_torch_bytes=1,
                  cudagraph_bytes=1, cudagraph_in_budget=True, kv_cache_bytes=52)
    assert computed(MemoryBudget, dict(values)) == MemoryBudget(**values)
    assert computed(MemoryBudget, dict(values)).model_fields_set == set(values)


def test_every_field_given_must_come_in_declaration_order(fast_path, monkeypatch):
    # NOTE: given every field, computed() keeps the dict as the instance's __dict__, whose order model_dump_json
    # follows; the suite's validating mode refuses any other order, so no call site can ship one.
    given = {"key": "kv_cache", "label": "KV cache", "bytes": 1024, "inside_budget": True}
    expected = '{"key":"kv_cache","label":"KV cache","bytes":1024,"inside_budget":true}'
    assert computed(MemorySegment, dict(given)).model_dump_json() == expected
    monkeypatch.setattr(computed_module, "_VALIDATE", True)
    with pytest.raises(ValueError, match="not in declaration order"):
        computed(MemorySegment, dict(reversed(list(given.items()))))
    assert computed(MemorySegment, dict(given)).model_dump_json() == expected


def test_some_fields_given_take_the_defaults_in_declaration_order(fast_path):
    partial = {"kv_cache_bytes": 52, "formula": "v1_free_drop", "total_bytes": 80, "requested_bytes": 72,
               "gpu_memory_utilization": 0.9, "other_processes_bytes": 0, "context_bytes": 1, "weights_bytes": 16,
               "activation_bytes": 2, "non_torch_bytes": 1, "cudagraph_bytes": 1, "cudagraph_in_budget": True}
    built = computed(MemoryBudget, dict(partial))
    assert list(built.__dict__) == list(MemoryBudget.model_fields)
    assert built.model_dump_json() == MemoryBudget(**partial).model_dump_json()
