"""The Plan page's inputs, grouped like a table of contents: model, hardware, parallelism, vLLM, workload.

Widgets offer exactly what the engine accepts: numeric ranges come from the Scenario's own bounds, the
quantizations from what this checkpoint can load, TP sizes from the divisors of its attention heads. A value a
link or an import brought that is not among them stays selectable (so the input is kept) and is explained.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from typing import Any, get_args

import streamlit as st

from calculator import (
    CalculatorError,
    ModelSpec,
    Scenario,
    Workload,
    gpu_catalog,
    preset_ids,
)
from calculator.engine.expert_parallel import All2AllBackend
from calculator.engine.interconnect import INTERCONNECT_LABELS
from calculator.engine.kv_cache import SUPPORTED_KV_CACHE_DTYPES
from calculator.engine.lora import LORA_RANKS
from calculator.engine.speculative import TYPICAL_ACCEPTANCE
from calculator.engine.vllm_versions import (
    LATEST_VERSION,
    known_versions,
    provenance_summary,
    rules_for,
    version_notice,
    version_provenance,
)
from calculator.limits import field_bounds
from calculator.model.hf_overrides import hf_overrides_text, parse_hf_overrides
from calculator.model.model_source import (
    hub_model_spec,
    load_model_spec,
    model_spec_from_text,
)
from calculator.model.quantization import SUPPORTED_FLAGS, quantization_from_flag
from calculator.scenario import DEFAULT_GPU, DEFAULT_MODEL, capture_sizes_from_text
from calculator.units import parse_size
from calculator.url_state import UTILIZATION_SLIDER

from .state import (
    CUSTOM_GPU,
    DTYPES,
    FROM_CHECKPOINT,
    MODEL_SOURCES,
    clear_substitution,
)

# NOTE: a None option shows as "Choose an option" in a selectbox, so pickers hold words and map them back.
TRI_STATE = {"vLLM's default": None, "on": True, "off": False}
INSTALLS = {"pip (the wheel)": "pip", "Docker image (vllm/vllm-openai)": "docker"}
PLATFORMS = {"the GPU's own": None, "cuda": "cuda", "rocm": "rocm", "cpu": "cpu"}
INTERCONNECTS = {"the card's usual link": None, **{label: key for key, label in INTERCONNECT_LABELS.items()}}
ALL2ALL_BACKENDS = {"vLLM's default (allgather_reducescatter)": None,
                    **{name: name for name in get_args(All2AllBackend) if name != "allgather_reducescatter"}}


def _word(mapping: dict[str, object], value: object) -> str:
    return next((word for word, mapped in mapping.items() if mapped == value and type(mapped) is type(value)),
                next(iter(mapping)))


_KEPT = frozenset({"number_input", "text_input", "checkbox", "selectbox"})  # the widgets the sections use


class _Drawn:
    """An open section's box: its widgets keep their values while the section is closed (``persist_state``)."""

    def __init__(self, box) -> None:
        self._box = box

    def __getattr__(self, name: str):
        call = getattr(self._box, name)
        return (lambda *args, **kwargs: call(*args, persist_state="page", **kwargs)) if name in _KEPT else call

    def columns(self, count: int) -> list[_Drawn]:
        return [_Drawn(column) for column in self._box.columns(count)]


class _Closed:
    """A closed section's box: each widget gives the value its key holds, as the widget would, and draws nothing.
    NOTE: the Plan page sets every such key on a session's first run (``state.apply_scenario``); a key never set reads
    as None, empty, off or the first option."""

    def number_input(self, _label: str, *, key: str, **_kwargs: Any) -> Any:
        return st.session_state.get(key)

    def text_input(self, _label: str, *, key: str, **_kwargs: Any) -> str:
        return st.session_state.get(key) or ""

    def checkbox(self, _label: str, *, key: str, **_kwargs: Any) -> bool:
        return bool(st.session_state.get(key, False))

    def selectbox(self, _label: str, options, *, key: str, **_kwargs: Any) -> Any:
        return st.session_state.get(key, list(options)[0])

    def columns(self, count: int) -> list[_Closed]:
        return [self] * count

    def __init__(self, label: str) -> None:
        self._label = label

    def error(self, message: str, **kwargs: Any) -> None:
        # NOTE: a value typed while the section was open that does not parse is not used: say so with it closed too
        st.error(f"{self._label}: {message}", **kwargs)


def lazy_expander(label: str, key: str):
    """An expander whose widgets are drawn only while it is open (issue 21 item 3: each drawn widget makes Streamlit
    copy the whole session state); closed, the section's values come from the keys its widgets keep."""
    expander = st.expander(label, key=key, on_change="rerun")
    return _Drawn(expander) if expander.open else _Closed(label)


def _picker(label: str, mapping: dict[str, object], prefix: str, field: str, column=st, **kwargs) -> object:
    """A selectbox over words for a field whose values include None; its state key holds the word."""
    key = f"{prefix}_{field}_choice"
    if f"{prefix}_{field}" in st.session_state:  # set by a link or an import
        st.session_state[key] = _word(mapping, st.session_state.pop(f"{prefix}_{field}"))
    return mapping[column.selectbox(label, list(mapping), key=key, **kwargs)]


def interconnect_picker(prefix: str, column=st) -> object:
    """How the GPUs talk (``--interconnect``); None: the card's usual link."""
    return _picker("GPU interconnect", INTERCONNECTS, prefix, "interconnect", column,
                   help="At TP > 1 NCCL's buffers and vLLM's custom all-reduce depend on it: NVLink SHARP buffers on "
                        "NVSwitch systems, far smaller ones over PCIe. Cards sold both ways (A100 PCIe, A6000, "
                        "H100 NVL) default to their usual link.")


def _bounded(field: str) -> dict[str, float | None]:
    """min_value/max_value for a number_input: the Scenario's range, in the field's own type."""
    low, high = field_bounds(Scenario, field)
    cast = float if "float" in str(Scenario.model_fields[field].annotation) else int
    return {"min_value": None if low is None else cast(low), "max_value": None if high is None else cast(high)}


# NOTE: a random key per process, so a token's fingerprint in a cache key cannot be checked against a guess.
_FINGERPRINT_KEY = secrets.token_bytes(32)


def token_fingerprint(token: str | None) -> str:
    """What a cache key holds of a token: "" without one, else a keyed hash (never the token itself)."""
    return hmac.new(_FINGERPRINT_KEY, token.encode(), hashlib.sha256).hexdigest() if token else ""


def cached_model_spec(source: str, model: str, token: str | None = None) -> ModelSpec:
    """Presets and files offline; Hub ids through huggingface_hub, cached per token (issue 28: a private or gated
    model read with one visitor's token must not be served to a visitor without it)."""
    return _cached_model_spec(source, model, token_fingerprint(token), _token=token)


@st.cache_resource(ttl="1h", max_entries=256, show_spinner="Reading the model's config.json")
def _cached_model_spec(source: str, model: str, reader: str, _token: str | None = None) -> ModelSpec:
    """``reader`` (the token's fingerprint) keys the cache; ``_token`` itself is left out of the key."""
    if source == MODEL_SOURCES[0]:
        return load_model_spec(model)
    return hub_model_spec(model, token=_token or os.environ.get("HF_TOKEN") or None)


def model_section(prefix: str) -> tuple[str, ModelSpec | None, str | None]:
    """Model picker; returns (model id, spec or None, error message or None)."""
    st.subheader("Model")
    source = st.radio("Source", MODEL_SOURCES, key=f"{prefix}_source", horizontal=True, label_visibility="collapsed")
    try:
        if source == MODEL_SOURCES[0]:
            st.session_state.setdefault(f"{prefix}_preset", DEFAULT_MODEL)
            model = st.selectbox("Preset (type to search)", preset_ids(), key=f"{prefix}_preset")
            return model, cached_model_spec(source, model), None
        if source == MODEL_SOURCES[1]:
            model = st.text_input("Hugging Face model id", key=f"{prefix}_hub_id", placeholder="org/name").strip()
            token = st.text_input("Hugging Face token (optional, kept only in this browser session)",
                                  type="password", key=f"{prefix}_hf_token")
            if not model:
                return model, None, "Type a Hugging Face model id, e.g. Qwen/Qwen3-8B."
            return model, cached_model_spec(source, model, token=token or None), None
        upload = st.file_uploader("config.json", type=["json"], key=f"{prefix}_upload")
        if upload is None:
            return "upload:", None, "Upload a model's config.json."
        name = f"upload:{upload.name}"
        return name, model_spec_from_text(upload.getvalue(), name), None
    except CalculatorError as exc:
        model = st.session_state.get(f"{prefix}_hub_id" if source == MODEL_SOURCES[1] else f"{prefix}_preset", "")
        return str(model).strip() or DEFAULT_MODEL, None, str(exc)


def _gpu_changed(prefix: str) -> None:
    """A newly picked catalog GPU brings its own memory (and ends a link's substitution)."""
    clear_substitution(prefix, "gpu")
    if st.session_state.get(f"{prefix}_gpu") != CUSTOM_GPU:
        st.session_state[f"{prefix}_gpu_memory_gib"] = None


def hardware_section(prefix: str) -> dict[str, object]:
    st.subheader("Hardware")
    catalog = {g.key: g for g in gpu_catalog()}
    st.session_state.setdefault(f"{prefix}_gpu", DEFAULT_GPU)
    if st.session_state[f"{prefix}_gpu"] not in (*catalog, CUSTOM_GPU):
        st.session_state[f"{prefix}_gpu"] = DEFAULT_GPU  # url_state has already reported the substitution
    gpu = st.selectbox("GPU (type to search)", (*catalog, CUSTOM_GPU), key=f"{prefix}_gpu",
                       on_change=_gpu_changed, args=(prefix,),
                       format_func=lambda k: "Custom memory…" if k == CUSTOM_GPU else
                       f"{catalog[k].name} — {catalog[k].memory_gib:.2f} GiB")
    key = f"{prefix}_gpu_memory_gib"
    if gpu == CUSTOM_GPU and st.session_state.get(key) is None:
        st.session_state[key] = 80.0
    memory = st.number_input("GPU memory as the driver reports it (GiB)" + ("" if gpu == CUSTOM_GPU else
                             ", if not the catalog's"), step=1.0, key=key, **_bounded("gpu_memory_gib"),
                             placeholder=None if gpu == CUSTOM_GPU else f"{catalog[gpu].memory_gib:.2f}")
    other = st.number_input("Memory already used on each GPU by other processes (GiB)", step=0.5,
                            key=f"{prefix}_other_processes_memory_gib", **_bounded("other_processes_memory_gib"))
    device = _picker("Platform", PLATFORMS, prefix, "device")
    return {"gpu": None if gpu == CUSTOM_GPU else gpu, "gpu_memory_gib": memory, "other_processes_memory_gib": other,
            "device": device}


def parallelism_section(prefix: str, spec: ModelSpec | None) -> dict[str, object]:
    st.subheader("Parallelism")
    heads = spec.num_attention_heads if spec else None
    key = f"{prefix}_tensor_parallel_size"
    st.session_state.setdefault(key, 1)
    valid = [tp for tp in range(1, 1025) if heads and heads % tp == 0] or [1, 2, 4, 8, 16]
    options = sorted({*valid, int(st.session_state[key])})  # a value from a link stays, and is explained
    left, right = st.columns(2)
    tp = left.selectbox("Tensor parallel", options, key=key,
                        help=(f"{heads} attention heads: vLLM needs TP to divide them" if heads else None),
                        format_func=lambda v: f"{v}" if v in valid else f"{v} (does not divide {heads} heads)")
    pp = right.number_input("Pipeline parallel", key=f"{prefix}_pipeline_parallel_size",
                            **_bounded("pipeline_parallel_size"))
    dp = st.number_input("Data parallel (engines)", key=f"{prefix}_data_parallel_size",
                         help="--data-parallel-size: independent engines of TP × PP GPUs; MoE experts are split "
                              "over TP × DP GPUs", **_bounded("data_parallel_size"))
    ep = st.checkbox("Expert parallel (MoE)", key=f"{prefix}_enable_expert_parallel",
                        help="--enable-expert-parallel: each GPU holds whole experts instead of a slice of each "
                             "(MoE models)")
    eplb_left, eplb_right = st.columns(2)
    eplb = eplb_left.checkbox("EPLB", key=f"{prefix}_enable_eplb",
                              help="--enable-eplb: vLLM's expert load balancer (needs expert parallel): its state "
                                   "and a buffer of one layer's experts per GPU")
    redundant = eplb_right.number_input("Redundant experts", key=f"{prefix}_num_redundant_experts",
                                        help="--eplb-config '{\"num_redundant_experts\": R}': R more physical "
                                             "experts, split evenly with the others over TP × DP GPUs",
                                        **_bounded("num_redundant_experts"))
    link = interconnect_picker(prefix)
    backend = _picker("All-to-all backend (expert parallel with DP)", ALL2ALL_BACKENDS, prefix, "all2all_backend",
                      help="--all2all-backend: how MoE tokens reach the ranks holding their experts under "
                           "--enable-expert-parallel with data parallel > 1; DeepEP, NIXL-EP and FlashInfer's "
                           "one-sided all-to-all keep buffers per GPU (DeepEP low-latency: GiBs, sized by the batch "
                           "budget)")
    st.caption(f"{tp * pp} GPU(s) per engine" + (f", {tp * pp * dp} in all" if dp > 1 else ""))
    return {"tensor_parallel_size": tp, "pipeline_parallel_size": pp, "data_parallel_size": dp,
            "enable_expert_parallel": ep, "enable_eplb": eplb, "num_redundant_experts": redundant,
            "interconnect": link, "all2all_backend": backend}


def valid_quantizations(spec: ModelSpec | None) -> list[str]:
    """``--quantization`` values vLLM accepts for this checkpoint."""
    if spec is None:
        return list(SUPPORTED_FLAGS)
    valid = []
    for flag in SUPPORTED_FLAGS:
        try:
            quantization_from_flag(flag, spec)
        except CalculatorError:
            continue
        valid.append(flag)
    return valid


def vllm_section(prefix: str, spec: ModelSpec | None):
    """vLLM's knobs; returns (values, a placeholder under the utilization slider for what it does here)."""
    st.subheader("vLLM settings")
    versions = list(known_versions())
    st.session_state.setdefault(f"{prefix}_vllm_version", LATEST_VERSION)
    if st.session_state[f"{prefix}_vllm_version"] not in versions:
        versions.insert(0, st.session_state[f"{prefix}_vllm_version"])  # a valid version from a link or import
    version = st.selectbox("vLLM version", versions, key=f"{prefix}_vllm_version", help=provenance_summary(),
                           format_func=lambda v: f"{v} ({LATEST_VERSION} rules)" if version_notice(v) else v)
    st.caption(version_provenance(version))
    use_default = st.checkbox("Default gpu_memory_utilization", key=f"{prefix}_util_default")
    default_util = 1.0 if rules_for(version).memory_formula == "v1_extensible" else \
        rules_for(version).default_gpu_memory_utilization
    st.session_state.setdefault(f"{prefix}_util", default_util)
    util = st.slider("gpu_memory_utilization", *UTILIZATION_SLIDER, step=0.01, key=f"{prefix}_util",
                     disabled=use_default,
                     help=f"vLLM {version} default: {default_util}; vLLM accepts 0 < value ≤ 1")
    util_note = st.empty()
    context = spec.derived_max_model_len if spec else None
    max_len = st.number_input("max_model_len (empty: the config's)", step=1024, key=f"{prefix}_max_model_len",
                              placeholder=f"{context:,}" if context else "config", **_bounded("max_model_len"))
    # NOTE: one per row: in half a sidebar these labels would break mid-word.
    seqs = st.number_input("max_num_seqs", key=f"{prefix}_max_num_seqs", placeholder="vLLM's default for the GPU",
                           **_bounded("max_num_seqs"))
    batched = st.number_input("max_num_batched_tokens", step=1024, key=f"{prefix}_max_num_batched_tokens",
                              placeholder="vLLM's default for the GPU", **_bounded("max_num_batched_tokens"))
    left, right = st.columns(2)
    block = left.number_input("block_size", key=f"{prefix}_block_size", placeholder="default",
                              **_bounded("block_size"))
    dtype = right.selectbox("dtype", DTYPES, key=f"{prefix}_dtype")
    valid = valid_quantizations(spec)
    key = f"{prefix}_quantization"
    current = st.session_state.get(key) or FROM_CHECKPOINT
    options = [FROM_CHECKPOINT, *valid] + ([current] if current not in (FROM_CHECKPOINT, *valid) else [])
    checkpoint = spec.quantization.method if spec and spec.quantization else None
    quantization = st.selectbox(
        "quantization", options, key=key,
        format_func=lambda q: q if q in (FROM_CHECKPOINT, *valid) else f"{q} (not for this checkpoint)",
        help=(f"This checkpoint is quantized with {checkpoint}: vLLM loads only that format." if checkpoint else
              "This checkpoint is 16-bit: vLLM can quantize it while loading (fp8, bitsandbytes); AWQ, GPTQ and "
              "the others need a checkpoint quantized that way."))
    kv_dtype = st.selectbox("kv_cache_dtype", SUPPORTED_KV_CACHE_DTYPES, key=f"{prefix}_kv_cache_dtype")
    eager = st.checkbox("enforce-eager (no CUDA graphs)", key=f"{prefix}_enforce_eager")
    values = {"vllm_version": version, "gpu_memory_utilization": None if use_default else util,
              "max_model_len": max_len, "max_num_seqs": seqs, "max_num_batched_tokens": batched, "block_size": block,
              "dtype": dtype, "quantization": None if quantization == FROM_CHECKPOINT else quantization,
              "kv_cache_dtype": kv_dtype, "enforce_eager": eager}
    values.update(_advanced(prefix))
    values.update(adapters_and_speculation(prefix, drawn_when_open=True))
    return values, util_note


def _text_setting(label: str, key: str, parse: Callable[[str], Any], box=st) -> Any:
    """A setting typed as text: None when empty; when it does not parse, the reason under it (and None)."""
    text = box.text_input(label, key=key)
    if not text.strip():
        return None
    try:
        return parse(text)
    except (ValueError, OverflowError) as exc:
        box.error(f"{label.split(' ', 1)[0]}: {exc}")
        return None


def hf_overrides_setting(prefix: str, box=st) -> str | None:
    """--hf-overrides as a text field (canonical JSON, or None); a link, an import or the page just seen fills it."""
    if f"{prefix}_hf_overrides" in st.session_state:
        st.session_state[f"{prefix}_hf_overrides_text"] = st.session_state.pop(f"{prefix}_hf_overrides") or ""
    return _text_setting('hf_overrides (a JSON object applied to config.json, e.g. {"num_hidden_layers": 16}; '
                         "empty: the config as published)", f"{prefix}_hf_overrides_text",
                         lambda text: hf_overrides_text(parse_hf_overrides(text)), box)


def _advanced(prefix: str) -> dict[str, object]:
    """The rarer knobs (and the Live page's calibration); every share-link key has its widget."""
    box = lazy_expander("More vLLM settings", f"{prefix}_more_settings_open")
    kv_bytes = _text_setting("kv_cache_memory_bytes (e.g. 8G; empty: sized from utilization)",
                             f"{prefix}_kv_cache_memory_text", parse_size, box)
    sizes = _text_setting("cudagraph_capture_sizes (e.g. 1 2 4 8; empty: vLLM's default list)",
                          f"{prefix}_cudagraph_capture_sizes_text", capture_sizes_from_text, box)
    overrides = hf_overrides_setting(prefix, box)
    blocks = box.number_input("num_gpu_blocks_override", key=f"{prefix}_num_gpu_blocks_override",
                              placeholder="none", **_bounded("num_gpu_blocks_override"))
    offload = box.number_input("cpu_offload_gb (weights per GPU kept in CPU memory)", step=1.0,
                               key=f"{prefix}_cpu_offload_gb", **_bounded("cpu_offload_gb"))
    left, right = box.columns(2)
    extensible = _picker("Extensible KV cache", TRI_STATE, prefix, "enable_extensible_kv_cache", left,
                         help="--enable-extensible-kv-cache (vLLM 0.34+)")
    asynchronous = _picker("Async scheduling", TRI_STATE, prefix, "async_scheduling", right)
    caching = _picker("Prefix caching", TRI_STATE, prefix, "enable_prefix_caching", left,
                      help="shares prefixes and the n samples' prompts (on in V1)")
    chunked = _picker("Chunked prefill", TRI_STATE, prefix, "enable_chunked_prefill", right,
                      help="--enable-chunked-prefill: off, vLLM batches whole prompts (max_num_batched_tokens at "
                           "least max_model_len, a larger profiling peak); V0 turns it on past 32K tokens, V1 always "
                           "(and keeps it on before 0.11.1 whatever the flag)")
    install = _picker("Install", INSTALLS, prefix, "install", left,
                      help="The Docker image ships FlashInfer: vLLM 0.10-0.11.0 then sample top-k/top-p with it "
                           "(~3.5 fp32 logits copies at the profiling peak instead of torch's ~9.7); from 0.11.1 "
                           "only with VLLM_USE_FLASHINFER_SAMPLER=1")
    adjustment = right.number_input("Calibrated overhead (GiB)", step=0.1, key=f"{prefix}_overhead_adjustment_gib",
                                    help="what the Live page measured beyond the estimate (its 'calibrated' link)",
                                    **_bounded("overhead_adjustment_gib"))
    return {"kv_cache_memory_bytes": kv_bytes, "num_gpu_blocks_override": blocks, "cpu_offload_gb": offload,
            "enable_extensible_kv_cache": extensible, "async_scheduling": asynchronous,
            "enable_prefix_caching": caching, "enable_chunked_prefill": chunked, "overhead_adjustment_gib": adjustment, "cudagraph_capture_sizes": sizes,
            "hf_overrides": overrides, "install": install}


SPECULATIVE_METHODS = {"off": None, "n-gram (prompt look-up)": "ngram", "draft model": "draft_model",
                       "EAGLE head": "eagle", "EAGLE-3 head": "eagle3", "MTP (the model's own layers)": "mtp"}


def adapters_and_speculation(prefix: str, drawn_when_open: bool = False) -> dict[str, object]:
    """LoRA slots (--enable-lora ...) and speculative decoding (--speculative-config), as vLLM names them;
    ``drawn_when_open``: the widgets are drawn only while the expander is open (see ``lazy_expander``)."""
    label = "LoRA adapters and speculative decoding"
    box = lazy_expander(label, f"{prefix}_adapters_open") if drawn_when_open else _Drawn(st.expander(label))
    left, right = box.columns(2)
    lora = left.checkbox("enable-lora", key=f"{prefix}_enable_lora",
                         help="max_loras slots of max_lora_rank on every linear layer, before the KV cache")
    fully = right.checkbox("fully-sharded-loras", key=f"{prefix}_fully_sharded_loras", disabled=not lora)
    loras = left.number_input("max_loras", key=f"{prefix}_max_loras", disabled=not lora,
                              **_bounded("max_loras"))
    rank = right.number_input("max_lora_rank", key=f"{prefix}_max_lora_rank", disabled=not lora,
                              help=f"vLLM accepts {', '.join(map(str, LORA_RANKS))}", **_bounded("max_lora_rank"))
    cpu = left.number_input("max_cpu_loras", key=f"{prefix}_max_cpu_loras", placeholder="= max_loras",
                            disabled=not lora, help="adapters cached in CPU memory (no GPU memory)",
                            **_bounded("max_cpu_loras"))
    lora_dtype = right.selectbox("lora_dtype", ("auto", "float16", "bfloat16"), key=f"{prefix}_lora_dtype",
                                 disabled=not lora)
    method = _picker("Speculative decoding", SPECULATIVE_METHODS, prefix, "speculative_method", box,
                     help="--speculative-config's method: the proposer's weights and KV layers join the plan")
    if f"{prefix}_speculative_model" in st.session_state:  # set by a link or an import
        st.session_state[f"{prefix}_speculative_model_text"] = st.session_state.pop(
            f"{prefix}_speculative_model") or ""
    draft = box.text_input("Draft model (Hugging Face id or preset)", key=f"{prefix}_speculative_model_text",
                           disabled=method != "draft_model").strip() or None
    left, right = box.columns(2)
    tokens = left.number_input("num_speculative_tokens", key=f"{prefix}_num_speculative_tokens",
                               placeholder="the method's default", disabled=method is None,
                               **_bounded("num_speculative_tokens"))
    draft_tp = right.number_input("draft_tensor_parallel_size", key=f"{prefix}_draft_tensor_parallel_size",
                                  placeholder="= TP", disabled=method != "draft_model",
                                  **_bounded("draft_tensor_parallel_size"))
    accept = box.number_input("Acceptance rate per draft token (your assumption)", step=0.05, format="%.2f",
                              key=f"{prefix}_speculative_acceptance_rate", disabled=method is None,
                              placeholder="the method's typical value", min_value=0.0, max_value=0.99,
                              help="what vllm:spec_decode_num_accepted_tokens / num_draft_tokens shows on your "
                                   "traffic; empty: " + ", ".join(f"{name} {rate:g}" for name, (rate, _)
                                                                  in TYPICAL_ACCEPTANCE.items()))
    return {"enable_lora": lora, "max_loras": loras, "max_lora_rank": rank, "max_cpu_loras": cpu,
            "lora_dtype": lora_dtype, "fully_sharded_loras": fully, "speculative_method": method,
            "speculative_model": draft if method == "draft_model" else None,
            "num_speculative_tokens": tokens if method else None,
            "draft_tensor_parallel_size": draft_tp if method == "draft_model" else None,
            "speculative_acceptance_rate": accept if method else None}


def workload_section(prefix: str) -> Workload | str:
    """Workload inputs; returns a Workload or the reason it is invalid."""
    st.subheader("Workload")
    left, right = st.columns(2)
    values = {
        "prompt_tokens_mean": left.number_input("Prompt tokens (mean)", 1, 10_000_000, key=f"{prefix}_prompt_tokens_mean"),
        "prompt_tokens_p95": right.number_input("Prompt tokens (p95)", 1, 10_000_000, key=f"{prefix}_prompt_tokens_p95",
                                                placeholder="= mean"),
        "output_tokens_mean": left.number_input("Output tokens (mean)", 0, 10_000_000, key=f"{prefix}_output_tokens_mean"),
        "output_tokens_p95": right.number_input("Output tokens (p95)", 0, 10_000_000, key=f"{prefix}_output_tokens_p95",
                                                placeholder="= mean"),
        "shared_prefix_tokens": left.number_input("Shared prefix tokens", 0, 10_000_000,
                                                  key=f"{prefix}_shared_prefix_tokens"),
        "parallel_samples": right.number_input("Parallel samples n", 1, 1024, key=f"{prefix}_parallel_samples"),
        "target_concurrent_requests": st.number_input("Target concurrent requests", 1, 10_000_000,
                                                      key=f"{prefix}_target_concurrent_requests"),
    }
    try:
        return Workload(**values)
    except ValueError as exc:
        return str(exc).splitlines()[-1] if str(exc) else "invalid workload"


def build_scenario(model: str, *parts: dict[str, object]) -> Scenario | str:
    """A Scenario from the sections' values, or the validation message."""
    fields: dict[str, object] = {"model": model}
    for part in parts:
        fields.update(part)
    try:
        return Scenario(**fields)
    except ValueError as exc:
        return str(exc).splitlines()[-1]
