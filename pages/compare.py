"""Compare: two to four deployments side by side — one memory chart, one table, one share link."""

import sys
from pathlib import Path

# NOTE: a deep link or AppTest may run this page without app.py; the repo root must still be importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamlit as st

from calculator import (
    CalculatorError,
    Estimate,
    Scenario,
    Workload,
    estimate,
    find_gpu,
    gpu_catalog,
    preset_ids,
)
from calculator.charts import compare_memory_figure
from calculator.engine import uncertainty
from calculator.engine.kv_cache import SUPPORTED_KV_CACHE_DTYPES
from calculator.engine.vllm_versions import known_versions
from calculator.explain import deployment_line, verdict_word
from calculator.speed.inputs import SpeedInputs, speed_plan
from calculator.units import format_ms
from calculator.summary import requests_at_once
from calculator.units import GIB
from calculator.url_state import read_link, to_query_params
from pages.common import import_box, outcomes, page_setup, sentence
from pages.common.inputs import cached_model_spec, interconnect_picker, valid_quantizations
from pages.common.capacity_view import gpu_count
from pages.common.outputs import CHART_CONFIG
from pages.common.speed_view import usd
from pages.common.state import CUSTOM_GPU, FROM_CHECKPOINT, MODEL_SOURCES, carried_context, plan_link, share_link

PREFIX = "cmp"
LETTERS = "abcd"
STARTERS = (
    Scenario(model="meta-llama/Llama-3.1-70B-Instruct", gpu="h100-sxm-80gb", tensor_parallel_size=4,
             max_model_len=32768),
    Scenario(model="RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", gpu="h100-sxm-80gb", tensor_parallel_size=2,
             max_model_len=32768),
    Scenario(model="Qwen/Qwen2.5-72B-Instruct-AWQ", gpu="l40s-48gb", tensor_parallel_size=2, max_model_len=16384),
    Scenario(model="Qwen/Qwen3-32B", gpu="a100-sxm-80gb", max_model_len=32768, kv_cache_dtype="fp8"),
)
# Edited here; every other field of a scenario (from a link or an import) is kept as it came.
EDITABLE = ("model", "gpu", "tensor_parallel_size", "quantization", "kv_cache_dtype", "max_model_len", "vllm_version",
            "interconnect")
VERDICT_BOX = {"fits with margin": st.success, "borderline": st.warning, "does not fit": st.error,
               "does not run": st.error}


def keep(letter: str, scenario: Scenario, asked_model: str | None = None) -> None:
    """Hold a scenario's full settings and set its editors."""
    st.session_state[f"{PREFIX}_{letter}__scenario"] = scenario
    st.session_state[f"{PREFIX}_{letter}__substituted"] = asked_model
    for field in EDITABLE:
        st.session_state[f"{PREFIX}_{letter}_{field}"] = getattr(scenario, field)
    if scenario.gpu is None:
        st.session_state[f"{PREFIX}_{letter}_gpu"] = CUSTOM_GPU


def read_link_once() -> list[str]:
    """Scenarios from ``a.m=...&b.tp=...`` parameters, once per session."""
    if st.session_state.get(f"{PREFIX}__initialised"):
        return []
    params = st.query_params.to_dict()
    count = params.get("k", "2")
    warnings = [] if count in ("2", "3", "4") else [f"Share link: k={count!r} is not 2-4; showing 2 scenarios"]
    shown = int(count) if count in ("2", "3", "4") else 2
    # NOTE: a scenario the link sets is shown even past its k (which may have been edited or left out), and said.
    named = max((LETTERS.index(key[0]) + 1 for key in params if key[:2] in {f"{x}." for x in LETTERS}), default=0)
    if named > shown:
        asked = f"k={count!r}, but " if "k" in params else ""
        warnings.append(f"Share link: {asked}the link sets scenario {LETTERS[named - 1].upper()}; "
                        f"showing {named} scenarios")
        shown = named
    st.session_state[f"{PREFIX}_count"] = shown
    carried = carried_context()  # opened without a link: scenario A is the deployment just seen elsewhere
    for index, letter in enumerate(LETTERS):
        own = {key[2:]: value for key, value in params.items() if key.startswith(f"{letter}.")}
        link = read_link(own) if own else None
        scenario = link.scenario if link else carried[0] if carried and index == 0 else STARTERS[index]
        warnings += [f"Share link, scenario {letter.upper()}: {p}" for p in (link.warnings if link else ())]
        origin = "The deployment you came from" if carried and index == 0 and not link else "Share link"
        warnings += hold(letter, scenario, f"{origin}, scenario {letter.upper()}")
    st.session_state[f"{PREFIX}__initialised"] = True
    return warnings


def hold(letter: str, scenario: Scenario, origin: str) -> list[str]:
    """Keep a scenario from a link or an import; a model that is not a preset is substituted, and says so."""
    if scenario.model in preset_ids():
        keep(letter, scenario)
        return []
    starter = STARTERS[LETTERS.index(letter)].model
    keep(letter, scenario.replace(model=starter), scenario.model)
    return [f"{origin}: {scenario.model} is not a bundled preset; showing {starter} instead (no Plan link is "
            "offered for it)"]


def scenario_editor(letter: str, column) -> Scenario | str:
    key = f"{PREFIX}_{letter}"
    held: Scenario = st.session_state.get(f"{key}__scenario", STARTERS[LETTERS.index(letter)])
    presets, catalog = preset_ids(), [g.key for g in gpu_catalog()]
    names = {g.key: g.name for g in gpu_catalog()}
    if held.gpu is None and held.gpu_memory_gib is not None:  # a custom GPU from a link or an import stays
        catalog.append(CUSTOM_GPU)
        names[CUSTOM_GPU] = f"Custom {held.gpu_memory_gib:g} GiB GPU"
    if st.session_state.get(f"{key}_quantization") is None:
        st.session_state[f"{key}_quantization"] = FROM_CHECKPOINT
    for field, options in (("model", presets), ("gpu", catalog), ("kv_cache_dtype", SUPPORTED_KV_CACHE_DTYPES)):
        if st.session_state.get(f"{key}_{field}") not in options:
            st.session_state[f"{key}_{field}"] = getattr(STARTERS[LETTERS.index(letter)], field)
    versions = list(known_versions())
    if st.session_state.get(f"{key}_vllm_version") not in versions:
        versions.insert(0, st.session_state.get(f"{key}_vllm_version") or versions[0])
    with column:
        st.markdown(f"**Scenario {letter.upper()}**")
        model = st.selectbox("Model", presets, key=f"{key}_model")
        spec = cached_model_spec(MODEL_SOURCES[0], model)
        heads = spec.num_attention_heads
        asked_tp = st.session_state.get(f"{key}_tensor_parallel_size", 1)
        tps = sorted({*(tp for tp in range(1, 1025) if heads % tp == 0), asked_tp})
        quantizations = [FROM_CHECKPOINT, *valid_quantizations(spec)]
        if st.session_state[f"{key}_quantization"] not in quantizations:
            quantizations.append(st.session_state[f"{key}_quantization"])
        values = {
            "model": model,
            "gpu": st.selectbox("GPU", catalog, key=f"{key}_gpu", format_func=lambda k: names[k]),
            "tensor_parallel_size": st.selectbox("TP", tps, key=f"{key}_tensor_parallel_size",
                                                 help=f"{heads} attention heads: TP must divide them"),
            "quantization": st.selectbox("Quantization", quantizations, key=f"{key}_quantization"),
            "kv_cache_dtype": st.selectbox("KV cache dtype", SUPPORTED_KV_CACHE_DTYPES, key=f"{key}_kv_cache_dtype"),
            "max_model_len": st.number_input("max_model_len", 1, 100_000_000, key=f"{key}_max_model_len",
                                             placeholder="config"),
            "vllm_version": st.selectbox("vLLM", versions, key=f"{key}_vllm_version"),
            "interconnect": interconnect_picker(key),
        }
    if values["quantization"] == FROM_CHECKPOINT:
        values["quantization"] = None
    if values["gpu"] == CUSTOM_GPU:
        values["gpu"] = None
    elif values["gpu"] != held.gpu:
        values["gpu_memory_gib"] = None  # a newly picked catalog GPU brings its own memory, as on the Plan page
    if values["model"] != held.model or values["gpu"] != held.gpu:
        st.session_state[f"{key}__substituted"] = None  # the user chose: nothing stands in any more
    try:
        return held.replace(**values)
    except ValueError as exc:
        return str(exc).splitlines()[-1]


def speed_rows(result: Estimate, workload: Workload) -> dict[str, str]:
    """Plan's capacity plan for the same scenario, load and (default) SLOs: GPUs, speed, cost and the SLO verdict."""
    if not result.fits:
        return dict.fromkeys(SPEED_ROWS, "— (does not start)")
    try:
        ceilings = speed_plan(result, workload, SpeedInputs()).ceilings
    except CalculatorError as exc:
        return {**dict.fromkeys(SPEED_ROWS, "—"), "SLO verdict": sentence(exc)}
    plan = ceilings.plan
    per = plan.per_replica
    return {"plan: replicas × GPUs": f"{gpu_count(plan.replicas, plan.gpus_per_replica)} ({ceilings.binding} binds)",
            "TTFT p95": format_ms(per.ttft_p95_ms), "ITL": format_ms(per.tpot_ms),
            "throughput (output)": f"{plan.output_throughput_tok_s:,.0f} tok/s",
            "$/hour": "no price" if plan.cost_per_hour is None else usd(plan.cost_per_hour),
            "$/M output tokens": "no price" if plan.cost_per_hour is None else usd(plan.cost_per_million_output_tokens),
            "SLO verdict": "meets the SLOs" if plan.meets_slo else "misses: " + "; ".join(plan.violations)}


SPEED_ROWS = ("plan: replicas × GPUs", "TTFT p95", "ITL", "throughput (output)", "$/hour", "$/M output tokens",
              "SLO verdict")


def table(results: list[tuple[str, Estimate]], workload: Workload) -> None:
    """One row per figure, one column per scenario: the same verdicts, plan, speed and cost as Plan, and vLLM's
    effective batch limits."""
    rows: dict[str, list[str]] = {}
    for _, result in results:
        s, b = result.settings, result.budget
        running, limit = requests_at_once(result)
        figures = {
            "verdict": verdict_word(uncertainty.verdict(result)),
            **speed_rows(result, workload),
            "GPUs (TP × PP)": f"{result.num_gpus} × {result.gpu.name if result.gpu else 'custom'}",
            "weights / GPU": f"{b.weights_bytes / GIB:,.2f} GiB",
            "LoRA slots / GPU": f"{b.lora_bytes / GIB:,.2f} GiB" if b.lora_bytes else "—",
            "speculative proposer / GPU": (f"{b.draft_weights_bytes / GIB:,.2f} GiB ({result.proposer.method}, "
                                           f"{result.proposer.num_speculative_tokens} tokens)"
                                           if result.proposer else "—"),
            "max_num_seqs (effective)": f"{s.max_num_seqs:,}",
            "max_num_batched_tokens (effective)": f"{s.max_num_batched_tokens:,}",
            "activation peak / GPU": f"{b.activation_bytes / GIB:,.2f} GiB",
            "KV cache / GPU": f"{result.kv_cache_bytes / GIB:,.2f} GiB",
            "KV / token / GPU": f"{result.layout.kv_bytes_per_token / 1024:,.1f} KiB",
            "KV cache tokens": f"{result.capacity.kv_cache_tokens:,}",
            "max concurrency @ max_model_len": f"{result.capacity.max_concurrency:,.2f}x",
            "requests at once @ max_model_len": f"{running:,} ({limit.replace('_', ' ')})",
            "largest max_model_len": f"{result.max_fitting_model_len:,}",
            "vLLM": f"{result.rules.version}",
        }
        for label, value in figures.items():
            rows.setdefault(label, []).append(value)
    names = [name for name, _ in results]
    st.table({"": list(rows), **{name: [rows[label][i] for label in rows] for i, name in enumerate(names)}})
    defaults = {(r.settings.max_num_seqs, r.settings.max_num_batched_tokens) for _, r in results
                if r.scenario.max_num_seqs is None and r.scenario.max_num_batched_tokens is None}
    if len(defaults) > 1:
        st.caption("ℹ️ vLLM's defaults for max_num_seqs and max_num_batched_tokens differ by GPU memory tier (e.g. "
                   "1,024 seqs and 8,192 tokens on ≥ 70 GiB GPUs other than the A100 since 0.11), which moves the "
                   "activation peak and so the KV cache; set them to compare like with like.")


# The load every scenario is planned for: (link key, Workload field, label); Plan's same-named link keys.
LOAD_FIELDS = (("users", "target_concurrent_requests", "Concurrent requests"),
               ("in", "prompt_tokens_mean", "Prompt tokens"), ("out", "output_tokens_mean", "Output tokens"))


def load_input() -> Workload:
    """The load every scenario is planned for (``users``, ``in``, ``out`` in the link); Plan's default SLOs."""
    defaults, values = Workload(), {}
    for column, (link_key, field, label) in zip(st.columns(len(LOAD_FIELDS)), LOAD_FIELDS):
        key, low = f"{PREFIX}_{field}", 0 if field == "output_tokens_mean" else 1
        if key not in st.session_state:
            asked = st.query_params.get(link_key, "")
            seen = carried_context()  # opened without a link: the load just seen elsewhere
            start = seen[1] if seen and seen[1] is not None else defaults
            st.session_state[key] = int(asked) if asked.isdigit() and low <= int(asked) <= 10_000_000 else (
                getattr(start, field))
        values[field] = column.number_input(
            label, low, 10_000_000, key=key,
            help="Speed, cost and the SLO verdict below use Plan's default SLOs (TTFT p95 ≤ "
                 f"{SpeedInputs().ttft_p95_ms / 1e3:g} s, ITL ≤ {SpeedInputs().tpot_ms:g} ms); open a scenario in "
                 "Plan to change them.")
    return Workload(**values)


def import_target() -> str:
    return st.segmented_control("Into scenario", list(LETTERS[: st.session_state.get(f"{PREFIX}_count", 2)]),
                                key=f"{PREFIX}_import_into", format_func=str.upper, default="a") or "a"


def import_base(letter: str) -> Scenario:
    """A launch line does not say the GPU or the version: the target scenario's are kept."""
    return st.session_state.get(f"{PREFIX}_{letter}__scenario", STARTERS[LETTERS.index(letter)])


def chosen_target() -> str:
    return st.session_state.get(f"{PREFIX}_import_into") or "a"


def apply_import(scenario: Scenario, letter: str) -> list[str]:
    return hold(letter, scenario, f"Imported command, scenario {letter.upper()}")


page_setup("Compare")
LINK_WARNINGS = f"{PREFIX}__link_warnings"
if link_warnings := read_link_once():
    outcomes.keep(LINK_WARNINGS, link_warnings)
report_place = import_box.import_box(PREFIX, import_base, apply_import, label="Put this command into the scenario",
                                     target=import_target, chosen_target=chosen_target)
link_warnings_place = st.container()
count = st.segmented_control("Scenarios", (2, 3, 4), key=f"{PREFIX}_count") or 2
load = load_input()
columns = st.columns(count)
results, params = [], {"k": str(count)} if count != 2 else {}
params.update({link_key: str(getattr(load, field)) for link_key, field, _ in LOAD_FIELDS
               if getattr(load, field) != getattr(Workload(), field)})
asked_by_letter = {letter: scenario_editor(letter, column) for letter, column in zip(LETTERS[:count], columns)}
import_box.show_report(PREFIX, report_place, asked_by_letter.get)
for warning in outcomes.while_inputs_are(LINK_WARNINGS, asked_by_letter) or ():
    link_warnings_place.warning(warning, icon="🔗")
for (letter, scenario), column in zip(asked_by_letter.items(), columns):
    if isinstance(scenario, str):
        column.error(scenario)
        continue
    asked = st.session_state.get(f"{PREFIX}_{letter}__substituted")
    params.update({f"{letter}.{k}": v for k, v in to_query_params(scenario).items()})
    if asked:
        params[f"{letter}.m"] = asked  # the link keeps what was asked for
    try:
        result = estimate(scenario, cached_model_spec(MODEL_SOURCES[0], scenario.model))
    except CalculatorError as exc:
        column.error(sentence(exc))
        continue
    call = uncertainty.verdict(result)
    with column:
        st.caption(f"**{deployment_line(result)}**")
        VERDICT_BOX[call]((f"Substituted for {asked}: " if asked else "") + verdict_word(call),
                          icon="✅" if call == "fits with margin" else "⚖️" if call == "borderline" else "🛑")
        if not asked:
            st.link_button("Open in Plan", plan_link(scenario, load))
    gpu = find_gpu(scenario.gpu).name if scenario.gpu else f"custom {scenario.gpu_memory_gib:g} GiB GPU"
    results.append((f"{letter.upper()}: {scenario.model.split('/')[-1]} on {result.num_gpus}× {gpu}", result))

if results:
    # NOTE: the chart names scenarios by letter (long names would slant over the legend); the table has them in full.
    st.plotly_chart(compare_memory_figure([(name.split(":")[0], result) for name, result in results]),
                    config=CHART_CONFIG, key="compare_chart")
    table(results, load)
st.markdown("#### Share this comparison")
st.code(share_link(params), language=None, wrap_lines=True)
