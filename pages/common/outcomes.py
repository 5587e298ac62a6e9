"""Messages a page shows once (a share link's warnings, an import's report), kept until a run has drawn them all.

A run can be cut short: on a first load the browser asks for the rest of the page as soon as the figures are painted
(``figures_first``), and a click restarts a run in progress. A message popped at the start of a run that never
reaches the browser would be lost, so each is forgotten only after a run ends: ``app.py`` calls ``forget_shown``
once the page script has run to its end.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

_TO_FORGET = "_shown_once_to_forget"


def messages(name: str, new: list[str]) -> list[str]:
    """``new`` plus what an earlier run had to show and did not finish showing."""
    key = f"_shown_once_{name}"
    pending = [*st.session_state.get(key, []), *new]
    st.session_state[key] = pending
    _forget_after_this_run(key)
    return pending


def value(key: str) -> Any:
    """A one-run value another part of the page left in the session (None when there is none)."""
    found = st.session_state.get(key)
    if found is not None:
        _forget_after_this_run(key)
    return found


def forget_shown() -> None:
    """The run drew everything: forget what it showed."""
    for key in st.session_state.pop(_TO_FORGET, ()):
        st.session_state.pop(key, None)


def _forget_after_this_run(key: str) -> None:
    st.session_state[_TO_FORGET] = {*st.session_state.get(_TO_FORGET, ()), key}
