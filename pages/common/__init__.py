"""Shared Streamlit helpers for the pages (the only Streamlit code outside pages/*.py)."""

from __future__ import annotations

import streamlit as st


def page_setup(title: str) -> None:
    """Draw the shared frame; safe to call twice (a deep link may run a page without app.py)."""
    if not st.session_state.get("_page_config_done"):
        try:
            st.set_page_config(page_title=f"{title} · vLLM capacity planner", page_icon="🧮", layout="wide")
        except st.errors.StreamlitAPIException:
            pass  # app.py already set it in this run
        st.session_state["_page_config_done"] = True
    st.title(title)
