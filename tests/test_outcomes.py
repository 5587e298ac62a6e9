"""One-run messages (a share link's warnings, an import's report) survive a run that was cut short.

On a first load the browser asks for the rest of the page right after the figures paint, and a click restarts a run:
a message taken out of the session at the start of such a run was lost (found by a CI failure of the import browser
test). Now a message is forgotten only after a run reaches its end.
"""

from __future__ import annotations

from streamlit.testing.v1 import AppTest


def _page() -> None:
    import streamlit as st

    from pages.common import shown_once

    for message in shown_once.messages("warnings", st.session_state.pop("new", [])):
        st.warning(message)
    if st.session_state.get("cut_short"):
        st.stop()  # what the first-paint follow-up or a click does to a run in progress
    shown_once.forget_shown()  # app.py, after the page


def _warnings(app: AppTest) -> list[str]:
    return [w.value for w in app.warning]


def test_a_message_is_shown_again_after_a_cut_short_run_and_then_forgotten() -> None:
    app = AppTest.from_function(_page, default_timeout=30)
    app.session_state["new"] = ["the link named an unknown GPU"]
    app.session_state["cut_short"] = True
    app.run()
    assert _warnings(app) == ["the link named an unknown GPU"]
    app.session_state["cut_short"] = False
    app.run()
    assert _warnings(app) == ["the link named an unknown GPU"]  # the cut-short run may never have reached the screen
    app.run()
    assert _warnings(app) == []  # that run ended: shown once, forgotten


def test_a_message_of_a_run_that_ends_is_shown_once() -> None:
    app = AppTest.from_function(_page, default_timeout=30)
    app.session_state["new"] = ["imported: --max-model-len"]
    app.run()
    assert _warnings(app) == ["imported: --max-model-len"]
    app.run()
    assert _warnings(app) == []
