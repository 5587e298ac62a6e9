"""The KV band and the verdict, on hand-made bands so the expected numbers are worked out by hand."""

from __future__ import annotations

import math

import pytest

from calculator import Scenario, estimate
from calculator.engine import uncertainty
from calculator.engine.memory import memory_budget
from calculator.summary import estimate_summary
from calculator.units import GIB

TABLE = {"terms": {
    "weights_rel": {"pooled": 0.01, "n_pooled": 9, "eras": {}},
    "activation_rel": {"pooled": 0.10, "n_pooled": 9, "eras": {"v1": {"band": 0.20, "n": 5, "records": []}}},
    "non_torch_gib": {"pooled": 0.05, "n_pooled": 9, "eras": {}},
    "kv_rel": {"pooled": 0.05, "n_pooled": 9, "eras": {}},
}}
QWEN3_32B_PER_TOKEN = 64 * 8 * 128 * 2 * 2  # layers x KV heads x head_dim x (K + V) x bf16 = 256 KiB


@pytest.fixture(autouse=True)
def hand_made_bands(monkeypatch):
    monkeypatch.setattr(uncertainty, "band_table", lambda: TABLE)


def budget(*, weights_gib: float, activation_gib: float, total_gib: float = 80.0, util: float = 0.9, **extra):
    return memory_budget(formula="v1_sum_of_parts", total_bytes=int(total_gib * GIB), gpu_memory_utilization=util,
                         other_processes_bytes=0, context_bytes=0, weights_bytes=int(weights_gib * GIB),
                         activation_bytes=int(activation_gib * GIB), non_torch_bytes=0, cudagraph_bytes=0,
                         subtracts_cudagraph=False, has_startup_check=False, platform="cuda", **extra)


class TestHalfWidth:
    def test_terms_dominate_a_thin_pool(self):
        # 72 GiB - 66 - 4 = 2 GiB of KV; terms: sqrt((66 x 1%)^2 + (4 x 10%)^2 + 0.05^2) = 0.7734 GiB > 5% x 2 GiB.
        thin = budget(weights_gib=66, activation_gib=4)
        expected = math.sqrt(0.66 ** 2 + 0.4 ** 2 + 0.05 ** 2) * GIB
        assert uncertainty.kv_uncertainty_bytes(thin, "v0") == pytest.approx(expected, rel=1e-6)

    def test_the_end_to_end_band_dominates_a_large_pool(self):
        # 72 - 10 - 2 = 60 GiB; 5% of it is 3 GiB, more than the terms' sqrt(0.1^2 + 0.2^2 + 0.05^2).
        large = budget(weights_gib=10, activation_gib=2)
        assert uncertainty.kv_uncertainty_bytes(large, "v0") == pytest.approx(0.05 * large.kv_cache_bytes, rel=1e-6)

    def test_an_era_with_its_own_band_uses_it_and_others_use_the_pooled_one(self):
        assert uncertainty.term_band("activation_rel", "v1") == 0.20
        assert uncertainty.term_band("activation_rel", "v1_0_17") == 0.10
        assert uncertainty.term_band("no_such_term", "v1") == 0.0

    def test_a_pool_given_in_bytes_has_no_band(self):
        given = budget(weights_gib=10, activation_gib=2, kv_cache_memory_bytes=8 * GIB)
        assert uncertainty.kv_uncertainty_bytes(given, "v1") == 0


def qwen3_32b(max_model_len: int, **changes) -> Scenario:
    return Scenario(model="Qwen/Qwen3-32B", gpu=None, gpu_memory_gib=79.18, gpu_memory_utilization=0.9,
                    vllm_version="0.11.0", max_model_len=max_model_len, **changes)


class TestBand:
    def test_low_and_high_bracket_the_estimate_and_tokens_follow_the_blocks(self):
        result = estimate(qwen3_32b(16000))
        low, high, tokens_low, tokens_high = uncertainty.kv_band(result)
        half = uncertainty.kv_uncertainty_bytes(result.budget, result.rules.overhead_era)
        assert (low, high) == (result.kv_cache_bytes - half, result.kv_cache_bytes + half)
        per_block = 16 * QWEN3_32B_PER_TOKEN
        assert (tokens_low, tokens_high) == (low // per_block * 16, high // per_block * 16)
        assert tokens_low < result.capacity.kv_cache_tokens < tokens_high

    def test_a_fixed_pool_has_no_band(self):
        result = estimate(qwen3_32b(16000, kv_cache_memory_bytes=4 * GIB))
        low, high, tokens_low, tokens_high = uncertainty.kv_band(result)
        assert low == high == 4 * GIB and tokens_low == tokens_high == result.capacity.kv_cache_tokens


class TestVerdict:
    # Qwen3-32B on one H100 (0.11.0): 71.26 - 61.02 weights - 5.62 peak - 0.13 non-torch = 4.49 GiB of KV. The terms
    # give sqrt((61.02 x 1%)^2 + (5.62 x 20%)^2 + 0.05^2) = 1.28 GiB: the band is about 3.21 .. 5.77 GiB.
    # One request needs max_model_len x 256 KiB: 16,000 -> 3.91 GiB, 12,000 -> 2.93, 20,000 -> 4.88, 26,000 -> 6.35.

    def test_fits_with_margin_when_the_low_end_holds_one_request(self):
        assert uncertainty.verdict(estimate(qwen3_32b(12_000))) == "fits with margin"

    def test_borderline_when_only_the_nominal_estimate_holds_it(self):
        result = estimate(qwen3_32b(16_000))
        assert result.fits and uncertainty.verdict(result) == "borderline"

    def test_borderline_when_only_the_high_end_holds_it(self):
        result = estimate(qwen3_32b(20_000))
        assert not result.fits and uncertainty.verdict(result) == "borderline"

    def test_does_not_fit_when_even_the_high_end_is_short(self):
        assert uncertainty.verdict(estimate(qwen3_32b(26_000))) == "does not fit"

    def test_settings_vllm_refuses_do_not_fit_whatever_the_memory(self):
        result = estimate(Scenario(model="Qwen/Qwen3-0.6B", gpu="h100", max_model_len=50_000))
        assert result.settings.error and uncertainty.verdict(result) == "does not fit"

    def test_a_fixed_pool_is_judged_at_its_size(self):
        assert uncertainty.verdict(estimate(qwen3_32b(16_000, kv_cache_memory_bytes=4 * GIB))) == "fits with margin"
        assert uncertainty.verdict(estimate(qwen3_32b(16_000, kv_cache_memory_bytes=3 * GIB))) == "does not fit"


def test_the_summary_carries_the_band_and_the_verdict():
    result = estimate(qwen3_32b(16_000))
    summary = estimate_summary(result)
    low, high, tokens_low, tokens_high = uncertainty.kv_band(result)
    assert (summary["kv_cache_bytes_low"], summary["kv_cache_bytes_high"]) == (low, high)
    assert (summary["kv_cache_tokens_low"], summary["kv_cache_tokens_high"]) == (tokens_low, tokens_high)
    assert summary["verdict"] == "borderline"


class TestReportedFailures:
    """A reported vLLM failure turns "fits" into "borderline", only where the report applies."""

    def gpt_oss_120b(self, **changes) -> Scenario:
        settings = dict(model="openai/gpt-oss-120b", gpu="h100", vllm_version="0.14.1", gpu_memory_utilization=0.97,
                        max_model_len=5120, max_num_seqs=1)
        return Scenario(**{**settings, **changes})

    def test_the_reported_oom_is_borderline_with_the_report_as_reason(self):
        result = estimate(self.gpt_oss_120b())
        assert result.fits and uncertainty.verdict(result) == "borderline"
        assert "vllm-project/vllm#33155" in uncertainty.verdict_reason(result)
        assert any("https://github.com/vllm-project/vllm/issues/33155" in w for w in result.warnings)

    @pytest.mark.parametrize("changes", [{"vllm_version": "0.13.0"}, {"model": "openai/gpt-oss-20b"},
                                         {"gpu": "b200"}, {"tensor_parallel_size": 2}])
    def test_outside_the_report_it_is_not_applied(self, changes):
        result = estimate(self.gpt_oss_120b(**changes))
        assert not any("33155" in warning for warning in result.warnings)


def test_graphs_captured_after_the_kv_cache_must_fit_in_the_headroom():
    # vLLM 0.13 captures CUDA graphs after the KV cache, in what total x (1 - util) leaves: 79.19 x 0.01 = 0.79 GiB
    tight = estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100", vllm_version="0.13.0",
                              gpu_memory_utilization=0.99))
    assert not tight.budget.cudagraph_in_budget and tight.fits
    assert uncertainty.verdict(tight) == "borderline"
    reason = uncertainty.verdict_reason(tight)
    assert "need more than the 0.79 GiB that gpu_memory_utilization 0.99 leaves" in reason
    assert reason.endswith("or pass --enforce-eager.")
    eager = estimate(tight.scenario.replace(enforce_eager=True))
    assert uncertainty.verdict(eager) == "fits with margin"
    roomy = estimate(tight.scenario.replace(gpu_memory_utilization=0.95))  # 3.96 GiB of headroom
    assert uncertainty.verdict(roomy) == "fits with margin"
