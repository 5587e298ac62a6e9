"""Fleet: many vLLM replicas, read from Prometheus, as one capacity picture."""

import sys
import time
from pathlib import Path

# NOTE: a deep link or AppTest may run this page without app.py; the repo root must still be importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamlit as st

from calculator import CalculatorError
from calculator.observe.fleet import MODEL_LABEL, group_replicas, groupable_labels, replicas_from_reading
from calculator.observe.fleet_client import PrometheusClient, read_fleet
from calculator.observe.fleet_latency import read_latency
from calculator.observe.promql import parse_filters, time_range
from pages.common import page_setup, sentence
from pages.common.live_view import access_notice, access_policy
from pages.common.fleet_view import (
    GROUP_PANELS,
    connection_section,
    estimate_section,
    fleet_summary,
    group_panel,
    latency_panel,
    model_specs,
    plan_section,
    range_section,
)

page_setup("Fleet")
with st.sidebar:
    url, credentials, filter_text = connection_section()
    frozen_end_s, duration_s, refresh_s = range_section()
    base = estimate_section()
    target, headroom, changes = plan_section()
access_notice(access_policy(), "This page reads many vLLM replicas from one Prometheus server and plans the "
                                "fleet's capacity from what they report.")



@st.fragment(run_every=refresh_s)
def fleet_panel() -> None:
    """Reads Prometheus and draws the fleet; reruns alone on the auto-refresh, the sidebar stays as it is."""
    try:
        matchers = parse_filters(filter_text)
        window = time_range(frozen_end_s or time.time(), duration_s)
        with st.spinner("Querying Prometheus"), PrometheusClient(url, policy=access_policy(), **credentials) as client:
            deadline = time.monotonic() + client.deadline_s  # one wait for the fleet and its latencies
            reading = read_fleet(client, window, matchers, count_series=True, deadline=deadline)
            try:
                latency = read_latency(client, window, matchers, deadline=deadline)
            except CalculatorError as exc:
                latency = sentence(exc)
    except CalculatorError as exc:
        st.error(sentence(exc), icon="🔌")
        return
    replicas = replicas_from_reading(reading)
    if not replicas:
        st.info("Prometheus has no vllm:* series for this filter at the end of the range. Is it scraping the vLLM "
                "servers' /metrics? (Check Status → Targets in Prometheus.)")
        return
    labels = st.multiselect("Group replicas by served model and", groupable_labels(replicas), key="fleet_group_by")
    groups = group_replicas(replicas, reading.over_range, labels)
    fleet_summary(reading, replicas, groups, reading.series_seen or 0)
    latency_panel(replicas, latency)
    specs = model_specs(sorted({group.key[MODEL_LABEL] for group in groups[:GROUP_PANELS]}))
    for group in groups[:GROUP_PANELS]:
        group_panel(group, specs[group.key[MODEL_LABEL]], base, target, headroom, changes, labels)
    if len(groups) > GROUP_PANELS:
        st.info(f"{len(groups) - GROUP_PANELS:,} more groups not drawn: "
                + ", ".join(group.title for group in groups[GROUP_PANELS:GROUP_PANELS + 20])
                + (" …" if len(groups) > GROUP_PANELS + 20 else "") + ". Narrow the filter to see them.")


fleet_panel()
