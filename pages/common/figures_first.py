"""The key figures reach the screen before the charts, on a session's first load and after every input change.

Streamlit's browser draws what arrives in batches, and a batch holding a chart waits for Plotly: on a 2-core machine
a redraw takes a few hundred milliseconds and, on the first load, evaluating Plotly (4.7 MB), the table grid
(1.2 MB) and the syntax highlighter (1.5 MB) takes seconds. So the figures travel in a batch of their own.

NOTE: a session without a browser (AppTest, a script) sends no headers and has nothing to paint early: it gets the
whole page in one run, without the pause.
"""

from __future__ import annotations

import time

import streamlit as st

# Long enough for the browser to start drawing the figures before the next element arrives (measured with
# benchmarks/browser_slider.py: slider to KPI median ~300 ms without it, ~200 ms with it; 30 ms was not enough).
_PAUSE_S = 0.06
_DRAWN = "_figures_first_drawn"
_ASK_WHEN_PAINTED = """
export default function (component) {
  const { data, setTriggerValue } = component;
  let done = false;
  const ask = () => { if (!done) { done = true; setTriggerValue("painted", true); } };
  const watch = () => document.querySelector(data.selector)
    ? requestAnimationFrame(() => requestAnimationFrame(ask))
    : requestAnimationFrame(watch);
  watch();
  const deadline = setTimeout(ask, data.deadline_ms);  // whatever happens, the page gets its rest
  return () => { done = true; clearTimeout(deadline); };
}
"""
_ask_when_painted = st.components.v2.component("vllm_planner.figures_first", js=_ASK_WHEN_PAINTED)


def _in_a_browser() -> bool:
    return bool(st.context.headers)


def send_the_figures(painted_selector: str) -> None:
    """Call right after the figures. On a session's first run in a browser, end the run here: the browser asks for
    the rest two frames after ``painted_selector`` is in the page (a rerun sent from here at once, or on a timer,
    could arrive before the figures are drawn, and wait with them for Plotly). On every later run, pause briefly so
    the figures leave in a batch of their own."""
    if not _in_a_browser():
        return
    if st.session_state.get(_DRAWN):
        time.sleep(_PAUSE_S)
        return
    st.session_state[_DRAWN] = True
    # NOTE: in the sidebar, not below the figures: the browser fetched the code of the sidebar's element types first,
    # then the metric's, and only then this component's (and Arrow's, which it imports), while the figures, drawn in
    # the same pass, waited for it (Chromium resource timing). In the sidebar, all of them are fetched at once. Gain
    # measured (two A/B runs at load 7-11, 10-12 new sessions each): first KPI 2.04-2.07 s against 2.05-2.18 s, within
    # the noise. It draws nothing, and the run it asks for does not draw it again.
    with st.sidebar:
        _ask_when_painted(key="figures_first", data={"selector": painted_selector, "deadline_ms": 5000},
                          on_painted_change=lambda: None)
    st.stop()

