"""The model spec a page reads is one shared object across reruns (issue 21: the Plan rerun's speed).

A ``st.cache_data`` copy per rerun cost an unpickling of every weight tensor on each slider move, and the engine's
memo lookups (layout, weights, fitting length) then compared that copy field by field against the previous run's.
"""

from __future__ import annotations

from pages.common.inputs import MODEL_SOURCES, cached_model_spec

from calculator import load_model_spec
from calculator.scenario import DEFAULT_MODEL


def test_a_preset_is_served_as_the_same_object_each_rerun() -> None:
    first = cached_model_spec(MODEL_SOURCES[0], DEFAULT_MODEL)
    again = cached_model_spec(MODEL_SOURCES[0], DEFAULT_MODEL)
    assert again is first
    assert first == load_model_spec(DEFAULT_MODEL)

