"""Router only: every page lives in pages/ and starts with pages.common.page_setup(), which draws the menu."""

import streamlit as st

from pages.common import PAGES

st.set_page_config(page_title="vLLM capacity planner", page_icon="🧮", layout="wide")
st.navigation([st.Page(script, title=title, icon=icon, default=script == PAGES[0][0])
               for script, title, icon in PAGES], position="hidden").run()
