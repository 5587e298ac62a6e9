"""Speculative decoding (calculator/engine/speculative.py): the proposer's memory and the tokens a step yields.

Hand figures: Llama-3.1-8B keeps 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072 B per token; its
Llama-3.2-1B draft 16 x 8 x 64 x 2 x 2 B = 32,768 B, in the same pool: 163,840 B per token. The draft's weights:
embed 128,256 x 2,048 (tied) + 16 layers x (q 2,048^2 + k, v 512 x 2,048 + o 2,048^2 + gate, up, down 8,192 x 2,048
+ two norms of 2,048) + the final norm = 1,235,814,400 parameters x 2 B = 2,471,628,800 B.
"""

from __future__ import annotations

import json

import pytest

from calculator.cli import main
from calculator.engine.estimate import estimate
from calculator.engine.speculative import tokens_per_step
from calculator.errors import InvalidInput
from calculator.scenario import Scenario
from calculator.serve_command import import_serve_command, serve_command
from calculator.speed.predict import speed_estimate
from calculator.speed.speculation import speculation_gain
from calculator.speed.traffic import Traffic
from calculator.url_state import read_link, to_query_params

LLAMA_8B, LLAMA_1B = "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"
BASE = Scenario(model=LLAMA_8B, vllm_version="0.32.0")
DRAFT = BASE.replace(speculative_method="draft_model", speculative_model=LLAMA_1B, num_speculative_tokens=4)
# One Llama-3.1-8B decoder layer: q 4,096^2, k and v 1,024 x 4,096, o 4,096^2, gate, up, down 14,336 x 4,096, two norms.
LAYER_PARAMS = 16_777_216 + 2 * 4_194_304 + 16_777_216 + 3 * 58_720_256 + 2 * 4_096


def test_a_draft_model_adds_its_weights_and_its_kv_layers_to_the_same_pool():
    result = estimate(DRAFT)
    assert result.layout.kv_bytes_per_token == 163_840
    assert result.budget.draft_weights_bytes == 2_471_628_800
    assert result.fits and result.proposer.num_speculative_tokens == 4


def test_a_draft_at_tp_1_keeps_all_its_kv_heads_on_every_target_rank():
    # Llama-3.1-8B at TP 2: 32 layers x 4 of its 8 KV heads x 128 x (K, V) x bf16 = 65,536 B per token and rank;
    # Llama-3.2-1B: 16 layers x 8 KV heads x 64 x (K, V) x bf16 = 32,768 B whole, 16,384 B split over 2 ranks.
    assert estimate(DRAFT.replace(tensor_parallel_size=2)).layout.kv_bytes_per_token == 65_536 + 16_384
    at_tp_1 = estimate(DRAFT.replace(tensor_parallel_size=2, draft_tensor_parallel_size=1))
    assert at_tp_1.layout.kv_bytes_per_token == 65_536 + 32_768
    assert at_tp_1.budget.draft_weights_bytes == 2_471_628_800  # the whole drafter on each rank, as at TP 1


def test_the_profiling_run_also_runs_the_drafter_over_every_batched_token():
    # max_num_seqs 16 keeps the sampler's warm-up below the forward pass. Llama-3.1-8B's forward over 8,192 tokens:
    # 4 hidden (4,096) and 3 intermediate (14,336) tensors per token in bf16. The drafter's dummy run follows it
    # while the target's hidden states stay alive: an EAGLE head of the same width costs one more hidden tensor
    # per token, EAGLE-3 four (its three auxiliary hidden states too); the 1B draft's own forward is smaller.
    base = BASE.replace(max_num_seqs=16)
    target = 8192 * (4 * 4_096 + 3 * 14_336) * 2
    for method, extra in (("eagle", 8192 * 4_096 * 2), ("eagle3", 8192 * 4 * 4_096 * 2)):
        assert estimate(base.replace(speculative_method=method)).budget.activation_bytes == target + extra
    draft = base.replace(speculative_method="draft_model", speculative_model=LLAMA_1B)
    assert 8192 * (4 * 2_048 + 3 * 8_192 + 4_096) * 2 < target == estimate(draft).budget.activation_bytes


def test_eagle_heads_are_one_decoder_layer_of_the_target():
    eagle = estimate(BASE.replace(speculative_method="eagle"))
    # + fc 4,096 x 8,192; the embedding and LM head are the target's.
    assert eagle.budget.draft_weights_bytes == (LAYER_PARAMS + 4_096 * 8_192) * 2 == 503_332_864
    assert eagle.layout.kv_bytes_per_token == 131_072 + 4_096
    eagle3 = estimate(BASE.replace(speculative_method="eagle3"))
    # q, k and v read 2 x hidden; fc 4,096 x 12,288; its own LM head of 32,000 x 4,096 (yuhuili/EAGLE3-LLaMA3.1).
    qkv_extra = (4_096 + 2 * 1_024) * 4_096
    assert eagle3.budget.draft_weights_bytes == (LAYER_PARAMS + qkv_extra + 4_096 * 12_288 + 32_000 * 4_096) * 2
    assert eagle3.budget.draft_weights_bytes == 849_362_944


def test_mtp_runs_the_checkpoints_own_layers_and_ngram_takes_no_memory():
    v3 = Scenario(model="deepseek-ai/DeepSeek-V3", gpu="H200 141GB", tensor_parallel_size=8)
    plain, mtp = estimate(v3), estimate(v3.replace(speculative_method="mtp", num_speculative_tokens=1))
    # One more MLA layer: 576 latent values x 2 B per token.
    assert mtp.layout.kv_bytes_per_token - plain.layout.kv_bytes_per_token == 576 * 2
    assert mtp.budget.draft_weights_bytes > 0 and "1 MTP layer(s) from the checkpoint" in mtp.proposer.note
    ngram = estimate(BASE.replace(speculative_method="ngram", num_speculative_tokens=3))
    base = estimate(BASE)
    assert (ngram.budget.draft_weights_bytes, ngram.layout.kv_bytes_per_token) == (0, 131_072)
    assert ngram.budget.kv_cache_bytes == base.budget.kv_cache_bytes
    with pytest.raises(InvalidInput, match="has none: use eagle, eagle3, draft_model or ngram"):
        estimate(BASE.replace(speculative_method="mtp"))


def test_qwen3_next_mtp_is_one_full_attention_layer_with_its_fc_and_three_norms():
    # vLLM 0.32 qwen3_next_mtp.py: fc 2 x 2,048 -> 2,048, pre_fc_norm_hidden, pre_fc_norm_embedding and norm around one
    # full-attention Qwen3-Next decoder layer: q (with its gate) 2,048 -> 16 x 256 x 2, k and v 2,048 -> 2 x 256,
    # o 4,096 -> 2,048, q and k norms of 256, two layer norms; 512 experts of gate, up 2,048 -> 512 and down back, a
    # router 2,048 -> 512, a shared expert of the same shape and its 2,048 -> 1 gate.
    attention = 2_048 * 8_192 + 2 * 2_048 * 512 + 4_096 * 2_048 + 2 * 256
    moe = 512 * 2_048 + 513 * 3 * 512 * 2_048 + 2_048
    fc_and_norms = 2_048 * 4_096 + 3 * 2_048
    base = Scenario(model="Qwen/Qwen3-Coder-Next", gpu="h200-141gb", vllm_version="0.32.0")
    plain, mtp = estimate(base), estimate(base.replace(speculative_method="mtp", num_speculative_tokens=1))
    assert mtp.budget.draft_weights_bytes == (attention + 2 * 2_048 + moe + fc_and_norms) * 2 == 3_300_942_848
    # Its KV joins the pool: one more full-attention layer of 2 KV heads x 256 x (K, V) x bf16.
    assert mtp.layout.kv_bytes_per_token - plain.layout.kv_bytes_per_token == 2 * 256 * 2 * 2


def test_what_vllm_refuses_about_the_draft():
    with pytest.raises(InvalidInput, match="cannot be other value than 1 or target model tensor_parallel_size"):
        estimate(DRAFT.replace(tensor_parallel_size=4, draft_tensor_parallel_size=2))
    with pytest.raises(InvalidInput, match="differs from the target's"):
        estimate(DRAFT.replace(speculative_model="Qwen/Qwen3-0.6B"))


# What V1 raised for a draft model before v1/spec_decode/draft_model.py arrived in 0.15.0 (vLLM issues #26547 on
# 0.11.0, #31883 on 0.13.0): the oracle's NotImplementedError (engine/arg_utils.py 0.10.0:1398), then
# _check_feature_supported's (arg_utils.py 0.11.0:1486, 0.13.0:1744, 0.14.1:1793).
_REFUSED_0_10 = ("Speculative decoding with draft model is not supported yet. Please consider using other "
                 "speculative decoding methods such as ngram, medusa, eagle, or deepseek_mtp.")
_REFUSED_0_11 = ("Draft model speculative decoding is not supported yet. Please consider using other speculative "
                 "decoding methods such as ngram, medusa, eagle, or mtp.")


@pytest.mark.parametrize(("version", "refusal"), [
    ("0.10.0", _REFUSED_0_10), ("0.11.0", _REFUSED_0_11), ("0.12.0", _REFUSED_0_11), ("0.13.0", _REFUSED_0_11),
    ("0.14.1", _REFUSED_0_11), ("0.15.0", None), ("0.28.0", None),
])
def test_v1_refuses_a_draft_model_before_0_15(version, refusal):
    result = estimate(DRAFT.replace(vllm_version=version, gpu="h100-sxm-80gb"))
    assert result.refusal == refusal and result.fits is (refusal is None)
    if refusal:
        assert result.error.endswith(f"vLLM raises: {refusal}")
        assert "has no draft-model proposer (0.15.0 added one)" in result.error
    assert estimate(BASE.replace(vllm_version=version, gpu="h100-sxm-80gb", speculative_method="eagle")).fits


def test_the_cli_shows_the_refusal_for_0_11(capsys):
    assert main(["estimate", "--model", LLAMA_8B, "--gpu", "h100-sxm-80gb", "--vllm-version", "0.11.0",
                 "--speculative-config", f'{{"method": "draft_model", "model": "{LLAMA_1B}"}}', "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["fits"] is False and shown["refusal"] == _REFUSED_0_11
    assert shown["error"].endswith(f"vLLM raises: {_REFUSED_0_11}")


_FALLBACK = "runs the V0 engine here: Speculative Decoding is not supported by the V1 Engine. Falling back to V0."


@pytest.mark.parametrize(("version", "method", "engine"), [
    # EngineArgs._is_v1_supported_oracle: 0.8.0 - 0.8.2 n-gram only, 0.8.3 + eagle, 0.8.5 + eagle3, 0.9 + MTP
    # (deepseek_mtp); a draft model falls back to V0 through 0.9.2.
    ("0.8.2", "ngram", "v1"), ("0.8.2", "eagle", "v0"), ("0.8.3", "eagle", "v1"), ("0.8.4", "eagle3", "v0"),
    ("0.8.5", "eagle3", "v1"), ("0.9.2", "draft_model", "v0"), ("0.9.2", "eagle3", "v1"),
])
def test_0_8_and_0_9_fall_back_to_v0_for_the_methods_v1_lacks(version, method, engine):
    scenario = BASE.replace(vllm_version=version, gpu="h100-sxm-80gb", speculative_method=method,
                            speculative_model=LLAMA_1B if method == "draft_model" else None)
    result = estimate(scenario)
    assert result.settings.engine == engine and result.refusal is None
    assert any(_FALLBACK in w for w in result.warnings) is (engine == "v0")


@pytest.mark.parametrize("version", ["0.7.3", "0.8.5", "0.9.2"])
def test_v0_profiles_the_target_alone_so_the_draft_is_outside_the_kv_budget(version):
    # worker.py: memory_profiling(weights_memory=self.model_runner.model_memory_usage) around the scorer's
    # profile_run; the draft's weights were already loaded (SpecDecodeWorker.init_device) when the peak was reset
    draft = estimate(DRAFT.replace(vllm_version=version, gpu="h100-sxm-80gb"))
    b = draft.budget
    assert draft.settings.engine == "v0" and b.formula == "v0"
    assert b.draft_weights_bytes == 2_471_628_800 and not b.draft_in_budget
    assert not next(s for s in b.segments() if s.key == "draft").inside_budget
    # so the KV budget is total x util less the target's weights, its peak and the non-torch memory: no draft term
    assert b.kv_cache_bytes == b.requested_bytes - b.weights_bytes - b.activation_bytes - b.non_torch_bytes
    assert b.unused_bytes == (b.total_bytes - b.requested_bytes - b.context_bytes - b.cudagraph_bytes
                              - 2_471_628_800)  # the draft comes out of the (1 - util) headroom
    assert any("profiles the target model alone: the proposer's 2.30 GiB of weights" in w for w in draft.warnings)
    # V1 (0.32) profiles with the draft loaded: its weights come out of the budget
    v1 = estimate(DRAFT.replace(gpu="h100-sxm-80gb"))
    assert v1.budget.draft_in_budget and v1.budget.kv_cache_bytes < estimate(
        BASE.replace(gpu="h100-sxm-80gb")).budget.kv_cache_bytes - 2_471_628_800


def test_tokens_per_step_follow_the_acceptance_rate():
    assert tokens_per_step(3, 0.8) == pytest.approx((1 - 0.8 ** 4) / 0.2) == pytest.approx(2.952)
    assert tokens_per_step(0, 0.9) == 1.0
    assert tokens_per_step(4, 0.0) == 1.0


def test_the_draft_models_cost_per_step_and_the_tokens_it_yields_by_hand():
    import test_speed_roofline as roofline  # Llama-3.1-8B's hand figures, the H100's rates, the UNIT constants

    from calculator.speed.costs import forward_costs
    from calculator.speed.hardware import gpu_rates
    from calculator.speed.step_time import step_time

    def one_request_step(scenario):
        result = estimate(scenario.replace(gpu="h100-sxm-80gb", speculative_acceptance_rate=0.7))
        costs = forward_costs(result)
        return costs, step_time(costs, gpu_rates(result.gpu, result.quantization), roofline.UNIT, decode_tokens=1,
                                decode_context_tokens=context)

    k, context = 4, 1000
    # One proposal pass of the Llama-3.2-1B draft streams its weights (the docstring's 2,471,628,800 B; the tied
    # embedding is its lm_head) and its KV of the context (32,768 B a token), and does 2 FLOPs per linear weight:
    # 16 x (q, o 2,048^2 + k, v 512 x 2,048 + gate, up, down 8,192 x 2,048) + lm_head 128,256 x 2,048.
    draft_pass_bytes = 2_471_628_800 + context * 32_768  # 2,504,396,800
    draft_pass_flops = 2 * (16 * (2 * 2048 * 2048 + 2 * 512 * 2048 + 3 * 8192 * 2048) + 128_256 * 2048)
    assert draft_pass_flops == 2_471_493_632
    costs, step = one_request_step(DRAFT)
    linear = roofline.LLAMA8_LINEAR_PARAMS
    # the target verifies k + 1 tokens in one pass
    target_bytes = (2 * linear + roofline.LLAMA8_NORM_BYTES + context * roofline.LLAMA8_KV_BYTES_PER_TOKEN
                    + (k + 1) * roofline.LLAMA8_ACTIVATION_BYTES_PER_TOKEN)
    assert step.memory_s == pytest.approx((target_bytes + k * draft_pass_bytes) / roofline.H100_STREAMING_BYTES_S,
                                         rel=1e-12)
    assert step.compute_s == pytest.approx(((k + 1) * (2 * linear + context
                                                       * roofline.LLAMA8_ATTENTION_FLOPS_PER_CONTEXT_TOKEN)
                                            + k * draft_pass_flops) / roofline.H100_CEILING, rel=1e-12)
    # The draft's share of the step: k passes, 4 x 2,504,396,800 B / 2,978 GB/s (the H100's streaming rate) =
    # 3.364 ms on one H100; n-gram proposals with the same k cost the step nothing on the GPU
    _, ngram = one_request_step(BASE.replace(speculative_method="ngram", num_speculative_tokens=k))
    assert (step.memory_s - ngram.memory_s) * 1e3 == pytest.approx(4 * 2_504_396_800 / 2978e9 * 1e3, rel=1e-12)
    assert (step.memory_s - ngram.memory_s) * 1e3 == pytest.approx(3.364, abs=5e-4)
    # Accepted tokens per step at a = 0.7: (1 - 0.7^5) / 0.3 = 2.7731, so TPOT is the step over 2.7731
    assert costs.tokens_per_decode_step == pytest.approx(0.83193 / 0.3, rel=1e-12)
    one = Traffic(input_tokens=1000, output_tokens=200, concurrency=1)
    with_draft = estimate(DRAFT.replace(gpu="h100-sxm-80gb", speculative_acceptance_rate=0.7))
    assert speed_estimate(with_draft, one, constants=roofline.UNIT).tpot_ms < speed_estimate(
        estimate(BASE.replace(gpu="h100-sxm-80gb")), one, constants=roofline.UNIT).tpot_ms


def test_speculation_pays_at_low_concurrency_and_stops_paying_when_the_step_is_compute_bound():
    traffic = {"input_tokens": 1000, "output_tokens": 200}
    plain, ngram = estimate(BASE), estimate(BASE.replace(speculative_method="ngram", num_speculative_tokens=3))
    one = Traffic(**traffic, concurrency=1)
    assert speed_estimate(ngram, one).tpot_ms < speed_estimate(plain, one).tpot_ms
    many = Traffic(**traffic, concurrency=256)
    assert speed_estimate(ngram, many).output_throughput_tok_s < speed_estimate(plain, many).output_throughput_tok_s
    # The user's acceptance rate sets the gain: nothing accepted is only the cost.
    never = estimate(BASE.replace(speculative_method="ngram", num_speculative_tokens=3,
                                  speculative_acceptance_rate=0.0))
    assert speed_estimate(never, one).tpot_ms > speed_estimate(plain, one).tpot_ms


def test_import_export_link_and_cli(capsys):
    line = ("vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config "
            "'{\"model\": \"meta-llama/Llama-3.2-1B-Instruct\", \"num_speculative_tokens\": 4}'")
    scenario, report = import_serve_command(line, BASE)
    assert scenario == DRAFT and report.incomplete == ()
    exported = serve_command(scenario, multiline=False)
    assert exported.endswith("--speculative-config '{\"method\":\"draft_model\",\"model\":"
                             "\"meta-llama/Llama-3.2-1B-Instruct\",\"num_speculative_tokens\":4}'")
    assert import_serve_command(exported, BASE)[0] == scenario
    mtp, _ = import_serve_command("vllm serve deepseek-ai/DeepSeek-V3 --speculative-config "
                                  "'{\"method\": \"deepseek_mtp\", \"num_speculative_tokens\": 1}'", BASE)
    assert mtp.speculative_method == "mtp"
    _, medusa = import_serve_command(f"vllm serve {LLAMA_8B} --speculative-config '{{\"method\": \"medusa\"}}'", BASE)
    assert medusa.incomplete and "not modelled" in medusa.incomplete[0]
    linked = DRAFT.replace(speculative_acceptance_rate=0.6)
    params = to_query_params(linked)
    assert {k: params[k] for k in ("spec", "draft", "ntok", "accept")} == {
        "spec": "draft_model", "draft": LLAMA_1B, "ntok": "4", "accept": "0.6"}
    assert read_link(params).scenario == linked
    assert main(["estimate", "--model", LLAMA_8B, "--vllm-version", "0.32.0", "--speculative-config",
                 '{"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct"}', "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["draft_weights_bytes"], shown["kv_bytes_per_token"], shown["speculative_method"]) == (
        2_471_628_800, 163_840, "draft_model")
    with pytest.raises(SystemExit):
        main(["estimate", "--model", LLAMA_8B, "--speculative-config", '{"method": "medusa"}'])
    assert "this speculative method is not modelled" in capsys.readouterr().err


def test_the_speed_cli_says_up_to_which_concurrency_speculation_pays(capsys):
    # EAGLE-3 lowers TPOT while the step streams weights (one user) and less and less as the k + 1 query tokens per
    # request make it compute-bound (hundreds of users); it pays up to the last concurrency before the first loss,
    # or to the last one the sweep reaches. (With the constants of 5 Dec 2026 the gain shrinks to ~4 % at 256
    # requests, the engine's max_num_seqs, without turning into a loss: where it crosses moves with the calibration.)
    eagle3 = estimate(BASE.replace(speculative_method="eagle3"))
    gain = speculation_gain(eagle3, Traffic(input_tokens=1000, output_tokens=200, concurrency=1))
    assert gain.concurrency[0] == 1 and gain.tpot_ms[0] < gain.tpot_without_ms[0] / 2
    ratios = [ours / theirs for ours, theirs in zip(gain.tpot_ms, gain.tpot_without_ms)]
    assert ratios == sorted(ratios) and ratios[-1] > 0.9  # the gain shrinks with every doubling, to under 10 %
    losses = [i for i, ratio in enumerate(ratios) if ratio >= 1]
    assert gain.pays_up_to == gain.concurrency[losses[0] - 1 if losses else -1]
    assert speculation_gain(estimate(BASE), Traffic(input_tokens=1000, output_tokens=200, concurrency=1)) is None
    assert main(["speed", "--model", LLAMA_8B, "--vllm-version", "0.32.0", "--speculative-config",
                 '{"method": "eagle3"}', "--input-tokens", "1000", "--output-tokens", "200", "--concurrency", "8",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["speculation_pays_up_to_concurrency"] == gain.pays_up_to
