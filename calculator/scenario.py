"""The input of one estimate: a model on some GPUs with vLLM settings, named as ``vllm serve`` names them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .engine.expert_parallel import All2AllBackend
from .engine.vllm_versions import LATEST_VERSION, Device, Install
from .gpus import MAX_GPU_MEMORY_GIB, MIN_GPU_MEMORY_GIB, Interconnect
from .limits import (
    MAX_BLOCK_SIZE_TOKENS,
    MAX_CONTEXT_TOKENS,
    MAX_KV_CACHE_MEMORY_BYTES,
    MAX_LORAS,
    MAX_MODEL_REFERENCE_CHARS,
    MAX_NAME_CHARS,
    MAX_NUM_GPU_BLOCKS,
    MAX_NUM_SEQS,
    MAX_PARALLEL_SIZE,
    MAX_SPECULATIVE_TOKENS,
)
from .model.hf_overrides import hf_overrides_text, parse_hf_overrides

DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DEFAULT_GPU = "h100-sxm-80gb"
_MAX_OPTION_CHARS = 64  # dtype, kv_cache_dtype, quantization and version names are short words
MAX_CAPTURE_SIZES = 1024  # vLLM's default list has 67 sizes at most; a longer one is not a launch line
# vLLM's --speculative-config "method" values the plan models (vllm/config/speculative.py SpeculativeMethod; the
# per-model MTP names such as "deepseek_mtp" are read as "mtp").
SpeculativeMethod = Literal["ngram", "draft_model", "eagle", "eagle3", "mtp"]
CaptureSize = Annotated[int, Field(ge=1, le=MAX_CONTEXT_TOKENS)]


class Scenario(BaseModel):
    """A frozen deployment description. ``None`` means "vLLM's default for this version and GPU"."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(DEFAULT_MODEL, min_length=1, max_length=MAX_MODEL_REFERENCE_CHARS)
    gpu: str | None = Field(DEFAULT_GPU, max_length=MAX_NAME_CHARS)  # catalog key, name or nvidia-smi alias
    gpu_memory_gib: float | None = Field(None, ge=MIN_GPU_MEMORY_GIB, lt=MAX_GPU_MEMORY_GIB)  # custom memory; overrides the catalog's
    device: Device | None = None  # None: the GPU's platform (cuda or rocm)
    interconnect: Interconnect | None = None  # how the GPUs talk (NCCL's buffers); None: the card's usual link
    install: Install = "pip"  # "docker": the vllm/vllm-openai image, with FlashInfer (its sampler in 0.10-0.11.0)
    tensor_parallel_size: int = Field(1, ge=1, le=MAX_PARALLEL_SIZE)
    pipeline_parallel_size: int = Field(1, ge=1, le=MAX_PARALLEL_SIZE)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    max_model_len: int | None = Field(None, ge=1, le=MAX_CONTEXT_TOKENS)
    max_num_seqs: int | None = Field(None, ge=1, le=MAX_NUM_SEQS)
    max_num_batched_tokens: int | None = Field(None, ge=1, le=MAX_CONTEXT_TOKENS)
    block_size: int | None = Field(None, ge=1, le=MAX_BLOCK_SIZE_TOKENS)
    dtype: str = Field("auto", max_length=_MAX_OPTION_CHARS)
    kv_cache_dtype: str = Field("auto", max_length=_MAX_OPTION_CHARS)
    quantization: str | None = Field(None, max_length=_MAX_OPTION_CHARS)
    kv_cache_memory_bytes: int | None = Field(None, ge=0, le=MAX_KV_CACHE_MEMORY_BYTES)
    num_gpu_blocks_override: int | None = Field(None, ge=1, le=MAX_NUM_GPU_BLOCKS)
    enforce_eager: bool = False
    enable_extensible_kv_cache: bool | None = None
    async_scheduling: bool | None = None
    vllm_version: str = Field(LATEST_VERSION, max_length=_MAX_OPTION_CHARS)
    other_processes_memory_gib: float = Field(0.0, ge=0, lt=MAX_GPU_MEMORY_GIB)
    # Engines (replicas) of tp x pp GPUs each (--data-parallel-size); MoE experts shard over tp x dp ranks.
    data_parallel_size: int = Field(1, ge=1, le=1024)
    enable_expert_parallel: bool = False  # whole experts per rank instead of a slice of every expert
    all2all_backend: All2AllBackend | None = None  # --all2all-backend (EP with DP); None: vLLM's allgather_reducescatter
    # EPLB (--enable-eplb; --eplb-config '{"num_redundant_experts": R}', --num-redundant-experts before 0.12): R extra
    # physical experts spread over the EP ranks, and the balancer's state (engine/eplb.py).
    enable_eplb: bool = False
    num_redundant_experts: int = Field(0, ge=0, le=100_000)
    cpu_offload_gb: float = Field(0.0, ge=0, le=100_000)  # weights per GPU kept in pinned CPU memory (UVA)
    enable_prefix_caching: bool | None = None  # None: the version's default (on in V1)
    # --enable-chunked-prefill / --no-enable-chunked-prefill; None: the version's default (V0: on only past 32K tokens
    # on a GPU; V1: always, and from 0.12 it may be turned off)
    enable_chunked_prefill: bool | None = None
    # The batch sizes vLLM captures CUDA graphs for (--cudagraph-capture-sizes); None: the version's default list.
    cudagraph_capture_sizes: tuple[CaptureSize, ...] | None = Field(None, min_length=1, max_length=MAX_CAPTURE_SIZES)
    # Overhead the estimate missed, back-solved from a running server (live page "Calibrate"); may be negative.
    overhead_adjustment_gib: float = Field(0.0, ge=-1000, le=1000)
    # LoRA adapters (--enable-lora ...): slots of max_lora_rank on every linear layer, allocated before the KV cache.
    enable_lora: bool = False
    max_loras: int = Field(1, ge=1, le=MAX_LORAS)
    max_lora_rank: int = Field(16, ge=1, le=512)  # vLLM accepts 1, 8, 16, 32, 64, 128, 256, 320, 512
    max_cpu_loras: int | None = Field(None, ge=1, le=MAX_LORAS)  # adapters cached in CPU memory: no GPU memory
    lora_dtype: Literal["auto", "float16", "bfloat16"] = "auto"
    fully_sharded_loras: bool = False
    # Speculative decoding (--speculative-config JSON): its method, model and num_speculative_tokens keys.
    speculative_method: SpeculativeMethod | None = None
    speculative_model: str | None = Field(None, min_length=1, max_length=MAX_MODEL_REFERENCE_CHARS)
    num_speculative_tokens: int | None = Field(None, ge=1, le=MAX_SPECULATIVE_TOKENS)
    draft_tensor_parallel_size: int | None = Field(None, ge=1, le=MAX_PARALLEL_SIZE)
    # The planner's assumption, not a vLLM flag: the chance each draft token is accepted (None: the method's
    # typical value, calculator.engine.speculative.TYPICAL_ACCEPTANCE).
    speculative_acceptance_rate: float | None = Field(None, ge=0, lt=1)
    # --hf-overrides: a JSON object applied to the model's config.json before the spec is built
    # (``model/hf_overrides.py``), held as canonical JSON text so the Scenario stays hashable.
    hf_overrides: str | None = None

    @field_validator("hf_overrides", mode="before")
    @classmethod
    def _canonical_overrides(cls, value: object) -> str | None:
        if value is None:
            return None
        overrides = parse_hf_overrides(value)  # type: ignore[arg-type]
        return hf_overrides_text(overrides) if overrides else None

    @model_validator(mode="after")
    def _has_memory(self) -> Scenario:
        if self.gpu is None and self.gpu_memory_gib is None and self.device != "cpu":
            raise ValueError("give a GPU from the catalog or its memory (gpu_memory_gib)")
        if self.speculative_method is None and (self.speculative_model or self.num_speculative_tokens):
            raise ValueError("a speculative model or num_speculative_tokens needs a speculative method")
        return self

    def replace(self, **changes: object) -> Scenario:
        """A copy with some fields changed, validated again."""
        # NOTE: the field values themselves, not model_dump()'s copies of them (a third of the cost of each point of
        # a sweep); every field is a plain value, so validation sees the same input either way.
        return Scenario.model_validate({**self.__dict__, **changes})


def capture_sizes_from_text(text: str) -> tuple[int, ...]:
    """CUDA-graph capture sizes from ``"1 2 4 8"`` or ``"1,2,4,8"`` (a widget, a link), sorted, without repeats."""
    words = text.replace(",", " ").split()
    if not words or not all(word.isdigit() and 0 < int(word) <= MAX_CONTEXT_TOKENS for word in words):
        raise ValueError(f"not a list of batch sizes (1 to {MAX_CONTEXT_TOKENS:,}): {text[:60]!r}")
    if len(words) > MAX_CAPTURE_SIZES:
        raise ValueError(f"more than {MAX_CAPTURE_SIZES:,} sizes")
    return tuple(sorted({int(word) for word in words}))
