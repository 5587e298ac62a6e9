"""Router only: every page lives in pages/ and starts with pages.common.page_setup(), which draws the menu."""

import streamlit as st

from pages.common import PAGES, shown_once

st.set_page_config(page_title="vLLM capacity planner", page_icon="🧮", layout="wide")
st.navigation([st.Page(script, title=title, icon=icon, default=script == PAGES[0][0])
               for script, title, icon in PAGES], position="hidden").run()
shown_once.forget_shown()  # NOTE: only after a run that reached its end (a stop or a rerun skips this line)
