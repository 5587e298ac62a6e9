"""Shared Streamlit helpers for the pages (the only Streamlit code outside pages/*.py)."""

from __future__ import annotations

import streamlit as st
from pydantic import ValidationError

# (script, title, icon): app.py routes to these; page_setup draws the same menu in every page.
PAGES = (
    ("pages/plan.py", "Plan", "🧮"),
    ("pages/compare.py", "Compare", "⚖️"),
    ("pages/recommend.py", "Recommend", "🧭"),
    ("pages/live.py", "Live server", "📡"),
    ("pages/diagnose.py", "Diagnose a log", "🩺"),
    ("pages/fleet.py", "Fleet", "🛰️"),
    ("pages/learn.py", "Learn", "🎓"),
    ("pages/gpu.py", "GPUs", "🖥️"),
)


def sentence(error: object) -> str:
    """An error as the UI shows it: the library's messages start lowercase (they also end CLI lines)."""
    text = str(error)
    return text[:1].upper() + text[1:]


def first_error(exc: ValidationError) -> str:
    """An input model's first complaint as one line: ``field: what is wrong``."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {str(error['msg']).lower()}" if where else str(error["msg"])


def page_setup(title: str) -> None:
    """Draw the shared frame; safe to call twice (a deep link may run a page without app.py)."""
    if not st.session_state.get("_page_config_done"):
        try:
            st.set_page_config(page_title=f"{title} · vLLM capacity planner", page_icon="🧮", layout="wide")
        except st.errors.StreamlitAPIException:
            pass  # app.py already set it in this run
        st.session_state["_page_config_done"] = True
    # NOTE: a deep link runs the page as a legacy pages/ app, whose own menu lists bare file names; both routes
    # hide their menu (app.py, .streamlit/config.toml) and show this one instead.
    with st.sidebar:
        try:
            for script, label, icon in PAGES:
                st.page_link(script, label=label, icon=icon)
            st.divider()
        except st.errors.StreamlitPageNotFoundError:
            pass  # a page run on its own (AppTest.from_file) has no app to link to
    st.title(title)
