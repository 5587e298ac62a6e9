"""Plan: pick a model and GPUs, move the knobs, see what vLLM will do — and share the view."""

import sys
from pathlib import Path

# NOTE: a deep link or AppTest may run this page without app.py; the repo root must still be importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamlit as st

from calculator import CalculatorError, Estimate, Scenario, Workload, estimate, workload_capacity
from calculator.model.stand_in import preset_stand_in
from calculator.scenario import DEFAULT_MODEL
from calculator.speed.inputs import SpeedInputs
from pages.common import (
    capacity_view,
    figures_first,
    import_box,
    inputs,
    outcomes,
    outputs,
    page_setup,
    sentence,
    speed_view,
    state,
)

PREFIX = "plan"
LAST_VALID = f"{PREFIX}__last_valid"  # (scenario, spec, workload) of the last run that produced numbers


def import_base(_target: object = None) -> Scenario:
    """What a launch line cannot say (GPU, platform, version) comes from the page's current inputs."""
    values = state.widget_values(PREFIX, ("gpu", "gpu_memory_gib", "vllm_version", "other_processes_memory_gib"))
    values["device"] = inputs.PLATFORMS.get(st.session_state.get(f"{PREFIX}_device_choice"))
    gpu = values.pop("gpu")
    custom = gpu == state.CUSTOM_GPU
    try:
        return Scenario(gpu=None if custom else gpu, **{k: v for k, v in values.items()
                                                         if v is not None and (custom or k != "gpu_memory_gib")})
    except ValueError:
        return Scenario()


def apply_import(scenario: Scenario, _target: object = None) -> list[str]:
    st.session_state.pop(f"{PREFIX}__substituted", None)  # the import names the model: nothing stands in for it
    return state.apply_scenario(PREFIX, scenario)


def offer_stand_in(model: str) -> None:
    """The Hub cannot give ``model``: offer the bundled preset of the same model, for the user to accept."""
    preset = preset_stand_in(model)
    if preset is None:
        return
    st.info(f"**{preset}**, a bundled preset, is the same model in another precision. Use it as a stand-in? The "
            f"page will say that {model} was asked for, and its weights figures are the preset's.", icon="🔁")
    st.button(f"Use {preset} as a stand-in", key=f"{PREFIX}_stand_in", on_click=use_stand_in, args=(preset, model))


def use_stand_in(preset: str, asked: str) -> None:
    st.session_state[f"{PREFIX}_source"] = state.MODEL_SOURCES[0]
    st.session_state[f"{PREFIX}_preset"] = preset
    st.session_state[f"{PREFIX}__substituted"] = {**state.substituted(PREFIX), "model": asked}


def results(scenario: Scenario, spec, workload: Workload, substituted: dict[str, str], util_note, live: bool,
            result: Estimate | None = None, speed: SpeedInputs | str = SpeedInputs()) -> Estimate:
    """Everything the page shows for one valid scenario; ``live`` False draws the last valid one, greyed."""
    result = result or estimate(scenario, spec)
    capacity = workload_capacity(result, workload)
    outputs.header(result, substituted)
    outputs.verdict(result, substituted)
    outputs.kpis(result, capacity, PREFIX)
    if live:
        outputs.utilization_note(result, util_note)
        figures_first.send_the_figures(".st-key-kpis [data-testid=stMetricValue]")
    outputs.memory_chart(result)
    outputs.ladder(result)
    plan = speed_view.section(result, workload, speed)
    if plan is None:
        capacity_view.memory_only(result, capacity, workload, "the speed model has no answer here, see above")
    else:
        capacity_view.draw(plan, workload)
    outputs.how_calculated(result)
    if result.fits:  # NOTE: a server that does not start holds no requests, paged or not
        outputs.paged_vs_naive(capacity, result)
    outputs.sweeps(scenario, spec, PREFIX)
    if live and not substituted:
        outputs.launch(scenario, result)
    return result


page_setup("Plan")
outputs.page_css()
LINK_WARNINGS = f"{PREFIX}__link_warnings"
if link_warnings := state.init_from_url(PREFIX):
    outcomes.keep(LINK_WARNINGS, link_warnings)
report_place = import_box.import_box(PREFIX, import_base, apply_import)
link_warnings_place = st.container()

with st.sidebar:
    model, spec, model_error = inputs.model_section(PREFIX)
    hardware = inputs.hardware_section(PREFIX)
    parallelism = inputs.parallelism_section(PREFIX, spec)
    vllm_settings, util_note = inputs.vllm_section(PREFIX, spec)
    workload = inputs.workload_section(PREFIX)
    speed = speed_view.inputs_section(PREFIX)

substituted = dict(state.substituted(PREFIX))
asked = inputs.build_scenario(model, hardware, parallelism, vllm_settings)
page_inputs = (asked, workload, speed)  # what an import or a link set, as long as the user has not changed it
import_box.show_report(PREFIX, report_place, lambda _target: page_inputs)
for warning in outcomes.while_inputs_are(LINK_WARNINGS, page_inputs) or ():
    link_warnings_place.warning(warning, icon="🔗")
problem = None
if isinstance(workload, str):
    problem, workload = f"Workload: {workload}", None
if spec is None:
    problem = sentence(model_error)
elif isinstance(asked, str):
    problem = f"Settings: {asked}"
elif problem is None:
    try:
        current = estimate(asked, spec)
    except CalculatorError as exc:
        problem = sentence(exc)

if problem is None:
    st.session_state[LAST_VALID] = (asked, spec, workload)
    state.remember(asked, workload)
    results(asked, spec, workload, substituted, util_note, live=True, result=current, speed=speed)
    sweep_view = st.session_state.get(f"{PREFIX}_view_sweep", "max_model_len")
    # NOTE: a link cannot carry an uploaded config.json, so none is offered for one (rather than another model's).
    link = None if model.startswith("upload:") else state.write_url(
        asked, workload, {"sweep": sweep_view} if sweep_view != "max_model_len" else {},
        speed if isinstance(speed, SpeedInputs) else None, substituted)
    if not substituted:
        outputs.share_and_export(link, current, workload)
elif LAST_VALID in st.session_state:
    st.error(f"**{problem}** The inputs are kept; below, greyed, the last settings that gave numbers.", icon="✋")
    if spec is None:
        offer_stand_in(model)
    if isinstance(asked, Scenario) and not model.startswith("upload:"):
        state.write_url(asked, workload)  # the address bar keeps what was asked, so the link is not lost
    last_scenario, last_spec, last_workload = st.session_state[LAST_VALID]
    with st.container(key="stale_result"):
        results(last_scenario, last_spec, last_workload, {}, util_note, live=False,
                speed=speed if isinstance(speed, SpeedInputs) else SpeedInputs())
elif spec is None:
    # Nothing valid yet (a link or an import named an unknown model): show the default model, say so, and offer
    # no command or link for it.
    st.error(f"**{problem}** Showing {DEFAULT_MODEL} instead; no command or link is offered for it.", icon="✋")
    offer_stand_in(model)
    fallback = asked.replace(model=DEFAULT_MODEL) if isinstance(asked, Scenario) else Scenario()
    if isinstance(asked, Scenario) and not model.startswith("upload:"):
        state.write_url(asked, workload)  # the address bar keeps what was asked
    default_spec = inputs.cached_model_spec(state.MODEL_SOURCES[0], DEFAULT_MODEL)
    try:
        estimate(fallback, default_spec)
    except CalculatorError:
        fallback = Scenario(gpu=fallback.gpu, gpu_memory_gib=fallback.gpu_memory_gib)
    results(fallback, default_spec, workload or Workload(), {**substituted, "model": model}, util_note, live=False)
else:
    st.error(f"**{problem}** The inputs are kept; change the highlighted setting to see numbers.", icon="✋")
