"""Speculative decoding (``--speculative-config``): the proposer's weights and KV layers, and the tokens a step yields.

Pure arithmetic, read from vLLM 0.32.0's source (vllm/config/speculative.py, vllm/v1/spec_decode/):

* ``draft_model``: a second, smaller checkpoint, loaded whole at ``draft_tensor_parallel_size`` (the target's TP
  unless 1 is given; any other value is refused, ``_verify_and_get_draft_tp``), in the target's dtype, sharing
  nothing with the target (``DraftModelProposer._maybe_share_embeddings`` is a no-op). At draft TP 1 under a
  larger target TP every rank runs the whole drafter (Model Runner V2, 0.32's default on GPUs: its
  ``standalone_ar`` speculator builds the draft with ``draft_parallel_config``), so each rank's KV pages hold all
  of the draft's KV heads. The V1 runner refuses that layout (``DraftModelProposer._raise_if_draft_tp_mismatch``).
* ``eagle`` / ``eagle3``: a head of one decoder layer of the target's width. EAGLE adds ``fc`` (2 x hidden ->
  hidden); EAGLE-3 feeds its attention 2 x hidden and fuses three hidden states (``fc``: 3 x hidden -> hidden) and
  keeps its own LM head over a smaller draft vocabulary (32,000 in the published Llama-3.1 heads). Both share the
  target's ``embed_tokens`` (``_maybe_share_embeddings``: "EAGLE model without its own embed_tokens").
* ``mtp``: the checkpoint's own multi-token-prediction layers (DeepSeek-V3/R1 ``num_nextn_predict_layers``,
  Qwen3-Next ``mtp_num_hidden_layers``, GLM-4.5), which vLLM skips unless this is on; they share the target's
  embedding and LM head ("Detected MTP model").
* ``ngram``: prompt look-up on the CPU: no GPU memory.

Which releases run which method is per version (``VersionRules.v1_speculative_methods`` and
``draft_model_refusal``, applied in ``engine_support``): 0.8 - 0.9 fall back to V0 for the methods their V1 lacked, and
0.10.0 - 0.14.1 refuse a draft model. The shapes below are 0.32's for every release.

Every proposer with layers registers their attention in the same KV-cache pool as the target's (the runner collects
``{layer_name: spec}`` including the drafter's, ``UniformTypeKVCacheSpecs``), so a block holds the pages of both.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ..errors import InvalidInput
from ..model.spec import LayerAttention, ModelSpec, QuantizationSpec, WeightTensor
from ..model.weights import weight_bytes_per_rank
from .overheads import forward_activation_bytes

EAGLE3_DRAFT_VOCAB = 32_000  # draft_vocab_size of yuhuili/EAGLE3-LLaMA3.1-Instruct-8B and the heads built like it
# The chance each proposed token is accepted, per method, when the user gives none (the planner's assumption; the
# real rate depends on the workload and is what vllm:spec_decode_num_accepted_tokens / num_draft_tokens measures).
TYPICAL_ACCEPTANCE: dict[str, tuple[float, str]] = {
    "ngram": (0.3, "prompt look-up accepts much on input-grounded tasks (summaries, code edits) and little in open "
                   "chat; vLLM's speculative-decoding blog (2024-10-17) measured up to 2.8x on CNN/DailyMail"),
    "draft_model": (0.7, "Leviathan et al. 2023 (arXiv 2211.17192) Table 3: alpha 0.52 to 0.88 across "
                         "target/draft pairs"),
    "eagle": (0.75, "Li et al. 2024, EAGLE (arXiv 2401.15077): acceptance rate alpha about 0.75 for LLaMA2-Chat 7B "
                    "on MT-bench"),
    "eagle3": (0.8, "Li et al. 2025, EAGLE-3 (arXiv 2503.01840): about 0.8 per position on MT-bench for "
                    "LLaMA-3.1-8B"),
    "mtp": (0.85, "DeepSeek-V3 technical report (arXiv 2412.19437) section 5.4.3: the second token's acceptance "
                  "rate is 85-90%"),
}
DEFAULT_SPECULATIVE_TOKENS = {"ngram": 3, "draft_model": 3, "eagle": 3, "eagle3": 3, "mtp": 1}
# model_type of the families whose checkpoints carry MTP layers vLLM can run (vllm/config/speculative.py MTPModelTypes)
MTP_MODEL_TYPES = frozenset({"deepseek_v3", "deepseek_v32", "qwen3_next", "qwen3_5", "qwen3_5_moe", "glm4_moe",
                             "glm4_moe_lite", "mimo", "mimo_v2", "ernie4_5_moe", "longcat_flash"})
_SHARED_WITH_TARGET = ("embed_tokens.weight", "shared_head.head.weight")  # MTP: vLLM shares both


class Proposer(BaseModel):
    """What the proposer adds on one GPU, and the work of one proposal pass."""

    model_config = ConfigDict(frozen=True)
    method: str
    num_speculative_tokens: int
    acceptance_rate: float
    weights_bytes: int  # on one rank
    layers: tuple[LayerAttention, ...]  # attention layers whose KV joins the target's pool
    spec: ModelSpec | None = None  # the proposer as a model (its step cost); None for n-gram
    tensor_parallel_size: int = 1
    note: str = ""  # what the plan assumed about the proposer


def tokens_per_step(num_speculative_tokens: int, acceptance_rate: float) -> float:
    """Expected tokens a verification step yields for one request: the accepted prefix of ``k`` proposals plus the
    target's own token, ``(1 - a^(k+1)) / (1 - a)`` (Leviathan et al. 2023, eq. 1, tokens accepted independently
    with probability ``a``)."""
    k, a = num_speculative_tokens, acceptance_rate
    if k <= 0:
        return 1.0
    return (1 - a ** (k + 1)) / (1 - a)


def mtp_layers_in(spec: ModelSpec) -> int:
    """The checkpoint's MTP layers that vLLM skips by default (their tensors sit after the main stack)."""
    ends = {t.layers[1] for t in spec.weights if not t.loaded and t.layers and t.layers[0] >= spec.num_hidden_layers}
    return max(ends, default=spec.num_hidden_layers) - spec.num_hidden_layers


def _head_spec(spec: ModelSpec, tensors: list[WeightTensor], layers: int, name: str,
               quantization: QuantizationSpec | None) -> ModelSpec:
    return spec.model_copy(update={"model_id": f"{spec.model_id} ({name})", "weights": tuple(tensors),
                                   "num_hidden_layers": layers, "layers": (spec.layers[-1],) * layers,
                                   "quantization": quantization, "tie_word_embeddings": False, "moe": None})


def _rebased(tensor: WeightTensor, first: int | None = None, *, in_features: int | None = None) -> WeightTensor:
    """``tensor`` loaded and moved to start at layer 0 (``first``: where its layers start; None: one layer of it),
    optionally with another input width."""
    low, high = tensor.layers or (0, 1)
    span = (low - first, high - first) if first is not None else (0, 1)
    shape = (*tensor.shape[:-1], in_features) if in_features else tensor.shape
    return tensor.model_copy(update={"layers": span, "loaded": True, "shape": shape})


def _last_layer_tensors(spec: ModelSpec) -> list[WeightTensor]:
    last = spec.num_hidden_layers - 1
    return [t for t in spec.weights if t.loaded and t.layers and t.layers[0] <= last < t.layers[1]]


def _eagle_head(spec: ModelSpec, method: str) -> tuple[ModelSpec, str]:
    """One decoder layer of the target's width (its last layer's tensors, in the model dtype) and EAGLE's fc."""
    hidden = spec.hidden_size
    layer = [_rebased(t, in_features=2 * hidden
                      if method == "eagle3" and t.name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight"))
                      else None) for t in _last_layer_tensors(spec)]
    fused = 3 if method == "eagle3" else 2
    extra = [WeightTensor(name="fc.weight", shape=(hidden, fused * hidden), role="other", layers=(0, 1))]
    note = (f"{method} head: one decoder layer of the target's width, fc {fused} x hidden -> hidden, the target's "
            "embedding shared")
    if method == "eagle3":
        extra.append(WeightTensor(name="lm_head.weight", shape=(EAGLE3_DRAFT_VOCAB, hidden), role="lm_head",
                                  tp="vocab", placement="last"))
        note += f", its own LM head over {EAGLE3_DRAFT_VOCAB:,} draft tokens"
    return _head_spec(spec, [*layer, *extra], 1, method, None), note


def _mtp_head(spec: ModelSpec, quantization: QuantizationSpec | None) -> tuple[ModelSpec, str]:
    count = mtp_layers_in(spec)
    if not count and spec.model_type not in MTP_MODEL_TYPES:
        raise InvalidInput(f"speculative method mtp runs the checkpoint's own multi-token-prediction layers; "
                           f"{spec.model_id} ({spec.model_type}) has none: use eagle, eagle3, draft_model or ngram")
    if count:
        first = spec.num_hidden_layers
        tensors = [_rebased(t, first) for t in spec.weights
                   if not t.loaded and t.layers and t.layers[0] >= first and not t.name.endswith(_SHARED_WITH_TARGET)]
        return (_head_spec(spec, tensors, count, "MTP", quantization),
                f"{count} MTP layer(s) from the checkpoint, the embedding and LM head shared with the target")
    hidden = spec.hidden_size
    # NOTE: Qwen3-Next (mtp_num_hidden_layers) and GLM-4.5 (num_nextn_predict_layers) publish one MTP layer shaped
    # like a decoder layer; the inventory lists DeepSeek's alone, so the others are built from the last layer.
    # NOTE: around the layer both keep three norms of the hidden width: the two before eh_proj / fc and the last one
    # (glm4_moe_mtp.py enorm, hnorm, shared_head.norm; qwen3_next_mtp.py pre_fc_norm_hidden, pre_fc_norm_embedding,
    # norm).
    tensors = [*(_rebased(t) for t in _last_layer_tensors(spec)),
               WeightTensor(name="eh_proj.weight", shape=(hidden, 2 * hidden), role="mtp", layers=(0, 1)),
               WeightTensor(name="mtp_norms.weight", shape=(hidden,), role="norm", layers=(0, 1), count=3)]
    return (_head_spec(spec, tensors, 1, "MTP", quantization),
            "one MTP layer assumed, shaped like the last decoder layer (the inventory does not list this model's)")


def proposer(spec: ModelSpec, *, method: str, num_speculative_tokens: int | None, acceptance_rate: float | None,
             draft_spec: ModelSpec | None, tensor_parallel_size: int, draft_tensor_parallel_size: int | None,
             dtype_bytes: int, quantization: QuantizationSpec | None) -> Proposer:
    """The proposer ``method`` loads next to ``spec`` on each of ``tensor_parallel_size`` ranks."""
    k = num_speculative_tokens or DEFAULT_SPECULATIVE_TOKENS[method]
    rate = TYPICAL_ACCEPTANCE[method][0] if acceptance_rate is None else acceptance_rate
    tp = tensor_parallel_size
    if method == "ngram":
        return Proposer(method=method, num_speculative_tokens=k, acceptance_rate=rate, weights_bytes=0, layers=(),
                        note="n-gram prompt look-up runs on the CPU: no GPU memory")
    if method == "draft_model":
        if draft_spec is None:
            raise InvalidInput("speculative method draft_model needs a draft model (the config's \"model\")")
        draft_tp = draft_tensor_parallel_size or tp
        if draft_tp not in (1, tp):
            raise InvalidInput(f"speculative_draft_tensor_parallel_size={draft_tp} cannot be other value than 1 or "
                               "target model tensor_parallel_size")
        if draft_spec.vocab_size != spec.vocab_size:
            raise InvalidInput(f"the draft model's vocabulary ({draft_spec.vocab_size:,}) differs from the "
                               f"target's ({spec.vocab_size:,}): vLLM verifies draft tokens by id, so they must "
                               "share one tokenizer")
        head, note, layers = draft_spec, f"draft model {draft_spec.model_id} at TP {draft_tp}", draft_spec.layers
        if draft_tp != tp:
            # NOTE: the shared pool divides every layer's KV heads by the target's TP; a drafter at TP 1 keeps all
            # of its heads on each rank.
            layers = tuple(layer.model_copy(update={"num_kv_heads": layer.num_kv_heads * tp}) for layer in layers)
    else:
        draft_tp = tp
        if method in ("eagle", "eagle3"):
            head, note = _eagle_head(spec, method)
        else:
            head, note = _mtp_head(spec, quantization)
        layers = head.layers
    weights = weight_bytes_per_rank(head, dtype_bytes=dtype_bytes, tensor_parallel_size=draft_tp,
                                    quantization=head.quantization).busiest_stage_bytes
    return Proposer(method=method, num_speculative_tokens=k, acceptance_rate=rate, weights_bytes=weights,
                    layers=tuple(layers), spec=head, tensor_parallel_size=draft_tp, note=note)


def with_proposer_layers(spec: ModelSpec, extra: tuple[LayerAttention, ...]) -> ModelSpec:
    """``spec`` with the proposer's attention layers after its own: the KV pool the runner sizes holds both."""
    if not extra:
        return spec
    return spec.model_copy(update={"layers": (*spec.layers, *extra),
                                   "num_hidden_layers": spec.num_hidden_layers + len(extra)})


def drafter_activation_bytes(drafter: Proposer, target: ModelSpec, *, max_num_batched_tokens: int,
                             activation_dtype_bytes: int) -> int:
    """Peak of the drafter's dummy run in the profiling pass: vLLM 0.32 runs it after the target's forward over the
    same tokens (V1 ``_dummy_run``: ``drafter.dummy_run(num_tokens)``; V2: ``speculator.propose(dummy_run=True)``),
    while the target's hidden states (and EAGLE-3's three auxiliary ones) stay alive (0 without draft layers)."""
    if drafter.spec is None:
        return 0
    kept = target.hidden_size * (4 if drafter.method == "eagle3" else 1)
    return max_num_batched_tokens * kept * activation_dtype_bytes + forward_activation_bytes(
        drafter.spec, max_num_batched_tokens=max_num_batched_tokens, activation_dtype_bytes=activation_dtype_bytes,
        tensor_parallel_size=drafter.tensor_parallel_size)
