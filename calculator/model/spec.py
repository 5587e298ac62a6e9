"""The vocabulary of model facts: a frozen, validated description of one checkpoint.

``architecture.py`` builds a ``ModelSpec`` from a ``config.json``; everything else only reads it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

AttentionKind = Literal["full", "sliding_window", "chunked_local", "mla", "mamba"]
WeightRole = Literal[
    "embedding", "position_embedding", "lm_head", "attention", "mlp", "expert", "router",
    "norm", "vision", "projector", "mtp", "scale", "other",
]
TpSharding = Literal["column", "row", "replicated", "vocab", "expert"]
# NOTE: "all" = resident on every pipeline stage; vLLM builds multimodal encoders unconditionally (no PPMissingLayer).
Placement = Literal["first", "last", "layers", "all"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LayerAttention(_Frozen):
    """What one decoder layer keeps in the KV cache (vLLM's per-layer ``KVCacheSpec``)."""

    kind: AttentionKind
    num_kv_heads: int = Field(ge=0)  # whole model, before TP
    head_size: int = Field(ge=0)  # K (or the MLA latent: kv_lora_rank + qk_rope_head_dim)
    head_size_v: int = Field(ge=0)  # V; 0 for MLA, whose latent serves both
    sliding_window: int | None = Field(None, ge=1)
    attention_chunk_size: int | None = Field(None, ge=1)
    # kind == "mamba" (Mamba2, gated-delta-net linear attention, LFM2's short convolutions): the recurrent state,
    # whole model, before TP. conv state: conv_dim x conv_len in the model dtype; temporal state: heads x a x b
    # (MambaStateShapeCalculator), None for a short convolution, which keeps only its conv state.
    mamba_conv_dim: int | None = Field(None, ge=1)
    mamba_conv_len: int | None = Field(None, ge=0)
    mamba_temporal_shape: tuple[int, int, int] | None = None
    # Mamba2: its B/C groups, whose conv channels each TP rank replicates when they do not split evenly
    # (extra_groups_for_head_shards).
    mamba_n_groups: int | None = Field(None, ge=1)
    # The temporal state's dtype when the model fixes it (Nemotron-H float32, Qwen3.5's mamba_ssm_dtype); None = as
    # the conv state (vLLM's mamba_ssm_cache_dtype "auto").
    mamba_ssm_dtype: Literal["float32", "bfloat16", "float16"] | None = None
    # A layer with neither attention nor state (Nemotron-H's MLP and MoE layers, '-' and 'E' in its pattern).
    stateless: bool = False
    # Falcon-H1: a Mamba2 mixer runs beside this layer's attention; vLLM gives it a cache (a MambaSpec) of its own.
    parallel_state: LayerAttention | None = None
    # NOTE: a layer that reads an earlier layer's cache allocates none (vLLM's kv_sharing_target_layer_name;
    # Gemma 4's last num_kv_shared_layers).
    kv_sharing_target: int | None = Field(None, ge=0)
    # kind == "mla" with DeepSeek-V3.2-style sparse attention: bytes per token of the indexer's key cache beside the
    # latent (DeepseekV32IndexerCache: index_head_dim fp8 values + one fp32 scale per 128, whatever the KV dtype).
    indexer_bytes_per_token: int = Field(0, ge=0)


class MlaSpec(_Frozen):
    """DeepSeek-style multi-head latent attention fields from the config."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None
    # DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): each query attends to the index_topk earlier tokens its
    # indexer (index_n_heads heads of index_head_dim) scores highest
    index_topk: int | None = None
    index_n_heads: int = 0
    index_head_dim: int = 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def latent_size(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim


class MoeSpec(_Frozen):
    """Mixture-of-experts shape; the counts are per MoE layer."""

    num_experts: int = Field(ge=1)
    experts_per_token: int = Field(ge=1)
    expert_intermediate_size: int = Field(ge=1)
    num_shared_experts: int = Field(0, ge=0)
    shared_expert_intermediate_size: int = Field(0, ge=0)
    num_moe_layers: int = Field(ge=0)


class QuantizationSpec(_Frozen):
    """Weight quantization as read from ``quantization_config`` or ``--quantization``."""

    method: str  # normalised vLLM name: awq, gptq, fp8, fbgemm_fp8, compressed-tensors, mxfp4, modelopt_fp4, bitsandbytes
    weight_bits: float = Field(gt=0)  # bits per quantized weight element, before scales
    group_size: int | None = None  # AWQ/GPTQ/NVFP4/MXFP4 group; None = per channel or per tensor
    has_zeros: bool = False  # AWQ/GPTQ asymmetric zero points
    has_g_idx: bool = False  # GPTQ act-order (desc_act) keeps a g_idx per input channel
    scale_granularity: Literal["tensor", "channel", "block", "group", "none"] = "none"
    weight_block_size: tuple[int, int] | None = None  # FP8 block scales (e.g. 128x128)
    scale_bytes: int = 2  # bytes per scale element (fp16 AWQ/GPTQ, fp32 FP8, 1 for fp8/e8m0 micro-scales)
    modules_to_not_convert: tuple[str, ...] = ()
    from_checkpoint: bool = True


class WeightTensor(_Frozen):
    """One kind of tensor in the checkpoint, repeated ``count`` times in each layer it lives in."""

    name: str
    shape: tuple[int, ...]  # logical shape, output features first for linears
    role: WeightRole
    tp: TpSharding = "replicated"
    placement: Placement = "layers"
    layers: tuple[int, int] | None = None  # [first, last) decoder layers; None unless placement == "layers"
    count: int = Field(1, ge=1)  # e.g. experts stacked in one layer
    quantizable: bool = False  # a Linear weight that weight-quantization methods convert
    loaded: bool = True  # False for checkpoint tensors vLLM skips by default (DeepSeek MTP layers)
    dtype_bytes: float | None = None  # fixed storage size (scales, packed blocks); None = the model dtype

    @computed_field  # type: ignore[prop-decorator]
    @property
    def numel(self) -> int:
        """Elements of one copy of this tensor."""
        total = 1
        for dim in self.shape:
            total *= dim
        return total

    @computed_field  # type: ignore[prop-decorator]
    @property
    def num_layers(self) -> int:
        if self.layers is None:
            return 1
        return self.layers[1] - self.layers[0]


class ModelSpec(_Frozen):
    """Everything the engine needs to know about a model, read once from its config."""

    model_id: str
    architecture: str
    model_type: str
    known_architecture: bool = True
    vocab_size: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    intermediate_size: int = Field(ge=0)
    num_hidden_layers: int = Field(ge=1)
    num_attention_heads: int = Field(ge=1)
    num_key_value_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    layers: tuple[LayerAttention, ...]
    mla: MlaSpec | None = None
    moe: MoeSpec | None = None
    tie_word_embeddings: bool = False
    max_position_embeddings: int | None = None
    derived_max_model_len: int = Field(ge=1)  # what vLLM uses when --max-model-len is not given
    config_dtype: str | None = None  # dtype/torch_dtype from the config, normalised (bfloat16, float16, float32)
    quantization: QuantizationSpec | None = None
    weights: tuple[WeightTensor, ...] = ()
    checkpoint_num_params: int | None = None  # elements stored in the checkpoint as the Hub counts them
    is_multimodal: bool = False
    warnings: tuple[str, ...] = ()
    # The config.json dict the spec was read from, for --hf-overrides (``hf_overrides.py``); not part of a dump.
    hf_config: dict[str, Any] | None = Field(None, exclude=True, repr=False)

    def __hash__(self) -> int:
        # NOTE: specs key the engine's caches; pydantic's default hash walks every nested field (slow), and
        # equal specs always share these fields, so this stays consistent with __eq__. Read from __dict__: every
        # estimate hashes the spec, and pydantic's __getattr__ puts each attribute read on CPython's slower path.
        fields = self.__dict__
        return hash((fields["model_id"], fields["architecture"], fields["num_hidden_layers"], fields["hidden_size"],
                     fields["vocab_size"]))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def num_params(self) -> int:
        """Parameters of the model as published (every tensor of the checkpoint, unquantized shapes)."""
        return sum(w.numel * w.count * w.num_layers for w in self.weights if w.role != "scale")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def num_attention_layers(self) -> int:
        return sum(1 for layer in self.layers if layer.kind != "mamba" and not layer.stateless)
