"""Page state: the URL is read once per session into prefixed widget keys; widgets -> Scenario -> URL."""

from __future__ import annotations

from typing import Any

import streamlit as st

from calculator import Scenario, Workload, preset_ids
from calculator.engine.kv_cache import SUPPORTED_KV_CACHE_DTYPES
from calculator.model.quantization import SUPPORTED_FLAGS
from calculator.speed.inputs import SpeedInputs
from calculator.url_state import SCENARIO_KEYS, WORKLOAD_KEYS, read_link, to_query_params

CUSTOM_GPU = "custom"
MODEL_SOURCES = ("Preset", "Hugging Face id", "Upload config.json")
# Scenario/Workload fields that map 1:1 to a widget named f"{prefix}_{field}".
WIDGET_FIELDS = (*(f for f in SCENARIO_KEYS if f not in ("model", "gpu", "gpu_memory_utilization")),
                 *WORKLOAD_KEYS)

FROM_CHECKPOINT = "from checkpoint"  # NOTE: a None option would show as "Choose an option" in a selectbox
QUANTIZATIONS = (FROM_CHECKPOINT, *SUPPORTED_FLAGS)
DTYPES = ("auto", "bfloat16", "float16", "float32")


CONTEXT = "context__last"  # (Scenario, Workload | None): the deployment and workload the user last looked at


def remember(scenario: Scenario, workload: Workload | None = None) -> None:
    """What the user is looking at now, for the next page they open."""
    st.session_state[CONTEXT] = (scenario, workload)


def carried_context() -> tuple[Scenario, Workload | None] | None:
    """The deployment and workload the user was just looking at on another page, for a page opened without a link
    of its own (a link always wins)."""
    if st.query_params.to_dict():
        return None
    return st.session_state.get(CONTEXT)


def init_from_url(prefix: str) -> list[str]:
    """Fill this page's widget keys from the share link, once per session (or, opened without one, from what the
    user was just looking at on another page); returns the link's warnings."""
    flag = f"{prefix}__initialised"
    if st.session_state.get(flag):
        return []  # the link's warnings were shown when it was opened
    link = read_link(st.query_params.to_dict())
    carried = carried_context()
    scenario, workload = (carried[0], carried[1] or link.workload) if carried else (link.scenario, link.workload)
    warnings = [*link.warnings, *apply_scenario(prefix, scenario, workload)]
    apply_speed(prefix, link.speed)
    for key, value in link.view.items():
        st.session_state[f"{prefix}_view_{key}"] = value
    st.session_state[f"{prefix}__substituted"] = dict(link.substituted)
    # NOTE: kept so the address bar can go on carrying what the link asked for while a substitute is shown.
    st.session_state[f"{prefix}__asked"] = {"model": scenario.model, **link.substituted}
    st.session_state[flag] = True
    return [f"Share link: {w}" for w in warnings]


def substituted(prefix: str) -> dict[str, str]:
    """Inputs a link asked for that the page replaced (field -> asked value), until the user picks another."""
    return st.session_state.get(f"{prefix}__substituted") or {}


def clear_substitution(prefix: str, field: str) -> None:
    """Widget callback: the user chose a value, so nothing is substituted for this field any more."""
    st.session_state.get(f"{prefix}__substituted", {}).pop(field, None)


def apply_scenario(prefix: str, scenario: Scenario, workload: Workload | None = None) -> list[str]:
    """Set every widget of the page to a scenario (links, `vllm serve` import, calibration); returns warnings
    for values a picker cannot show (they fall back to the default)."""
    warnings = []
    if scenario.kv_cache_dtype not in SUPPORTED_KV_CACHE_DTYPES:
        warnings.append(f"kv_cache_dtype {scenario.kv_cache_dtype!r} is not one vLLM accepts; using auto")
        scenario = scenario.replace(kv_cache_dtype="auto")
    state = st.session_state
    if scenario.model in preset_ids():
        state[f"{prefix}_source"], state[f"{prefix}_preset"] = MODEL_SOURCES[0], scenario.model
    else:
        state[f"{prefix}_source"], state[f"{prefix}_hub_id"] = MODEL_SOURCES[1], scenario.model
    state[f"{prefix}_gpu"] = scenario.gpu or CUSTOM_GPU
    state[f"{prefix}_util_default"] = scenario.gpu_memory_utilization is None
    if scenario.gpu_memory_utilization is not None:
        state[f"{prefix}_util"] = scenario.gpu_memory_utilization
    for field in WIDGET_FIELDS:
        if field in WORKLOAD_KEYS and workload is None:
            continue  # an import changes the deployment, not the workload
        source: Any = scenario if field in SCENARIO_KEYS else workload
        state[f"{prefix}_{field}"] = getattr(source, field)
    state[f"{prefix}_kv_cache_memory_text"] = ("" if scenario.kv_cache_memory_bytes is None
                                               else str(scenario.kv_cache_memory_bytes))
    state[f"{prefix}_cudagraph_capture_sizes_text"] = " ".join(map(str, scenario.cudagraph_capture_sizes or ()))
    state[f"{prefix}_hf_overrides_text"] = scenario.hf_overrides or ""
    if scenario.quantization is None:
        state[f"{prefix}_quantization"] = FROM_CHECKPOINT
    return warnings


LOADS = ("concurrent requests", "request rate")


def apply_speed(prefix: str, speed: SpeedInputs) -> None:
    """Set the speed section's widgets (``{prefix}_speed_{field}``) to a link's load, SLOs, price and rates."""
    state = st.session_state
    for field in SpeedInputs.model_fields:
        state[f"{prefix}_speed_{field}"] = getattr(speed, field)
    state[f"{prefix}_speed_load"] = LOADS[1] if speed.request_rate is not None else LOADS[0]


def widget_values(prefix: str, fields: tuple[str, ...]) -> dict[str, Any]:
    return {field: st.session_state.get(f"{prefix}_{field}") for field in fields}


def write_url(scenario: Scenario, workload: Workload | None = None, view: dict[str, str] | None = None,
              speed: SpeedInputs | None = None, substituted: dict[str, str] | None = None) -> str:
    """Mirror the inputs into the address bar (so the page URL is always the share link); return the link.
    ``substituted``: fields a stand-in is shown for; the address bar keeps what was asked (an unknown ``g=``),
    so copying it again brings the same warning back instead of silently planning the stand-in."""
    params = to_query_params(scenario, workload, view, speed)
    params.update({SCENARIO_KEYS[field]: asked for field, asked in (substituted or {}).items()
                   if field in SCENARIO_KEYS and field != "model"})
    return share_link(params)


def share_link(params: dict[str, str]) -> str:
    """Put ``params`` in the address bar and return the full link to this page with them."""
    if params != st.query_params.to_dict():
        st.query_params.from_dict(params)
    return link_to(_base_url(), params)


def plan_link(scenario: Scenario, workload: Workload | None = None, speed: SpeedInputs | None = None) -> str:
    """A link that opens the Plan page with ``scenario`` (and the speed section's inputs)."""
    base = _base_url()
    root = base[: base.rfind("/") + 1] if "/" in base.split("://", 1)[-1] else base + "/"
    return link_to(root, to_query_params(scenario, workload, speed=speed))


def link_to(base: str, params: dict[str, str]) -> str:
    query = "&".join(f"{key}={_quote(value)}" for key, value in params.items())
    return f"{base}?{query}" if query else base


def _quote(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="/.:-_")


def _base_url() -> str:
    try:
        url = st.context.url or ""
    except Exception:  # noqa: BLE001 - AppTest and old servers have no URL context
        url = ""
    return url.split("?")[0] or "http://localhost:8501/"
