"""The accuracy benchmark on real vLLM start-ups: issue 13's targets hold, the record mapping is right, and the
stored uncertainty bands are the ones the benchmark computes (regenerate with ``python benchmarks/accuracy.py``)."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from benchmarks.accuracy import (
    RECORD_FILES,
    RECORDS,
    SOURCE_OUT,
    bands,
    check_targets,
    evaluate,
    source_key,
    source_out_targets,
    summary,
    worst_records,
)
from benchmarks.baselines import llm_d, seed_article
from benchmarks.held_out import FITS
from benchmarks.stand_ins import STAND_INS
from calculator import Scenario, estimate
from calculator.engine.calibration_records import calibration_case, load_cases, modelled_version, preset_for
from calculator.engine.overheads import ROCM_EXTRA_NON_TORCH_BYTES
from calculator.engine.uncertainty import verdict, verdict_reason
from calculator.units import GIB


@pytest.fixture(scope="module")
def report():
    return evaluate(RECORDS)


def test_issue_13_targets_hold_on_the_calibration_records(report):
    targets = {what: (value, limit, holds) for what, value, limit, holds in check_targets(report)}
    # NOTE: the KV-token p90 (5 %, in sample and left one out) held (3.99 %) until the thirteen records mined for issue
    # 20 item 2 took it to 11.04 %; the RTX 5090 pair's boot-to-boot rule (8.37 %), PCIe for a card outside the catalog
    # (the Turing TP 2 pair: 4.67 %) and the Docker image's FlashInfer sampler (llm-d's Mistral-Small-3.2: 4.37 %)
    # brought it back, so every target is held as set again.
    failed = [f"{what}: {value:.2f} > {limit}" for what, (value, limit, holds) in targets.items() if not holds]
    assert not failed, "; ".join(failed) + " (run python benchmarks/accuracy.py)"
    assert {what: limit for what, (_, limit, _) in targets.items()} == {
        "weights median %": 1.0, "KV tokens median %": 2.0, "KV tokens p90 %": 5.0,
        "KV arithmetic given the printed pool, max %": 0.5, 'failed start-ups called "fits with margin"': 0,
        'started ones called "does not fit"': 0,
        # leave-one-out: the same targets with every record-fitted constant refitted without the record scored
        "weights median %, left out": 1.0, "KV tokens median %, left out": 2.0, "KV tokens p90 %, left out": 5.0,
        'failed start-ups called "fits with margin", left out': 0, 'started ones called "does not fit", left out': 0}


def test_issue_20_left_out_by_source(report):
    targets = {what.split(" (")[0]: (value, limit, holds) for what, value, limit, holds in source_out_targets(report)}
    for what in ("weights median %, source left out",
                 'failed start-ups called "fits with margin", source left out',
                 'started ones called "does not fit", source left out',
                 "KV band holds the printed pool, source left out"):
        value, limit, holds = targets[what]
        assert holds, f"{what}: {value:.2f} against {limit} (run python benchmarks/accuracy.py)"
    # NOTE: issue 20's median of 1.5 % held (1.20) since the 0.27+ persistent-memory constant, set by the O'Reilly
    # runs alone, falls back to Model Runner V2's penalty tensors read in vLLM's source when that source is left out
    # (it fell back to nothing: 1.56). Thirteen records mined for issue 20 item 2 took it to 1.92 % (an RTX 5090 at
    # 0.28 printing 1.9 GiB of non-torch memory, +21 %; two Turing cards at TP 2 printing 0.21 GiB where we take 2.56,
    # -14 %; PP 4 over PCIe, +13 %); 1.73 % once the RTX 5090 pair left the statistics by the boot-to-boot rule: a
    # record that shows a miss stays counted; held here (below) so that a regression still fails, and to 1.5 % by
    # accuracy.py --check.
    # 1.71 % with PCIe for a card outside the catalog and the Docker image's sampler (this session's mechanisms);
    # 1.59 % once the blog records of other authors stopped sharing the O'Reilly runs' source; 1.57 % with the 0.27+
    # persistent term kept to compiled runs; 1.20 % once file-80gb-llama31-8b-131k-util092 was read as what its log
    # says (0.31.0 by its line numbers, an A100 by its 79.25 GiB: -2.16 -> -0.11 %). The target holds: guarded.
    assert targets["KV tokens median %, source left out"][0] <= 1.5
    # NOTE: the p90's 5 % held until an RTX PRO 4000 Blackwell AWQ start-up on 0.28 (predicted +11.1 %, ~3 points of
    # it from the nvidia-smi total the record had to use) took it to 7.08 %; 5.29, then 11.21 with the thirteen
    # records of issue 20 item 2 (the misses named above), 8.52 once the RTX 5090 pair left the statistics (boot-to-boot
    # rule). A record that shows a miss stays counted; held here (below) so that a regression still fails, and to 5 %
    # by accuracy.py --check.
    # 5.08 % with PCIe for a card outside the catalog (Turing TP 2: -13.7 -> -4.8 %) and the Docker image's sampler
    # (Mistral-Small-3.2: -9.1 -> +1.6 %); 4.69 % with the fused-MoE workspace read in vLLM's source (moe_workspace.py:
    # the 4 x RTX PRO 6000 Qwen3-235B runs, TP 4 +5.20 -> +2.11 %, TP 4 + EP +3.30 -> +1.74, PP 4 +12.92 -> +11.20):
    # the target holds again and is guarded here.
    assert targets["KV tokens p90 %, source left out"][0] <= 5.0


def test_check_fails_when_any_issue_13_or_issue_20_target_fails(report, capsys) -> None:
    from benchmarks.accuracy import STALE_BANDS, main

    # the reproduction: issue 13's targets all held while issue 20's source-left-out median (1.73 % against 1.5 %)
    # did not, and --check exited 0 because it looked at issue 13's only
    targets = check_targets(report) + source_out_targets(report)
    assert main(["--no-write", "--check", "--worst", "3"]) == (0 if all(holds for *_, holds in targets) else 1)
    printed, said = capsys.readouterr()
    # --worst N: the records behind the KV-token figures, largest source-left-out error first
    listed = printed.split("the 3 largest errors\n")[1].splitlines()
    assert listed == [f"{error:+7.2f} %  {record_id}" for record_id, error in worst_records(report, count=3)]
    # the committed bands are those the records give, so the coverage above was judged with them (a record change
    # without a rerun of the benchmark once judged the new records against the old bands)
    assert STALE_BANDS not in said
    for what in ("KV tokens median %, source left out", "weights median %, source left out",
                 "KV band holds the printed pool, source left out"):
        assert what in printed


def test_the_worst_records_are_those_the_source_left_out_kv_figures_are_taken_over(report) -> None:
    listed = worst_records(report)
    sizes = [abs(error) for _, error in listed]
    assert sizes == sorted(sizes, reverse=True)
    # every counted record that prints a KV-token figure, once: the median and p90 read off the list by hand
    # (inclusive quantiles: the p90 sits 0.9 of the way from the first to the last of n sorted values) are the targets'
    assert len({record_id for record_id, _ in listed}) == len(listed)
    ascending = sorted(sizes)
    position = 0.9 * (len(ascending) - 1)
    low = int(position)
    p90 = ascending[low] + (position - low) * (ascending[low + 1] - ascending[low])
    middle = len(ascending) // 2
    median = ascending[middle] if len(ascending) % 2 else (ascending[middle - 1] + ascending[middle]) / 2
    targets = {what: value for what, value, _, _ in source_out_targets(report)}
    assert targets["KV tokens p90 %, source left out"] == pytest.approx(p90)
    assert targets["KV tokens median %, source left out"] == pytest.approx(median)
    assert worst_records(report, count=2) == listed[:2]


def test_a_source_goes_out_whole() -> None:
    # the three A6000 records of vLLM PR 4454 and one MI300X start-up set the <= 0.6.3 constant: without the PR's
    # source only the MI300X's 1.35 GiB is left, without both sources nothing (0)
    held = next(fit for fit in FITS if fit.constant == "ERA_CONSTANTS['v0_used_memory'].held_after_profile_bytes")
    a6000 = ["vllm-pr4454-a6000-opt-125m", "vllm-pr4454-a6000-meta-llama-3-8b-instruct",
             "vllm-pr4454-a6000-zephyr-7b-beta-awq"]
    assert held.without(a6000) == 1.35
    assert held.without([*a6000, "file-mi300x-llama2-7b-tp1-v063dev"]) == 0.0
    # without llm-d the V1 TP = 1 non-torch figure is the other three sources' (0.02, 0.07, 0.02 GiB printed) and the
    # sampler's the one other torch-sort-path record's (1.40 GiB / 256 x 151,936 fp32 logits = 9.66 copies)
    fits = {fit.constant: fit for fit in FITS}
    llmd = ["llmd-h100-llama31-8b", "llmd-h100-qwen3-0.6b-16k", "llmd-h100-qwen3-0.6b-32k",
            "llmd-h100-qwen3-32b-tp1-16k", "llmd-h100-qwen3-32b-tp1-32k-failed", "llmd-h100-gpt-oss-20b"]
    assert fits["ERA_CONSTANTS['v1'].non_torch_tp1_bytes"].without(llmd) == pytest.approx((0.02 + 0.07 + 0.02) / 3)
    assert fits["ERA_CONSTANTS['v1'].sampler_logits_copies"].without(llmd) == 9.66
    # ... and what each gave is what it printed: non-torch as printed, the sampler peak over one logits copy
    assert 1.40 * GIB / (256 * 151_936 * 4) == pytest.approx(9.66, abs=0.005)
    assert fits["ERA_CONSTANTS['v1'].non_torch_tp1_bytes"].used == pytest.approx(
        (0.13 + 0.13 + 0.14 + 0.13 + 0.02 + 0.07 + 0.02) / 7, abs=0.001)
    assert source_key({"id": "blog-l4-x", "source": {}}) == source_key({"id": "blog-l40s-y", "source": {}})
    assert source_key({"id": "a", "source": {"url": "https://github.com/vllm-project/vllm/pull/4454"}}) == \
        "https://github.com/vllm-project/vllm/pull/4454"
    assert source_key({"id": "f", "source": {"locator": "public repository file (path not recorded)"}}) == "f"


def test_the_source_left_out_estimate_differs_only_where_the_source_set_a_constant(report) -> None:
    for row in report.counted():
        if not row.source_out.refitted:
            assert row.errors[SOURCE_OUT] == row.errors["ours"], row.case.record_id


def test_leaving_a_record_out_refits_the_constants_it_set() -> None:
    fits = {fit.constant: fit for fit in FITS}
    v0_held = fits["ERA_CONSTANTS['v0_used_memory'].held_after_profile_bytes"]
    assert v0_held.without("vllm-pr4454-a6000-opt-125m") == pytest.approx((1.03 + 1.11 + 1.35) / 3)
    assert v0_held.without("llmd-h100-llama31-8b") is None  # it did not help set this one
    persistent = fits["FREE_DROP_PERSISTENT_BYTES"]
    assert persistent.without("blog-l40s-qwen3-14b-awq-tuned") == pytest.approx((0.70 + 0.38) / 2)  # median of two
    # a repeat goes out with its set-up: median(0.49, 0.70)
    assert persistent.without("blog-l4-qwen3-14b-awq-replica") == pytest.approx(0.595)
    assert fits["ROCM_EXTRA_NON_TORCH_BYTES"].without("file-rocm-24gb-opt125m-serverlessllm") == 0.0  # no other


def test_without_its_one_source_the_persistent_memory_falls_back_to_what_vllms_source_shows() -> None:
    # every set-up of FREE_DROP_PERSISTENT_BYTES is an O'Reilly blog run; left out together, what stands for the
    # constant is Model Runner V2's penalty tensors (penalties.py, 0.28): int32 [256, 151,936] + [256, 4,748]
    persistent = next(fit for fit in FITS if fit.constant == "FREE_DROP_PERSISTENT_BYTES")
    blog = [rid for records in persistent.setups for rid in records]
    qwen3 = estimate(Scenario(model="Qwen/Qwen3-14B", gpu="l40s-48gb", vllm_version="0.28.0"))
    assert qwen3.settings.max_num_seqs == 256
    assert persistent.without(blog, qwen3) == pytest.approx((155_582_464 + 4_861_952) / GIB)
    assert persistent.without(blog) == 0.0  # no deployment given: the plain prior
    # penalties.py is read in the 0.28-0.32 wheels only, so before 0.28 nothing is assumed
    older = estimate(Scenario(model="Qwen/Qwen3-14B", gpu="l40s-48gb", vllm_version="0.27.1"))
    assert persistent.without(blog, older) == 0.0
    # one set-up left keeps the measured value
    assert persistent.without(blog[1:], qwen3) == pytest.approx(0.49)


def test_a_left_out_record_loses_the_memory_its_constant_gave(report) -> None:
    row = next(r for r in report.counted() if r.case.record_id == "file-rocm-24gb-opt125m-serverlessllm")
    # without ROCm's 0.40 GiB of extra non-torch memory the pool grows by exactly that much
    grown = row.held_out.result.budget.kv_cache_bytes - row.result.budget.kv_cache_bytes
    assert grown == int(0.40 * GIB) == ROCM_EXTRA_NON_TORCH_BYTES


def test_every_failed_start_with_a_config_is_not_called_a_fit_and_says_why(report):
    failed = {row.case.record_id: row for row in report.scored() if row.case.observed.started is False}
    calls = {record_id: (verdict(row.result), verdict_reason(row.result)) for record_id, row in failed.items()}
    assert {record_id: call for record_id, (call, _) in calls.items()} == {
        # NOTE: the KV bands are sized from leave-one-source-out residuals (issue 20); the V0 era's activation band
        # (2.06 -> 0.82) and non-torch band (0.30 -> 0.22 GiB) narrowed with the V0 records of 2423220 / 90a080c, so
        # this OOM is now called for what it was
        "vllm-16570-4xa100-40g-qwen25-vl-72b-tp4": "does not fit", "llmd-h100-llama33-70b-fp8-tp1-failed":
        "does not fit", "llmd-h100-qwen3-32b-tp1-32k-failed": "does not fit",
        "vllm-33155-h100-gpt-oss-120b-v0141-oom": "borderline",
        # on stand-in configs (benchmarks/stand_ins.py)
        "vllm-6156-2xl40-deepseek-coder-v2-lite-tp2": "does not fit",
        "file-gb10-qwen25-14b-fp8dyn-util015-failed-v0130nv": "does not fit",
        "vllm-16128-24gb-mistral-small-31-awq": "borderline",
        # 0.6.1's era has no KV band of its own and takes the pooled one (5.2 % -> 4.8 % once the Docker-image records
        # took FlashInfer's sampler); 25,776 tokens predicted against the 30,000 asked: the band no longer reaches it
        "file-a10g-phi35-vision-v061-30k-failed": "does not fit",
        # benchmarks/data/calibration-mined.jsonl
        "vllm-13061-2x4090-r1-distill-qwen14b-tp2-failed": "does not fit",
        "vllm-10517-3090-llama31-8b-29k-failed": "borderline",
        # 110 GiB of FP8 weights per rank on a 95 GiB card: vLLM ran out of memory loading them
        "blog-kubesimplify-2xrtxpro6000-qwen3-235b-fp8-tp2-load-oom-v0271": "does not fit",
        # one H100 80GB, 0.11.0, gpt-oss-120b at its 131,072 tokens: vLLM printed a pool of -2.28 GiB (util 0.9), then
        # 1.71 GiB (util 0.95), short of one request's 4.5 GiB (18 full-attention layers x 8 KV heads x 64 x 2 x 2 B)
        "vllm-27508-h100-gpt-oss-120b-async-defaults-v0110-failed": "does not fit",
        "vllm-27508-h100-gpt-oss-120b-util095-mbt1024-v0110-failed": "does not fit",
        # one OCI A10 (22.07 GiB), 0.7.1, Llama-3.1-8B at 131,072 tokens: vLLM's pool held 37,696 tokens (2,356 blocks)
        "oci-aqua-a10-llama31-8b-131k-failed-v071": "does not fit"}
    # Phi-3.5-vision's language model: 32 layers x 32 KV heads x 96 x 2 (K, V) x 2 bytes = 384 KiB per token
    assert failed["file-a10g-phi35-vision-v061-30k-failed"].result.layout.kv_bytes_per_token == 32 * 32 * 96 * 2 * 2
    # the KV pool was allocated, then the engine ran out of memory: 0.8.3 captures its graphs in the 5 % headroom
    mistral = failed["vllm-16128-24gb-mistral-small-31-awq"]
    for card in ("RTX 4090", "RTX 3090", "A10G", "A10", "L4"):  # the record names only a "24G GPU"
        on_card = estimate(mistral.case.scenario.replace(gpu=card), mistral.result.model)
        assert verdict(on_card) == "borderline", card
        assert verdict_reason(on_card).startswith("the CUDA graphs ("), card
    # two RTX 4090s over PCIe, TP 2: vLLM printed 81,536 tokens (5,096 blocks) against the 131,072 asked. V0 turns on
    # chunked prefill past 32K (the unprinted version is modelled as 0.6.6: 512 batched tokens), so the driver rank's
    # sampler peak sets the activation: 9.7 fp32 copies of 256 x 152,064 logits = 1.41 GiB (vLLM: 23.08 - 13.95 -
    # 0.25 - 7.46 = 1.42)
    pcie = failed["vllm-13061-2x4090-r1-distill-qwen14b-tp2-failed"].result
    assert pcie.settings.max_num_batched_tokens == 512
    assert pcie.budget.activation_bytes == int(9.7 * 256 * 152_064 * 4)
    assert calls["vllm-13061-2x4090-r1-distill-qwen14b-tp2-failed"][1].startswith(
        "The model's max seq len (131072) is larger than the maximum number of tokens that can be stored in KV cache")
    # vLLM 0.6.6 cached DeepSeek-V2's K and V per head at 256: 8 heads x 256 x 2 x 2 bytes x 27 layers per rank
    assert failed["vllm-6156-2xl40-deepseek-coder-v2-lite-tp2"].result.layout.kv_bytes_per_token == 221_184
    assert calls["vllm-6156-2xl40-deepseek-coder-v2-lite-tp2"][1].startswith(
        "The model's max seq len (163840) is larger than the maximum number of tokens that can be stored in KV cache")
    # vLLM's own message for the modelled version, as the records quote it
    assert calls["llmd-h100-llama33-70b-fp8-tp1-failed"][1] == (
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the "
        "engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
    assert calls["llmd-h100-qwen3-32b-tp1-32k-failed"][1].startswith(
        "To serve at least one request with the models's max seq len (32000)")
    assert "vllm-project/vllm#33155" in calls["vllm-33155-h100-gpt-oss-120b-v0141-oom"][1]


def test_we_beat_both_baselines_on_available_kv_memory_and_tokens(report):
    for metric in ("available_kv_gib", "kv_cache_tokens"):
        ours = summary(report.errors("ours", metric))
        for baseline in ("seed article", "llm-d"):
            theirs = summary(report.errors(baseline, metric))
            assert ours["median"] < theirs["median"] and ours["p90"] < theirs["p90"]


def test_records_without_a_config_are_listed_not_scored(report):
    skipped = [row for row in report.rows if row.result is None]
    assert len(report.rows) == 47 + 22 + 81  # the two shared files and calibration-mined.jsonl
    assert len(skipped) + len(report.scored()) == 150
    unnamed_gpu = "file-24gb-llama31-8b-v064dev-131k-failed"  # kept for the chunked-prefill budget it prints
    assert all(row.problem.startswith("no config") for row in skipped
               if not row.stand_in and row.case.record_id != unnamed_gpu)
    assert next(row for row in skipped if row.case.record_id == unnamed_gpu).problem.startswith(
        "cannot build a scenario: GPU 'unknown (about 24 GB; not printed)' is not in the catalog")
    assert "vllm-pr12126-h100-llama32-11b-vision-64k-eager" in {row.case.record_id for row in skipped}


def test_stand_in_records_are_scored_outside_the_statistics(report):
    stood_in = {row.case.record_id: row for row in report.scored() if row.stand_in}
    assert set(stood_in) == set(STAND_INS)
    assert not set(stood_in) & {row.case.record_id for row in report.counted()}
    assert all(row.excluded.startswith(f"run on the stand-in config {row.stand_in.preset}: ")
               for row in stood_in.values())
    # the stand-in's weights against what the real checkpoint printed: Neural Magic's FP8-dynamic Qwen2.5-14B
    assert stood_in["file-gb10-qwen25-14b-fp8dyn-util015-failed-v0130nv"].result.budget.weights_bytes / GIB == (
        pytest.approx(15.2227, rel=0.001))


def test_what_the_statistics_leave_out_and_why(report):
    left_out = {row.case.record_id: row.excluded for row in report.scored() if row.excluded and not row.stand_in}
    assert set(left_out) == {"vllm-19996-h100-llama31-8b-eagle", "vllm-5248-2xt4-deepseek-coder-6.7b-tp2",
                             "blog-l4-qwen3-14b-awq-replica", "file-gtx1080-phi15-v064post1",
                             "file-gtx1080-opt125m-v064post1", "file-gtx1080-opt125m-v064post1-nvcc126",
                             "file-4x3090-qwen3-vl-30b-a3b-tp4-64k-v0110",
                             "file-rtx5090-qwen3-14b-awq-util070-16k-v0280",
                             "file-rtx5090-qwen3-14b-awq-util070-32k-v0280",
                             "oci-aqua-a10-llama31-8b-131k-failed-v071"}
    # 0.28 charges another process's start-up allocations to vLLM (device-wide free memory); the source's Qwen3-32B-AWQ
    # printed 'weights and non-torch' 18.62 then 20.04 GiB on the same card and version (only the utilization moved)
    for record_id in ("file-rtx5090-qwen3-14b-awq-util070-16k-v0280", "file-rtx5090-qwen3-14b-awq-util070-32k-v0280"):
        assert left_out[record_id].startswith("the source shows a deterministic term")
        assert "18.62 GiB" in left_out[record_id] and "20.04 GiB" in left_out[record_id]
    # 0.11.0 profiled Qwen3-VL's encoder with a 153,600-token video ("profiled with 1 video items"), not an image
    assert left_out["file-4x3090-qwen3-vl-30b-a3b-tp4-64k-v0110"].startswith("vLLM profiled the vision encoder with a video")
    assert left_out["file-gtx1080-phi15-v064post1"].startswith("0.6.4 counts other processes' memory")
    assert left_out["file-gtx1080-opt125m-v064post1-nvcc126"].startswith("0.6.4 counts other processes' memory")
    assert left_out["vllm-19996-h100-llama31-8b-eagle"].startswith("speculative decoding")
    assert left_out["blog-l4-qwen3-14b-awq-replica"].startswith("same settings as blog-l4-qwen3-14b-awq-single")
    # V0's profile samples 256 dummy prompts at the defaults: 256 x 128,256 fp32 logits x ~9.7 copies = 1.19 GiB
    # beyond the forward; the managed service's log printed 0.22 GiB in all, so it did not run the defaults
    assert "0.22 GiB activation peak holds no sampler run" in left_out["oci-aqua-a10-llama31-8b-131k-failed-v071"]


def test_repeated_settings_are_scored_once_against_the_mean(report):
    rows = {row.case.record_id: row for row in report.scored()}
    single = rows["blog-l4-qwen3-14b-awq-single"]
    predicted = single.predictions["ours"].available_kv_gib
    mean = (9.10 + 10.33) / 2  # what the two start orders printed
    assert single.errors["ours"]["available_kv_gib"] == pytest.approx((predicted - mean) / mean * 100)


def test_stored_bands_are_what_the_benchmark_computes(report):
    stored = json.loads((resources.files("calculator") / "data" / "uncertainty.json").read_text(encoding="utf-8"))
    assert stored == json.loads(json.dumps(bands(report)))


class TestRecordMapping:
    def test_a_local_path_names_its_preset_and_prose_names_none(self):
        assert preset_for("microsoft/phi-4 (local path /opt/tiger/test0/Phi-4)") == "microsoft/phi-4"
        assert preset_for("Llama-2-7B (meta-llama; exact repo not stated)") is None
        assert preset_for("fine-tune of microsoft/phi-4-mini-instruct (local merged model)") is None

    def test_versions_unknown_approximate_or_of_the_other_engine(self):
        assert modelled_version("0.9.1.dev705+g01220ce89", "v1") == ("0.9.1", None)
        assert modelled_version(None, "v1")[0] == "0.13.0"
        assert modelled_version(None, "v0")[0] == "0.6.6"
        assert modelled_version("main@73c8d677 (~0.4.1+)", "v0")[0] == "0.4.1"
        assert modelled_version("0.11.2 (ROCm dev build, V0 engine)", "v0")[0] == "0.6.6"
        assert modelled_version("0.2.4", "v0")[0] == "0.6.6"  # older than anything we model

    def test_printed_memory_keeps_the_catalog_family_and_assumed_defaults_are_used(self):
        cases = {case.record_id: case for case in load_cases(RECORD_FILES[0])}
        case = cases["llmd-h100-mistral-small-3.2-24b-v0110"]
        assert (case.scenario.gpu, case.scenario.gpu_memory_gib) == ("h100-sxm-80gb", 79.19)
        assert estimate(case.scenario).gpu.family == "hopper"
        llava = cases["file-80gb-llava16-mistral-7b-v0102"]
        assert llava.scenario.gpu is None and llava.scenario.gpu_memory_gib == 79.19  # name not printed
        opt = cases["vllm-pr4454-a6000-opt-125m"]
        assert (opt.scenario.gpu_memory_utilization, opt.scenario.block_size) == (0.9, 16)
        assert opt.observed.kv_cache_tokens == 75_937 * 16  # V0: "# GPU blocks" x block_size

    def test_an_oom_after_the_pool_was_printed_is_a_failed_start_and_no_outcome_is_unknown(self):
        cases = {case.record_id: case for case in load_cases(RECORD_FILES[0])}
        assert cases["vllm-16570-4xa100-40g-qwen25-vl-72b-tp4"].observed.started is False
        assert cases["vllm-5248-2xt4-deepseek-coder-6.7b-tp2"].observed.started is None

    def test_a_record_is_mapped_field_by_field(self):
        record = {"id": "x", "engine": "v1", "vllm_version": "0.28.0", "model": "Qwen/Qwen3-14B-AWQ",
                  "dtype": None, "quantization": "awq (checkpoint)", "kv_cache_dtype": "fp8 (flag elided)",
                  "gpu_name": "NVIDIA L40S", "gpu_total_memory_gib": None, "tensor_parallel_size": 1,
                  "pipeline_parallel_size": 2, "gpu_memory_utilization": 0.95, "max_model_len": 1024,
                  "max_num_seqs": 8, "max_num_batched_tokens": 8192, "block_size": 16, "enforce_eager": True,
                  "observed": {"available_kv_cache_gib": 31.02, "startup_outcome": "started"},
                  "annotations": {"startup_ok": True}}
        scenario = calibration_case(record).scenario
        assert scenario == Scenario(model="Qwen/Qwen3-14B-AWQ", gpu="l40s-48gb", vllm_version="0.28.0",
                                    pipeline_parallel_size=2, gpu_memory_utilization=0.95, max_model_len=1024,
                                    max_num_seqs=8, max_num_batched_tokens=8192, block_size=16,
                                    kv_cache_dtype="fp8", enforce_eager=True)


class TestBaselines:
    def test_seed_article_counts_every_head_and_leaves_the_rest_to_the_kv_cache(self):
        # Llama-2-7B fp16 on 80 GiB at 0.9: 72 GiB - 2 B x params; 2 x 32 layers x 4096 x 2 B = 512 KiB a token.
        result = estimate(Scenario(model="meta-llama/Llama-2-7b-chat-hf", gpu_memory_gib=80, gpu=None,
                                   gpu_memory_utilization=0.9, max_model_len=4096, vllm_version="0.11.0"))
        seed = seed_article(result, 0.9)
        weights = result.model.num_params * 2
        assert seed.available_kv_gib == pytest.approx((80 * 0.9 * GIB - weights) / GIB)
        assert seed.kv_cache_tokens == int((80 * 0.9 * GIB - weights) // (512 * 1024))

    def test_llm_d_takes_its_constants_once_per_engine_and_floors_concurrency(self):
        # Qwen3-32B on 2 x 79.18 GiB: 2 x 0.9 x 79.18 - weights - 5.6 (Qwen3 profile) - 2 x 0.6 non-torch.
        result = estimate(Scenario(model="Qwen/Qwen3-32B", gpu=None, gpu_memory_gib=79.18, tensor_parallel_size=2,
                                   gpu_memory_utilization=0.9, max_model_len=16000, vllm_version="0.11.0"))
        prediction = llm_d(result, 0.9)
        per_token = 64 * 2 * 8 * 128 * 2  # every layer, 8 KV heads x 128, bf16, not split by TP
        allocatable = prediction.available_kv_gib * 2 * GIB
        assert allocatable == pytest.approx(2 * 0.9 * 79.18 * GIB - prediction.weights_gib * 2 * GIB
                                            - 5.6 * GIB - 2 * 0.6 * GIB)
        assert prediction.kv_cache_tokens == int(allocatable // per_token)
        assert prediction.max_concurrency == int(allocatable // (per_token * 16000))


def test_records_from_the_docker_image_run_with_flashinfers_sampler():
    cases = {case.record_id: case for path in RECORD_FILES for case in load_cases(path)}
    mistral = cases["llmd-h100-mistral-small-3.2-24b-v0110"]  # llm-d's vllm/vllm-openai v0.11.0 runs
    assert mistral.scenario.install == "docker"
    # 1,024 seqs x 131,072 vocab x (2 B bf16 logits + 3 fp32 copies) + 8,192 tokens x 5,120 hidden x 2 B:
    # 1,879,048,192 + 83,886,080 = 1.83 GiB (printed: 2.12); above the forward pass, 8,192 x (4 x 5,120 + 3 x 32,768)
    # x 2 = 1,946,157,056
    assert estimate(mistral.scenario).budget.activation_bytes == 1_962_934_272
    assert cases["file-8xl40s-qwen3-235b-a22b-fp8-tp8-ep-v0102"].scenario.install == "pip"  # printed torch's 9.7x
