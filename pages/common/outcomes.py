"""What an action leaves on the page (a share link's warnings, an import's report), kept while the page still shows
what that action set.

An action's outcome belongs to the action, not to the run that carries it. A run can be cut short (on a first load
the browser asks for the rest of the page as soon as the figures are painted, and any click restarts a run in
progress), and a run can follow another with nothing changed (that follow-up, a chart's event). So an outcome is
neither popped by the run that shows it nor forgotten when a run ends: it is anchored to the page's inputs the first
time a run reaches it, shown on every run while the inputs are still those, and forgotten once the user changes one.
"""

from __future__ import annotations

from typing import Any

import streamlit as st


def keep(key: str, outcome: Any) -> None:
    """An action's outcome, to show from the next run on (it replaces the outcome of an earlier action)."""
    st.session_state[key] = (outcome, False, None)


def peek(key: str) -> Any:
    """The outcome kept under ``key`` (None when there is none), without anchoring it."""
    held = st.session_state.get(key)
    return None if held is None else held[0]


def while_inputs_are(key: str, inputs: Any) -> Any:
    """The outcome kept under ``key`` while the page's ``inputs`` are those of the first run that reached it; None
    once they changed (and from then on)."""
    held = st.session_state.get(key)
    if held is None:
        return None
    outcome, anchored, anchor = held
    if not anchored:
        st.session_state[key] = (outcome, True, inputs)
    elif anchor != inputs:
        del st.session_state[key]
        return None
    return outcome
