"""Learn: where the memory goes and why GQA, MLA and PagedAttention matter — with your own model's numbers."""

import sys
from pathlib import Path

# NOTE: a deep link or AppTest may run this page without app.py; the repo root must still be importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamlit as st

from calculator import Scenario, Workload, estimate, gpu_catalog, preset_ids, workload_capacity
from calculator.charts import block_grid_figure, kv_per_token_figure, memory_stack_figure
from calculator.engine.kv_cache import compare_with_mha
from calculator.engine.workload import paged_slots
from calculator.scenario import DEFAULT_GPU, DEFAULT_MODEL
from calculator.units import GIB
from pages.common import page_setup
from pages.common.inputs import MODEL_SOURCES, cached_model_spec
from pages.common.outputs import CHART_CONFIG

page_setup("Learn")
st.caption("A guided tour of vLLM's memory accounting, computed live for the model and GPU you pick.")
left, right = st.columns(2)
model = left.selectbox("Model", preset_ids(), index=preset_ids().index(DEFAULT_MODEL), key="learn_model")
gpus = {g.key: g for g in gpu_catalog()}
gpu = right.selectbox("GPU", list(gpus), index=list(gpus).index(DEFAULT_GPU), key="learn_gpu",
                      format_func=lambda key: gpus[key].name)
spec = cached_model_spec(MODEL_SOURCES[0], model)
result = estimate(Scenario(model=model, gpu=gpu, vllm_version="0.32.0"), spec)
budget, layout = result.budget, result.layout

st.header("1. Where the memory goes")
st.markdown(
    f"vLLM may use `gpu_memory_utilization` × {budget.total_bytes / GIB:.2f} GiB = "
    f"**{budget.requested_bytes / GIB:.2f} GiB** of this GPU. The weights take **{budget.weights_bytes / GIB:.2f} GiB**; "
    f"a dummy forward pass over `max_num_batched_tokens` and the sampler reserve an activation peak of "
    f"**{budget.activation_bytes / GIB:.2f} GiB**; NCCL/cuBLAS and CUDA graphs take "
    f"{(budget.non_torch_bytes + budget.cudagraph_bytes) / GIB:.2f} GiB. **Everything left — "
    f"{result.kv_cache_bytes / GIB:.2f} GiB — becomes the KV cache**, and its size sets how many requests run at once.")
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
block = st.select_slider("Block size (tokens)", [8, 16, 32, 64, 128], value=16, key="learn_block")
lengths = [int(x) for x in st.text_input("Request lengths (tokens)", "70, 33, 120, 18", key="learn_lengths")
           .replace(" ", "").split(",") if x.isdigit() and int(x) > 0][:8] or [70]
st.plotly_chart(block_grid_figure(lengths, block), config=CHART_CONFIG, key="learn_blocks")
allocated = paged_slots(lengths, block)
st.markdown(
    f"Paged: {len(lengths)} requests hold {allocated:,} token slots for {sum(lengths):,} tokens — only the last block "
    f"of each is partly empty ({100 * (1 - sum(lengths) / allocated):.1f}% waste). A contiguous allocator reserves "
    f"`max_model_len` = {result.settings.max_model_len:,} tokens per request: "
    f"{100 * (1 - sum(lengths) / (len(lengths) * result.settings.max_model_len)):.2f}% waste.")

st.header("4. Shared prefixes and parallel sampling")
prefix = st.slider("System prompt shared by every request (tokens)", 0, 4096, 1024, step=64, key="learn_prefix")
samples = st.slider("Parallel samples per request (n)", 1, 8, 4, key="learn_n")
alone = workload_capacity(result, Workload(prompt_tokens_mean=2048, output_tokens_mean=512))
shared = workload_capacity(result, Workload(prompt_tokens_mean=2048, output_tokens_mean=512,
                                            shared_prefix_tokens=prefix, parallel_samples=samples))
st.plotly_chart(block_grid_figure([2048 + 512] * min(samples, 4), 256, shared_prefix_tokens=prefix),
                config=CHART_CONFIG, key="learn_shared")
st.markdown(
    f"With prefix caching the {prefix:,}-token prefix is stored once ({shared.mean.prefix_blocks:,} blocks), and the "
    f"{samples} samples of a request share their full prompt blocks; only the last prompt block is copied on write. "
    f"A 2,048 + 512-token request alone needs {alone.mean.private_blocks:,} blocks; with the prefix and {samples} "
    f"samples it needs {shared.mean.private_blocks:,} private blocks for {samples}× the output. "
    f"On this GPU that is **{alone.concurrency_mean:,}** single requests or **{shared.concurrency_mean:,}** "
    f"requests of {samples} samples at once.")
