"""The empirical overheads per version era, against the start-up figures their constants come from."""

from __future__ import annotations

import pytest

from calculator import load_model_spec, rules_for
from calculator.engine.overheads import (
    activation_peak_bytes,
    cudagraph_capture_sizes,
    flashinfer_sampler_bytes,
    max_capture_size,
    non_torch_bytes,
)
from calculator.units import GIB


class TestCaptureSizes:
    def test_v0_captures_up_to_max_num_seqs_rounded_up_to_a_size(self):
        assert cudagraph_capture_sizes(256, rules_for("0.6.6")) == (1, 2, 4, *range(8, 257, 8))
        assert cudagraph_capture_sizes(100, rules_for("0.6.6"))[-1] == 104

    def test_v1_before_0_11_always_captures_up_to_512(self):
        assert cudagraph_capture_sizes(8, rules_for("0.10.2")) == (1, 2, 4, *range(8, 513, 8))

    def test_v1_from_0_11_captures_up_to_twice_max_num_seqs(self):
        assert len(cudagraph_capture_sizes(256, rules_for("0.11.0"))) == 3 + 31 + 17
        assert cudagraph_capture_sizes(8, rules_for("0.28.0")) == (1, 2, 4, 8, 16)
        assert cudagraph_capture_sizes(1024, rules_for("0.28.0"), max_num_batched_tokens=64)[-1] == 64

    def test_data_centre_blackwell_captures_up_to_1024_from_0_28(self):
        # vLLM 0.28 config/vllm.py: default_max_graph_size = 1024 if is_device_capability_family(100) else 512
        # (0.27: 512 everywhere); still bounded by 2 x max_num_seqs and max_num_batched_tokens
        b200, rtx = (10, 0), (12, 0)
        assert max_capture_size(rules_for("0.28.0"), b200) == 1024
        assert max_capture_size(rules_for("0.27.0"), b200) == 512
        assert max_capture_size(rules_for("0.32.0"), rtx) == max_capture_size(rules_for("0.32.0"), None) == 512
        sizes = cudagraph_capture_sizes(1024, rules_for("0.28.0"), 16384, max_capture_size(rules_for("0.28.0"), b200))
        assert sizes == (1, 2, 4, *range(8, 256, 8), *range(256, 1025, 16)) and len(sizes) == 3 + 31 + 49
        assert cudagraph_capture_sizes(256, rules_for("0.28.0"), 16384, 1024)[-1] == 512  # 2 x max_num_seqs

    def test_the_blackwell_ceiling_reaches_the_memory_estimate(self):
        from calculator import Scenario, estimate

        def graphs(gpu: str, version: str) -> int:
            return estimate(Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu=gpu,
                                     vllm_version=version)).budget.cudagraph_bytes

        # max_num_seqs 1024 on a 180 GB card: 83 sizes on a B200 from 0.28 against 51 up to 512 on an H200
        assert graphs("b200-180gb", "0.28.0") * 51 == graphs("h200-141gb", "0.28.0") * 83


def sampler_peak_gib(version: str, model: str = "meta-llama/Llama-3.1-8B-Instruct") -> float:
    return activation_peak_bytes(load_model_spec(model), max_num_batched_tokens=8192, max_num_seqs=1024,
                                 activation_dtype_bytes=2, tensor_parallel_size=1, is_last_stage=True,
                                 rules=rules_for(version)) / GIB


def test_the_sampler_peak_follows_the_era():
    assert sampler_peak_gib("0.11.0") == pytest.approx(4.76, rel=0.01)  # llmd-h100-llama31-8b
    assert sampler_peak_gib("0.19.0") == pytest.approx(1024 * 128_256 * 4 * 4.5 / GIB)  # 1.89 printed by llm-d


class TestFlashInferSampler:
    """vLLM 0.11.0's ``_dummy_sampler_run`` on Llama-3.1-8B, 1,024 seqs x 128,256 vocab, 8,192 tokens x 4,096 hidden."""

    def peak_bytes(self, flashinfer: bool) -> int:
        return activation_peak_bytes(load_model_spec("meta-llama/Llama-3.1-8B-Instruct"), max_num_batched_tokens=8192,
                                     max_num_seqs=1024, activation_dtype_bytes=2, tensor_parallel_size=1,
                                     is_last_stage=True, rules=rules_for("0.11.0"), flashinfer_sampler=flashinfer)

    def test_flashinfer_path_holds_the_tensors_read_in_the_source(self):
        # bf16 logits 1024 x 128,256 x 2 = 262,668,288; their fp32 copy, top_k_mask_logits' output and the softmax
        # 3 x 525,336,576 = 1,576,009,728; the dummy forward's hidden states 8,192 x 4,096 x 2 = 67,108,864
        assert self.peak_bytes(True) == 262_668_288 + 1_576_009_728 + 67_108_864  # 1,905,786,880 B = 1.77 GiB

    def test_torch_path_keeps_the_fitted_copies(self):
        # 9.7 fp32 copies (llmd-h100-llama31-8b printed 4.76 GiB): 9.7 x 525,336,576 = 5,095,764,787.2
        assert self.peak_bytes(False) == pytest.approx(5_095_764_787, abs=1)

    def test_a_float32_model_has_no_separate_fp32_copy(self):
        spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
        # 1024 x 128,256 x (4 + 2 x 4) + 8,192 x 4,096 x 4
        assert flashinfer_sampler_bytes(spec, rows=1024, max_num_batched_tokens=8192,
                                        activation_dtype_bytes=4) == 1_576_009_728 + 134_217_728


@pytest.mark.parametrize(("version", "tp", "device", "expected_gib"), [
    # llmd-h100-* TP=1 (four set-ups), file-24gb-qwen3-8b-fp8, file-80gb-llava16-mistral-7b, file-44gb-llama32-1b
    ("0.11.0", 1, "cuda", (0.13 + 0.13 + 0.14 + 0.13 + 0.02 + 0.07 + 0.02) / 7),
    ("0.11.0", 2, "cuda", 0.54),  # llmd-h100-qwen3-32b-tp2-16k
    ("0.11.0", 8, "cuda", 1.74),  # file-8xh200-glm53-flash-tp8
    ("0.19.0", 2, "cuda", 2.07),  # llm-d v0.19.0 report, TP=2
    ("0.6.6", 4, "cuda", 0.38),  # vllm-16570-4xa100-40g-qwen25-vl-72b-tp4 (0.34-0.43)
    ("0.6.6", 1, "rocm", 0.53),  # file-rocm-24gb-opt125m-serverlessllm
    ("0.4.1", 1, "cuda", 0.13 + (0.65 + 1.03 + 1.11 + 1.35) / 4),  # <= 0.6.3 counted what profiling left in use
])
def test_non_torch_memory_per_era(version, tp, device, expected_gib):
    got = non_torch_bytes(tensor_parallel_size=tp, pipeline_parallel_size=1, device=device, rules=rules_for(version))
    assert got / GIB == pytest.approx(expected_gib, abs=0.01)


def test_the_free_memory_drop_of_0_27_also_counts_persistent_memory():
    from calculator.engine.overheads import free_drop_persistent_bytes

    # 0.28 on Qwen3-14B-AWQ holds 0.49 GiB more than weights + activation + non-torch (blog-l40s-qwen3-14b-awq-tuned
    # 0.49, blog-l4-qwen3-14b-awq-pp2 0.70, blog-l4-qwen3-14b-awq-single/-replica 0.38, against the totals vLLM prints
    # for the L40S and the L4): the median, on compiled runs.
    def persistent(version, *, enforce_eager=False, device="cuda"):
        return free_drop_persistent_bytes(rules_for(version), device=device, enforce_eager=enforce_eager,
                                          penalty_state=160_444_416)
    assert persistent("0.26.0") == 0  # 0.9.1-0.26 sum their terms; nothing persistent is measured
    assert persistent("0.27.1") == int(0.49 * GIB)
    assert persistent("0.27.1", device="cpu") == 0
    # --enforce-eager: only the runner's penalty tensors (file-turing24g-qwen25-1.5b-fp16-eager-4k-v0281rc1 printed
    # 3.25 GiB consumed - 2.98 weights = 0.27 GiB, no room for the compiled runs' 0.49 beside 0.15 of penalties)
    assert persistent("0.28.0", enforce_eager=True) == 160_444_416
    # the non-torch term itself no longer carries it
    assert non_torch_bytes(tensor_parallel_size=1, pipeline_parallel_size=1, device="cuda",
                           rules=rules_for("0.27.1")) / GIB == pytest.approx(0.26, abs=0.005)


def test_an_eager_model_runner_v2_start_holds_its_penalty_state_on_the_last_stage_only():
    from calculator import Scenario, estimate

    # Qwen3-14B on 0.28 runs Model Runner V2 (cudagraph_budget.py); 256 seqs x 151,936 vocabulary: int32
    # [256, 151,936] = 155,582,464 B and [256, 4,748] = 4,861,952 B (penalties.py)
    compiled = Scenario(model="Qwen/Qwen3-14B", gpu="l40s-48gb", vllm_version="0.28.0")
    eager = compiled.replace(enforce_eager=True)
    assert estimate(compiled).budget.non_torch_bytes - estimate(eager).budget.non_torch_bytes == (
        int(0.49 * GIB) - (155_582_464 + 4_861_952))
    # PP 2: the sampler, and its penalty tensors, live on the last stage (model_runner.py load_model)
    first, last = estimate(eager.replace(pipeline_parallel_size=2)).budgets_per_stage
    assert last.non_torch_bytes - first.non_torch_bytes == 155_582_464 + 4_861_952


def test_model_runner_v2_holds_a_penalty_bin_count_per_sequence_and_token():
    from calculator.engine.overheads import penalty_state_bytes

    # penalties.py (0.28): output_bin_counts int32 [256, 151,936] = 155,582,464 B and prompt_bin_mask int32
    # [256, 151,936 / 32 = 4,748] = 4,861,952 B (Qwen3's vocabulary at the default 256 seqs)
    assert penalty_state_bytes(max_num_seqs=256, vocab_size=151_936) == 155_582_464 + 4_861_952
    # the mask rounds the vocabulary up to whole 32-bit words: 32,001 tokens -> 1,001 words
    assert penalty_state_bytes(max_num_seqs=8, vocab_size=32_001) == 4 * 8 * 32_001 + 4 * 8 * 1_001


def test_an_integrated_gpu_adds_the_hosts_growth_and_starts_from_the_hosts_use():
    from calculator.engine.overheads import cuda_context_bytes

    discrete = non_torch_bytes(tensor_parallel_size=1, pipeline_parallel_size=1, device="cuda",
                               rules=rules_for("0.13.0"))
    unified = non_torch_bytes(tensor_parallel_size=1, pipeline_parallel_size=1, device="cuda",
                              rules=rules_for("0.13.0"), unified_memory=True)
    # the median of four GB10 start-ups: 0.86, 1.89, 2.79, 4.38 GiB beyond our discrete-GPU terms
    assert (unified - discrete) / GIB == pytest.approx((1.89 + 2.79) / 2, abs=0.05)
    # file-gb10-qwen38-27b-786k-v0271: "Free memory on device (112.26/119.63 GiB) on startup"
    context = cuda_context_bytes(tensor_parallel_size=1, pipeline_parallel_size=1, device="cuda", unified_memory=True)
    assert context / GIB == pytest.approx(119.63 - 112.26, abs=0.005)


def test_up_to_0_6_3_the_communicators_are_made_after_the_snapshot_and_count_against_the_budget():
    from calculator.engine.overheads import cuda_context_bytes

    # vllm/worker/worker.py (0.6.3) Worker.init_device reads init_gpu_memory, then calls
    # init_worker_distributed_environment: at TP 8 the communicators (0.25 GiB, our assumption) are inside
    # peak_memory. file-mi300x-llama31-405b-tp8-131k-v063dev and file-mi300x-llama2-7b-tp8-v063dev, 8 x MI300X
    # (xGMI, ROCm: no custom all-reduce), predicted 11.9 % and 2.1 % high with them outside the budget.
    def split(version):
        rules = rules_for(version)
        context = cuda_context_bytes(tensor_parallel_size=8, pipeline_parallel_size=1, device="rocm",
                                     interconnect="xgmi", rules=rules)
        non_torch = non_torch_bytes(tensor_parallel_size=8, pipeline_parallel_size=1, device="rocm",
                                    interconnect="xgmi", nvls=False, rules=rules)
        return round(context / GIB, 3), round(non_torch / GIB, 3)

    # the distributed set-up: the communicators 0.25 GiB and the custom all-reduce's two 8 MiB IPC buffers and
    # 8 MiB rank_data (our rule builds them on xGMI; 0.6.3's custom_all_reduce.py builds none on AMD: left open)
    setup = 0.25 + 3 * 8 / 1024
    # 0.6.3: the bare context only; in the budget: TP = 1's 0.13 + 1.035 held after profiling + ROCm's 0.40 +
    # xGMI's P2P buffers 0.25 + the set-up
    assert split("0.6.3") == (0.5, round(0.13 + 1.035 + 0.40 + 0.25 + setup, 3))
    # 0.6.4+: the baseline is taken after them, so they sit in the (1 - utilization) slack with the context
    assert split("0.6.4") == (round(0.5 + setup, 3), round(0.13 + 0.40 + 0.25, 3))
    # at TP = 1 nothing moves
    assert cuda_context_bytes(tensor_parallel_size=1, pipeline_parallel_size=1, device="rocm",
                              rules=rules_for("0.6.3")) / GIB == pytest.approx(0.5)
