"""GPUs: what NVML reports on the machine running the dashboard, and a plan on any of those GPUs."""

import sys
from pathlib import Path

# NOTE: a deep link or AppTest may run this page without app.py; the repo root must still be importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamlit as st

from calculator import CalculatorError, Scenario
from calculator.observe import nvml
from calculator.units import gib
from pages.common import page_setup
from pages.common.state import plan_link


def no_gpus(reason: str) -> None:
    st.info(
        "**No GPUs to show.** This page reads the NVIDIA GPUs of the machine running the dashboard (the server "
        f"host), not the computer your browser runs on.\n\n{reason}",
        icon="🖥️",
    )
    st.link_button("Plan with a catalog GPU", plan_link(Scenario()), icon="🧮")


def gpu_section(status: nvml.GpuStatus) -> None:
    st.subheader(f"GPU {status.index} · {status.name}")
    catalog = f"catalog GPU `{status.catalog_key}`" if status.catalog_key else "not in the catalog"
    st.caption(f"{status.uuid} · {catalog} · MIG {status.mig_mode}")
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
    st.link_button("Plan on this GPU", plan_link(nvml.plan_scenario(status, Scenario())), icon="🧮",
                   help="Opens Plan with this GPU's memory, less what other processes already hold.")


def _or_na(value: float | None, template: str) -> str:
    return "n/a" if value is None else template.format(value)


page_setup("GPUs")
st.button("Refresh", icon="🔄")  # a click reruns the page, which reads NVML again
try:
    snapshot = nvml.read_gpus()
except CalculatorError as exc:
    no_gpus(str(exc))
    st.stop()
cuda = f" · CUDA {snapshot.cuda_driver_version}" if snapshot.cuda_driver_version else ""
st.caption(f"Driver {snapshot.driver_version}{cuda} · {len(snapshot.gpus)} GPU(s)")
if not snapshot.gpus:
    no_gpus("The NVIDIA driver is loaded but reports no GPU.")
for gpu_status in snapshot.gpus:
    gpu_section(gpu_status)
