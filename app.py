"""Router only: every page lives in pages/ and starts with pages.common.page_setup()."""

import streamlit as st

st.set_page_config(page_title="vLLM capacity planner", page_icon="🧮", layout="wide")
st.navigation([
    st.Page("pages/plan.py", title="Plan", icon="🧮", default=True),
    st.Page("pages/compare.py", title="Compare", icon="⚖️"),
    st.Page("pages/live.py", title="Live server", icon="📡"),
    st.Page("pages/fleet.py", title="Fleet", icon="🛰️"),
    st.Page("pages/learn.py", title="Learn", icon="🎓"),
    st.Page("pages/gpu.py", title="GPUs", icon="🖥️"),
]).run()
