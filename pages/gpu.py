"""GPUs: what NVML reports on the machine running the dashboard, and a plan on any of those GPUs."""

import sys
from pathlib import Path

# NOTE: a deep link or AppTest may run this page without app.py; the repo root must still be importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamlit as st

from calculator import CalculatorError, Scenario, Workload
from calculator.gpus import GpuSpec, find_gpu
from calculator.observe import nvml
from calculator.units import gib
from pages.common import page_setup
from pages.common.state import carried_context, plan_link


def no_gpus(reason: str, planned: Scenario, load: Workload | None) -> None:
    st.info(
        "**No GPUs to show.** This page reads the NVIDIA GPUs of the machine running the dashboard (the server "
        f"host), not the computer your browser runs on.\n\n{reason}",
        icon="🖥️",
    )
    st.link_button("Plan with a catalog GPU", plan_link(planned, load), icon="🧮")


def _planned_gpu(planned: Scenario) -> GpuSpec | None:
    try:
        return find_gpu(planned.gpu) if planned.gpu else None
    except CalculatorError:
        return None  # NOTE: Plan remembers only deployments it estimated, so this is a stale session at most


def planned_gpu_line(planned: Scenario) -> None:
    """Which deployment this page plans on its GPUs: the one the user was just looking at on another page."""
    gpu = _planned_gpu(planned)
    gpus = planned.tensor_parallel_size * planned.pipeline_parallel_size
    st.caption(f"Your plan: `{planned.model}` on {gpu.name if gpu else 'a custom GPU'} × {gpus}. Each GPU below "
               "says whether it is the planned one, and its Plan link keeps the plan's model, settings and load on "
               "that GPU.")


def planned_here(status: nvml.GpuStatus, planned: Scenario) -> str:
    gpu = _planned_gpu(planned)
    if gpu is None:
        return "the plan uses a custom GPU"
    return "**the planned GPU**" if status.catalog_key == gpu.key else f"not the planned {gpu.name}"


def gpu_section(status: nvml.GpuStatus, planned: Scenario, workload: Workload | None, carried: bool) -> None:
    st.subheader(f"GPU {status.index} · {status.name}")
    catalog = f"catalog GPU `{status.catalog_key}`" if status.catalog_key else "not in the catalog"
    st.caption(f"{status.uuid} · {catalog} · MIG {status.mig_mode}"
               + (f" · {planned_here(status, planned)}" if carried else ""))
    used, free, total, load, heat, power = st.columns(6)
    used.metric("Memory used", f"{gib(status.memory_used_bytes):.2f} GiB")
    free.metric("Memory free", f"{gib(status.memory_free_bytes):.2f} GiB")
    total.metric("Memory total", f"{gib(status.memory_total_bytes):.2f} GiB")
    load.metric("Utilization", _or_na(status.utilization_gpu_percent, "{} %"))
    heat.metric("Temperature", _or_na(status.temperature_c, "{} °C"))
    watts = (_or_na(value, "{:.0f} W") for value in (status.power_w, status.power_limit_w))
    power.metric("Power / limit", " / ".join(watts))
    if status.mig_mode == "enabled":
        st.warning("MIG is on: a vLLM on one MIG instance sees only that slice's memory; "
                   "the plan below uses the whole card.")
    if status.processes is None:
        st.caption("This GPU does not list the processes holding its memory.")
    elif not status.processes:
        st.caption("No process holds memory on this GPU.")
    else:
        st.dataframe([{"PID": p.pid, "Process": p.name or "?",
                       "Memory (GiB)": None if p.used_memory_bytes is None else round(gib(p.used_memory_bytes), 2)}
                      for p in status.processes], hide_index=True)
    st.link_button("Plan on this GPU", plan_link(nvml.plan_scenario(status, planned), workload), icon="🧮",
                   help="Opens Plan with this GPU's memory, less what other processes already hold.")


def _or_na(value: float | None, template: str) -> str:
    return "n/a" if value is None else template.format(value)


page_setup("GPUs")
st.button("Refresh", icon="🔄")  # a click reruns the page, which reads NVML again
carried = carried_context()  # NOTE: the deployment and load the user was just looking at (Plan, Compare ...)
planned, load = carried if carried else (Scenario(), None)
if carried:
    planned_gpu_line(planned)
try:
    snapshot = nvml.read_gpus()
except CalculatorError as exc:
    no_gpus(str(exc), planned, load)
    st.stop()
cuda = f" · CUDA {snapshot.cuda_driver_version}" if snapshot.cuda_driver_version else ""
st.caption(f"Driver {snapshot.driver_version}{cuda} · {len(snapshot.gpus)} GPU(s)")
if not snapshot.gpus:
    no_gpus("The NVIDIA driver is loaded but reports no GPU.", planned, load)
for gpu_status in snapshot.gpus:
    gpu_section(gpu_status, planned, load, carried is not None)
