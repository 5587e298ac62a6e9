"""The version table: defaults and formulas per vLLM era (internals notes §1.2, §1.4, §2.5, §2.7)."""

from __future__ import annotations

import pytest

from calculator.engine.vllm_versions import VllmVersion, batch_defaults, default_block_size, rules_for
from calculator.errors import UnsupportedVllmVersion


@pytest.mark.parametrize(("version", "util", "block", "formula", "tokens"), [
    ("0.6.6.post1", 0.9, 16, "v0", "blocks_times_block_size"),
    ("0.8.5", 0.9, 16, "v1_global", "blocks_times_block_size"),
    ("0.10.2", 0.9, 16, "v1_sum_of_parts", "blocks_per_group"),
    ("0.19.0", 0.9, 16, "v1_sum_of_parts", "blocks_per_group"),
    ("0.20.0", 0.92, 16, "v1_sum_of_parts", "blocks_per_group"),
    ("0.21", 0.92, 16, "v1_sum_of_parts", "concurrency_times_len"),
    ("0.27.0", 0.92, 16, "v1_free_drop", "concurrency_times_len"),
    ("0.33.1", 0.92, 16, "v1_free_drop", "concurrency_times_len"),
    ("0.34.0", 0.92, 64, "v1_extensible", "concurrency_times_len"),
])
def test_eras(version, util, block, formula, tokens):
    rules = rules_for(version)
    assert rules.default_gpu_memory_utilization == util
    assert rules.default_block_size == block
    assert rules.memory_formula == formula
    assert rules.token_semantics == tokens


def test_cudagraph_estimate_is_subtracted_from_0_20():
    assert not rules_for("0.19.1").subtracts_cudagraph_estimate
    assert rules_for("0.20.0").subtracts_cudagraph_estimate


def test_kv_cache_dtypes_grow_with_versions():
    assert "bfloat16" not in rules_for("0.10.2").kv_cache_dtypes
    assert "fp8_ds_mla" in rules_for("0.14.0").kv_cache_dtypes
    assert "nvfp4_ds_mla" in rules_for("0.30.0").kv_cache_dtypes


def test_error_text_spelling_changed_in_0_22():
    assert "models's max seq len" in rules_for("0.21.0").max_len_error_template
    assert "model's max seq len" in rules_for("0.22.0").max_len_error_template


@pytest.mark.parametrize(("version", "memory", "name", "seqs", "tokens"), [
    ("0.29.0", 79.19, "H100 SXM 80GB", 1024, 8192),
    ("0.29.0", 79.15, "A100 SXM 80GB", 256, 2048),  # A100 is excluded from the big tier
    ("0.29.0", 178.35, "B200", 1024, 8192),
    ("0.30.0", 178.35, "B200", 1024, 16384),
    ("0.34.0", 23.56, "RTX 3090", 256, 2048),
    ("0.10.2", 79.19, "H100 SXM 80GB", 256, 2048),
])
def test_batch_defaults_by_memory_tier(version, memory, name, seqs, tokens):
    defaults = batch_defaults(rules_for(version), device="cuda", gpu_memory_gib=memory, gpu_family=None,
                              gpu_name=name)
    assert (defaults.max_num_seqs, defaults.max_num_batched_tokens) == (seqs, tokens)


def test_mla_block_sizes_follow_the_backend():
    assert default_block_size(rules_for("0.15.0"), device="cuda", uses_mla=True, gpu_family="hopper") == 64
    assert default_block_size(rules_for("0.25.0"), device="cuda", uses_mla=True, gpu_family="hopper") == 16
    assert default_block_size(rules_for("0.25.0"), device="cuda", uses_mla=True, gpu_family="blackwell") == 32
    assert default_block_size(rules_for("0.15.0"), device="cuda", uses_mla=True, gpu_family="blackwell") == 128
    assert default_block_size(rules_for("0.34.0"), device="cuda", uses_mla=True, gpu_family="hopper") == 64
    assert default_block_size(rules_for("0.32.0"), device="cpu", uses_mla=False, gpu_family=None) == 128


def test_versions_compare_numerically_and_bad_ones_are_refused():
    assert VllmVersion.parse("0.10.0") > VllmVersion.parse("0.9.2")
    assert str(VllmVersion.parse("v0.6.6.post1")) == "0.6.6"
    with pytest.raises(UnsupportedVllmVersion):
        VllmVersion.parse("latest")
    with pytest.raises(UnsupportedVllmVersion):
        VllmVersion.parse("0.3.0")
