"""Learn: where the memory goes and why GQA, MLA and PagedAttention matter — with the Plan page's own scenario."""

import sys
from pathlib import Path

# NOTE: a deep link or AppTest may run this page without app.py; the repo root must still be importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamlit as st

from calculator import CalculatorError, Workload, estimate, preset_ids, workload_capacity
from calculator.charts import block_grid_figure, kv_per_token_figure, memory_stack_figure, samples_block_figure
from calculator.engine.kv_cache import compare_with_mha
from calculator.engine.workload import paged_slots, prefix_caching_enabled
from calculator.model.hf_overrides import with_hf_overrides
from calculator.model.quantization import quantization_from_config, quantization_from_flag, resident_bytes
from calculator.model.weights import weight_bytes_per_rank
from calculator.explain import deployment_line
from calculator.scenario import DEFAULT_MODEL, Scenario
from calculator.units import GIB
from calculator.url_state import read_link, to_query_params
from pages.common import page_setup, sentence
from pages.common.inputs import MODEL_SOURCES, cached_model_spec
from pages.common.outputs import CHART_CONFIG
from pages.common.state import carried_context, plan_link, share_link


def plan_scenario() -> tuple[Scenario, object, Workload, list[str]]:
    """The Plan page's last scenario in this session; else the link's (Plan's keys); else the defaults."""
    held = st.session_state.get("plan__last_valid")
    if held is not None:
        scenario, spec, workload = held
        return scenario, spec, workload, []
    link = read_link(st.query_params.to_dict())
    carried = carried_context()  # what another page (Recommend, say) was just showing
    scenario, workload = (carried[0], carried[1] or link.workload) if carried else (link.scenario, link.workload)
    source = MODEL_SOURCES[0] if scenario.model in preset_ids() else MODEL_SOURCES[1]
    try:
        spec = cached_model_spec(source, scenario.model)
    except CalculatorError as exc:
        fallback = scenario.replace(model=DEFAULT_MODEL)
        return (fallback, cached_model_spec(MODEL_SOURCES[0], DEFAULT_MODEL), workload,
                [*link.warnings, f"{sentence(exc)} Showing {DEFAULT_MODEL} instead."])
    return scenario, spec, workload, list(link.warnings)


page_setup("Learn")
scenario, spec, workload, problems = plan_scenario()
for problem in problems:
    st.warning(problem, icon="🔗")
try:
    spec = with_hf_overrides(spec, scenario.hf_overrides)  # NOTE: the text below explains the model vLLM builds
    result = estimate(scenario, spec)
except CalculatorError as exc:
    st.error(f"**{sentence(exc).rstrip('.')}.** This page explains a scenario the estimate accepts: change it on "
             "the Plan page.", icon="✋")
    st.link_button("Change the scenario on the Plan page", plan_link(scenario, workload))
    st.stop()
budget, layout, settings = result.budget, result.layout, result.settings
share_link(to_query_params(scenario, workload))
st.markdown(f"**{deployment_line(result)}**")
st.caption("A guided tour of vLLM's memory accounting for exactly the Plan page's scenario and workload.")
st.link_button("Change the scenario on the Plan page", plan_link(scenario, workload))

st.header("1. Where the memory goes")
extensible = budget.formula == "v1_extensible"
# NOTE: every part of the GPU is named from the budget's own segments (the chart's), so the parts and "everything
# left" add up to the GPU's memory in the text too, not only in the chart's legend.
GIB_TEXT = "{:,.2f} GiB"
PART_WORDS = {
    "weights": "the weights take **{}**",
    "activation": (f"a dummy forward pass over `max_num_batched_tokens` = {settings.max_num_batched_tokens:,} and the "
                   "sampler reserve an activation peak of **{}**"),
    "non_torch": "NCCL/cuBLAS (memory outside PyTorch) take **{}**",
    "cudagraph": "CUDA graphs take **{}**" + ("" if budget.cudagraph_in_budget else " (captured in the headroom)"),
    "extensible_reserve": "the extensible-cache margin keeps **{}** free (so the cache can grow without running out)",
    "calibration": "overhead calibrated on real servers takes **{}**",
    "context": "the CUDA context (the driver's own, before vLLM allocates anything) takes **{}**",
    "other": "other processes hold **{}**",
    "unused": "**{}** stays unused (the 1 − gpu_memory_utilization headroom)",
}
parts = [PART_WORDS[seg.key].format(GIB_TEXT.format(seg.bytes / GIB)) for seg in budget.segments()
         if seg.key in PART_WORDS and seg.bytes > 0]
st.markdown(
    f"vLLM {result.rules.version} may use `gpu_memory_utilization` × {budget.total_bytes / GIB:.2f} GiB = "
    f"{budget.gpu_memory_utilization:g} × {budget.total_bytes / GIB:.2f} = **{budget.requested_bytes / GIB:.2f} GiB** "
    f"of this GPU{' (with the extensible KV cache it is a cap, and a safety margin is kept free)' if extensible else ''}."
    f" Of its {budget.total_bytes / GIB:.2f} GiB, " + "; ".join(parts) + ". **Everything left — "
    f"{max(result.kv_cache_bytes, 0) / GIB:.2f} GiB — becomes the KV cache**, and its size sets how many requests "
    "run at once.")
st.plotly_chart(memory_stack_figure(result), config=CHART_CONFIG, key="learn_stack")

st.header("2. Why GQA and MLA shrink the KV cache")
layer = next(x for x in spec.layers if x.kind != "mamba")
saving = compare_with_mha(spec)
as_mha, actual, fp8 = saving.as_mha_bytes, saving.as_built_bytes, saving.as_built_fp8_bytes
key_size, value_size = saving.mha_key_size, saving.mha_value_size
kind = "MLA latent" if layer.kind == "mla" else f"GQA: {layer.num_kv_heads} KV heads"
st.markdown(
    f"Every token stores a key and a value per layer. With one KV head per query head (MHA) this model would need "
    f"{spec.num_hidden_layers} layers × {spec.num_attention_heads} heads × ({key_size} + {value_size}) × 2 B = "
    f"**{as_mha / 1024:,.0f} KiB per token**. Its real layout ({kind}) needs **{actual / 1024:,.1f} KiB**, "
    f"{as_mha / actual:,.1f}× less — so {as_mha / actual:,.1f}× more tokens fit in the same memory.")
st.plotly_chart(kv_per_token_figure([("if it were MHA", as_mha), (f"as built ({kind})", actual),
                                     ("as built, fp8 KV", fp8)]), config=CHART_CONFIG, key="learn_kv")

st.header("3. PagedAttention: blocks instead of reservations")
sizes = sorted({8, 16, 32, 64, 128, settings.block_size})
block = st.select_slider("Block size (tokens)", sizes, value=settings.block_size, key="learn_block",
                         help=f"this scenario's block_size is {settings.block_size}")
# NOTE: ASCII digits only ("²".isdigit() holds, int("²") fails), at most 9 (int() refuses 4,300 digits); the figure
# draws a request of any length within a bounded number of cells.
lengths = [int(x) for x in st.text_input("Request lengths (tokens)", "70, 33, 120, 18", key="learn_lengths")
           .replace(" ", "").split(",") if x.isascii() and x.isdigit() and len(x) <= 9 and int(x) > 0][:8] or [70]
st.plotly_chart(block_grid_figure(lengths, block), config=CHART_CONFIG, key="learn_blocks")
allocated = paged_slots(lengths, block)
st.markdown(
    f"Paged: {len(lengths)} requests hold {allocated:,} token slots for {sum(lengths):,} tokens — only the last block "
    f"of each is partly empty ({100 * (1 - sum(lengths) / allocated):.1f}% waste). A contiguous allocator reserves "
    f"`max_model_len` = {settings.max_model_len:,} tokens per request: "
    f"{100 * (1 - sum(lengths) / (len(lengths) * settings.max_model_len)):.2f}% waste.")
st.markdown(
    f"**concurrency = KV pool ÷ KV per request.** For requests of the full `max_model_len`: "
    f"{result.capacity.num_gpu_blocks:,} blocks ÷ {result.capacity.blocks_per_request:,} blocks per request = "
    f"**{result.capacity.max_concurrency:,.2f}** (vLLM's \"Maximum concurrency\"). The scheduler also stops at "
    f"`max_num_seqs` = {settings.max_num_seqs:,}.")

st.header("4. Shared prefixes and parallel sampling")
prompt = max(workload.prompt_tokens_mean, 1)
prefix = st.slider("System prompt shared by every request (tokens)", 0, prompt,
                   min(workload.shared_prefix_tokens, prompt), key="learn_prefix")
LEARN_MAX_SAMPLES = 16  # the slider's range: enough to see sharing, few enough to draw every block
samples = st.slider("Parallel samples per request (n)", 1, LEARN_MAX_SAMPLES,
                    min(workload.parallel_samples, LEARN_MAX_SAMPLES), key="learn_n")
if workload.parallel_samples > LEARN_MAX_SAMPLES:
    st.caption(f"The scenario asks for n = {workload.parallel_samples:,}; this illustration stops at "
               f"{LEARN_MAX_SAMPLES} (the Plan page counts all {workload.parallel_samples:,}).")
alone = workload_capacity(result, Workload(prompt_tokens_mean=prompt, output_tokens_mean=workload.output_tokens_mean))
shared = workload_capacity(result, Workload(prompt_tokens_mean=prompt, output_tokens_mean=workload.output_tokens_mean,
                                            shared_prefix_tokens=prefix, parallel_samples=samples))
caching = prefix_caching_enabled(result)
st.plotly_chart(samples_block_figure(prompt, workload.output_tokens_mean, samples, layout.block_size,
                                     shared_prefix_tokens=prefix, prefix_caching=caching),
                config=CHART_CONFIG, key="learn_shared")
st.markdown(
    (f"With prefix caching the {prefix:,}-token prefix is stored once ({shared.mean.prefix_blocks:,} blocks of "
     f"{layout.block_size} tokens), and the {samples} samples of a request share their full prompt blocks; only the "
     "last prompt block is copied on write. " if caching else
     "Prefix caching is off in this scenario, so nothing is shared between requests or samples. ") +
    f"A {prompt:,} + {workload.output_tokens_mean:,}-token request alone needs {alone.mean.private_blocks:,} blocks; "
    f"with the prefix and {samples} samples it needs {shared.mean.private_blocks:,} private blocks for {samples}× the "
    f"output. **concurrency = KV pool ÷ KV per request**: on this GPU that is **{alone.concurrency_mean:,}** single "
    f"requests or **{shared.concurrency_mean:,}** requests of {samples} samples at once "
    f"(limited by {shared.limited_by_mean}).")

st.header("5. Weight quantization: fewer bytes per weight, more room for the KV cache")
# NOTE: real numbers from the engine's own weight accounting (weights.py, quantization.py), for this model
plain = spec.model_copy(update={"quantization": None})
side = spec.hidden_size
formats = [("16-bit (bf16/fp16)", None), ("fp8 (--quantization fp8)", quantization_from_flag("fp8", plain)),
           ("AWQ 4-bit, groups of 128", quantization_from_config({"quantization_config": {
               "quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}}))]
matrix = {name: 2 * side * side if quant is None else resident_bytes(quant, side, side) for name, quant in formats}
st.markdown(
    f"One {side:,} × {side:,} projection of this model holds {side * side:,} weights: **{matrix[formats[0][0]]:,} B** "
    f"in 16 bits; fp8 keeps 1 B per weight and one fp32 scale for the tensor: **{matrix[formats[1][0]]:,} B**; "
    "AWQ keeps ½ B per weight plus, for every 128 inputs of each output, an fp16 scale and a packed 4-bit zero "
    f"point: **{matrix[formats[2][0]]:,} B** ({matrix[formats[0][0]] / matrix[formats[2][0]]:,.2f}× smaller). Embeddings, "
    "the output head and norms stay in 16 bits, so the whole model shrinks less than its matrices:")
rows = []
for name, quant in formats:
    weights = weight_bytes_per_rank(plain, dtype_bytes=2, quantization=quant)
    kept = sum(weights.per_stage_bytes_by_role[0].get(role, 0) for role in ("embedding", "lm_head", "norm"))
    rows.append({"format": name, "weights (GiB)": round(weights.model_bytes / GIB, 2),
                 "of which kept in 16 bits (GiB)": round(kept / GIB, 2) if quant is not None else None})
st.dataframe(rows, hide_index=True, key="learn_quant")
if spec.quantization is not None:
    st.caption(f"This checkpoint is already quantized ({spec.quantization.method}); the Plan page counts its own "
               "format. The table shows the same model from a 16-bit checkpoint.")
else:
    try:
        with_fp8 = estimate(scenario.replace(quantization="fp8"), spec)
    except CalculatorError as exc:
        st.caption(f"--quantization fp8 on this deployment: {sentence(exc)}")
    else:
        st.markdown(
            f"Every byte the weights give up goes to the KV cache: with `--quantization fp8` this deployment's "
            f"KV cache grows from {max(result.kv_cache_bytes, 0) / GIB:,.2f} to "
            f"**{max(with_fp8.kv_cache_bytes, 0) / GIB:,.2f} GiB** ({result.capacity.kv_cache_tokens:,} → "
            f"{with_fp8.capacity.kv_cache_tokens:,} tokens).")
